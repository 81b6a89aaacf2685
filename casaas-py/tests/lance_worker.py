"""One writer of the concurrent-append test: C appends to one Lance dataset,
with casaas's commit lock or with Lance's default commit path.

Usage: python lance_worker.py URI OPTIONS_JSON LOCK_URL|- WORKER COUNT
Prints one JSON line: the appends Lance answered as committed, and errors.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List

import lance
import pyarrow as pa

import casaas


def main() -> None:
    uri, options_json, lock_url, worker, count = sys.argv[1:6]
    storage_options: Dict[str, str] = json.loads(options_json)
    commit_lock = None if lock_url == "-" else casaas.lance_commit_lock(lock_url, ttl=10, wait=60)
    done: List[int] = []
    errors: List[str] = []
    for i in range(int(count)):
        table = pa.table({"worker": [int(worker)], "i": [i]})
        kwargs: Dict[str, Any] = {"mode": "append", "storage_options": storage_options}
        if commit_lock is not None:
            kwargs["commit_lock"] = commit_lock
        try:
            lance.write_dataset(table, uri, **kwargs)
            done.append(i)
        except Exception as e:  # reported, and judged by the test
            errors.append(f"{type(e).__name__}: {e}")
    print(json.dumps({"worker": int(worker), "committed": done, "errors": errors}), flush=True)


if __name__ == "__main__":
    main()
