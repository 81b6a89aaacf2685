"""Sessions, elections, fenced resources and logs, group commit, create_once."""

from __future__ import annotations

import json
import threading
import uuid
from typing import List, Optional

import pytest

import casaas


def test_fenced_resource_refuses_an_older_token(memory_url: str) -> None:
    pointer = casaas.FencedResource(memory_url, "table/head")
    assert pointer.read() is None
    assert pointer.write(2, {"v": 1}) == casaas.Fenced({"v": 1}, 2)
    with pytest.raises(casaas.FencedOut) as info:
        pointer.write(1, {"v": "stale"})
    assert (info.value.presented, info.value.recorded) == (1, 2)
    assert pointer.read() == casaas.Fenced({"v": 1}, 2)


def test_a_paused_holder_is_fenced_out_by_its_successor(memory_url: str) -> None:
    store = casaas.open(memory_url)
    report = casaas.FencedResource(store, "report")
    old = casaas.Lease(store, "locks/job", ttl=2).acquire(0)
    old_token = old.token
    old.abandon()  # as if paused: its lease expires
    new = casaas.Lease(store, "locks/job", ttl=2).acquire(wait=10)
    assert new.token > old_token
    report.write(new.token, "new")
    with pytest.raises(casaas.FencedOut):
        report.write(old_token, "old")
    new.release()


def test_fenced_log_appends_in_order_and_fences(memory_url: str) -> None:
    log = casaas.FencedLog(memory_url, "logs/a")
    assert log.latest_seq() is None
    first = log.append(1, {"n": 1})
    assert (first.seq, first.token, first.value) == (1, 1, {"n": 1})
    log.append(3, [1, 2])
    with pytest.raises(casaas.FencedOut):
        log.append(2, "stale")
    assert [e.value for e in log.entries()] == [{"n": 1}, [1, 2]]
    assert log.read(2)[0].token == 3
    assert log.read(9) == []
    assert log.latest_seq() == 2


def test_group_commit_batches_concurrent_appends(memory_url: str) -> None:
    log = casaas.FencedLog(memory_url, "logs/g")
    errors: List[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(10):
                log.append(1, {"t": i, "j": j}, grouped=True)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    records = log.entries()
    assert len(records) == 80
    assert sorted((r.value["t"], r.value["j"]) for r in records) == [
        (i, j) for i in range(8) for j in range(10)
    ]
    # Records are ordered by (seq, offset); batching wrote fewer entries.
    assert [(r.seq, r.offset) for r in records] == sorted((r.seq, r.offset) for r in records)
    latest = log.latest_seq()
    assert latest is not None and latest <= 80


def test_create_once_settles_exactly_one_body(memory_url: str) -> None:
    store = casaas.open(memory_url)

    def body(nonce: str) -> bytes:
        return json.dumps({"nonce": nonce, "by": "me"}).encode()

    def nonce_in(stored: bytes) -> Optional[str]:
        got = json.loads(stored).get("nonce")
        return got if isinstance(got, str) else None

    assert casaas.create_once(store, "manifests/1", body, nonce_in) is True
    assert casaas.create_once(store, "manifests/1", body, nonce_in) is False


def test_create_once_reports_a_failing_body(memory_url: str) -> None:
    def body(nonce: str) -> bytes:
        raise RuntimeError("no body today")

    # Nothing was written: the body's own exception, as it was raised.
    with pytest.raises(RuntimeError) as info:
        casaas.create_once(memory_url, "manifests/2", body, lambda b: None)
    assert "no body today" in str(info.value)


def test_election_campaign_leader_resign(memory_url: str) -> None:
    store = casaas.open(memory_url)
    a = casaas.Election(store, "elections/e", ttl=3, owner="a")
    b = casaas.Election(store, "elections/e", ttl=3, owner="b")
    assert a.leader() is None
    with a.campaign(wait=5) as term:
        assert a.leader() == casaas.Leader("a", term.token)
        assert b.leader() == casaas.Leader("a", term.token)
        with pytest.raises(casaas.Timeout):
            b.campaign(wait=0.3)
        term.check()
    assert term.lost
    second = b.campaign(wait=5)
    assert second.token == term.token + 1
    second.resign()


def test_session_holds_many_locks_and_loses_them_together(memory_url: str) -> None:
    store = casaas.open(memory_url)
    with casaas.Session(store, "sessions/w", ttl=3, owner="w") as session:
        assert session.term == 1
        a = session.lease("locks/a").acquire(0)
        b = session.lease("locks/b").acquire(0)
        assert session.held_locks() == 2
        with pytest.raises(casaas.LockHeld):
            casaas.lock(store, "locks/a", wait=0).__enter__()
        session.ensure_held_for(1)
        with session.lock("locks/c") as c:
            assert not c.lost
    assert a.lost and b.lost
    with casaas.lock(store, "locks/a", wait=0) as again:
        assert again.token > a.token


def test_exceptions_form_one_hierarchy() -> None:
    for name in (
        "LockHeld",
        "UnsafeStore",
        "FencedOut",
        "LeaseLost",
        "MayHaveTakenEffect",
        "InvalidUrl",
        "InvalidConfig",
        "Timeout",
        "StoreError",
    ):
        assert issubclass(getattr(casaas, name), casaas.Error), name
    assert issubclass(casaas.MayHaveTakenEffect, casaas.StoreError)
    assert issubclass(casaas.InvalidUrl, ValueError)
    assert issubclass(casaas.Timeout, TimeoutError)


def test_unique_memory_urls_do_not_share() -> None:
    one = f"memory://{uuid.uuid4().hex}/x"
    two = f"memory://{uuid.uuid4().hex}/x"
    with casaas.lock(one, "locks/a", wait=0):
        with casaas.lock(two, "locks/a", wait=0):
            pass


def test_election_observe_reports_each_change(memory_url: str) -> None:
    store = casaas.open(memory_url)
    a = casaas.Election(store, "elections/o", ttl=3, owner="a")
    watcher = casaas.Election(store, "elections/o", ttl=3, owner="watcher")
    seen = watcher.observe(timeout=5)
    assert next(seen) is None
    term = a.campaign(wait=5)
    assert next(seen) == casaas.Leader("a", term.token)
    term.resign()
    assert next(seen) is None
    quiet = watcher.observe(timeout=0.3)
    assert next(quiet) is None
    assert list(quiet) == []
