"""ElectionRunner: one leader at a time, the second runner takes over when
the first stops or its process is killed, the work has stopped before the
term is resigned, callbacks' exceptions are raised by run(), Ctrl-C and
asyncio stop a run cleanly; on the file store and on real servers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest

import casaas
from casaas import _casaas
from conftest import server


def until(check: Any, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


class Record:
    """What the runners' callbacks saw, shared by them."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.leading: Dict[str, int] = {}
        self.most = 0
        self.events: List[Tuple[str, str, Any]] = []

    def runner(self, store: casaas.Store, key: str, owner: str, **kw: Any) -> casaas.ElectionRunner:
        def lead(term: casaas.RunnerTerm) -> None:
            with self.guard:
                self.leading[owner] = term.token
                self.most = max(self.most, len(self.leading))
                self.events.append(("started", owner, term.token))
            term.wait()
            # Still leading while the work stops: the lease is released after.
            time.sleep(0.2)
            with self.guard:
                del self.leading[owner]
                self.events.append(("work ended", owner, term.token))

        def stopped(reason: str) -> None:
            with self.guard:
                self.events.append(("stopped", owner, reason))

        def new_leader(leader: Optional[casaas.Leader]) -> None:
            with self.guard:
                self.events.append(("leader", owner, None if leader is None else leader.owner))

        return casaas.ElectionRunner(
            store,
            key,
            owner=owner,
            on_started_leading=lead,
            on_stopped_leading=stopped,
            on_new_leader=new_leader,
            **kw,
        )


def check_one_leader_and_takeover(store: casaas.Store, ttl: float) -> None:
    record = Record()
    first = record.runner(store, "elections/e", "first", ttl=ttl).start()
    until(lambda: "first" in record.leading)
    second = record.runner(store, "elections/e", "second", ttl=ttl).start()
    until(lambda: ("leader", "second", "first") in record.events)
    time.sleep(1.0)
    assert list(record.leading) == ["first"]
    first.stop()
    # Resigned on stop: the second takes over well before a TTL.
    until(lambda: "second" in record.leading, limit=ttl)
    assert record.most == 1
    first_token = next(e[2] for e in record.events if e[:2] == ("started", "first"))
    assert record.leading["second"] > first_token
    events = [e for e in record.events if e[1] == "first" and e[0] != "leader"]
    assert events == [
        ("started", "first", first_token),
        ("work ended", "first", first_token),
        ("stopped", "first", "released"),
    ]
    second.stop()
    assert record.most == 1
    assert casaas.Election(store, "elections/e").leader() is None


def test_two_runners_elect_one_leader_and_the_second_takes_over(file_url: str) -> None:
    check_one_leader_and_takeover(casaas.open(file_url), ttl=10)


@pytest.mark.parametrize("name", ["ceph", "seaweedfs"])
def test_runners_on_a_server(name: str) -> None:
    url, options = server(name)
    opts: Dict[str, Any] = dict(options)
    check_one_leader_and_takeover(casaas.open(url, **opts), ttl=10)


LEADER_PROCESS = """
import sys, casaas
def lead(term):
    print("leading", term.token, flush=True)
    term.wait()
casaas.run_election(sys.argv[1], owner="doomed", ttl=2, on_started_leading=lead)
"""


def test_the_second_takes_over_when_the_leaders_process_is_killed(file_url: str) -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(LEADER_PROCESS), f"{file_url}/locks/k"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert leader.stdout is not None
    assert leader.stdout.readline().split() == ["leading", "1"]
    record = Record()
    store = casaas.open(file_url)
    with record.runner(store, "locks/k", "survivor", ttl=2):
        time.sleep(0.5)
        assert record.leading == {}
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(10)
        killed = time.monotonic()
        until(lambda: "survivor" in record.leading)
        took = time.monotonic() - killed
        assert record.leading["survivor"] == 2
        # Taken over once the dead leader's record was seen unchanged for
        # its TTL (2 s), not sooner.
        assert took >= 1.0, took
    assert ("stopped", "survivor", "released") in record.events


def test_an_exception_of_the_work_is_raised_and_the_term_resigned(file_url: str) -> None:
    store = casaas.open(file_url)
    stopped: List[str] = []

    def lead(term: casaas.RunnerTerm) -> None:
        raise ValueError(f"the work failed in term {term.token}")

    runner = casaas.ElectionRunner(
        store, "elections/x", ttl=10, on_started_leading=lead, on_stopped_leading=stopped.append
    )
    with pytest.raises(ValueError, match="the work failed in term 1"):
        runner.run(timeout=20)
    assert stopped == ["released"]
    assert casaas.Election(store, "elections/x").leader() is None


def test_an_exception_of_another_callback_stops_the_run(file_url: str) -> None:
    store = casaas.open(file_url)

    def new_leader(leader: Optional[casaas.Leader]) -> None:
        if leader is not None:
            raise KeyError(f"no route to {leader.owner}")

    started = time.monotonic()
    with pytest.raises(KeyError, match="no route to me"):
        casaas.run_election(
            store, "elections/y", owner="me", ttl=10, on_new_leader=new_leader, timeout=20
        )
    assert time.monotonic() - started < 10
    assert casaas.Election(store, "elections/y").leader() is None
    # A background run raises it from stop().
    runner = casaas.ElectionRunner(store, "elections/y", owner="me", ttl=10, on_new_leader=new_leader)
    runner.start()
    until(lambda: not runner.running)
    with pytest.raises(KeyError, match="no route to me"):
        runner.stop()


def test_work_that_returns_ends_the_run_and_a_timeout_stops_it(file_url: str) -> None:
    store = casaas.open(file_url)
    terms: List[int] = []
    casaas.run_election(store, "elections/w", ttl=10, on_started_leading=lambda t: terms.append(t.token))
    casaas.run_election(store, "elections/w", ttl=10, on_started_leading=lambda t: terms.append(t.token))
    assert terms == [1, 2]
    assert casaas.Election(store, "elections/w").leader() is None
    # No work: leads until the timeout, then resigns.
    started = time.monotonic()
    casaas.run_election(store, "elections/w", ttl=10, timeout=1)
    assert 1 <= time.monotonic() - started < 8
    assert casaas.Election(store, "elections/w").leader() is None


def test_ctrl_c_stops_the_runner_and_resigns(file_url: str) -> None:
    code = """
        import sys, casaas
        def lead(term):
            print("leading", term.token, flush=True)
            term.wait()
            print("work ended", flush=True)
        try:
            casaas.run_election(sys.argv[1], ttl=30, on_started_leading=lead,
                                on_stopped_leading=lambda r: print("stopped", r, flush=True))
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), f"{file_url}/locks/c"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().split() == ["leading", "1"]
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert out.split("\n")[:3] == ["work ended", "stopped released", "interrupted"]
    # Resigned, not left to expire after its 30 s TTL.
    assert casaas.Election(f"{file_url}/locks", "c").leader() is None


def test_runner_async(file_url: str) -> None:
    async def main() -> None:
        store = await casaas.open_async(file_url)
        tokens: List[int] = []

        def lead(term: casaas.RunnerTerm) -> None:
            tokens.append(term.token)
            term.wait()

        runner = casaas.ElectionRunner(store, "elections/a", ttl=10, on_started_leading=lead)
        task = asyncio.ensure_future(runner.run_async())
        deadline = time.monotonic() + 20
        while not tokens:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        election = casaas.Election(store, "elections/a")
        while await election.leader_async() is not None:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await casaas.ElectionRunner(store, "elections/a", ttl=10).run_async(timeout=0.5)
        assert tokens == [1]

    asyncio.run(main())


def test_a_runner_still_running_at_exit_is_stopped_and_resigns(file_url: str) -> None:
    code = """
        import sys, casaas
        def lead(term):
            print("leading", term.token, flush=True)
            term.wait()
        runner = casaas.ElectionRunner(sys.argv[1], "e", ttl=30, on_started_leading=lead,
                                       on_stopped_leading=lambda r: print("stopped", r, flush=True))
        runner.start()
        while sys.stdin.readline().strip() != "exit":
            pass
        """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), f"{file_url}/locks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().split() == ["leading", "1"]
    started = time.monotonic()
    out, _ = proc.communicate("exit\n", timeout=20)
    assert proc.returncode == 0
    assert out.strip() == "stopped released"
    assert time.monotonic() - started < 6
    # Resigned at exit, not left to expire after its 30 s TTL.
    assert casaas.Election(f"{file_url}/locks", "e").leader() is None



def test_the_health_check_of_a_leading_runner(file_url: str) -> None:
    store = casaas.open(file_url)
    leading = threading.Event()

    def lead(term: casaas.RunnerTerm) -> None:
        leading.set()
        term.wait()

    runner = casaas.ElectionRunner(store, "elections/h", ttl=3, on_started_leading=lead)
    assert runner.check_health() is None  # not leading: healthy
    with runner:
        assert leading.wait(20)
        # Leading across several renewals (one a second): still healthy.
        time.sleep(2.5)
        assert runner.check_health() is None
    assert runner.check_health() is None
    with pytest.raises(casaas.InvalidConfig):
        runner.check_health(-1)


def test_a_lost_term_stops_the_work_and_the_runner_campaigns_again(file_url: str) -> None:
    store = casaas.open(file_url)
    record = Record()
    with record.runner(store, "elections/lost", "me", ttl=2):
        until(lambda: record.leading.get("me") == 1)
        # Another writer supersedes our record (as a takeover would): the
        # next renewal finds it and the term is lost.
        swap = _casaas.SwapOnce(store)
        got = swap.read("elections/lost")
        assert got is not None
        body, version = got
        ours = json.loads(body)

        def usurp(nonce: str) -> bytes:
            return json.dumps(dict(ours, owner="usurper", token=ours["token"] + 1, nonce=nonce)).encode()

        outcome = swap.swap(
            "elections/lost", version, usurp, lambda b: json.loads(b).get("nonce"), lambda _b, _n: True
        )
        assert outcome[0] == "ours"
        until(lambda: any(e[0] == "stopped" for e in record.events))
        # Campaigns again: the usurper never renews, so after its TTL we
        # lead once more, with a greater token.
        until(lambda: record.leading.get("me", 0) > 2, limit=20)
    events = [e for e in record.events if e[1] == "me" and e[0] != "leader"]
    assert events[:3] == [
        ("started", "me", 1),
        ("work ended", "me", 1),
        ("stopped", "me", "superseded by 'usurper' (token 2)"),
    ]
    assert events[3][:2] == ("started", "me") and events[3][2] == 3
    assert events[-1] == ("stopped", "me", "released")
    assert record.most == 1
