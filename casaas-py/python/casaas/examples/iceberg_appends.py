"""Concurrent appends to one Iceberg table through the casaas catalog.

W processes each append C one-row batches with PyIceberg (``table.append``,
with its commit retry) to one table, then the table is read back: every row
must be there exactly once and there must be one snapshot per commit::

    python -m casaas.examples.iceberg_appends --writers 4 --commits 10
    python -m casaas.examples.iceberg_appends --catalog sql   # PyIceberg's SqlCatalog on SQLite
    python -m casaas.examples.iceberg_appends --writers 4 --commits 10 --faults 0.2 \\
        --url 's3://bucket/lake?endpoint=http://127.0.0.1:8333' --local-data \\
        --property casaas.aws_access_key_id=... --property casaas.aws_secret_access_key=...

Prints ``commits=N snapshots=S duplicates=D lost=L`` and the mean time a
writer spent per commit (retries included); exits 1 unless ``S == N``,
``D == 0``, ``L == 0`` and every writer finished. With no ``--url`` the
catalog lives on the local disk in a temporary directory.

``--faults P`` puts a fault proxy (:class:`FaultProxy`, in this module, no
other program needed) between the catalog and its store: it forwards every
request to the URL's ``endpoint=`` and, for a share P of the writes of
pointers (paths containing ``tables/``), lets the write land and then drops
the answer, so the writer sees a broken connection for a write that
happened. The catalog must settle each one by reading (success, never a
second commit). It needs a ``--url`` with ``endpoint=http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import multiprocessing
import pathlib
import random
import sys
import tempfile
import threading
import time
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

SCHEMA_FIELDS = (("id", "int64"), ("writer", "int64"))
TABLE = "bench.appends"
RETRIES = {
    "commit.retry.num-retries": "200",
    "commit.retry.min-wait-ms": "5",
    "commit.retry.max-wait-ms": "200",
}
# Writes of paths containing this are the catalog's pointer writes.
POINTERS = "tables/"
WRITES = ("PUT", "POST")


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in SCHEMA_FIELDS])


class FaultProxy:
    """An HTTP forwarder to `upstream` on a loopback port of its own, in a
    background thread: for a share `probability` of the writes (PUT, POST)
    whose path contains `only`, it forwards the request, reads the whole
    answer, then closes the client's connection without it.

    One request per connection (answers carry ``Connection: close``), so a
    dropped answer never leaves a client connection half used.
    """

    def __init__(self, upstream: str, probability: float, only: str = POINTERS, seed: int = 1):
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(
                f"the fault proxy forwards plain HTTP: give an endpoint like "
                f"http://127.0.0.1:PORT, not {upstream!r}"
            )
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"the share of answers to drop is in [0, 1], not {probability}")
        self.upstream_host = parsed.hostname
        self.upstream_port = parsed.port or 80
        self.upstream_path = parsed.path.rstrip("/")
        self.probability = probability
        self.only = only
        self._random = random.Random(seed)
        self.writes = 0
        self.dropped = 0
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._server: Optional[asyncio.base_events.Server] = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def endpoint(self) -> str:
        """The proxy's URL, standing for the upstream's (its path kept)."""
        return f"http://127.0.0.1:{self.port}{self.upstream_path}"

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = started.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *_exc: Any) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @staticmethod
    def _headers(head: bytes) -> Tuple[str, List[Tuple[str, str]]]:
        lines = head.decode("latin-1").split("\r\n")
        headers = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
        return lines[0], headers

    @staticmethod
    def _with_close(first: str, headers: List[Tuple[str, str]]) -> bytes:
        kept = [(k, v) for k, v in headers if k.lower() not in ("connection", "keep-alive")]
        kept.append(("Connection", "close"))
        return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept) + "\r\n").encode(
            "latin-1"
        )

    @staticmethod
    async def _body(reader: asyncio.StreamReader, headers: List[Tuple[str, str]]) -> bytes:
        named = {k.lower(): v for k, v in headers}
        if "chunked" in named.get("transfer-encoding", "").lower():
            # Forwarded with its framing, chunk by chunk to the last one.
            body = b""
            while True:
                size_line = await reader.readuntil(b"\r\n")
                body += size_line
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:
                        trailer = await reader.readuntil(b"\r\n")
                        body += trailer
                        if trailer == b"\r\n":
                            return body
                body += await reader.readexactly(size + 2)
        return await reader.readexactly(int(named.get("content-length", "0")))

    async def _serve(self, client: asyncio.StreamReader, answer: asyncio.StreamWriter) -> None:
        try:
            head = await client.readuntil(b"\r\n\r\n")
            first, headers = self._headers(head)
            body = await self._body(client, headers)
            method, target = first.split(" ", 2)[:2]
            self.requests += 1
            drop = False
            if method in WRITES and self.only in urllib.parse.unquote(target):
                self.writes += 1
                drop = self._random.random() < self.probability
            reader, writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            try:
                writer.write(self._with_close(first, headers) + body)
                await writer.drain()
                response = await reader.read()  # to EOF: the upstream closes
            finally:
                writer.close()
            if drop:
                # The write happened; its answer never arrives.
                self.dropped += 1
                answer.transport.abort()
                return
            end = response.find(b"\r\n\r\n")
            if end < 0:
                answer.transport.abort()
                return
            status, response_headers = self._headers(response[: end + 4])
            answer.write(self._with_close(status, response_headers) + response[end + 4 :])
            await answer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            answer.transport.abort()
            return
        answer.close()


def with_endpoint(url: str, endpoint: str) -> Tuple[str, str]:
    """`url` with its ``endpoint=`` query option replaced by `endpoint`,
    and the endpoint it had."""
    base, sep, query = url.partition("?")
    options = urllib.parse.parse_qsl(query, keep_blank_values=True)
    old = dict(options).get("endpoint")
    if not old:
        raise ValueError(
            "--faults puts a proxy in front of the store's endpoint: give a --url with "
            "endpoint=http://HOST:PORT (for example s3://bucket/lake?endpoint=http://127.0.0.1:8333)"
        )
    replaced = [(k, endpoint if k == "endpoint" else v) for k, v in options]
    return base + sep + urllib.parse.urlencode(replaced, safe=":/"), old


def catalog_props(kind: str, url: str, root: pathlib.Path, local_data: bool) -> Dict[str, str]:
    """The catalog properties of one run: PyIceberg's `SqlCatalog` on a
    SQLite file under `root`, or the casaas catalog on `url`."""
    if kind == "sql":
        return {
            "type": "sql",
            "uri": f"sqlite:///{root}/catalog.db",
            "warehouse": f"file://{root}/warehouse",
        }
    props = {"py-catalog-impl": "casaas.iceberg.Catalog", "uri": url}
    if local_data:
        props["warehouse"] = f"file://{root}/warehouse"
    return props


def writer(props: Dict[str, str], w: int, commits: int, out: Any) -> None:
    """One writer process: `commits` appends of one row each."""
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("bench", **props)
    schema = _schema()
    started = time.perf_counter()
    for c in range(commits):
        table = catalog.load_table(TABLE)
        table.append(pa.table({"id": [w * 1_000_000 + c], "writer": [w]}, schema=schema))
    out.put((w, time.perf_counter() - started))


@dataclasses.dataclass
class Outcome:
    """What a run found when it read the table back."""

    catalog: str
    writers: int
    commits: int
    snapshots: int
    duplicates: int
    lost: int
    rows: int
    failed_writers: int
    seconds: float
    ms_per_commit: float
    dropped_answers: int

    @property
    def ok(self) -> bool:
        """One snapshot per commit, every row once, every writer done."""
        return (
            self.snapshots == self.commits
            and self.duplicates == 0
            and self.lost == 0
            and self.rows == self.commits
            and self.failed_writers == 0
        )

    def line(self) -> str:
        """The line the example prints."""
        return (
            f"catalog={self.catalog} writers={self.writers} commits={self.commits} "
            f"snapshots={self.snapshots} duplicates={self.duplicates} lost={self.lost} "
            f"rows={self.rows} failed_writers={self.failed_writers} "
            f"dropped_answers={self.dropped_answers} seconds={self.seconds:.2f} "
            f"ms_per_commit={self.ms_per_commit:.1f}"
        )


def run(
    writers: int,
    commits: int,
    url: Optional[str] = None,
    faults: float = 0.0,
    catalog: str = "casaas",
    local_data: bool = False,
    properties: Optional[Dict[str, str]] = None,
    seed: int = 1,
) -> Outcome:
    """Creates the table, runs `writers` processes of `commits` appends
    each, and reads the table back. `faults` > 0 routes the catalog's
    requests through a :class:`FaultProxy` (`url` must name an endpoint)."""
    from pyiceberg.catalog import load_catalog

    if faults and catalog != "casaas":
        raise ValueError("--faults applies to the casaas catalog's store only")
    if faults and not url:
        raise ValueError("--faults needs a --url with endpoint=http://HOST:PORT to put the proxy in front of")
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "warehouse").mkdir()
        proxy: Optional[FaultProxy] = None
        store = url or f"file://{root / 'warehouse'}"
        if faults and url:
            _, upstream = with_endpoint(url, "")
            proxy = FaultProxy(upstream, faults, seed=seed).__enter__()
            store, _ = with_endpoint(url, proxy.endpoint)
        try:
            props = catalog_props(catalog, store, root, local_data)
            props.update(properties or {})
            first = load_catalog("bench", **props)
            first.create_namespace("bench")
            first.create_table(TABLE, schema=_schema(), properties=RETRIES)

            ctx = multiprocessing.get_context("spawn")
            out = ctx.Queue()
            procs = [
                ctx.Process(target=writer, args=(props, w, commits, out)) for w in range(writers)
            ]
            started = time.perf_counter()
            for p in procs:
                p.start()
            busy = 0.0
            for _ in procs:
                try:
                    busy += out.get(timeout=600)[1]
                except Exception:  # noqa: BLE001 - a writer that died: counted below
                    break
            for p in procs:
                p.join()
            elapsed = time.perf_counter() - started
            failed = [p.exitcode for p in procs if p.exitcode != 0]

            table = first.load_table(TABLE)
            ids = table.scan().to_arrow().column("id").to_pylist()
        finally:
            if proxy is not None:
                proxy.__exit__(None, None, None)
    counts = collections.Counter(ids)
    expected = {w * 1_000_000 + c for w in range(writers) for c in range(commits)}
    total = writers * commits
    return Outcome(
        catalog=catalog,
        writers=writers,
        commits=total,
        snapshots=len(table.metadata.snapshots),
        duplicates=sum(n - 1 for n in counts.values() if n > 1),
        lost=len(expected - set(counts)),
        rows=len(ids),
        failed_writers=len(failed),
        seconds=elapsed,
        ms_per_commit=1000 * busy / max(total, 1),
        dropped_answers=proxy.dropped if proxy else 0,
    )


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (see the module docs); returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m casaas.examples.iceberg_appends",
        description=(__doc__ or "").split("\n\n", 1)[0],
        epilog=(__doc__ or "").split("\n\n", 1)[-1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--writers", type=int, default=2, help="writer processes (default 2)")
    parser.add_argument("--commits", type=int, default=3, help="appends per writer (default 3)")
    parser.add_argument(
        "--url", help="the catalog's store, a casaas URL (default: a temporary directory)"
    )
    parser.add_argument(
        "--faults",
        type=float,
        default=0.0,
        metavar="P",
        help=(
            "drop the answer of this share of pointer writes after they land, through a "
            "proxy built into this example (needs a --url with endpoint=http://HOST:PORT)"
        ),
    )
    parser.add_argument(
        "--local-data",
        action="store_true",
        help="keep the table's metadata and data files on the local disk (only pointers on --url)",
    )
    parser.add_argument("--catalog", choices=["casaas", "sql"], default="casaas")
    parser.add_argument("--seed", type=int, default=1, help="the proxy's random seed")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a catalog property (casaas.aws_access_key_id=..., s3.endpoint=..., warehouse=...)",
    )
    args = parser.parse_args(argv)
    properties = dict(p.split("=", 1) for p in args.property)
    try:
        outcome = run(
            args.writers,
            args.commits,
            url=args.url,
            faults=args.faults,
            catalog=args.catalog,
            local_data=args.local_data,
            properties=properties,
            seed=args.seed,
        )
    except ValueError as e:
        parser.error(str(e))
    print(outcome.line())
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
