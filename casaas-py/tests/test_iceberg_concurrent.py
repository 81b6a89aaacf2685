"""W processes x C PyIceberg appends (``table.append``, with its commit
retry) to one table through the casaas catalog, on the local disk and on
the real servers, the servers behind a proxy that lets a share of pointer
writes land and then drops their answer: one snapshot per commit, no
duplicate row, no lost row, the exact row count.

In the first test only the catalog's pointers live on the servers; the
table's metadata and data files stay on the local disk (``--local-data``;
PyIceberg's FileIO against Azurite and fake-gcs is not tried here). The
pointers are what the commit protocol swaps. The second puts the table's
files on Ceph RGW and SeaweedFS too, with the AWS SDK's request checksums
limited to where they are required: with the SDK's default, PyArrow's
uploads are refused by Ceph RGW with ``411 MissingContentLength``.
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


@pytest.mark.parametrize("name", ["ceph", "seaweedfs"])
def test_concurrent_appends_with_the_table_files_on_the_server(
    name: str, monkeypatch: pytest.MonkeyPatch, checksums: str
) -> None:
    """The same run with the table's metadata and data files on the S3
    server too (PyIceberg's FileIO straight to it, only the catalog's
    pointers behind the proxy)."""
    env = server_env(name)
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", checksums)
    url, options = server(name)
    properties: Dict[str, str] = {f"casaas.{k}": v for k, v in options.items()}
    properties.update(
        {
            "s3.endpoint": env["AWS_ENDPOINT_URL"],
            "s3.access-key-id": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": env["AWS_SECRET_ACCESS_KEY"],
            "s3.region": env.get("AWS_REGION", "us-east-1"),
        }
    )
    outcome = run(
        WRITERS,
        COMMITS,
        url=url,
        faults=FAULTS,
        local_data=False,
        properties=properties,
        seed=7,
    )
    print(outcome.line())
    assert outcome.failed_writers == 0, outcome.line()
    assert outcome.snapshots == outcome.commits == WRITERS * COMMITS, outcome.line()
    assert outcome.duplicates == 0, outcome.line()
    assert outcome.lost == 0, outcome.line()
    assert outcome.rows == WRITERS * COMMITS, outcome.line()
    assert outcome.dropped_answers > 0, outcome.line()


@pytest.fixture
def checksums() -> str:
    """The AWS SDK's request checksums, limited to the operations that
    require them: by default the SDK inside PyArrow uploads parts as
    ``aws-chunked`` with a trailing checksum and no ``Content-Length``,
    which Ceph RGW refuses (``411 MissingContentLength``)."""
    return "WHEN_REQUIRED"
