"""Locks: the context managers, waiting, tokens, loss, errors, processes,
asyncio, Ctrl-C and fork."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import casaas


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_lock_takes_and_releases(file_url: str) -> None:
    with casaas.lock(f"{file_url}/locks/job", ttl=5) as held:
        assert held.token == 1
        assert not held.lost
        assert held.lost_reason is None
        assert 0 < held.remaining <= 5
        held.check()
        held.ensure_held_for(1)
    assert held.lost
    with pytest.raises(casaas.LeaseLost):
        held.check()
    # The next holder's token is greater.
    with casaas.lock(f"{file_url}/locks/job", ttl=5) as again:
        assert again.token == 2


def test_wait_zero_raises_lock_held_naming_the_holder(file_url: str) -> None:
    with casaas.lock(f"{file_url}/locks/job", owner="first", ttl=5):
        with pytest.raises(casaas.LockHeld) as info:
            with casaas.lock(f"{file_url}/locks/job", owner="second", wait=0):
                pytest.fail("acquired a held lock")
        assert info.value.owner == "first"
        assert info.value.token == 1
        assert "first" in str(info.value)
        assert isinstance(info.value, casaas.Error)


def test_bounded_wait_gives_up_with_lock_held(file_url: str) -> None:
    with casaas.lock(f"{file_url}/locks/job", ttl=5):
        start = time.monotonic()
        with pytest.raises(casaas.LockHeld):
            casaas.lock(f"{file_url}/locks/job", wait=datetime.timedelta(milliseconds=300)).__enter__()
        assert time.monotonic() - start >= 0.3


def test_waiter_gets_the_lock_when_released(file_url: str) -> None:
    lease = casaas.Lease(f"{file_url}/locks", "job", ttl=5)
    first = lease.acquire(0)
    holder = lease.holder()
    assert holder is not None and holder.token == 1
    other = casaas.Lease(f"{file_url}/locks", "job", ttl=5)
    assert other.try_acquire() is None
    first.release()
    assert lease.holder() is None
    second = other.acquire(wait=5)
    assert second.token == 2
    second.release()
    second.release()  # a second release is a no-op


def test_durations_are_checked() -> None:
    url = "memory://durations/app/locks/x"
    with pytest.raises(casaas.InvalidConfig):
        casaas.lock(url, ttl="10")  # type: ignore[arg-type]
    with pytest.raises(casaas.InvalidConfig):
        casaas.lock(url, ttl=-1)
    with pytest.raises(casaas.InvalidConfig) as info:
        casaas.lock(url, ttl=float("nan"))
    assert isinstance(info.value, ValueError)


def test_ensure_held_for_more_than_the_ttl_raises(memory_url: str) -> None:
    with casaas.lock(memory_url, "locks/x", ttl=3) as held:
        with pytest.raises(casaas.InsufficientValidity) as info:
            held.ensure_held_for(60)
        assert info.value.required == 60
        assert info.value.remaining < 3


def test_lock_lost_during_the_block_raises_on_exit(memory_url: str) -> None:
    with pytest.raises(casaas.LeaseLost):
        with casaas.lock(memory_url, "locks/x", ttl=3) as held:
            held.abandon()
    assert held.lost


def test_url_without_a_lock_name_is_invalid() -> None:
    with pytest.raises(casaas.InvalidUrl):
        casaas.lock("s3://bucket")


def test_unknown_option_is_refused() -> None:
    with pytest.raises(casaas.InvalidUrl) as info:
        casaas.open("memory://opts/app", regoin="x")
    assert "regoin" in str(info.value)


def test_credentials_never_appear_in_errors() -> None:
    secret = "wJalrXUtnFEMI-very-secret-key"
    with pytest.raises(casaas.Error) as info:
        with casaas.lock(
            "s3://bucket/locks/job?endpoint=http://127.0.0.1:9&region=us-east-1&request_timeout=1s",
            wait=0,
            aws_access_key_id="AKIAEXAMPLE",
            aws_secret_access_key=secret,
        ):
            pass
    assert secret not in str(info.value)
    assert secret not in repr(info.value)


def test_the_lock_excludes_another_process(file_url: str) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, casaas
                with casaas.lock(sys.argv[1], ttl=5) as held:
                    print(held.token, flush=True)
                    sys.stdin.readline()
                """
            ),
            f"{file_url}/locks/job",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "1"
        with pytest.raises(casaas.LockHeld):
            casaas.lock(f"{file_url}/locks/job", wait=0).__enter__()
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(30) == 0
        with casaas.lock(f"{file_url}/locks/job", wait=0) as held:
            assert held.token == 2
    finally:
        holder.kill()


def test_ctrl_c_cancels_the_wait_and_holds_nothing(file_url: str) -> None:
    url = f"{file_url}/locks/job"
    first = casaas.Lease(f"{file_url}/locks", "job", ttl=5, owner="first").acquire(0)
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, casaas
                print("waiting", flush=True)
                try:
                    with casaas.lock(sys.argv[1], owner="waiter"):
                        print("acquired", flush=True)
                except KeyboardInterrupt:
                    print("interrupted", flush=True)
                """
            ),
            url,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert waiter.stdout is not None
    assert waiter.stdout.readline().strip() == "waiting"
    time.sleep(0.5)
    waiter.send_signal(signal.SIGINT)
    out, _ = waiter.communicate(timeout=15)
    assert out.strip() == "interrupted"
    first.release()
    # Nothing of the waiter's is left: the lock is free at once.
    with casaas.lock(url, wait=0) as held:
        assert held.token == 2


def test_fork_child_gets_a_clear_error_and_a_working_runtime(file_url: str) -> None:
    out = run_python(
        """
        import os, sys, casaas
        store = casaas.open(sys.argv[1])
        with casaas.lock(store, "locks/parent", wait=0):
            pass
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                casaas.lock(store, "locks/child", wait=0).__enter__()
                code = 3
            except casaas.RuntimeFailure as e:
                if "fork" not in str(e):
                    code = 4
            # A store opened in the child works.
            with casaas.lock(sys.argv[1] + "/locks/child", wait=0) as held:
                if held.token != 1:
                    code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """,
        file_url,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0", out.stderr


def test_interpreter_exit_releases_held_locks(file_url: str) -> None:
    url = f"{file_url}/locks/job"
    out = run_python(
        """
        import sys, casaas
        held = casaas.lock(sys.argv[1], ttl=30).__enter__()
        print(held.token)
        """,
        url,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
    # Released at exit: free now, well before its 30 s TTL.
    with casaas.lock(url, wait=0) as held:
        assert held.token == 2


def test_async_with(memory_url: str) -> None:
    async def main() -> None:
        async with casaas.lock(memory_url, "locks/a", ttl=5) as held:
            assert held.token == 1
            with pytest.raises(casaas.LockHeld):
                async with casaas.lock(memory_url, "locks/a", wait=0):
                    pass
        async with casaas.lock(memory_url, "locks/a", ttl=5) as held:
            assert held.token == 2

    asyncio.run(main())


def test_asyncio_cancellation_stops_the_wait(memory_url: str) -> None:
    async def main() -> None:
        store = await casaas.open_async(memory_url)
        first = await casaas.Lease(store, "locks/a", ttl=5).acquire_async(0)
        waiter = asyncio.ensure_future(casaas.Lease(store, "locks/a", ttl=5).acquire_async())
        await asyncio.sleep(0.3)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await first.release_async()
        again = await casaas.Lease(store, "locks/a", ttl=5).acquire_async(0)
        assert again.token == 2
        await again.release_async()

    asyncio.run(main())


def test_threads_take_turns(memory_url: str) -> None:
    import threading

    store = casaas.open(memory_url)
    inside = []
    overlaps = []
    errors = []

    def turns() -> None:
        for _ in range(5):
            with casaas.lock(store, "locks/t", ttl=5):
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(1)
                time.sleep(0.002)
                inside.pop()

    def work() -> None:
        try:
            turns()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert not overlaps
    assert casaas.Lease(store, "locks/t").acquire(0).token == 21


def test_help_is_useful() -> None:
    doc = casaas.lock.__doc__ or ""
    assert "wait=None" in doc and "LockHeld" in doc and "token" in doc
    assert os.path.exists(os.path.join(os.path.dirname(casaas.__file__), "py.typed"))
