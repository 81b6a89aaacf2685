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
