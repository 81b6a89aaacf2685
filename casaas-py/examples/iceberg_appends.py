"""Concurrent appends to one Iceberg table through the casaas catalog.

W processes each append C one-row batches with PyIceberg (``table.append``,
with its commit retry) to one table, then the table is read back: every row
must be there exactly once and there must be one snapshot per commit::

    python examples/iceberg_appends.py --writers 4 --commits 10
    python examples/iceberg_appends.py --catalog sql    # PyIceberg's SqlCatalog on SQLite

Prints ``commits=N snapshots=S duplicates=D lost=L`` and the mean time a
writer spent per commit (retries included); exits 1 unless ``S == N``, ``D == 0`` and ``L == 0``. With no
``--url`` the catalog lives on the local disk in a temporary directory.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import pathlib
import sys
import tempfile
import time
from typing import Any, Dict, List

import pyarrow as pa
from pyiceberg.catalog import load_catalog

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.int64())])
RETRIES = {
    "commit.retry.num-retries": "200",
    "commit.retry.min-wait-ms": "5",
    "commit.retry.max-wait-ms": "200",
}


def catalog_props(kind: str, url: str, root: str) -> Dict[str, str]:
    if kind == "sql":
        return {
            "type": "sql",
            "uri": f"sqlite:///{root}/catalog.db",
            "warehouse": f"file://{root}/warehouse",
        }
    return {"py-catalog-impl": "casaas.iceberg.Catalog", "uri": url}


def writer(props: Dict[str, str], w: int, commits: int, out: Any) -> None:
    catalog = load_catalog("bench", **props)
    started = time.perf_counter()
    for c in range(commits):
        table = catalog.load_table("bench.appends")
        table.append(pa.table({"id": [w * 1_000_000 + c], "writer": [w]}, schema=SCHEMA))
    out.put((w, time.perf_counter() - started))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--commits", type=int, default=3)
    parser.add_argument("--url", help="the catalog's store (default: a temporary directory)")
    parser.add_argument("--catalog", choices=["casaas", "sql"], default="casaas")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a catalog property (s3.endpoint=..., casaas.aws_access_key_id=..., warehouse=...)",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "warehouse").mkdir()
        url = args.url or f"file://{root / 'warehouse'}"
        props = catalog_props(args.catalog, url, str(root))
        props.update(p.split("=", 1) for p in args.property)
        catalog = load_catalog("bench", **props)
        catalog.create_namespace("bench")
        catalog.create_table("bench.appends", schema=SCHEMA, properties=RETRIES)

        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [
            ctx.Process(target=writer, args=(props, w, args.commits, out))
            for w in range(args.writers)
        ]
        started = time.perf_counter()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        elapsed = time.perf_counter() - started
        failed = [p.exitcode for p in procs if p.exitcode != 0]
        busy = 0.0
        while not out.empty():
            busy += out.get()[1]

        table = catalog.load_table("bench.appends")
        ids = table.scan().to_arrow().column("id").to_pylist()
        counts = collections.Counter(ids)
        expected = {w * 1_000_000 + c for w in range(args.writers) for c in range(args.commits)}
        commits = args.writers * args.commits
        snapshots = len(table.metadata.snapshots)
        duplicates = sum(n - 1 for n in counts.values() if n > 1)
        lost = len(expected - set(counts))
        print(
            f"catalog={args.catalog} writers={args.writers} commits={commits} "
            f"snapshots={snapshots} duplicates={duplicates} lost={lost} "
            f"rows={len(ids)} failed_writers={len(failed)} "
            f"seconds={elapsed:.2f} ms_per_commit={1000 * busy / max(commits, 1):.1f}"
        )
        ok = snapshots == commits and duplicates == 0 and lost == 0 and not failed
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
