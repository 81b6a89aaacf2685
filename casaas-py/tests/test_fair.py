"""Fair locks: waiters queued behind a holder acquire in ticket order, and a
waiter that gives up (its wait run out, Ctrl-C, a cancelled task) leaves no
ticket in the queue; on the file store and on real servers."""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import casaas
from casaas import _casaas
from conftest import server


def tickets(store: casaas.Store, key: str) -> List[str]:
    """The objects under the lock's queue (`KEY.queue/`)."""
    return _casaas.SwapOnce(store).list(f"{key}.queue/")


def until(check: Any, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def queue_in_order(store: casaas.Store, key: str, waiters: int) -> Tuple[List[int], List[int]]:
    """A holder holds `key`; `waiters` threads queue one after another (each
    starts once the previous one's ticket is listed); then the holder
    releases. Returns the order they acquired in and their tokens."""
    holder = casaas.Lease(store, key, ttl=5, owner="holder").acquire(0)
    order: List[int] = []
    tokens: List[int] = []
    errors: List[BaseException] = []
    guard = threading.Lock()

    def wait_in_turn(i: int) -> None:
        try:
            with casaas.lock(store, key, fair=True, ttl=5, wait=60, owner=f"w{i}") as held:
                with guard:
                    order.append(i)
                    tokens.append(held.token)
                # Long enough for a waiter that ignores the queue to barge in.
                time.sleep(0.3)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = []
    for i in range(waiters):
        t = threading.Thread(target=wait_in_turn, args=(i,))
        t.start()
        threads.append(t)
        until(lambda: len(tickets(store, key)) == i + 1)
    holder.release()
    for t in threads:
        t.join(60)
    assert errors == []
    assert not any(t.is_alive() for t in threads)
    return order, tokens


def test_waiters_acquire_in_ticket_order(file_url: str) -> None:
    store = casaas.open(file_url)
    order, tokens = queue_in_order(store, "locks/report", 4)
    assert order == [0, 1, 2, 3]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4
    # Every ticket ended once its waiter held the lock.
    until(lambda: tickets(store, "locks/report") == [])


def test_a_timed_out_waiter_leaves_no_ticket(file_url: str) -> None:
    store = casaas.open(file_url)
    holder = casaas.Lease(store, "locks/job", ttl=30, owner="holder").acquire(0)
    fair = casaas.FairLease(store, "locks/job", ttl=30)
    assert fair.queue_prefix == "locks/job.queue/" and fair.key == "locks/job"
    with pytest.raises(casaas.LockTimeout) as raised:
        fair.acquire(wait=0.5)
    assert raised.value.owner == "holder" and raised.value.token == 1
    assert tickets(store, "locks/job") == []
    # wait=0 is one attempt on the lock: no ticket at all.
    with pytest.raises(casaas.LockHeld):
        fair.acquire(0)
    assert fair.try_acquire() is None
    assert tickets(store, "locks/job") == []
    # A waiter behind a given-up one is not held up by its ticket: it takes
    # the lock as soon as the holder releases, well before a ticket's TTL.
    holder.release()
    started = time.monotonic()
    with fair.acquire(wait=5) as held:
        assert held.token == 2
    assert time.monotonic() - started < 5


def test_ctrl_c_ends_the_waiters_ticket(file_url: str) -> None:
    store = casaas.open(file_url)
    holder = casaas.Lease(store, "locks/job", ttl=30, owner="holder").acquire(0)
    code = """
        import sys, time, casaas
        print("waiting", flush=True)
        try:
            casaas.lock(sys.argv[1], fair=True, ttl=30, owner="waiter").__enter__()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    waiter = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), f"{file_url}/locks/job"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert waiter.stdout is not None
    assert waiter.stdout.readline().strip() == "waiting"
    until(lambda: len(tickets(store, "locks/job")) == 1)
    waiter.send_signal(signal.SIGINT)
    out, _ = waiter.communicate(timeout=20)
    assert out.strip() == "interrupted"
    assert tickets(store, "locks/job") == []
    holder.release()


def test_a_cancelled_task_ends_its_ticket(file_url: str) -> None:
    async def main() -> None:
        store = await casaas.open_async(file_url)
        holder = casaas.Lease(store, "locks/aio", ttl=30, owner="holder").acquire(0)
        task = asyncio.ensure_future(casaas.FairLease(store, "locks/aio", ttl=30).acquire_async())
        deadline = time.monotonic() + 20
        while len(tickets(store, "locks/aio")) != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The ticket's end runs on casaas's threads after the cancellation.
        while tickets(store, "locks/aio"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await holder.release_async()
        async with casaas.lock(store, "locks/aio", fair=True, wait=5) as held:
            assert held.token == 2

    asyncio.run(main())


def test_a_fair_lock_shared_by_threads_keeps_each_hold(memory_url: str) -> None:
    lock = casaas.lock(memory_url, "locks/shared", fair=True, ttl=5, wait=30)
    assert lock.fair
    inside = 0
    most = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        with lock as held:
            assert not held.lost
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.1)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most == 1
    with pytest.raises(TypeError):
        casaas.lock(memory_url, "locks/shared", fair="yes")  # type: ignore[arg-type]
    # Where a call takes no fair=, it is a typo of the call, not a store option.
    with pytest.raises(TypeError, match="fair=True of lock"):
        casaas.Lease(memory_url, "locks/shared", fair=True)


@pytest.mark.parametrize("name", ["ceph", "seaweedfs"])
def test_fair_lock_on_a_server(name: str) -> None:
    url, options = server(name)
    opts: Dict[str, Any] = dict(options)
    store = casaas.open(url, **opts)
    order, tokens = queue_in_order(store, "locks/fair", 3)
    assert order == [0, 1, 2]
    assert tokens == sorted(tokens)
    holder = casaas.Lease(store, "locks/fair", ttl=10, owner="holder").acquire(10)
    with pytest.raises(casaas.LockTimeout):
        casaas.FairLease(store, "locks/fair", ttl=10).acquire(wait=1)
    until(lambda: tickets(store, "locks/fair") == [])
    holder.release()


def test_an_unkept_fair_holding_stays_held_and_warns(file_url: str) -> None:
    store = casaas.open(file_url)
    with pytest.warns(ResourceWarning, match="dropped without being released"):
        casaas.FairLease(store, "locks/kept", ttl=30).acquire(wait=5)
        gc.collect()
    holder = casaas.Lease(store, "locks/kept").holder()
    assert holder is not None and holder.token == 1
    with pytest.raises(casaas.LockHeld):
        casaas.lock(store, "locks/kept", fair=True, wait=0).__enter__()


def test_a_create_only_store_refuses_fair_turns_clearly() -> None:
    url, options = server("createonly")
    opts: Dict[str, Any] = dict(options)
    store = casaas.open(url + ("&" if "?" in url else "?") + "layout=epochs", **opts)
    with pytest.raises(casaas.Unsupported, match="fair turns need the record layout"):
        casaas.lock(store, "locks/x", fair=True).__enter__()
    # The plain lock works there.
    with casaas.lock(store, "locks/x", wait=10) as held:
        assert held.token == 1
