"""casaas.list_locks: every lock under a prefix as `casaas ls` shows it
(held, released, foreign, a fair-mode queue ticket as a waiter, a lock under
a session judged by its heartbeat, the store guard's objects left out), on
the file store and the real servers, and its asyncio form."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from typing import Any, Callable, Dict, List

import pytest

import casaas

from conftest import server


def _by_key(entries: List[casaas.LockEntry]) -> Dict[str, casaas.LockEntry]:
    return {e.key: e for e in entries}


def _check_listing(url: str, options: Dict[str, Any]) -> None:
    store = casaas.open(url, **options)
    with casaas.lock(store, "locks/held", ttl=20, owner="worker-1") as held:
        with casaas.lock(store, "locks/released", ttl=20):
            pass
        with casaas.Session(store, "sessions/w", ttl=20) as session:
            with session.lock("locks/shard"):
                entries = casaas.list_locks(url, **options)
                by_key = _by_key(entries)
                assert [e.key for e in entries] == sorted(by_key)
                assert not any(k.startswith(".casaas-guard/") for k in by_key), by_key

                e = by_key["locks/held"]
                assert e.state == "held"
                assert (e.holder, e.token, e.ttl, e.layout) == ("worker-1", held.token, 20.0, "record")
                assert isinstance(e.renewed_at, datetime.datetime)
                assert e.renewed_at.tzinfo == datetime.timezone.utc
                assert e.acquired_at is not None and e.acquired_at <= e.renewed_at
                assert e.version and e.session is None and e.found is None

                assert by_key["locks/released"].state == "released"

                e = by_key["locks/shard"]
                assert (e.state, e.session, e.session_term, e.session_state) == (
                    "held",
                    "sessions/w",
                    session.term,
                    "alive",
                )
                assert by_key["sessions/w"].state == "held"

                # Only the keys under a prefix, relative to it.
                under = casaas.list_locks(store, prefix="locks/")
                assert sorted(e.key for e in under) == ["held", "released", "shard"]
    after = _by_key(casaas.list_locks(store))
    assert after["locks/held"].state == "released"
    assert after["locks/shard"].state == "released"


def test_list_locks_on_the_file_store(file_url: str) -> None:
    _check_listing(file_url, {})


@pytest.mark.parametrize("name", ["ceph", "seaweedfs"])
def test_list_locks_on_a_server(name: str) -> None:
    url, options = server(name)
    _check_listing(url, dict(options))


def _put(store: casaas.Store, key: str, make: Callable[[str], bytes], find: Callable[[bytes], str]) -> None:
    assert casaas.create_once(store, key, make, find)


def test_foreign_objects_and_queue_tickets(file_url: str) -> None:
    store = casaas.open(file_url)
    _put(
        store,
        "locks/notes.txt",
        lambda nonce: f"hello, not a lock {nonce}".encode(),
        lambda body: body.decode().rsplit(" ", 1)[1],
    )
    now_ms = int(time.time() * 1000)
    ticket: Dict[str, Any] = {
        "kind": "casaas.lease",
        "schema": 1,
        "owner": "waiter",
        "token": 1,
        "ttl_ms": 60_000,
        "acquired_at_ms": now_ms,
        "renewed_at_ms": now_ms,
    }
    # A fair-mode waiter's ticket in the queue of `report`, as it renews it.
    _put(
        store,
        "locks/report.queue/00000000000000000001",
        lambda nonce: json.dumps({**ticket, "nonce": nonce}).encode(),
        lambda body: str(json.loads(body)["nonce"]),
    )
    by_key = _by_key(casaas.list_locks(file_url, prefix="locks/"))
    e = by_key["notes.txt"]
    assert (e.state, e.holder, e.token, e.layout) == ("foreign", None, None, None)
    assert e.found is not None and "hello" in e.found
    e = by_key["report.queue/00000000000000000001"]
    assert (e.state, e.holder, e.waiting_for) == ("waiting", "waiter", "report")


def test_list_locks_async(file_url: str) -> None:
    async def main() -> List[casaas.LockEntry]:
        async with casaas.lock(file_url + "/locks/a", ttl=20):
            return await casaas.list_locks_async(file_url, prefix="locks/")

    entries = asyncio.run(main())
    assert [(e.key, e.state) for e in entries] == [("a", "held")]


def test_bad_input_is_refused(file_url: str) -> None:
    with pytest.raises(casaas.InvalidUrl):
        casaas.list_locks("not a url")
    with pytest.raises(casaas.InvalidConfig):
        casaas.list_locks(casaas.open(file_url), region="x")
