"""An Apache Iceberg catalog on a bare bucket: every commit is one
conditional swap of the table's pointer, made exactly once by casaas.

Load it with PyIceberg::

    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(
        "lake",
        **{
            "py-catalog-impl": "casaas.iceberg.Catalog",
            "uri": "s3://bucket/warehouse?endpoint=http://127.0.0.1:8333",
            "casaas.aws_access_key_id": "...",      # options of casaas.open
            "casaas.aws_secret_access_key": "...",
            "warehouse": "s3://bucket/warehouse",    # where tables' files go
            "s3.endpoint": "http://127.0.0.1:8333",  # PyIceberg's FileIO
        },
    )

``uri`` is the casaas store that holds the catalog's own objects (a pointer
per table, an object per namespace); properties named ``casaas.NAME`` are
passed to :func:`casaas.open` as option ``NAME`` (credentials among them).
``warehouse`` is where new tables' metadata and data files go, read and
written by PyIceberg's FileIO (its usual ``s3.*`` properties apply); by
default the ``uri`` without its query.

The commit protocol runs in Rust (``SwapOnce``): the new metadata file is
written once, then the pointer is swapped only if it still names the
metadata the commit was based on. A lost answer is settled by reading the
pointer back: the commit's nonce there, or a later metadata whose
``metadata-log`` lists the commit's file, is success; another writer's
metadata is a conflict, raised as PyIceberg's ``CommitFailedException`` so
that PyIceberg's own retry rebases and commits again. Never both. See
``docs/iceberg.md`` for what each operation guarantees.
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.parse
from importlib import metadata as _metadata
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

from pyiceberg.catalog import MetastoreCatalog, PropertiesUpdateSummary
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    ServiceUnavailableError,
    TableAlreadyExistsError,
    UnauthorizedError,
)
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties

from . import _casaas
from ._errors import Contended, MayHaveTakenEffect, StoreError, Unauthorized

__all__ = ["Catalog"]

# PyIceberg's own commit retry (`commit.retry.num-retries`), which turns
# this catalog's CommitFailedException into a rebase and a new commit, is
# in PyIceberg from this release on.
MIN_PYICEBERG = (0, 12, 0)


def _require_pyiceberg(version: str) -> None:
    """Raises ImportError when PyIceberg `version` is older than
    :data:`MIN_PYICEBERG`: without its commit retry, every concurrent
    commit this catalog reports as a conflict would fail the caller."""
    parts: List[int] = []
    for part in version.split(".")[:3]:
        digits = re.match(r"\d*", part)
        parts.append(int(digits.group()) if digits and digits.group() else 0)
    if tuple(parts) < MIN_PYICEBERG:
        need = ".".join(map(str, MIN_PYICEBERG))
        raise ImportError(
            f"casaas.iceberg needs PyIceberg {need} or later (its commit retry); "
            f"PyIceberg {version} is installed: install casaas with its iceberg extra "
            f"(casaas[iceberg]) or pip install 'pyiceberg>={need}'"
        )


_require_pyiceberg(_metadata.version("pyiceberg"))


@contextlib.contextmanager
def _pyiceberg_errors(what: str) -> Iterator[None]:
    """casaas's exceptions as PyIceberg's, for PyIceberg's callers: a write
    that may or may not have landed is ``CommitStateUnknownException``,
    refused credentials ``UnauthorizedError``, too many writers
    ``CommitFailedException``, any other store failure
    ``ServiceUnavailableError`` (the casaas exception is the cause)."""
    try:
        yield
    except MayHaveTakenEffect as e:
        raise CommitStateUnknownException(
            f"{what} may or may not have taken effect ({e}): read it back before trying again"
        ) from e
    except Unauthorized as e:
        raise UnauthorizedError(f"{what}: the store refused the credentials ({e})") from e
    except Contended as e:
        raise CommitFailedException(f"{what}: too many concurrent writers ({e})") from e
    except StoreError as e:
        raise ServiceUnavailableError(f"{what}: the catalog's store failed ({e})") from e

POINTER_KIND = "casaas.iceberg.table"
NAMESPACE_KIND = "casaas.iceberg.namespace"
SCHEMA = 1
LIVE = "live"
DROPPED = "dropped"
# Rebases of drops, renames and namespace updates (each re-reads and
# writes again after another writer's change).
MAX_REBASES = 16

Body = Dict[str, Any]


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _nonce_in(stored: bytes) -> Optional[str]:
    try:
        nonce = json.loads(stored).get("nonce")
    except (ValueError, AttributeError):
        return None
    return nonce if isinstance(nonce, str) else None


def _decode(stored: bytes, key: str, kind: str) -> Body:
    try:
        body = json.loads(stored)
    except ValueError as e:
        raise ValueError(f"the catalog object {key} is not JSON: {e}") from e
    if not isinstance(body, dict) or body.get("kind") != kind:
        raise ValueError(
            f"the catalog object {key} is not a {kind} object: another tool wrote it; "
            "move it away or use another uri"
        )
    return body


def _encode(body: Body) -> Callable[[str], bytes]:
    def make(nonce: str) -> bytes:
        return json.dumps({**body, "nonce": nonce}, sort_keys=True).encode()

    return make


def _never(_stored: bytes, _nonce: str) -> bool:
    return False


class Catalog(MetastoreCatalog):
    """A PyIceberg catalog whose commits are conditional swaps on a store
    (see the module docs)."""

    def __init__(self, name: str, **properties: str):
        super().__init__(name, **properties)
        uri = properties.get("uri")
        if not uri:
            raise ValueError(
                "the casaas Iceberg catalog needs a uri: the store that holds its objects, "
                "for example uri=s3://bucket/warehouse or uri=file:///path/warehouse"
            )
        options = {
            k[len("casaas.") :]: v for k, v in properties.items() if k.startswith("casaas.")
        }
        self._store = _casaas.open(uri, options)
        self._swap = _casaas.SwapOnce(self._store)
        if "warehouse" not in self.properties:
            self.properties["warehouse"] = uri.split("?", 1)[0].rstrip("/")

    # -- keys and objects ------------------------------------------------

    @staticmethod
    def _namespace_key(namespace: Union[str, Identifier]) -> str:
        name = Catalog.namespace_to_string(Catalog.identifier_to_tuple(namespace))
        return f"namespaces/{_quote(name)}"

    @staticmethod
    def _table_key(identifier: Union[str, Identifier]) -> str:
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        table = Catalog.table_name_from(identifier)
        return f"tables/{_quote(namespace)}/{_quote(table)}"

    def _read(self, key: str, kind: str) -> Tuple[Optional[Body], Any]:
        """The object at `key` and its version; `(None, version)` for a
        dropped one, `(None, None)` when absent."""
        with _pyiceberg_errors(f"reading the catalog object {key}"):
            found = self._swap.read(key)
        if found is None:
            return None, None
        stored, version = found
        body = _decode(stored, key, kind)
        return (body if body.get("state") == LIVE else None), version

    def _swap_to(
        self,
        key: str,
        expected: Any,
        body: Body,
        descends: Callable[[bytes, str], bool] = _never,
    ) -> Tuple[str, Optional[bytes], Any]:
        with _pyiceberg_errors(f"the write of the catalog object {key}"):
            kind, current, version, _replaced = self._swap.swap(
                key, expected, _encode(body), _nonce_in, descends
            )
        return kind, current, version

    def _list(self, prefix: str) -> List[str]:
        with _pyiceberg_errors(f"listing the catalog objects under {prefix}"):
            keys: List[str] = self._swap.list(prefix)
        return keys

    # -- namespaces ------------------------------------------------------

    def create_namespace(
        self, namespace: Union[str, Identifier], properties: Properties = EMPTY_DICT
    ) -> None:
        key = self._namespace_key(namespace)
        current, version = self._read(key, NAMESPACE_KIND)
        if current is not None:
            raise NamespaceAlreadyExistsError(f"Namespace already exists: {namespace}")
        body = {"kind": NAMESPACE_KIND, "schema": SCHEMA, "state": LIVE, "properties": dict(properties)}
        kind, _, _ = self._swap_to(key, version, body)
        if kind != "ours":
            raise NamespaceAlreadyExistsError(f"Namespace already exists: {namespace}")

    def load_namespace_properties(self, namespace: Union[str, Identifier]) -> Properties:
        current, _ = self._read(self._namespace_key(namespace), NAMESPACE_KIND)
        if current is None:
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        return dict(current.get("properties", {}))

    def update_namespace_properties(
        self,
        namespace: Union[str, Identifier],
        removals: Optional[Set[str]] = None,
        updates: Properties = EMPTY_DICT,
    ) -> PropertiesUpdateSummary:
        key = self._namespace_key(namespace)
        for _ in range(MAX_REBASES):
            current, version = self._read(key, NAMESPACE_KIND)
            if current is None:
                raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
            summary, updated = self._get_updated_props_and_update_summary(
                current.get("properties", {}), removals, updates
            )
            kind, _, _ = self._swap_to(key, version, {**current, "properties": updated})
            if kind == "ours":
                return summary
        raise CommitFailedException(f"Namespace {namespace} kept changing: try again")

    def drop_namespace(self, namespace: Union[str, Identifier]) -> None:
        if self.list_tables(namespace):
            raise NamespaceNotEmptyError(f"Namespace is not empty: {namespace}")
        key = self._namespace_key(namespace)
        for _ in range(MAX_REBASES):
            current, version = self._read(key, NAMESPACE_KIND)
            if current is None:
                raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
            kind, _, _ = self._swap_to(key, version, {**current, "state": DROPPED})
            if kind == "ours":
                return
        raise CommitFailedException(f"Namespace {namespace} kept changing: try again")

    def list_namespaces(self, namespace: Union[str, Identifier] = ()) -> List[Identifier]:
        parent = Catalog.identifier_to_tuple(namespace) if namespace else ()
        if parent and not self.namespace_exists(parent):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        found: List[Identifier] = []
        for key in self._list("namespaces/"):
            name = urllib.parse.unquote(key[len("namespaces/") :])
            ident = Catalog.identifier_to_tuple(name)
            if len(ident) != len(parent) + 1 or ident[: len(parent)] != parent:
                continue
            current, _ = self._read(key, NAMESPACE_KIND)
            if current is not None:
                found.append(ident)
        return found

    # -- tables ----------------------------------------------------------

    def _load_metadata_table(self, identifier: Identifier, location: str) -> Table:
        io = load_file_io(properties=self.properties, location=location)
        metadata = FromInputFile.table_metadata(io.new_input(location))
        return Table(
            identifier=identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    def _pointer(
        self, identifier: Union[str, Identifier], location: str, **extra: Any
    ) -> Body:
        return {
            "kind": POINTER_KIND,
            "schema": SCHEMA,
            "state": LIVE,
            "metadata-location": location,
            "identifier": list(Catalog.identifier_to_tuple(identifier)),
            **extra,
        }

    def _descends_from(self, ours: str) -> Callable[[bytes, str], bool]:
        """The lineage check: does a stored pointer's metadata descend from
        our metadata file `ours` (its `metadata-log` lists it)? Raises when
        the log no longer reaches back that far."""
        our_version = self._parse_metadata_version(ours)

        def descends(stored: bytes, _nonce: str) -> bool:
            try:
                body = json.loads(stored)
            except ValueError:
                return False
            location = body.get("metadata-location") if isinstance(body, dict) else None
            if not isinstance(location, str):
                return False
            if location == ours:
                return True
            io = load_file_io(properties=self.properties, location=location)
            metadata = FromInputFile.table_metadata(io.new_input(location))
            logged = [entry.metadata_file for entry in metadata.metadata_log]
            if ours in logged:
                return True
            versions = [self._parse_metadata_version(f) for f in logged]
            if our_version >= 0 and versions and min(versions) <= our_version:
                return False
            raise CommitStateUnknownException(
                f"the table's metadata log no longer reaches back to {ours}: "
                "cannot tell whether that commit landed; look for it in the table's history"
            )

        return descends

    def create_table(
        self,
        identifier: Union[str, Identifier],
        schema: Any,
        location: Optional[str] = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        namespace = Catalog.namespace_from(identifier)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        staged = self._create_staged_table(
            identifier, schema, location, partition_spec, sort_order, properties
        )
        key = self._table_key(identifier)
        current, version = self._read(key, POINTER_KIND)
        if current is not None:
            raise TableAlreadyExistsError(f"Table already exists: {identifier}")
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        kind, _, _ = self._swap_to(
            key, version, self._pointer(identifier, staged.metadata_location)
        )
        if kind != "ours":
            self._forget(staged.io, staged.metadata_location)
            raise TableAlreadyExistsError(f"Table already exists: {identifier}")
        return self.load_table(identifier)

    def register_table(
        self, identifier: Union[str, Identifier], metadata_location: str, overwrite: bool = False
    ) -> Table:
        if overwrite:
            raise NotImplementedError("`overwrite` isn't supported: drop the table first")
        namespace = Catalog.namespace_from(identifier)
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        key = self._table_key(identifier)
        current, version = self._read(key, POINTER_KIND)
        if current is not None:
            raise TableAlreadyExistsError(f"Table already exists: {identifier}")
        kind, _, _ = self._swap_to(key, version, self._pointer(identifier, metadata_location))
        if kind != "ours":
            raise TableAlreadyExistsError(f"Table already exists: {identifier}")
        return self.load_table(identifier)

    def load_table(self, identifier: Union[str, Identifier]) -> Table:
        current, _ = self._read(self._table_key(identifier), POINTER_KIND)
        if current is None:
            raise NoSuchTableError(f"Table does not exist: {identifier}")
        return self._load_metadata_table(
            Catalog.identifier_to_tuple(identifier), current["metadata-location"]
        )

    def commit_table(
        self,
        table: Table,
        requirements: Tuple[TableRequirement, ...],
        updates: Tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        identifier = table.name()
        key = self._table_key(identifier)
        current, version = self._read(key, POINTER_KIND)
        current_table = (
            self._load_metadata_table(identifier, current["metadata-location"])
            if current is not None
            else None
        )
        # Raises CommitFailedException when a requirement does not hold on
        # the current metadata.
        staged = self._update_and_stage_table(current_table, identifier, requirements, updates)
        if current_table is not None and staged.metadata == current_table.metadata:
            return CommitTableResponse(  # type: ignore[call-arg]  # pydantic alias
                metadata=current_table.metadata,
                metadata_location=current_table.metadata_location,
            )
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        try:
            kind, _, _ = self._swap_to(
                key,
                version,
                self._pointer(identifier, staged.metadata_location),
                self._descends_from(staged.metadata_location),
            )
        except CommitStateUnknownException as e:
            raise CommitStateUnknownException(
                f"the commit to {identifier} may or may not have landed ({e.__cause__ or e}); "
                f"look for {staged.metadata_location} in the table's metadata log before committing again"
            ) from (e.__cause__ or e)
        if kind != "ours":
            # None of our writes can land any more: the file is nobody's.
            self._forget(staged.io, staged.metadata_location)
            if current_table is None:
                raise TableAlreadyExistsError(f"Table already exists: {identifier}")
            raise CommitFailedException(
                f"Table has been updated by another process: {'.'.join(identifier)}"
            )
        return CommitTableResponse(  # type: ignore[call-arg]  # pydantic alias
            metadata=staged.metadata, metadata_location=staged.metadata_location
        )

    @staticmethod
    def _forget(io: Any, location: str) -> None:
        try:
            io.delete(location)
        except Exception:  # noqa: BLE001 - an orphan file is harmless
            pass

    def drop_table(self, identifier: Union[str, Identifier]) -> None:
        key = self._table_key(identifier)
        for _ in range(MAX_REBASES):
            current, version = self._read(key, POINTER_KIND)
            if current is None:
                raise NoSuchTableError(f"Table does not exist: {identifier}")
            kind, _, _ = self._swap_to(key, version, {**current, "state": DROPPED})
            if kind == "ours":
                return
        raise CommitFailedException(f"Table {identifier} kept changing: try again")

    def rename_table(
        self, from_identifier: Union[str, Identifier], to_identifier: Union[str, Identifier]
    ) -> Table:
        source = Catalog.identifier_to_tuple(from_identifier)
        target = Catalog.identifier_to_tuple(to_identifier)
        if not self.namespace_exists(Catalog.namespace_from(target)):
            raise NoSuchNamespaceError(f"Namespace does not exist: {Catalog.namespace_from(target)}")
        from_key, to_key = self._table_key(source), self._table_key(target)
        for _ in range(MAX_REBASES):
            current, version = self._read(from_key, POINTER_KIND)
            if current is None:
                raise NoSuchTableError(f"Table does not exist: {from_identifier}")
            location = current["metadata-location"]
            # 1. The new name points where the old one does, marked as a
            # rename in flight (a rerun after a crash resumes from here).
            dest, dest_version = self._read(to_key, POINTER_KIND)
            if dest is not None and dest.get("renamed-from") != list(source):
                raise TableAlreadyExistsError(f"Table already exists: {to_identifier}")
            if dest is None or dest.get("metadata-location") != location:
                kind, _, _ = self._swap_to(
                    to_key,
                    dest_version,
                    self._pointer(target, location, **{"renamed-from": list(source)}),
                )
                if kind != "ours":
                    continue
                dest, dest_version = self._read(to_key, POINTER_KIND)
            # 2. The old name ends, if it still points where we copied.
            kind, _, _ = self._swap_to(
                from_key,
                version,
                {**current, "state": DROPPED, "renamed-to": list(target)},
            )
            if kind != "ours":
                continue  # a commit landed on the old name: copy it again
            # 3. The rename is complete: the mark goes.
            for _ in range(MAX_REBASES):
                if dest is None:
                    break
                marked = {k: v for k, v in dest.items() if k not in ("renamed-from", "nonce")}
                kind, _, _ = self._swap_to(to_key, dest_version, marked)
                if kind == "ours":
                    break
                dest, dest_version = self._read(to_key, POINTER_KIND)
                if dest is None or "renamed-from" not in dest:
                    break
            return self.load_table(target)
        raise CommitFailedException(f"Table {from_identifier} kept changing: try again")

    def list_tables(self, namespace: Union[str, Identifier]) -> List[Identifier]:
        ns = Catalog.identifier_to_tuple(namespace)
        if not self.namespace_exists(ns):
            raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
        prefix = f"tables/{_quote(Catalog.namespace_to_string(ns))}/"
        found: List[Identifier] = []
        for key in self._list(prefix):
            rest = key[len(prefix) :]
            if "/" in rest:
                continue
            current, _ = self._read(key, POINTER_KIND)
            if current is not None:
                found.append(ns + (urllib.parse.unquote(rest),))
        return found

    # -- views (not kept by this catalog) -------------------------------

    def list_views(self, namespace: Union[str, Identifier]) -> List[Identifier]:
        return []

    def view_exists(self, identifier: Union[str, Identifier]) -> bool:
        return False

    def drop_view(self, identifier: Union[str, Identifier]) -> None:
        raise NotImplementedError("the casaas catalog keeps tables only, not views")

    def load_view(self, identifier: Union[str, Identifier]) -> Any:
        raise NotImplementedError("the casaas catalog keeps tables only, not views")

    def register_view(self, identifier: Union[str, Identifier], metadata_location: str) -> Any:
        raise NotImplementedError("the casaas catalog keeps tables only, not views")

    def __repr__(self) -> str:
        return f"casaas Iceberg catalog {self.name} on {self._store.describe()}"
