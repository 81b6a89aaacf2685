"""A group-commit batch whose answer is lost (casaas.GroupResource), on the
real servers behind the fault proxy of test_lost_answers: settled by
reading back when the store answers, raised as MayHaveTakenEffect for the
batch's callers when it cannot be settled; never reported as success, and
never as a clean failure for an update that is in the store."""

from __future__ import annotations

import collections
import threading
from typing import Any, Dict, List, Set, Union

import pytest

import casaas
from test_lost_answers import SERVERS, LosingProxy, server_url, with_endpoint

KEY = "victim-group"
CALLERS = 6


def add(name: str) -> Any:
    def update(value: Any) -> Any:
        return (value or []) + [name]

    return update


def run(group: casaas.GroupResource) -> Dict[str, Union[casaas.Applied, BaseException]]:
    """CALLERS threads, one update each, released together so that they
    share batches."""
    outcome: Dict[str, Union[casaas.Applied, BaseException]] = {}
    start = threading.Barrier(CALLERS)

    def work(i: int) -> None:
        name = f"c{i}"
        start.wait()
        try:
            outcome[name] = group.update(1, add(name))
        except BaseException as e:  # noqa: BLE001 - each caller's answer is checked
            outcome[name] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome


def stored(url: str, options: Dict[str, Any]) -> List[str]:
    """The value as stored, read without the proxy."""
    got = casaas.FencedResource(casaas.open(url, **options), KEY).read()
    if got is None:
        return []
    value: List[str] = got.value
    return value


@pytest.mark.parametrize("name", SERVERS)
def test_a_group_batchs_lost_answer_is_settled_by_reading_back(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options, endpoint = server_url(name, monkeypatch)
    with LosingProxy(endpoint, only=KEY, cut_after=False) as proxy:
        store = casaas.open(with_endpoint(url, proxy.endpoint), **options)
        outcome = run(casaas.FencedResource(store, KEY).grouped())
    assert proxy.landed, "the proxy dropped no answer: the test proves nothing"
    failed = {n: o for n, o in outcome.items() if isinstance(o, BaseException)}
    assert not failed, failed
    value = stored(url, options)
    assert collections.Counter(value) == collections.Counter(list(outcome)), "lost or applied twice"
    for n, o in outcome.items():
        assert isinstance(o, casaas.Applied) and o.token == 1 and o.value[-1] == n


@pytest.mark.parametrize("name", SERVERS)
def test_a_group_batchs_lost_answer_that_cannot_be_settled_raises_may_have_taken_effect(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options, endpoint = server_url(name, monkeypatch)
    with LosingProxy(endpoint, only=KEY, cut_after=True) as proxy:
        store = casaas.open(with_endpoint(url, proxy.endpoint), **options)
        outcome = run(casaas.FencedResource(store, KEY).grouped())
    assert len(proxy.landed) == 1, proxy.landed
    value = stored(url, options)
    assert value, "the dropped write did not land: the test proves nothing"
    ambiguous: Set[str] = set()
    for n, o in outcome.items():
        # Never success: the one write that landed got no answer, and every
        # later request was cut (a later batch, never sent, may fail
        # cleanly: StoreError or Contended).
        assert isinstance(o, casaas.Error), f"{n}: {o!r}"
        if isinstance(o, casaas.MayHaveTakenEffect):
            assert o.kind == "ambiguous"
            assert KEY in str(o)
            ambiguous.add(n)
    # Every update in the store was told it may have taken effect, never a
    # clean failure; and the batch that landed carried each update once.
    assert ambiguous, outcome
    assert set(value) <= ambiguous, (value, outcome)
    assert len(value) == len(set(value))
