"""The Lance commit lock never turns a landed commit into a failure: once
Lance's body ran (its manifest may be written), no error of the lock's
release reaches Lance; a failure to acquire that a retry may cure is
Lance's CommitConflictError (nothing was written), so Lance retries."""

from __future__ import annotations

import logging
import pathlib

import pytest

import casaas

lance_commit = pytest.importorskip("lance.commit")


def test_a_release_error_after_the_body_ran_is_logged_not_raised(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    commit_lock = casaas.lance_commit_lock(f"file://{locks}/lance-commit", ttl=30, wait=5)
    ran = False
    with caplog.at_level(logging.WARNING, logger="casaas"):
        with commit_lock(7):
            ran = True  # Lance writes the manifest here
            # The lock's object becomes a directory (the file store keeps
            # key K as the file K~obj): the release fails with a store
            # error, not LeaseLost.
            (locks / "lance-commit~obj").unlink()
            (locks / "lance-commit~obj").mkdir()
    assert ran
    assert "version 7" in caplog.text and "release failed" in caplog.text, caplog.text


def test_an_acquire_error_that_is_not_held_is_a_commit_conflict(tmp_path: pathlib.Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    # wait=0: one try, whose store error is raised as it is (a longer wait
    # retries it until the deadline, then answers LockHeld).
    commit_lock = casaas.lance_commit_lock(f"file://{locks}/lance-commit", ttl=30, wait=0)
    (locks / "lance-commit~obj").mkdir()
    ran = False
    with pytest.raises(lance_commit.CommitConflictError, match="version 3"):
        with commit_lock(3):
            ran = True
    assert not ran


FIRST_COMMIT = """
import sys, time
import lance, pyarrow as pa
import casaas

uri, lock_url, start, worker = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
lock = casaas.lance_commit_lock(lock_url, ttl=10, wait=60)
table = pa.table({"worker": [worker]})
while time.time() < start:
    time.sleep(0.001)
try:
    lance.write_dataset(table, uri, mode="append", commit_lock=lock)
    print("first")
except OSError as e:
    if "already exists" not in str(e):
        raise
    # Another writer created the dataset first; nothing of ours was
    # committed: append to the dataset that exists now.
    lance.write_dataset(table, uri, mode="append", commit_lock=lock)
    print("again")
"""


def test_the_first_commit_of_a_new_dataset_under_contention(tmp_path: pathlib.Path) -> None:
    """Writers appending at once to a dataset that does not exist yet: one
    creates it, the others get Lance's "Dataset already exists" (an
    OSError, not a CommitConflictError Lance would retry), and the recipe
    of docs/python.md (append again) lands every row exactly once."""
    import subprocess
    import sys
    import time

    lance = pytest.importorskip("lance")
    locks = tmp_path / "locks"
    locks.mkdir()
    uri = str(tmp_path / "dataset")
    start = time.time() + 3
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FIRST_COMMIT, uri, f"file://{locks}/c", str(start), str(w)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    answers = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        answers.append(out.strip().splitlines()[-1])
    ds = lance.dataset(uri)
    assert sorted(ds.to_table().column("worker").to_pylist()) == [0, 1, 2]
    assert ds.version == 3
    print(f"first commit under contention: {answers}")
