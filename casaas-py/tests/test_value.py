"""A value published with a lock or a leader: value= on acquiring,
proclaim while holding, read back by holder(), leader() and observe();
bounded, with a clear error over the bound."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest

import casaas
from conftest import server


def test_a_lock_publishes_its_value(file_url: str) -> None:
    store = casaas.open(file_url + "/locks")
    with casaas.lock(f"{file_url}/locks/db", value={"addr": "10.0.0.7:5432"}) as held:
        assert held.value == {"addr": "10.0.0.7:5432"}
        holder = casaas.Lease(store, "db", owner="reader").holder()
        assert holder is not None and holder.token == held.token
        assert holder.value == {"addr": "10.0.0.7:5432"}
        held.proclaim([1, "two", None])
        assert held.value == [1, "two", None]
        holder = casaas.Lease(store, "db", owner="reader").holder()
        assert holder is not None and holder.value == [1, "two", None]
        assert holder.token == held.token
    # A lock with no value publishes none.
    with casaas.lock(store, "plain") as held:
        assert held.value is None
        holder = casaas.Lease(store, "plain", owner="reader").holder()
        assert holder is not None and holder.value is None


def test_values_are_bounded(file_url: str) -> None:
    url = f"{file_url}/locks/big"
    too_big = "x" * casaas.MAX_VALUE_BYTES
    with pytest.raises(casaas.InvalidConfig, match="at most 4096 bytes"):
        casaas.lock(url, value=too_big)
    with pytest.raises(casaas.InvalidConfig, match="at most 4096 bytes"):
        casaas.Election(casaas.open(file_url + "/locks"), "e", value=too_big)
    with casaas.lock(url) as held:
        with pytest.raises(casaas.InvalidConfig, match="at most 4096 bytes"):
            held.proclaim(too_big)
        with pytest.raises(TypeError):
            held.proclaim(object())
        held.proclaim("x" * (casaas.MAX_VALUE_BYTES - 2))  # the quotes count
    with pytest.raises(casaas.LeaseLost):
        held.proclaim("after")


def test_a_leader_publishes_its_value(file_url: str) -> None:
    store = casaas.open(file_url + "/locks")
    election = casaas.Election(store, "leader", owner="a", value={"url": "http://a:80"})
    watcher = casaas.Election(store, "leader", owner="w")
    with election.campaign(wait=5) as term:
        assert term.value == {"url": "http://a:80"}
        leader = watcher.leader()
        assert leader == casaas.Leader("a", term.token, {"url": "http://a:80"})
        seen = election.observe(timeout=5)
        first = next(seen)
        assert first is not None and first.value == {"url": "http://a:80"}
        term.proclaim({"url": "http://a:81"})
        # The observer reports the new value as a change, same term.
        changed = next(seen)
        assert changed == casaas.Leader("a", term.token, {"url": "http://a:81"})
        leader = watcher.leader()
        assert leader is not None and leader.value == {"url": "http://a:81"}
    with pytest.raises(casaas.LeaseLost):
        term.proclaim("after the term")


def test_proclaim_async(file_url: str) -> None:
    async def main() -> None:
        store = await casaas.open_async(file_url + "/locks")
        async with casaas.lock(store, "aio", value=1) as held:
            await held.proclaim_async(2)
            holder = await casaas.Lease(store, "aio", owner="r").holder_async()
            assert holder is not None and holder.value == 2
        term = await casaas.Election(store, "e").campaign_async(wait=5)
        await term.proclaim_async("leading")
        leader = await casaas.Election(store, "e", owner="w").leader_async()
        assert leader is not None and leader.value == "leading"
        await term.resign_async()

    asyncio.run(main())


@pytest.mark.parametrize("name", ["ceph", "seaweedfs"])
def test_values_on_a_server(name: str) -> None:
    url, options = server(name)
    opts: Dict[str, Any] = dict(options)
    store = casaas.open(url, **opts)
    with casaas.lock(store, "locks/v", value={"n": 1}) as held:
        held.proclaim({"n": 2})
        holder = casaas.Lease(store, "locks/v", owner="r").holder()
        assert holder is not None and holder.value == {"n": 2} and holder.token == held.token
    with casaas.Election(store, "elections/v", value="x").campaign(wait=20) as term:
        term.proclaim("y")
        leader = casaas.Election(store, "elections/v", owner="w").leader()
        assert leader is not None and leader.value == "y"
