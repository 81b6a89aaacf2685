"""Group commit for fenced resources (casaas.GroupResource): the promises a
Python caller relies on.

1. Updates from many threads and processes are each applied exactly once,
   under the token they were submitted with.
2. A superseded token's group update is refused (FencedOut), as a whole
   batch, and never applied.
3. A lost answer is settled by reading back, or raised as
   MayHaveTakenEffect for every caller of the batch: never success.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pytest

import casaas

THREADS = 8
PER_THREAD = 25


def add(name: str, token: int) -> Callable[[Any], Any]:
    """An update that appends ``[name, token]`` to the list stored: a
    duplicate apply shows as the name twice, a lost one as none, and the
    order of tokens in the list is the order of the writes."""

    def update(value: Any) -> Any:
        return (value or []) + [[name, token]]

    return update


def run_threads(work: Callable[[int], None], n: int = THREADS) -> List[BaseException]:
    errors: List[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def stored(group: casaas.GroupResource) -> List[List[Any]]:
    got = group.read()
    assert got is not None
    value: List[List[Any]] = got.value
    return value


def test_threads_updates_each_applied_once_under_their_token(file_url: str) -> None:
    store = casaas.open(file_url)
    held = casaas.Lease(store, "locks/job", ttl=30).acquire(0)
    group = casaas.FencedResource(store, "counter").grouped()
    answers: Dict[str, casaas.Applied] = {}

    def work(i: int) -> None:
        for j in range(PER_THREAD):
            name = f"{i}-{j}"
            answers[name] = group.update(held.token, add(name, held.token))

    assert run_threads(work) == []
    names = [f"{i}-{j}" for i in range(THREADS) for j in range(PER_THREAD)]
    value = stored(group)
    counts = collections.Counter(n for n, _ in value)
    assert counts == collections.Counter(names), "an update was lost or applied twice"
    assert {t for _, t in value} == {held.token}
    for name, a in answers.items():
        assert a.token == held.token
        # The value right after this update ends with it, at its place.
        assert a.value[-1] == [name, held.token]
        assert 0 <= a.offset < a.batch_len
    # Threads in one process shared writes: else this proves nothing about
    # group commit.
    assert max(a.batch_len for a in answers.values()) > 1
    assert group.read() == casaas.Fenced(value, held.token)
    held.release()


def test_tickets_from_one_thread_batch_and_a_cancelled_one_is_never_written(
    memory_url: str,
) -> None:
    group = casaas.GroupResource(memory_url, "pipelined", max_batch_records=16)
    tickets = [(f"t{i}", group.submit(5, add(f"t{i}", 5))) for i in range(64)]
    removed: Set[str] = set()
    for name, ticket in tickets[40:]:
        if ticket.cancel():
            removed.add(name)
    applied: Dict[str, casaas.Applied] = {}
    for name, ticket in tickets:
        if name not in removed:
            applied[name] = ticket.wait()
    value = stored(group)
    counts = collections.Counter(n for n, _ in value)
    assert counts == collections.Counter(list(applied)), "a cancelled update was written, or one lost"
    assert all(a.batch_len <= 16 for a in applied.values())
    # A ticket answers once.
    with pytest.raises(casaas.InvalidConfig):
        tickets[0][1].wait()


def worker(url: str, token: int, name: str, n: int) -> None:
    """One process's threads, each updating through one shared handle.

    An update answered MayHaveTakenEffect is settled as the error says: the
    resource is read, and the update made again only if it is not there (a
    write refused by a precondition may be our own duplicate, and when a
    process stalls while the others write more than the record's history
    holds, its outcome cannot be told from the record)."""
    group = casaas.GroupResource(url, "shared")
    batched: List[int] = []
    settled_by_reading = 0

    def work(i: int) -> None:
        nonlocal settled_by_reading
        for j in range(n):
            update_name = f"{name}-{i}-{j}"
            while True:
                try:
                    a = group.update(token, add(update_name, token))
                except casaas.MayHaveTakenEffect:
                    settled_by_reading += 1
                    if any(done == update_name for done, _ in stored(group)):
                        break
                    continue
                assert a.token == token, a
                batched.append(a.batch_len)
                break

    errors = run_threads(work, 4)
    if errors:
        raise errors[0]
    print(max(batched, default=0), settled_by_reading)


def test_processes_and_threads_updates_each_applied_once(file_url: str) -> None:
    # The lock is held by this process; its workers act under its token.
    held = casaas.Lease(file_url, "locks/job", ttl=60).acquire(0)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, file_url, str(held.token), f"p{p}", "10"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    names = [f"p{p}-{i}-{j}" for p in range(3) for i in range(4) for j in range(10)]
    got = casaas.FencedResource(file_url, "shared").read()
    assert got is not None and got.token == held.token
    counts = collections.Counter(n for n, _ in got.value)
    assert counts == collections.Counter(names), "an update was lost or applied twice"
    assert {t for _, t in got.value} == {held.token}
    held.release()


def test_a_superseded_tokens_group_update_is_refused(memory_url: str) -> None:
    store = casaas.open(memory_url)
    old = casaas.Lease(store, "locks/job", ttl=30).acquire(0)
    old_token = old.token
    old.release()
    new = casaas.Lease(store, "locks/job", ttl=30).acquire(0)
    assert new.token > old_token
    group = casaas.FencedResource(store, "report").grouped()
    group.update(new.token, add("new", new.token))

    # Alone, and as a whole batch of several threads: every update refused.
    refused: List[casaas.FencedOut] = []

    def stale(i: int) -> None:
        try:
            group.update(old_token, add(f"old-{i}", old_token))
        except casaas.FencedOut as e:
            refused.append(e)

    assert run_threads(stale) == []
    assert len(refused) == THREADS
    assert all((e.presented, e.recorded) == (old_token, new.token) for e in refused)
    assert group.read() == casaas.Fenced([["new", new.token]], new.token)
    new.release()


def test_mixed_tokens_old_ones_land_only_before_the_new_token(memory_url: str) -> None:
    """Threads submit under an old and a new token at once. An old-token
    update may land before the first new-token write (fencing allows it),
    never after; a batch never carries another token's update."""
    group = casaas.GroupResource(memory_url, "mixed")
    outcome: Dict[str, Tuple[int, Optional[casaas.Applied]]] = {}

    def work(i: int) -> None:
        for j in range(PER_THREAD):
            token = 7 if (i + j) % 2 else 8
            name = f"{i}-{j}"
            try:
                outcome[name] = (token, group.update(token, add(name, token)))
            except casaas.FencedOut:
                outcome[name] = (token, None)

    assert run_threads(work) == []
    value = stored(group)
    tokens = [t for _, t in value]
    assert tokens == sorted(tokens), f"an old token's update landed after a newer write: {tokens}"
    counts = collections.Counter(n for n, _ in value)
    for name, (token, applied) in outcome.items():
        if applied is None:
            assert token == 7 and counts[name] == 0, f"{name} was refused yet applied"
        else:
            assert applied.token == token, "applied under another token than submitted"
            assert counts[name] == 1, f"{name} applied {counts[name]} times"
    assert all(applied is not None for t, applied in outcome.values() if t == 8)
    assert sum(1 for t, a in outcome.values() if a is None) > 0, "no old update was refused"
    assert group.read() == casaas.Fenced(value, 8)


def test_an_update_function_that_raises_fails_alone(memory_url: str) -> None:
    group = casaas.GroupResource(memory_url, "raising")
    group.update(1, add("first", 1))
    errors: List[BaseException] = []

    def broken(value: Any) -> Any:
        raise ValueError("no")

    def work(i: int) -> None:
        try:
            if i == 3:
                group.update(1, broken)
            else:
                group.update(1, add(f"ok-{i}", 1))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    assert run_threads(work) == []  # collected by work itself
    assert [type(e) for e in errors] == [ValueError]
    assert sorted(n for n, _ in stored(group)) == sorted(
        ["first"] + [f"ok-{i}" for i in range(THREADS) if i != 3]
    )
    # A value json cannot encode is the function's error too.
    with pytest.raises(TypeError):
        group.update(1, lambda v: object())
    with pytest.raises(casaas.InvalidConfig):
        casaas.GroupResource(memory_url, "bad", max_queued=0)


if __name__ == "__main__":
    worker(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
