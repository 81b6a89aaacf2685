"""casaas.doctor and casaas.conformance: verdicts, probes, the commands'
JSON, errors, the GIL and Ctrl-C."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import casaas
from conftest import CREDENTIALS, server, server_env


def server_url(name: str, monkeypatch: pytest.MonkeyPatch) -> Tuple[str, Dict[str, Any]]:
    # Endpoints and emulator switches (not credentials) as the SDKs read them.
    for k, v in server_env(name).items():
        if k not in CREDENTIALS and k != "CASAAS_TEST_URL":
            monkeypatch.setenv(k, v)
    url, options = server(name)
    return url, dict(options)


def test_doctor_on_a_file_store_is_safe(file_url: str) -> None:
    verdict = casaas.doctor(file_url)
    assert verdict.verdict == "safe", verdict.summary
    assert verdict.safe and bool(verdict)
    assert verdict.exit_code == 0
    assert verdict.summary.startswith("SAFE")
    names = [p.name for p in verdict.probes]
    # The store guard's checks first, then the quick probes.
    assert names[0] == "guard.create_if_absent"
    assert "lease_protocol" in names and "create_conflict" in names
    assert verdict.failed() == []
    # The JSON of `casaas doctor --format json`.
    data = json.loads(verdict.to_json())
    assert data == verdict.to_dict()
    assert data["exit_code"] == 0
    assert data["verdict"] == verdict.summary
    assert data["guard"]["passed"] is True
    assert data["report"]["verdict"] == "safe"
    assert [c["name"] for c in data["guard"]["checks"]] == [
        n[len("guard.") :] for n in names if n.startswith("guard.")
    ]


def test_doctor_creates_no_directory(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(casaas.Error) as info:
        casaas.doctor(f"file://{missing}?create_dirs=true")
    assert str(missing) in str(info.value)
    assert not missing.exists()


def test_conformance_on_a_file_store_is_safe(file_url: str) -> None:
    verdict = casaas.conformance(file_url)
    assert verdict.verdict == "safe", verdict.summary
    assert verdict.safe
    assert verdict.recommended_options == []
    data = json.loads(verdict.json)
    # The schema of `casaas conformance --format json` (docs/conformance.md).
    assert data["schema_version"] >= 2
    assert data["tool"]["name"] == "casaas-conformance"
    assert data["settings"]["mode"] == "quick"
    assert data["verdict"] == "safe" and data["safe_for_leases"] is True
    assert data["summary"] == verdict.summary
    assert [p["id"] for p in data["probes"]] == [p.name for p in verdict.probes]
    race = next(p for p in verdict.probes if p.name == "race_create")
    assert race.severity == "critical" and race.outcome == "pass"
    assert race.evidence, "a race probe reports its counts"


def test_conformance_runs_only_the_probes_named(file_url: str) -> None:
    verdict = casaas.conformance(file_url, only=["create_conflict", "replace_stale"])
    assert [p.name for p in verdict.probes] == ["create_conflict", "replace_stale"]
    assert verdict.safe


def test_an_unknown_probe_is_refused_before_the_store_is_touched(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "never-made"
    with pytest.raises(casaas.InvalidConfig, match="unknown probe 'create_conflit'"):
        casaas.conformance(f"file://{missing}", only=["create_conflit"])


def test_a_malformed_url_is_invalid() -> None:
    with pytest.raises(casaas.InvalidUrl):
        casaas.doctor("nosuchscheme://bucket/prefix")


def test_doctor_on_a_store_that_ignores_conditions_is_not_safe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, options = server_url("s3rver", monkeypatch)
    verdict = casaas.doctor(url, **options)
    assert verdict.verdict == "not_safe", verdict.summary
    assert not verdict.safe and not verdict
    assert verdict.exit_code == 1
    assert "NOT SAFE" in verdict.summary
    failed = [p.name for p in verdict.failed()]
    assert "guard.create_if_absent" in failed
    assert "create_conflict" in failed
    data = verdict.to_dict()
    assert data["exit_code"] == 1 and data["guard"]["passed"] is False
    for value in options.values():
        if len(value) >= 8:
            assert value not in verdict.json


def test_conformance_on_a_store_that_ignores_conditions_is_not_safe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, options = server_url("s3rver", monkeypatch)
    verdict = casaas.conformance(url, only=["create_conflict", "lease_protocol"], **options)
    assert verdict.verdict == "not_safe", verdict.summary
    assert {p.name for p in verdict.failed()} == {"create_conflict", "lease_protocol"}
    conflict = next(p for p in verdict.probes if p.name == "create_conflict")
    assert conflict.evidence["second_create"] == "succeeded"
    assert json.loads(verdict.json)["verdict"] == "not_safe"


def test_doctor_on_a_safe_server(monkeypatch: pytest.MonkeyPatch) -> None:
    url, options = server_url("ceph", monkeypatch)
    verdict = casaas.doctor(url, **options)
    assert verdict.verdict == "safe", verdict.summary


def test_the_gil_is_released_while_the_checks_run(file_url: str) -> None:
    result: List[casaas.Verdict] = []
    worker = threading.Thread(target=lambda: result.append(casaas.doctor(file_url)))
    # Pure-Python work on this thread: it stalls for the whole run if the
    # checks hold the GIL.
    longest = 0.0
    last = time.monotonic()
    started = last
    worker.start()
    while worker.is_alive():
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
    elapsed = time.monotonic() - started
    worker.join()
    assert result and result[0].safe
    assert longest < elapsed / 2, f"this thread stalled {longest:.2f} s of {elapsed:.2f} s"


def test_ctrl_c_cancels_a_run(file_url: str) -> None:
    runner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, casaas
                print("running", flush=True)
                try:
                    casaas.conformance(sys.argv[1], quick=False)
                    print("finished", flush=True)
                except KeyboardInterrupt:
                    print("interrupted", flush=True)
                """
            ),
            file_url,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout is not None
    assert runner.stdout.readline().strip() == "running"
    time.sleep(1.0)
    runner.send_signal(signal.SIGINT)
    out, _ = runner.communicate(timeout=15)
    assert out.strip() == "interrupted"
    assert runner.returncode == 0


def test_help_is_useful() -> None:
    assert casaas.doctor.__doc__ and "store guard" in casaas.doctor.__doc__
    assert casaas.conformance.__doc__ and "--format json" in casaas.conformance.__doc__
    assert casaas.Verdict.__doc__ and "not_safe" in casaas.Verdict.__doc__
