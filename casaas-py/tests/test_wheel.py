"""The package under test is the wheel a user keeps: `cargo xtask python`
builds one abi3 wheel into dist/, installs it with pip into a fresh
virtualenv and runs these tests there (it sets CASAAS_TEST_WHEEL=1)."""

from __future__ import annotations

import os
import pathlib
from importlib import metadata

import pytest

import casaas

SOURCE = pathlib.Path(__file__).resolve().parents[1] / "python"


@pytest.mark.skipif(
    os.environ.get("CASAAS_TEST_WHEEL") != "1",
    reason="run by cargo xtask python, against the installed wheel",
)
def test_the_package_under_test_is_the_installed_abi3_wheel() -> None:
    imported = pathlib.Path(casaas.__file__).resolve()
    assert SOURCE not in imported.parents, f"casaas is imported from the source tree: {imported}"
    dist = metadata.distribution("casaas")
    wheel = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    assert tags and all("-abi3-" in t and t.startswith("cp39-") for t in tags), tags
    installer = (dist.read_text("INSTALLER") or "").strip()
    assert installer == "pip", installer
