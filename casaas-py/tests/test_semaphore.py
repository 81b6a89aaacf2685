"""Semaphores: up to N holders at once, a slot and a token each, the
count every holder must share, threads and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import casaas


def test_semaphore_lets_in_as_many_as_its_slots(file_url: str) -> None:
    url = f"{file_url}/locks/jobs"
    with casaas.semaphore(url, slots=2, ttl=5) as a, casaas.semaphore(url, slots=2, ttl=5) as b:
        assert {a.key, b.key} == {"jobs.slots/0", "jobs.slots/1"}
        assert a.token == 1 and b.token == 1
        with pytest.raises(casaas.LockHeld):
            with casaas.semaphore(url, slots=2, wait=0):
                pass
        assert casaas.Semaphore(casaas.open(file_url + "/locks"), "jobs", slots=2).try_acquire() is None
    # Released on exit: a slot is free again, and its token moves on.
    with casaas.semaphore(url, slots=2, wait=0) as c:
        assert c.token == 2


def test_a_holder_that_counts_differently_is_refused(file_url: str) -> None:
    url = f"{file_url}/locks/counted"
    with casaas.semaphore(url, slots=3):
        pass
    with pytest.raises(casaas.InvalidConfig, match="has 3 slots"):
        with casaas.semaphore(url, slots=4):
            pass
    with pytest.raises(casaas.InvalidConfig):
        casaas.semaphore(url, slots=0)
    with pytest.raises(TypeError):
        casaas.semaphore(url, slots="3")  # type: ignore[arg-type]


def test_threads_never_exceed_the_slots(file_url: str) -> None:
    url = f"{file_url}/locks/threads"
    inside = 0
    most = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        with casaas.semaphore(url, slots=2, ttl=5, wait=30):
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.2)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most == 2


def test_semaphore_async(file_url: str) -> None:
    async def main() -> None:
        sem = casaas.semaphore(f"{file_url}/locks/aio", slots=1, ttl=5)
        async with sem as held:
            assert held.token == 1
        async with sem as held:
            assert held.token == 2

    asyncio.run(main())
