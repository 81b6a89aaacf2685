"""One URL, one lock: Python splits every lock URL of the shared table
(casaas/tests/lock_urls.tsv, also read by the tests of the Rust library and
of the `casaas` command) into the store URL and key the table names, and
refuses the URLs that name no lock object."""

from __future__ import annotations

import pathlib
from typing import List, Tuple

import pytest

import casaas
from casaas import _casaas
from conftest import ROOT

TABLE = ROOT / "casaas" / "tests" / "lock_urls.tsv"


def rows() -> List[Tuple[str, str, str]]:
    out = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            url, store, key = line.split("\t")
            out.append((url, store, key))
    return out


@pytest.mark.parametrize("url,store,key", rows())
def test_every_lock_url_of_the_table_names_the_same_object(url: str, store: str, key: str) -> None:
    if store == "!refused":
        with pytest.raises(casaas.InvalidUrl):
            _casaas.split_key(url)
    else:
        assert _casaas.split_key(url) == (store, key)


def test_a_percent_encoded_lock_name_is_the_object_the_command_locks(tmp_path: pathlib.Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    store = casaas.open(f"file://{locks}")
    with casaas.lock(f"file://{locks}/my%20lock", wait=0) as held:
        # `casaas lock file://.../my%20lock` locks the key `my lock`.
        holder = casaas.Lease(store, "my lock").holder()
        assert holder is not None and holder.token == held.token
        assert casaas.Lease(store, "my%20lock").holder() is None


def test_a_trailing_slash_or_a_fragment_is_refused(tmp_path: pathlib.Path) -> None:
    for url in (f"file://{tmp_path}/x/", f"file://{tmp_path}/x#part"):
        with pytest.raises(casaas.InvalidUrl):
            casaas.lock(url)
