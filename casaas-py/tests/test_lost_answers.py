"""A write whose answer is lost: settled by reading back when the store
answers, and raised as casaas.MayHaveTakenEffect when it cannot be settled;
never reported as success or as a clean failure.

The real servers sit behind a proxy (below) that forwards a write, lets it
land, and drops its answer; from then on it cuts every request for the
victim's keys, so that no read can settle what happened.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

import pytest

import casaas
from conftest import CREDENTIALS, server, server_env

WRITES = ("PUT", "POST")

# S3 (Ceph RGW), Google Cloud Storage (fake-gcs) and Azure Blob (Azurite).
SERVERS = ["ceph", "fake-gcs", "azurite"]

# Environment variables that name an endpoint: left unset, so that the
# URL's (the proxy's) is the one used.
ENDPOINTS = ("CASAAS_TEST_URL", "AWS_ENDPOINT_URL", "AZURE_STORAGE_ENDPOINT", "STORAGE_EMULATOR_HOST", "GCS_ENDPOINT")


class LosingProxy:
    """An HTTP forwarder to `upstream` on a loopback port, in a thread of its
    own. Requests whose path contains `only` are the victim's: the first
    victim write (or every one, with ``cut_after=False``) is forwarded and
    its answer dropped; with ``cut_after``, every later victim request is
    cut without being forwarded. One request per connection."""

    def __init__(self, upstream: str, only: str, cut_after: bool) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        assert parsed.hostname and parsed.port
        self.host, self.port_up = parsed.hostname, parsed.port
        self.path = parsed.path.rstrip("/")
        self.only = only
        self.cut_after = cut_after
        self.landed: List[str] = []
        self.cut = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: Optional[asyncio.base_events.Server] = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def __enter__(self) -> "LosingProxy":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *_exc: Any) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @staticmethod
    def _head(raw: bytes) -> Tuple[str, List[Tuple[str, str]]]:
        lines = raw.decode("latin-1").split("\r\n")
        headers = [
            (k.strip(), v.strip())
            for k, _, v in (line.partition(":") for line in lines[1:] if line)
        ]
        return lines[0], headers

    @staticmethod
    def _closing(first: str, headers: List[Tuple[str, str]]) -> bytes:
        kept = [(k, v) for k, v in headers if k.lower() not in ("connection", "keep-alive")]
        kept.append(("Connection", "close"))
        return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept) + "\r\n").encode(
            "latin-1"
        )

    @staticmethod
    async def _chunked(client: asyncio.StreamReader) -> bytes:
        """A chunked body, framing kept, to its last chunk and trailers."""
        body = b""
        while True:
            size_line = await client.readuntil(b"\r\n")
            body += size_line
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:
                    trailer = await client.readuntil(b"\r\n")
                    body += trailer
                    if trailer == b"\r\n":
                        return body
            body += await client.readexactly(size + 2)

    async def _serve(self, client: asyncio.StreamReader, answer: asyncio.StreamWriter) -> None:
        try:
            first, headers = self._head(await client.readuntil(b"\r\n\r\n"))
            named = {k.lower(): v for k, v in headers}
            if "chunked" in named.get("transfer-encoding", "").lower():
                body = await self._chunked(client)
            else:
                body = await client.readexactly(int(named.get("content-length", "0")))
            method, target = first.split(" ", 2)[:2]
            victim = self.only in urllib.parse.unquote(target)
            if victim and self.cut_after and self.landed:
                self.cut += 1
                answer.transport.abort()
                return
            reader, writer = await asyncio.open_connection(self.host, self.port_up)
            try:
                writer.write(self._closing(first, headers) + body)
                await writer.drain()
                response = await reader.read()
            finally:
                writer.close()
            if victim and method in WRITES:
                # It landed upstream; its answer never arrives.
                self.landed.append(f"{method} {target}")
                answer.transport.abort()
                return
            end = response.find(b"\r\n\r\n")
            status, response_headers = self._head(response[: end + 4])
            answer.write(self._closing(status, response_headers) + response[end + 4 :])
            await answer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            answer.transport.abort()
            return
        answer.close()


def server_url(name: str, monkeypatch: pytest.MonkeyPatch) -> Tuple[str, Dict[str, Any], str]:
    """The server's URL (a fresh prefix), its credentials, and its endpoint."""
    for k, v in server_env(name).items():
        # The endpoint comes from the URL only, so that the proxy's is used.
        if k not in CREDENTIALS and k not in ENDPOINTS:
            monkeypatch.setenv(k, v)
    url, options = server(name)
    # A connection string names the endpoint too: the key alone, here.
    options.pop("azure_storage_connection_string", None)
    query = url.partition("?")[2]
    return url, dict(options), dict(urllib.parse.parse_qsl(query))["endpoint"]


def with_endpoint(url: str, endpoint: str) -> str:
    base, _, query = url.partition("?")
    pairs = [(k, endpoint if k == "endpoint" else v) for k, v in urllib.parse.parse_qsl(query)]
    return base + "?" + urllib.parse.urlencode(pairs, safe=":/")


def fenced_write(store: casaas.Store, key: str) -> Any:
    return casaas.FencedResource(store, key).write(1, {"by": "victim"})


def log_append(store: casaas.Store, key: str) -> Any:
    return casaas.FencedLog(store, key).append(1, "victim")


def create_once(store: casaas.Store, key: str) -> Any:
    return casaas.create_once(store, key, lambda nonce: nonce.encode(), lambda body: body.decode())


def acquire(store: casaas.Store, key: str) -> Any:
    return casaas.Lease(store, key, ttl=30, owner="victim").acquire(0)


def landed(store: casaas.Store, op: str, key: str) -> bool:
    """Whether the victim's write is in the store (read without the proxy)."""
    if op == "fenced_write":
        return casaas.FencedResource(store, key).read() == casaas.Fenced({"by": "victim"}, 1)
    if op == "log_append":
        return [e.value for e in casaas.FencedLog(store, key).entries()] == ["victim"]
    if op == "create_once":
        return casaas.create_once(store, key, lambda n: n.encode(), lambda b: b.decode()) is False
    with pytest.raises(casaas.LockHeld) as info:
        casaas.Lease(store, key, ttl=30, owner="other").acquire(0)
    return info.value.owner == "victim"


OPS = {
    "fenced_write": fenced_write,
    "log_append": log_append,
    "create_once": create_once,
    "lock": acquire,
}


@pytest.mark.parametrize("name", SERVERS)
@pytest.mark.parametrize("op", list(OPS))
def test_a_lost_answer_is_settled_by_reading_back(name: str, op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url, options, endpoint = server_url(name, monkeypatch)
    key = f"victim-{op}"
    with LosingProxy(endpoint, only=key, cut_after=False) as proxy:
        store = casaas.open(with_endpoint(url, proxy.endpoint), **options)
        result = OPS[op](store, key)
    assert proxy.landed, "the proxy dropped no answer: the test proves nothing"
    # The outcome the write had: created, token 1, nothing raised.
    if op == "create_once":
        assert result is True
    else:
        assert result.token == 1
    assert landed(casaas.open(url, **options), op, key)


@pytest.mark.parametrize("name", SERVERS)
@pytest.mark.parametrize("op", list(OPS))
def test_a_lost_answer_that_cannot_be_settled_raises_may_have_taken_effect(
    name: str, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options, endpoint = server_url(name, monkeypatch)
    key = f"victim-{op}"
    with LosingProxy(endpoint, only=key, cut_after=True) as proxy:
        store = casaas.open(with_endpoint(url, proxy.endpoint), **options)
        with pytest.raises(casaas.MayHaveTakenEffect) as info:
            OPS[op](store, key)
    assert len(proxy.landed) == 1, proxy.landed
    assert info.value.kind == "ambiguous"
    assert key in str(info.value)
    # It had taken effect: neither success nor a clean failure was the truth.
    assert landed(casaas.open(url, **options), op, key)
