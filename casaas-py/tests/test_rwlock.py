"""Read-write locks: readers share, a writer holds alone with a fencing
token, a waiting writer keeps new readers out; threads, asyncio, and a
real server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict

import pytest

import casaas
from conftest import server


def test_readers_share_and_the_writer_holds_alone(file_url: str) -> None:
    url = f"{file_url}/locks/table"
    lock = casaas.rwlock(url, ttl=5)
    other = casaas.rwlock(url, ttl=5)
    assert lock.key == "table" and lock.readers_prefix == "table.readers/"
    with lock.read(), other.read() as r:
        assert r.key.startswith("table.readers/")
        with pytest.raises(casaas.LockHeld):
            with other.write(wait=0):
                pass
        with pytest.raises(casaas.LockTimeout):
            with other.write(wait=0.3):
                pass
    with lock.write(wait=5) as w:
        assert w.key == "table"
        first = w.token
        with pytest.raises(casaas.LockHeld):
            with other.read(wait=0):
                pass
        with pytest.raises(casaas.LockHeld):
            with other.write(wait=0):
                pass
    with other.write(wait=5) as w:
        # The writer's fencing token moves on with each writer.
        assert w.token > first


def test_held_objects_release_and_renew(file_url: str) -> None:
    lock = casaas.RwLock(casaas.open(file_url + "/locks"), "held", ttl=5)
    r = lock.acquire_read(wait=0)
    assert not r.lost
    r.release()
    w = lock.acquire_write(wait=0)
    w.ensure_held_for(1)
    w.release()


def test_threads_never_see_a_writer_with_readers(file_url: str) -> None:
    url = f"{file_url}/locks/threads"
    readers = 0
    writers = 0
    most_readers = 0
    bad = []
    guard = threading.Lock()

    def read() -> None:
        nonlocal readers, most_readers
        with casaas.rwlock(url, ttl=5, wait=60).read():
            with guard:
                readers += 1
                most_readers = max(most_readers, readers)
                if writers:
                    bad.append("reader with a writer")
            time.sleep(0.3)
            with guard:
                readers -= 1

    def write() -> None:
        nonlocal writers
        with casaas.rwlock(url, ttl=5, wait=60).write():
            with guard:
                writers += 1
                if writers > 1 or readers:
                    bad.append("writer with others")
            time.sleep(0.1)
            with guard:
                writers -= 1

    threads = [threading.Thread(target=read) for _ in range(3)]
    threads += [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads)
    assert bad == []


def test_rwlock_async(file_url: str) -> None:
    async def main() -> None:
        lock = casaas.rwlock(f"{file_url}/locks/aio", ttl=5)
        async with lock.read() as a, lock.read() as b:
            assert a.key != b.key
        async with lock.write() as w:
            assert w.token == 1
            with pytest.raises(casaas.LockHeld):
                async with lock.read(wait=0):
                    pass
        async with lock.write() as w:
            assert w.token == 2

    asyncio.run(main())


@pytest.mark.parametrize("name", ["ceph", "seaweedfs"])
def test_rwlock_on_a_server(name: str) -> None:
    url, options = server(name)
    opts: Dict[str, Any] = dict(options)
    store = casaas.open(url, **opts)
    lock = casaas.rwlock(store, "locks/shared", ttl=5)
    other = casaas.rwlock(store, "locks/shared", ttl=5, owner="other")
    with lock.read(), other.read():
        with pytest.raises(casaas.LockHeld):
            with other.write(wait=0):
                pass
    with lock.write(wait=20) as w:
        first = w.token
        with pytest.raises(casaas.LockHeld):
            with other.read(wait=0):
                pass
    with other.write(wait=20) as w:
        # A writer's attempt takes the lock object (and a token) before it
        # waits for readers: tokens only grow, one per writer at least.
        assert w.token > first
