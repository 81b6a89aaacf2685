"""Python callbacks never run on the threads that renew leases: a lock held
by this process stays held while slow callbacks of every kind (group-commit
updates, create_once bodies and SwapOnce bodies, the Iceberg catalog's
commit callbacks among them) sleep for three times its TTL at once."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional

import casaas
from casaas import _casaas

TTL = 1.0
SLOW = 3 * TTL


def slow(value: Any) -> Any:
    time.sleep(SLOW)
    return value


def test_slow_callbacks_do_not_stall_another_locks_renewal(file_url: str) -> None:
    store = casaas.open(file_url)
    held = casaas.Lease(store, "locks/watched", ttl=TTL).acquire(0)
    swap = _casaas.SwapOnce(store)

    def create(i: int) -> None:
        casaas.create_once(
            store, f"created-{i}", lambda nonce: slow(nonce.encode()), lambda b: b.decode()
        )

    def group(i: int) -> None:
        casaas.FencedResource(store, f"grouped-{i}").grouped().update(
            held.token, lambda v: slow((v or 0) + 1)
        )

    def swapped(_: int) -> None:
        swap.swap(
            "pointer", None, lambda nonce: slow(nonce.encode()), lambda b: b.decode(),
            lambda _b, _n: True,
        )

    calls: List[Callable[[], None]] = [
        lambda: create(0), lambda: create(1), lambda: group(0), lambda: group(1),
        lambda: swapped(0),
    ]
    errors: List[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    assert errors == []
    assert took >= SLOW
    reason: Optional[str] = held.lost_reason
    assert not held.lost, f"the lock was lost while callbacks ran ({reason}) after {took:.1f} s"
    held.release()
