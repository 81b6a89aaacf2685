"""The exceptions casaas raises: one hierarchy under :class:`Error`.

Each carries the message the Rust core gives (never a credential).
"""

from __future__ import annotations

from typing import Optional


class Error(Exception):
    """Every error casaas raises."""


class InvalidUrl(Error, ValueError):
    """The URL (or an option beside it) cannot be opened: the message says what to fix."""


class InvalidConfig(Error, ValueError):
    """An argument or configuration is inconsistent: the message names what to change."""


class StoreError(Error):
    """The store failed (after the retries the protocol allows).

    ``kind`` names the failure (``throttled``, ``not_sent``, ...).
    """

    kind: Optional[str] = None


class MayHaveTakenEffect(StoreError):
    """A write's answer was lost: it may or may not have taken effect.

    Read before writing again; never assume either outcome.
    """


class UnsafeStore(StoreError):
    """The store does not honour the conditional writes casaas relies on."""


class Unauthorized(StoreError):
    """The store refused the credentials."""


class Unsupported(StoreError):
    """The store does not support what was asked."""


class LockHeld(Error):
    """The lock is held by someone else (``wait=0``, or ``wait`` ran out).

    ``owner`` and ``token`` name the holder when known.
    """

    owner: Optional[str] = None
    token: Optional[int] = None


class LeaseLost(Error):
    """The lease (lock, session, leadership) is no longer held; ``reason`` says why."""

    reason: Optional[str] = None


class InsufficientValidity(Error):
    """The lease is held, but with less validity left than required."""

    remaining: float = 0.0
    required: float = 0.0


class FencedOut(Error):
    """A fenced write presented a token lower than the one recorded.

    A newer holder has written since: stop acting as the holder.
    """

    presented: int = 0
    recorded: int = 0


class Timeout(Error, TimeoutError):
    """An operation's deadline passed."""


class LockTimeout(LockHeld, Timeout):
    """A bounded wait for a lock (or a session) ran out: a :class:`LockHeld`
    that is also a :class:`TimeoutError`, as filelock's ``Timeout`` is.

    ``owner`` and ``token`` name the holder when known.
    """


class Cancelled(Error):
    """The operation was cancelled."""


class ForeignObject(Error):
    """The object at the key is not a casaas record; it is never overwritten."""


class UnsupportedSchema(Error):
    """The record has a newer schema than this version understands: upgrade casaas."""


class Contended(Error):
    """Too many concurrent writers: the write lost every attempt."""


class Exhausted(Error):
    """A counter that only grows is at its maximum: use a new key."""


class RuntimeFailure(Error):
    """The bindings cannot run the operation (for example an object used across a fork)."""


__all__ = [
    "Error",
    "InvalidUrl",
    "InvalidConfig",
    "StoreError",
    "MayHaveTakenEffect",
    "UnsafeStore",
    "Unauthorized",
    "Unsupported",
    "LockHeld",
    "LockTimeout",
    "LeaseLost",
    "InsufficientValidity",
    "FencedOut",
    "Timeout",
    "Cancelled",
    "ForeignObject",
    "UnsupportedSchema",
    "Contended",
    "Exhausted",
    "RuntimeFailure",
]
