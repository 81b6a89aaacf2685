"""The same promises on the real servers `cargo xtask servers` runs."""

from __future__ import annotations

import pytest

import casaas
from conftest import CREDENTIALS, server, server_env

SAFE = ["moto", "ceph", "azurite", "fake-gcs", "seaweedfs"]


def open_server(name: str, monkeypatch: pytest.MonkeyPatch) -> casaas.Store:
    # Endpoints and emulator switches (not credentials) as the SDKs read them.
    for k, v in server_env(name).items():
        if k not in CREDENTIALS and k != "CASAAS_TEST_URL":
            monkeypatch.setenv(k, v)
    url, options = server(name)
    return casaas.open(url, **options)


@pytest.mark.parametrize("name", SAFE)
def test_lock_and_fencing_on_a_real_server(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_server(name, monkeypatch)
    with casaas.lock(store, "locks/job", ttl=10, owner="first") as held:
        assert held.token == 1
        with pytest.raises(casaas.LockHeld) as info:
            casaas.lock(store, "locks/job", wait=0).__enter__()
        assert info.value.owner == "first"
        report = casaas.FencedResource(store, "report")
        report.write(held.token, {"by": "first"})
    with casaas.lock(store, "locks/job", ttl=10) as second:
        assert second.token == 2
        report.write(second.token, {"by": "second"})
        with pytest.raises(casaas.FencedOut):
            report.write(held.token, {"by": "first, late"})
    log = casaas.FencedLog(store, "log")
    log.append(2, "a")
    with pytest.raises(casaas.FencedOut):
        log.append(1, "stale")
    assert [e.value for e in log.entries()] == ["a"]


def test_a_store_that_ignores_conditions_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_server("s3rver", monkeypatch)
    with pytest.raises(casaas.UnsafeStore):
        casaas.lock(store, "locks/job", wait=0).__enter__()
