"""Fixtures: temporary file stores, and the real servers `cargo xtask servers`
runs (each described by an env file under $CASAAS_SERVERS_DIR/NAME/env).

A server that is not running skips its tests, unless
CASAAS_REQUIRE_SERVERS=1 (set by `cargo xtask python`), which fails them.
"""

from __future__ import annotations

import os
import pathlib
import signal
import uuid
from typing import Dict, Iterator, Tuple

import pytest

# A command started in the background by a shell without job control
# inherits SIGINT ignored, and so would every Python the tests start: such a
# Python installs no KeyboardInterrupt handler and the Ctrl-C tests could
# only time out. The tests' children get the disposition of a terminal's
# Python (a handler here is reset to the default at exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVERS_DIR = pathlib.Path(
    os.environ.get("CASAAS_SERVERS_DIR", str(ROOT / ".casaas" / "servers"))
)

# The environment variables of a server's env file that are credentials,
# passed to casaas.open under their lowercase names.
CREDENTIALS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
)


def server_env(name: str) -> Dict[str, str]:
    path = SERVERS_DIR / name / "env"
    if not path.exists():
        if os.environ.get("CASAAS_REQUIRE_SERVERS") == "1":
            pytest.fail(f"server {name} is not running: cargo xtask servers up {name}")
        pytest.skip(f"server {name} is not running (cargo xtask servers up {name})")
    env: Dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            env[k.strip()] = v.strip()
    return env


def server(name: str) -> Tuple[str, Dict[str, str]]:
    """The store URL (with a fresh prefix) and credential options of `name`."""
    env = server_env(name)
    url = env["CASAAS_TEST_URL"]
    base, _, query = url.partition("?")
    prefix = f"py-{uuid.uuid4().hex[:12]}"
    url = f"{base.rstrip('/')}/{prefix}" + (f"?{query}" if query else "")
    options = {k.lower(): v for k, v in env.items() if k in CREDENTIALS}
    return url, options


@pytest.fixture
def file_url(tmp_path: pathlib.Path) -> Iterator[str]:
    """A file:// store in a fresh directory (shared by processes)."""
    d = tmp_path / "store"
    # Lock URLs name `locks/NAME` under it: the store is then `.../locks`.
    (d / "locks").mkdir(parents=True)
    yield f"file://{d}"


@pytest.fixture
def memory_url() -> str:
    """A memory:// store of its own (one process only)."""
    return f"memory://{uuid.uuid4().hex}/app"
