"""The Python model: how long a holding lives (until released or interpreter
exit, whatever Python does with the object), a Lock shared by threads and
tasks, exceptions that keep their meaning, asyncio without blocking the
loop, and the smaller truths of the docs (docs/python.md, "Lifetime,
threads, asyncio, fork, Ctrl-C and exit")."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from typing import Any, Dict, List, Optional

import pytest

import casaas


def run_python(code: str, *args: str, flags: Optional[List[str]] = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *(flags or []), "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


# A second process's attempt on the lock `sys.argv[1]` names.
TRY_LOCK = """
import sys, casaas
try:
    with casaas.lock(sys.argv[1], owner="other", wait=0):
        print("acquired")
except casaas.LockHeld:
    print("held")
"""


def test_a_lock_taken_in_an_if_stays_held_while_the_block_runs(file_url: str) -> None:
    lease = casaas.Lease(f"{file_url}/locks", "job", ttl=30)
    with pytest.warns(ResourceWarning, match="dropped without being released"):
        if lease.try_acquire():
            gc.collect()
            out = run_python(TRY_LOCK, f"{file_url}/locks/job")
            assert out.returncode == 0, out.stderr
            # The temporary Held is gone; the lock is not.
            assert out.stdout.strip() == "held"
    holder = lease.holder()
    assert holder is not None and holder.token == 1


def test_an_unkept_acquire_holds_until_interpreter_exit_and_warns(file_url: str) -> None:
    url = f"{file_url}/locks/job"
    out = run_python(
        """
        import gc, subprocess, sys, casaas
        casaas.Lease(sys.argv[1].rsplit("/", 1)[0], "job", ttl=60).acquire(0)
        gc.collect()
        other = subprocess.run([sys.executable, "-c", sys.argv[2], sys.argv[1]],
                               capture_output=True, text=True)
        print(other.stdout.strip())
        """,
        url,
        textwrap.dedent(TRY_LOCK),
        flags=["-W", "always::ResourceWarning"],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "held"
    assert "ResourceWarning" in out.stderr and "job" in out.stderr, out.stderr
    # Released at exit: free now, well before its 60 s TTL.
    with casaas.lock(url, wait=0) as held:
        assert held.token == 2


def test_a_session_not_kept_stays_open(file_url: str) -> None:
    store = casaas.open(file_url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        casaas.Session(store, "sessions/worker", ttl=30)
        gc.collect()
    out = run_python(
        """
        import sys, casaas
        try:
            casaas.Session(sys.argv[1], "sessions/worker", wait=0).close()
            print("opened")
        except casaas.LockHeld:
            print("held")
        """,
        file_url,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "held"
    assert [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_term_not_kept_still_leads(memory_url: str) -> None:
    store = casaas.open(memory_url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        casaas.Election(store, "elections/e", owner="first", ttl=30).campaign(wait=5)
        gc.collect()
    leader = casaas.Election(store, "elections/e", owner="second").leader()
    assert leader is not None and leader.owner == "first"
    assert [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_forked_child_neither_releases_nor_warns_about_the_parents_lock(file_url: str) -> None:
    out = run_python(
        """
        import gc, os, sys, casaas
        held = casaas.lock(sys.argv[1], ttl=30).__enter__()
        pid = os.fork()
        if pid == 0:
            del held
            gc.collect()
            sys.exit(0)  # atexit runs in the child
        _, status = os.waitpid(pid, 0)
        try:
            with casaas.lock(sys.argv[1], owner="other", wait=0):
                print("released by the child")
        except casaas.LockHeld:
            print("held", held.token, held.lost)
        """,
        f"{file_url}/locks/job",
        flags=["-W", "error::ResourceWarning"],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "held 1 False", out.stderr
    assert "ResourceWarning" not in out.stderr


def test_exit_releases_every_holding_within_its_bound(file_url: str) -> None:
    out = run_python(
        """
        import sys, time, casaas
        store = casaas.open(sys.argv[1])
        locks = [casaas.Lease(store, f"locks/l{i}", ttl=60).acquire(0) for i in range(20)]
        session = casaas.Session(store, "sessions/s", ttl=60)
        session.lease("locks/under").acquire(0)
        print(time.monotonic(), flush=True)
        """,
        file_url,
    )
    assert out.returncode == 0, out.stderr
    took = time.monotonic() - float(out.stdout.strip())
    assert took < 5.0 + 1.0
    store = casaas.open(file_url)
    for i in range(20):
        assert casaas.Lease(store, f"locks/l{i}").holder() is None
    assert casaas.Lease(store, "sessions/s").holder() is None


def test_a_lock_shared_by_threads_releases_only_its_own_hold(memory_url: str) -> None:
    store = casaas.open(memory_url)
    shared = casaas.lock(store, "locks/shared", ttl=1)
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()
    seen: Dict[str, Any] = {}

    def a() -> None:
        try:
            with shared as held:
                a_inside.set()
                held.abandon()  # a pause past the TTL: B takes over
                b_inside.wait(10)
        except BaseException as e:  # noqa: BLE001
            seen["a"] = e
        a_left.set()

    def b() -> None:
        a_inside.wait(10)
        with shared as held:
            b_inside.set()
            a_left.wait(10)
            seen["b_lost_after_a_left"] = held.lost
        seen["b_token"] = held.token

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # A's exit released A's hold (lost: it was abandoned), never B's.
    assert isinstance(seen.get("a"), casaas.LeaseLost), seen
    assert seen["b_lost_after_a_left"] is False
    assert seen["b_token"] == 2


def test_a_lock_shared_by_tasks_releases_only_its_own_hold(memory_url: str) -> None:
    async def main() -> None:
        store = await casaas.open_async(memory_url)
        shared = casaas.lock(store, "locks/shared", ttl=1)
        a_inside, b_inside, a_left = asyncio.Event(), asyncio.Event(), asyncio.Event()
        seen: Dict[str, Any] = {}

        async def a() -> None:
            try:
                async with shared as held:
                    a_inside.set()
                    held.abandon()
                    await b_inside.wait()
            except casaas.LeaseLost as e:
                seen["a"] = e
            a_left.set()

        async def b() -> None:
            await a_inside.wait()
            async with shared as held:
                b_inside.set()
                await a_left.wait()
                seen["b_lost"] = held.lost

        await asyncio.wait_for(asyncio.gather(a(), b()), 30)
        assert isinstance(seen.get("a"), casaas.LeaseLost), seen
        assert seen["b_lost"] is False

    asyncio.run(main())


def test_a_bounded_wait_that_runs_out_is_a_timeout_error(file_url: str) -> None:
    url = f"{file_url}/locks/job"
    with casaas.lock(url, owner="first", ttl=30):
        with pytest.raises(TimeoutError) as info:
            with casaas.lock(url, wait=0.3):
                pass
        assert isinstance(info.value, casaas.LockHeld)
        assert isinstance(info.value, casaas.LockTimeout)
        assert info.value.owner == "first"
        # One try is no timeout.
        with pytest.raises(casaas.LockHeld) as once:
            casaas.lock(url, wait=0).__enter__()
        assert not isinstance(once.value, TimeoutError)
    with casaas.Session(file_url, "sessions/s", ttl=30):
        with pytest.raises(TimeoutError):
            casaas.Session(file_url, "sessions/s", wait=0.3)


def test_a_call_level_typo_is_a_type_error(file_url: str) -> None:
    with pytest.raises(TypeError, match="'timeout'.*wait="):
        casaas.lock(f"{file_url}/locks/job", timeout=5)
    store = casaas.open(file_url)
    with pytest.raises(TypeError, match="'wait'"):
        casaas.Lease(store, "locks/job", wait=5)
    with pytest.raises(TypeError):
        casaas.open(file_url, ttl=5)
    # A misspelt store option is still the store's error.
    with pytest.raises(casaas.InvalidUrl):
        casaas.open(file_url, create_dir=True)


def test_session_exit_keeps_the_blocks_exception(tmp_path: Any) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    with pytest.raises(ValueError, match="the block's own") as info:
        with casaas.Session(f"file://{store_dir}", "sessions/s", ttl=1.5) as session:
            # Another writer replaces the heartbeat: the session is lost.
            heartbeat = [p for p in store_dir.rglob("*") if p.is_file() and "sessions" in str(p)]
            assert heartbeat, list(store_dir.rglob("*"))
            for p in heartbeat:
                p.write_bytes(b"{}")
            deadline = time.monotonic() + 10
            while not session.lost and time.monotonic() < deadline:
                time.sleep(0.1)
            assert session.lost
            raise ValueError("the block's own")
    notes = getattr(info.value, "__notes__", None)
    if sys.version_info >= (3, 11):
        assert notes and "LeaseLost" in notes[0]


def test_make_body_exception_keeps_its_type(file_url: str) -> None:
    class Broken(Exception):
        pass

    def make_body(nonce: str) -> bytes:
        raise Broken("no body")

    with pytest.raises(Broken):
        casaas.create_once(file_url, "once/a", make_body, lambda body: body.decode())


@pytest.mark.parametrize("name", ["ceph"])
def test_an_exception_of_nonce_in_is_not_no_nonce(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_lost_answers import LosingProxy, server_url, with_endpoint

    url, options, endpoint = server_url(name, monkeypatch)
    key = "victim-nonce"
    with LosingProxy(endpoint, only=key, cut_after=False) as proxy:
        store = casaas.open(with_endpoint(url, proxy.endpoint), **options)

        def nonce_in(body: bytes) -> Optional[str]:
            if proxy.landed:
                raise KeyError("cannot read the body")
            return body.decode()

        with pytest.raises(casaas.MayHaveTakenEffect) as info:
            casaas.create_once(store, key, lambda nonce: nonce.encode(), nonce_in)
    assert proxy.landed
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.kind == "ambiguous"


def test_async_with_a_url_never_opens_on_the_loop(file_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def blocking_open(*_: Any) -> Any:
        raise AssertionError("the store was opened by a blocking call on the event loop")

    monkeypatch.setattr(casaas._casaas, "open", blocking_open)

    async def main() -> None:
        async with casaas.lock(f"{file_url}/locks/job", ttl=5) as held:
            assert held.token == 1
        async with await casaas.Session.open_async(file_url, "sessions/s", ttl=5) as session:
            assert not session.lost
        assert session.lost

    asyncio.run(main())


def test_asyncio_forms(memory_url: str) -> None:
    async def main() -> None:
        store = await casaas.open_async(memory_url)
        election = casaas.Election(store, "elections/e", owner="me", ttl=5)
        async with await election.campaign_async(wait=5) as term:
            assert await election.leader_async() == casaas.Leader("me", term.token)
            observed = [leader async for leader in election.observe_async(timeout=0.3)]
            assert observed == [casaas.Leader("me", term.token)]
            resource = casaas.FencedResource(store, "tables/head")
            assert await resource.read_async() is None
            await resource.write_async(term.token, {"v": 1})
            assert await resource.read_async() == casaas.Fenced({"v": 1}, term.token)
            log = casaas.FencedLog(store, "logs/e")
            entry = await log.append_async(term.token, "a")
            await log.append_async(term.token, "b", grouped=True)
            assert entry.seq == 1
            assert [e.value for e in await log.entries_async()] == ["a", "b"]
            assert [e.value for e in await log.read_async(2)] == ["b"]
            assert await log.latest_seq_async() == 2
            lease = casaas.Lease(store, "locks/x", ttl=5)
            async with await lease.acquire_async(0) as held:
                assert await lease.holder_async() == casaas.Leader(lease.owner, held.token)
            assert await lease.holder_async() is None
        assert await election.leader_async() is None
        async with await casaas.Session.open_async(store, "sessions/s", ttl=5) as session:
            async with session.lock("locks/a"):
                assert session.held_locks() == 1

    asyncio.run(main())


def test_a_cancelled_task_still_releases_in_aexit(file_url: str) -> None:
    url = f"{file_url}/locks/job"

    async def main() -> None:
        inside = asyncio.Event()

        async def holder() -> None:
            async with casaas.lock(url, ttl=60):
                inside.set()
                await asyncio.sleep(60)

        task = asyncio.ensure_future(holder())
        await inside.wait()
        task.cancel()  # into __aexit__ ...
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()  # ... and again while it releases
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)

    for _ in range(20):
        asyncio.run(main())
        # Released, not left to expire after its 60 s TTL.
        assert casaas.Lease(file_url + "/locks", "job").holder() is None


def test_observe_yields_the_leader_first_and_no_placeholder(file_url: str) -> None:
    store = casaas.open(file_url)
    with casaas.Election(store, "elections/e", owner="leader", ttl=30).campaign(wait=5) as term:
        # The first value once came from a read and the second from the
        # watch before its first poll: (leader, None, leader), now and then.
        for _ in range(60):
            watcher = casaas.Election(store, "elections/e", owner="watcher", ttl=30)
            observed = list(watcher.observe(timeout=0.05))
            assert observed == [casaas.Leader("leader", term.token)]


def test_big_integers_are_refused_not_rounded(memory_url: str) -> None:
    resource = casaas.FencedResource(memory_url, "values/big")
    with pytest.raises(casaas.InvalidConfig, match="64 bits"):
        resource.write(1, {"n": 2**70})
    assert resource.write(1, {"n": 2**63 - 1, "m": -(2**63), "u": 2**64 - 1}).value == {
        "n": 2**63 - 1,
        "m": -(2**63),
        "u": 2**64 - 1,
    }
    # Objects come back with their keys sorted (serde_json's order).
    assert list(resource.write(1, {"b": 1, "a": 2}).value) == ["a", "b"]


def test_a_closed_sessions_error_says_why(file_url: str) -> None:
    session = casaas.Session(file_url, "sessions/s", ttl=5)
    session.close()
    with pytest.raises(casaas.LeaseLost) as info:
        session.ensure_held_for(0)
    assert info.value.reason == "closed"


WAITERS = {
    "lock": "casaas.lock(url + '/locks/job', owner='waiter').__enter__()",
    "session": "casaas.Session(url, 'locks/job', owner='waiter')",
    "campaign": "casaas.Election(url, 'locks/job', owner='waiter').campaign()",
}


@pytest.mark.parametrize("what", list(WAITERS))
def test_ctrl_c_cancels_a_wait_promptly_and_holds_nothing(file_url: str, what: str) -> None:
    first = casaas.Lease(f"{file_url}/locks", "job", ttl=30, owner="first").acquire(0)
    code = f"""
        import sys, time, casaas
        url = sys.argv[1]
        print("waiting", flush=True)
        try:
            {WAITERS[what]}
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
        """
    waiter = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), file_url], stdout=subprocess.PIPE, text=True
    )
    assert waiter.stdout is not None
    assert waiter.stdout.readline().strip() == "waiting"
    time.sleep(0.5)
    sent = time.monotonic()
    waiter.send_signal(signal.SIGINT)
    out, _ = waiter.communicate(timeout=15)
    word, at = out.split()
    assert word == "interrupted"
    assert float(at) - sent < 0.5
    first.release()
    # Nothing of the waiter's is left: the lock is free at once.
    with casaas.lock(f"{file_url}/locks/job", wait=0) as held:
        assert held.token == 2


def test_ctrl_c_in_a_block_releases_on_the_way_out(file_url: str) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time, casaas
                with casaas.lock(sys.argv[1], ttl=60):
                    print("inside", flush=True)
                    time.sleep(60)
                """
            ),
            f"{file_url}/locks/job",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "inside"
    holder.send_signal(signal.SIGINT)
    _, err = holder.communicate(timeout=15)
    assert "KeyboardInterrupt" in err
    with casaas.lock(f"{file_url}/locks/job", wait=0) as held:
        assert held.token == 2


def test_sigterm_runs_no_exit_handler_and_the_lock_expires(file_url: str) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time, casaas
                held = casaas.lock(sys.argv[1], ttl=2).__enter__()
                print("held", flush=True)
                time.sleep(60)
                """
            ),
            f"{file_url}/locks/job",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGTERM)
    holder.wait(15)
    with pytest.raises(casaas.LockHeld):
        casaas.lock(f"{file_url}/locks/job", wait=0).__enter__()
    # Taken over once its TTL has passed on our clock.
    with casaas.lock(f"{file_url}/locks/job", wait=10) as held:
        assert held.token == 2
