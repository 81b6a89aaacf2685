"""The Python side of casaas-bench's Python section: driven over stdin and
stdout, one JSON object a line each way, so that the Rust bench interleaves
its own round trips with these in one loop. Each round trip is timed here,
around the Python statement alone (the pipe is not in the figure).

Requests:
  {"op": "open", "name": N, "url": U, "options": {...}, "key": K}
  {"op": "redis", "url": U, "key": K}
  {"op": "cycle", "system": S}   S: "lease N", "lock N", "lock-url N", "redis-lock"
  {"op": "versions"}
  {"op": "quit"}
Answers: {"ok": true, ...} or {"ok": false, "error": "..."}.
"""

import json
import sys
import time

import casaas


class Target:
    """One store, in the three ways a Python user locks on it."""

    def __init__(self, url, options, key):
        self.options = options
        # A key per way, so that no way finds the record another one wrote.
        self.key = key + "-lock"
        # What a program that locks in a loop writes: open once, one Lease.
        self.store = casaas.open(url, **options)
        self.lease = casaas.Lease(self.store, key + "-lease")
        # The lock's full URL for `casaas.lock(url)`: the key as its last
        # path segment, the store's query after it.
        base, _, query = url.partition("?")
        self.lock_url = f"{base.rstrip('/')}/{key}-url" + (f"?{query}" if query else "")


def cycle(system, targets, redis_lock):
    kind, _, name = system.partition(" ")
    if kind == "redis-lock":
        started = time.perf_counter()
        with redis_lock:
            pass
        return time.perf_counter() - started
    target = targets[name]
    if kind == "lease":
        started = time.perf_counter()
        with target.lease.acquire(wait=0):
            pass
        return time.perf_counter() - started
    if kind == "lock":
        started = time.perf_counter()
        with casaas.lock(target.store, target.key, wait=0):
            pass
        return time.perf_counter() - started
    if kind == "lock-url":
        started = time.perf_counter()
        with casaas.lock(target.lock_url, wait=0, **target.options):
            pass
        return time.perf_counter() - started
    raise ValueError(f"unknown system {system!r}")


def main():
    targets = {}
    redis_lock = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        try:
            if op == "quit":
                break
            if op == "open":
                targets[request["name"]] = Target(
                    request["url"], request["options"], request["key"]
                )
                answer = {"ok": True}
            elif op == "redis":
                import redis
                import redis_lock as rl

                client = redis.Redis.from_url(request["url"])
                # The same TTL as casaas's default lease; no auto-renewal
                # thread, which would start and stop on each round trip.
                redis_lock = rl.Lock(client, request["key"], expire=15)
                answer = {"ok": True}
            elif op == "cycle":
                seconds = cycle(request["system"], targets, redis_lock)
                answer = {"ok": True, "ms": seconds * 1e3}
            elif op == "versions":
                import importlib.metadata as metadata
                import platform

                answer = {
                    "ok": True,
                    "python": platform.python_version(),
                    "redis": metadata.version("redis"),
                    "python-redis-lock": metadata.version("python-redis-lock"),
                }
            else:
                answer = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as e:  # reported to the bench, which fails the section
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
