"""The casaas Iceberg catalog through PyIceberg: namespaces, tables,
commits (one conditional swap each, exactly once), conflicts raised as
CommitFailedException, rename and drop, and tables read back through
PyIceberg's own SqlCatalog. On the local disk and on a real S3 server."""

from __future__ import annotations

import json
import pathlib
import threading
from typing import Any, Dict, List, Tuple

import pytest

pyiceberg = pytest.importorskip("pyiceberg")
pa = pytest.importorskip("pyarrow")

from pyiceberg.catalog import load_catalog  # noqa: E402
from pyiceberg.exceptions import (  # noqa: E402
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)

from conftest import server, server_env  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])


def rows(writer: str, start: int, n: int) -> Any:
    return pa.table(
        {"id": list(range(start, start + n)), "writer": [writer] * n}, schema=SCHEMA
    )


def file_catalog(tmp_path: pathlib.Path, name: str = "lake", query: str = "") -> Any:
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir(exist_ok=True)
    return load_catalog(
        name,
        **{
            "py-catalog-impl": "casaas.iceberg.Catalog",
            "uri": f"file://{warehouse}{query}",
            "warehouse": f"file://{warehouse}",
        },
    )


def s3_catalog(name: str = "lake") -> Tuple[Any, Dict[str, str]]:
    url, options = server("seaweedfs")
    env = server_env("seaweedfs")
    base = url.split("?", 1)[0]
    props = {
        "py-catalog-impl": "casaas.iceberg.Catalog",
        "uri": url,
        "warehouse": base,
        "s3.endpoint": env["AWS_ENDPOINT_URL"],
        "s3.access-key-id": env["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": env["AWS_SECRET_ACCESS_KEY"],
        "s3.region": env.get("AWS_REGION", "us-east-1"),
        "s3.force-virtual-addressing": "false",
        **{f"casaas.{k}": v for k, v in options.items()},
    }
    return load_catalog(name, **props), props


@pytest.fixture(params=["file", "file-create-only", "seaweedfs"])
def catalog(request: Any, tmp_path: pathlib.Path) -> Any:
    if request.param == "file":
        return file_catalog(tmp_path)
    if request.param == "file-create-only":
        # Pointers as chains of create-if-absent epochs: nothing replaced.
        created = file_catalog(tmp_path, query="?layout=epochs")
        assert created._swap.layout == "epochs"
        return created
    return s3_catalog()[0]


def test_namespaces_and_tables_round_trip(catalog: Any) -> None:
    catalog.create_namespace("db", {"owner": "analytics"})
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace("db")
    assert catalog.list_namespaces() == [("db",)]
    assert catalog.load_namespace_properties("db") == {"owner": "analytics"}
    summary = catalog.update_namespace_properties("db", removals={"owner"}, updates={"team": "x"})
    assert summary.removed == ["owner"] and summary.updated == ["team"]
    assert catalog.load_namespace_properties("db") == {"team": "x"}

    table = catalog.create_table("db.events", schema=SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("db.events", schema=SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        catalog.create_table("nowhere.events", schema=SCHEMA)
    table.append(rows("a", 0, 3))
    table.append(rows("a", 3, 2))
    assert catalog.list_tables("db") == [("db", "events")]
    loaded = catalog.load_table("db.events")
    assert loaded.scan().to_arrow().num_rows == 5
    assert len(loaded.metadata.snapshots) == 2
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace("db")

    renamed = catalog.rename_table("db.events", "db.events_v2")
    assert renamed.scan().to_arrow().num_rows == 5
    assert catalog.list_tables("db") == [("db", "events_v2")]
    with pytest.raises(NoSuchTableError):
        catalog.load_table("db.events")
    # The old name is free again.
    catalog.create_table("db.events", schema=SCHEMA)
    catalog.drop_table("db.events")
    catalog.drop_table("db.events_v2")
    with pytest.raises(NoSuchTableError):
        catalog.drop_table("db.events_v2")
    assert catalog.list_tables("db") == []
    catalog.drop_namespace("db")
    assert catalog.list_namespaces() == []


def test_a_stale_commit_raises_commit_failed_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    catalog = file_catalog(tmp_path)
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA)
    first = catalog.load_table("db.t")
    second = catalog.load_table("db.t")
    first.append(rows("first", 0, 1))
    # `second` still holds the metadata `first` replaced: a commit that
    # requires the branch it read fails against the current metadata.
    from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate

    with pytest.raises(CommitFailedException):
        catalog.commit_table(
            second,
            (AssertRefSnapshotId(ref="main", snapshot_id=None),),  # type: ignore[call-arg]
            (SetPropertiesUpdate(updates={"stale": "yes"}),),
        )
    current = catalog.load_table("db.t")
    assert "stale" not in current.properties
    assert len(current.metadata.snapshots) == 1


def test_a_conflict_in_the_swap_itself_is_commit_failed(tmp_path: pathlib.Path) -> None:
    """Two commits read the same pointer; the second one's swap finds the
    first one's metadata (not descending from its own) and says conflict."""
    catalog = file_catalog(tmp_path)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    real_read = catalog._swap.read
    seen: Dict[str, Any] = {}

    def stale_read(key: str) -> Any:
        # Every read returns what the first read saw.
        return seen.setdefault(key, real_read(key))

    catalog._swap = _ReadStale(catalog._swap, stale_read)
    table.append(rows("a", 0, 1))  # lands, read before it was cached
    with pytest.raises(CommitFailedException):
        # PyIceberg retries, rebased on the same stale read each time.
        catalog.load_table("db.t").append(rows("b", 1, 1))
    catalog._swap = catalog._swap.inner
    assert catalog.load_table("db.t").scan().to_arrow().num_rows == 1


class _ReadStale:
    def __init__(self, inner: Any, read: Any) -> None:
        self.inner = inner
        self.read = read

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_lineage_check_follows_the_metadata_log(tmp_path: pathlib.Path) -> None:
    catalog = file_catalog(tmp_path)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows("a", 0, 1))
    ours = catalog.load_table("db.t").metadata_location
    table = catalog.load_table("db.t")
    table.append(rows("b", 1, 1))
    table.append(rows("c", 2, 1))
    later = catalog.load_table("db.t").metadata_location
    body = json.dumps({"metadata-location": later}).encode()
    assert catalog._descends_from(ours)(body, "n") is True
    # A metadata file the log reaches back past, but does not list.
    other = ours.replace(ours.rsplit("/", 1)[1].split("-", 1)[1], "00000000-0000-0000-0000-000000000000.metadata.json")
    assert catalog._descends_from(other)(body, "n") is False


def test_concurrent_appends_each_land_once(tmp_path: pathlib.Path) -> None:
    catalog = file_catalog(tmp_path)
    catalog.create_namespace("db")
    catalog.create_table(
        "db.t", schema=SCHEMA, properties={"commit.retry.num-retries": "50", "commit.retry.min-wait-ms": "5", "commit.retry.max-wait-ms": "50"}
    )
    writers, commits = 4, 5
    errors: List[BaseException] = []

    def work(w: int) -> None:
        own = file_catalog(tmp_path, f"w{w}")
        try:
            for c in range(commits):
                own.load_table("db.t").append(rows(f"w{w}", w * 100 + c, 1))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    table = catalog.load_table("db.t")
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert ids == sorted(w * 100 + c for w in range(writers) for c in range(commits))
    assert len(table.metadata.snapshots) == writers * commits


def test_a_table_written_here_is_plain_iceberg_for_sql_catalog(tmp_path: pathlib.Path) -> None:
    catalog = file_catalog(tmp_path)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    for i in range(3):
        table.append(rows("a", i, 1))
    table = catalog.load_table("db.t")
    from pyiceberg.catalog.sql import SqlCatalog

    sql = SqlCatalog(
        "reference",
        uri=f"sqlite:///{tmp_path / 'reference.db'}",
        warehouse=f"file://{tmp_path / 'sqlwh'}",
    )
    sql.create_namespace("db")
    adopted = sql.register_table("db.t", table.metadata_location)
    assert [s.snapshot_id for s in adopted.metadata.snapshots] == [
        s.snapshot_id for s in table.metadata.snapshots
    ]
    for snapshot in table.metadata.snapshots:
        assert adopted.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows >= 1
    assert adopted.scan().to_arrow().num_rows == 3
    # And back: a table PyIceberg's SqlCatalog wrote, adopted here.
    mine = catalog.register_table("db.adopted", adopted.metadata_location)
    assert mine.scan().to_arrow().num_rows == 3


def test_a_rename_cut_short_is_finished_by_running_it_again(tmp_path: pathlib.Path) -> None:
    catalog = file_catalog(tmp_path)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows("a", 0, 2))
    source = catalog.load_table("db.t")
    # A rename that stopped after its first write: the new name points at
    # the table, marked as a rename in flight; the old name still lives.
    key = catalog._table_key(("db", "u"))
    body = catalog._pointer(("db", "u"), source.metadata_location, **{"renamed-from": ["db", "t"]})
    kind, _, _ = catalog._swap_to(key, None, body)
    assert kind == "ours"
    assert sorted(catalog.list_tables("db")) == [("db", "t"), ("db", "u")]
    # Creating the new name from scratch is refused: it is someone's rename.
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("db.u", schema=SCHEMA)
    done = catalog.rename_table("db.t", "db.u")
    assert done.scan().to_arrow().num_rows == 2
    assert catalog.list_tables("db") == [("db", "u")]
    stored, _ = catalog._swap.read(key)
    assert "renamed-from" not in json.loads(stored)


def test_an_exception_of_the_body_is_raised_as_it_is(tmp_path: pathlib.Path) -> None:
    """Nothing of the swap can land yet: the body's own exception, not a
    protocol error wrapping it."""
    catalog = file_catalog(tmp_path)

    class Unencodable(Exception):
        pass

    def body(_nonce: str) -> bytes:
        raise Unencodable("cannot encode the pointer")

    with pytest.raises(Unencodable, match="cannot encode the pointer"):
        catalog._swap.swap("tables/db/t", None, body, lambda _b: None, lambda _b, _n: False)
    assert catalog._swap.read("tables/db/t") is None
