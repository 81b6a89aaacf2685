"""Dependencies declared: the extras casaas[iceberg] and casaas[lance] name
the releases whose behaviour the docs rely on, casaas.iceberg refuses a
PyIceberg without its commit retry, and the catalog's other methods raise
PyIceberg's exception types, not casaas's."""

from __future__ import annotations

import pathlib
from importlib import metadata
from typing import List

import pytest

import casaas


def requirements() -> List[str]:
    return [r.replace(" ", "") for r in metadata.requires("casaas") or []]


def test_the_extras_name_the_releases_the_docs_rely_on() -> None:
    extras = metadata.metadata("casaas").get_all("Provides-Extra") or []
    assert {"iceberg", "lance"} <= set(extras), extras
    declared = requirements()
    assert any(r.startswith("pyiceberg>=0.12.0;") and "iceberg" in r for r in declared), declared
    assert any(r.startswith("pylance>=14.0.2;") and "lance" in r for r in declared), declared
    # Nothing is required without an extra.
    assert all("extra==" in r for r in declared), declared


def test_a_pyiceberg_without_its_commit_retry_is_refused() -> None:
    pytest.importorskip("pyiceberg")
    from casaas import iceberg

    for old in ("0.9.1", "0.11.0", "0.11.1rc2", "0.12rc1"):
        with pytest.raises(ImportError, match="PyIceberg 0.12.0 or later"):
            iceberg._require_pyiceberg(old)
    for new in ("0.12.0", "0.12.0rc1", "0.12.1", "0.13.0.dev1", "1.0.0"):
        iceberg._require_pyiceberg(new)


def test_a_store_failure_in_a_catalog_method_is_pyicebergs_exception(
    tmp_path: pathlib.Path,
) -> None:
    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import ServiceUnavailableError

    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    catalog = load_catalog(
        "lake",
        **{
            "py-catalog-impl": "casaas.iceberg.Catalog",
            "uri": f"file://{warehouse}",
            "warehouse": f"file://{warehouse}",
        },
    )
    catalog.create_namespace("ns")
    # The namespace's object becomes a directory (the file store keeps key
    # K as the file K~obj): every read of it is a store failure.
    (warehouse / "namespaces" / "ns~obj").unlink()
    (warehouse / "namespaces" / "ns~obj").mkdir()
    for call in (
        lambda: catalog.load_namespace_properties("ns"),
        lambda: catalog.drop_namespace("ns"),
        lambda: catalog.update_namespace_properties("ns", updates={"a": "b"}),
    ):
        with pytest.raises(ServiceUnavailableError) as raised:
            call()
        assert isinstance(raised.value.__cause__, casaas.Error)
