"""W processes x C PyIceberg appends (``table.append``, with its commit
retry) to one table through the casaas catalog, on the local disk and on
the real servers, the servers behind a proxy that lets a share of pointer
writes land and then drops their answer: one snapshot per commit, no
duplicate row, no lost row, the exact row count.

On the servers only the catalog's pointers live there; the table's metadata
and data files stay on the local disk (``--local-data``): PyIceberg's
default FileIO (PyArrow) is refused by Ceph RGW with ``411
MissingContentLength``, and Azurite and fake-gcs keep the same setup
(PyIceberg's FileIO against those emulators is not tried here). The
pointers are what the commit protocol swaps.
"""

from __future__ import annotations

from typing import Dict

import pytest

pytest.importorskip("pyiceberg")
pytest.importorskip("pyarrow")

from casaas.examples.iceberg_appends import run  # noqa: E402
from conftest import CREDENTIALS, server, server_env  # noqa: E402

WRITERS, COMMITS = 3, 4
# A share of pointer writes whose answer is dropped after they land.
FAULTS = 0.25


@pytest.mark.parametrize("name", ["file", "ceph", "azurite", "fake-gcs"])
def test_concurrent_appends_land_once_each_despite_lost_answers(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if name == "file":
        outcome = run(WRITERS, COMMITS)
    else:
        env = server_env(name)
        # Emulator switches (not credentials, not endpoints: those go
        # through the proxy, named by the URL) for the writer processes.
        for k, v in env.items():
            if k not in CREDENTIALS and k != "CASAAS_TEST_URL" and "127.0.0.1" not in v:
                monkeypatch.setenv(k, v)
        url, options = server(name)
        properties: Dict[str, str] = {f"casaas.{k}": v for k, v in options.items()}
        outcome = run(
            WRITERS,
            COMMITS,
            url=url,
            faults=FAULTS,
            local_data=True,
            properties=properties,
            seed=7,
        )
    print(outcome.line())
    assert outcome.failed_writers == 0, outcome.line()
    assert outcome.snapshots == outcome.commits == WRITERS * COMMITS, outcome.line()
    assert outcome.duplicates == 0, outcome.line()
    assert outcome.lost == 0, outcome.line()
    assert outcome.rows == WRITERS * COMMITS, outcome.line()
    if name != "file":
        # The faults happened: answers of writes that landed were dropped.
        assert outcome.dropped_answers > 0, outcome.line()
