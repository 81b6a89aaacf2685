"""Run a job under a lock, fencing its one write with the lock's token."""

import sys
import tempfile

import casaas


def main(store_url: str) -> None:
    report = casaas.FencedResource(store_url, "reports/nightly")
    with casaas.lock(store_url, "locks/nightly", ttl=30, wait=60) as held:
        held.ensure_held_for(5)  # the write below takes well under 5 s
        stored = report.write(held.token, {"rows": 42})
        print("wrote", stored.value, "with token", stored.token)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else f"file://{tempfile.mkdtemp()}")
