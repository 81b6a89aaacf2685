"""Campaign for leadership, lead while the term lasts, then resign."""

import sys
import tempfile

import casaas


def main(store_url: str) -> None:
    election = casaas.Election(store_url, "elections/scheduler", ttl=15)
    with election.campaign(wait=30) as term:
        leader = election.leader()
        assert leader is not None and leader.token == term.token
        print("leading with token", term.token)
        log = casaas.FencedLog(store_url, "logs/scheduler")
        log.append(term.token, {"event": "started"})
        term.ensure_held_for(1)
    print("resigned; leader now:", election.leader())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else f"file://{tempfile.mkdtemp()}")
