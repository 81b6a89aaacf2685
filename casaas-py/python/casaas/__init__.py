"""Leases, locks, leader election and fenced writes on object storage.

casaas turns the conditional writes of object stores (S3 ``If-Match`` /
``If-None-Match``, GCS generation preconditions, Azure ETag conditions) into
coordination. Every protocol runs in the Rust core; this package is its
Python face::

    import casaas

    with casaas.lock("s3://bucket/locks/nightly", ttl=30, wait=60) as held:
        ...  # pass held.token to every write the lock protects

Durations are seconds (``int`` / ``float``) or :class:`datetime.timedelta`.
Credentials go beside the URL as keyword options (``aws_access_key_id=...``)
or come from the SDKs' environment, never in the URL.

Lifetime: a lock (session, term) stays held until it is released, its
``with`` block ends, or the interpreter exits, whatever Python does with the
object; one dropped unreleased warns with :class:`ResourceWarning`. At
interpreter exit every holding still live is released, within 5 s in all; a
process killed outright (or ended by ``os._exit`` or an unhandled SIGTERM)
leaves its locks to expire after their TTL.

Threads, asyncio and fork: every call releases the GIL while it waits;
renewal runs on a runtime of the module's own threads, so a held lock stays
held while Python is busy. A :class:`Lock` shared by threads or tasks keeps
each one's hold apart. The ``_async`` forms never block the event loop. A
forked child gets a fresh runtime, but objects made before the fork refuse to
work in it (:class:`RuntimeFailure`): open the store again in the child; the
child never releases its parent's locks. See docs/python.md, "Lifetime,
threads, asyncio, fork, Ctrl-C and exit".
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import datetime
import json
import logging
import os
import select
import threading
import time
import warnings
import weakref
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Type,
    Union,
)

from . import _casaas
from ._errors import (
    Cancelled,
    Contended,
    Error,
    Exhausted,
    FencedOut,
    ForeignObject,
    InsufficientValidity,
    InvalidConfig,
    InvalidUrl,
    LeaseLost,
    LockHeld,
    LockTimeout,
    MayHaveTakenEffect,
    RuntimeFailure,
    StoreError,
    Timeout,
    Unauthorized,
    UnsafeStore,
    Unsupported,
    UnsupportedSchema,
)

_log = logging.getLogger("casaas")

Seconds = Union[int, float, datetime.timedelta]
"""A duration: seconds as a number, or a :class:`datetime.timedelta`."""

Store = _casaas.Store

__all__ = [
    "Applied",
    "Cancelled",
    "Contended",
    "Election",
    "ElectionRunner",
    "Error",
    "Exhausted",
    "FairLease",
    "Fenced",
    "FencedLog",
    "FencedOut",
    "FencedResource",
    "ForeignObject",
    "GroupResource",
    "GroupTicket",
    "Held",
    "InsufficientValidity",
    "InvalidConfig",
    "InvalidUrl",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLost",
    "Lock",
    "LockEntry",
    "LockHeld",
    "LockTimeout",
    "LogEntry",
    "MAX_VALUE_BYTES",
    "MayHaveTakenEffect",
    "Probe",
    "RunnerTerm",
    "RuntimeFailure",
    "RwLock",
    "RwLockHold",
    "Seconds",
    "Semaphore",
    "SemaphoreLock",
    "Session",
    "Store",
    "StoreError",
    "Timeout",
    "Unauthorized",
    "UnsafeStore",
    "Unsupported",
    "UnsupportedSchema",
    "Verdict",
    "conformance",
    "create_once",
    "doctor",
    "lance_commit_lock",
    "list_locks",
    "list_locks_async",
    "lock",
    "open",
    "open_async",
    "run_election",
    "rwlock",
    "semaphore",
]


def _seconds(value: Optional[Seconds], name: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidConfig(
            f"{name} must be seconds (int or float) or a datetime.timedelta, not {type(value).__name__}"
        )
    seconds = float(value)
    if not (seconds >= 0 and seconds != float("inf")):
        raise InvalidConfig(f"{name} must be a finite, non-negative number of seconds (got {seconds})")
    return seconds


def _required(value: Seconds, name: str) -> float:
    got = _seconds(value, name)
    if got is None:
        raise InvalidConfig(f"{name} must be given")
    return got


# Keyword names that are a call's own parameters (here or in other lock
# libraries), never a store's option: given where a call takes none, they
# are a typo of the call (a TypeError), not an unknown store option.
_CALL_WORDS = {
    "timeout": "wait=",
    "blocking": "wait=None (block) or wait=0 (try once)",
    "blocking_timeout": "wait=",
    "acquire_timeout": "wait=",
    "wait_timeout": "wait=",
    "wait": "wait= of the call that waits (lock(), acquire(), campaign())",
    "ttl": "ttl= of lock(), Lease(), Session() or Election()",
    "expire": "ttl=",
    "expires": "ttl=",
    "lease_time": "ttl=",
    "lease_duration": "ttl=",
    "owner": "owner= of lock(), Lease(), Session() or Election()",
    "identifier": "owner=",
    "id": "owner=",
    "name": "the key (the URL's last segment, or key=)",
    "key": "key=",
    "lock_name": "the key (the URL's last segment, or key=)",
    "min_validity": "min_validity= of lance_commit_lock()",
    "fair": "fair=True of lock(), or FairLease",
    "auto_renewal": "nothing: renewal always runs in the background",
    "thread_local": "nothing: a Lock shared by threads keeps each thread's hold apart",
    "poll_interval": "nothing: casaas paces its own retries",
}


def _check_call_options(options: Dict[str, Any]) -> None:
    for name in options:
        if name in _CALL_WORDS:
            raise TypeError(
                f"got an unexpected keyword argument {name!r} (use {_CALL_WORDS[name]}); "
                "the other keyword arguments are the store's options"
            )


def _options(options: Dict[str, Any]) -> Dict[str, str]:
    _check_call_options(options)
    out: Dict[str, str] = {}
    for name, value in options.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, datetime.timedelta):
            out[name] = f"{value.total_seconds()}s"
        else:
            out[name] = str(value)
    return out


async def _run(begin: Callable[[], Any]) -> Any:
    """Awaits a native operation. ``begin()`` starts it on the casaas runtime
    and returns its task, whose ``fileno()`` becomes readable when the
    outcome is ready; the runtime's threads never call into Python."""
    loop = asyncio.get_running_loop()
    fut: "asyncio.Future[Any]" = loop.create_future()
    task = begin()
    fd = task.fileno()

    def ready() -> None:
        loop.remove_reader(fd)
        if fut.done():
            return
        try:
            fut.set_result(task.result())
        except BaseException as e:  # the operation's exception, for the awaiter
            fut.set_exception(e)

    loop.add_reader(fd, ready)
    try:
        return await fut
    except asyncio.CancelledError:
        loop.remove_reader(fd)
        task.cancel()
        raise


def open(url: str, **options: Any) -> Store:
    """Opens the store ``url`` names.

    ``url`` is ``s3://bucket/prefix``, ``gs://bucket/prefix``,
    ``az://account/container/prefix``, ``file:///abs/dir`` or
    ``memory://name/prefix``; its query takes the store's options
    (``?region=...&endpoint=...``). Keyword ``options`` go beside the URL,
    credentials among them under the lowercase names of the providers'
    environment variables (``aws_access_key_id``, ``aws_secret_access_key``,
    ``azure_storage_key``, ...). An unknown option is an error
    (:class:`InvalidUrl`), so a typo writes nothing.

    Before the first lease on a store, a few requests prove that it honours
    conditional writes; a store that does not raises :class:`UnsafeStore`.
    """
    return _casaas.open(url, _options(options))


async def open_async(url: str, **options: Any) -> Store:
    """:func:`open` for asyncio."""
    store: Store = await _run(lambda: _casaas.open_start(url, _options(options)))
    return store


def _store_and_key(
    target: Union[str, Store], key: Optional[str], options: Dict[str, Any]
) -> "tuple[Union[str, Store], str]":
    if key is not None:
        return target, key
    if not isinstance(target, str):
        raise InvalidConfig("pass key= with a Store: the lock's name within it")
    store_url, name = _casaas.split_key(target)
    return store_url, name


def _resolve(target: Union[str, Store], options: Dict[str, Any]) -> Store:
    if isinstance(target, str):
        return open(target, **options)
    _check_call_options(options)
    if options:
        raise InvalidConfig("options go with a URL; this store is open already")
    return target


async def _resolve_async(target: Union[str, Store], options: Dict[str, Any]) -> Store:
    if isinstance(target, str):
        return await open_async(target, **options)
    return _resolve(target, options)


# Holdings (locks, sessions, terms) not yet ended, by their native objects.
# A holding lasts until it is released (or the interpreter exits), not until
# Python drops its last reference: `if lease.try_acquire(): work()` keeps
# the lock while `work()` runs. What Python drops unreleased is reported
# with a ResourceWarning and released at exit.
_LIVE: Dict[int, "tuple[str, Any]"] = {}
_LIVE_LOCK = threading.Lock()

# How long interpreter exit waits, in all, for the releases it starts.
_EXIT_BOUND = 5.0


def _keep(native: Any, kind: str) -> None:
    with _LIVE_LOCK:
        _LIVE[id(native)] = (kind, native)


def _forget(native: Any) -> None:
    with _LIVE_LOCK:
        kept = _LIVE.get(id(native))
        if kept is not None and kept[1] is native:
            del _LIVE[id(native)]


def _kept(native: Any) -> bool:
    with _LIVE_LOCK:
        kept = _LIVE.get(id(native))
        return kept is not None and kept[1] is native


def _dropped(native: Any, what: str) -> None:
    """A holder's Python object was collected: the holding stays (until
    interpreter exit), and the program hears of it."""
    try:
        if _kept(native) and native.is_held():
            warnings.warn(
                f"{what} was dropped without being released: it stays held until "
                "interpreter exit; call release() (close(), resign()) or use `with`",
                ResourceWarning,
                stacklevel=2,
            )
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        pass


def _watch(holder: object, native: Any, what: str) -> None:
    _keep(native, what.split(" ", 1)[0])
    finalizer = weakref.finalize(holder, _dropped, native, what)
    # Exit has its own release (below), without a warning per holding.
    finalizer.atexit = False


def _end_start(kind: str, native: Any) -> Any:
    if kind == "session":
        return native.close_start()
    if kind == "term":
        return native.resign_start()
    return native.release_start()


def _settle(tasks: List[Any], deadline: float) -> None:
    """Waits for native tasks until `deadline` (monotonic); those still
    running then are abandoned (their locks expire after their TTL)."""
    pending = {task.fileno(): task for task in tasks}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(list(pending), [], [], left)
        for fd in ready:
            task = pending.pop(fd)
            try:
                task.result()
            except Exception:  # noqa: BLE001 - lost or unreachable: it expires after its TTL
                pass
    for task in pending.values():
        task.cancel()


@atexit.register
def _release_at_exit() -> None:
    """At interpreter exit, ends every holding of this process still live:
    locks and terms first, then sessions, concurrently, all within
    ``_EXIT_BOUND`` seconds."""
    with _LIVE_LOCK:
        live = list(_LIVE.values())
        _LIVE.clear()
    deadline = time.monotonic() + _EXIT_BOUND
    for phase in (("lock", "term"), ("session",)):
        tasks = []
        for kind, native in live:
            if kind in phase:
                try:
                    tasks.append(_end_start(kind, native))
                except Exception:  # noqa: BLE001 - made in another process, or ended already
                    pass
        _settle(tasks, deadline)


def _forget_parents_holdings() -> None:
    # A forked child holds none of its parent's locks: nothing of them is
    # released (nor warned about) from the child.
    with _LIVE_LOCK:
        _LIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_holdings)


class Held:
    """A held lock (lease). Renewal runs in the background until
    :meth:`release`; a context manager releases it on exit.

    The lock stays held until :meth:`release` (or :meth:`abandon`, or the
    end of its ``with`` block), or until the interpreter exits: not merely
    until Python drops this object. Dropping it unreleased warns with a
    :class:`ResourceWarning`; the lock is then released at exit.

    Pass :attr:`token` with every write the lock protects, and call
    :meth:`ensure_held_for` before each side effect that must happen only
    while holding.
    """

    def __init__(self, native: Any) -> None:
        self._native = native
        _watch(self, native, f"lock {native.key!r} (token {native.token})")

    @property
    def value(self) -> Any:
        """The value this holding publishes (``value=`` or the last
        :meth:`proclaim`), or ``None``."""
        return _value_of(self._native.value)

    def proclaim(self, value: Any) -> None:
        """Publishes ``value`` (JSON-able, at most :data:`MAX_VALUE_BYTES`
        as JSON) with this holding: one conditional write, the token
        unchanged; readers of :meth:`Lease.holder` see it. Raises
        :class:`LeaseLost` once released or lost."""
        self._native.proclaim(_value_text(value))

    async def proclaim_async(self, value: Any) -> None:
        """:meth:`proclaim` for asyncio."""
        text = _value_text(value)
        await _run(lambda: self._native.proclaim_start(text))

    @property
    def token(self) -> int:
        """The fencing token: greater than every earlier holder's."""
        token: int = self._native.token
        return token

    @property
    def key(self) -> str:
        """The lock's key within its store."""
        key: str = self._native.key
        return key

    @property
    def owner(self) -> str:
        """The owner id written in the lock's record."""
        owner: str = self._native.owner
        return owner

    @property
    def remaining(self) -> float:
        """Validity left, in seconds (0 once lost or released)."""
        remaining: float = self._native.remaining()
        return remaining

    @property
    def lost(self) -> bool:
        """True once the lock is no longer held (lost, expired or released)."""
        return not self._native.is_held()

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the lock ended, or ``None`` while it is held."""
        reason: Optional[str] = self._native.lost_reason()
        return reason

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lock is no longer held."""
        self._native.ensure_held_for(0.0)

    def ensure_held_for(self, seconds: Seconds) -> None:
        """Raises unless the lock is held with at least ``seconds`` of validity
        left: :class:`LeaseLost` when it is gone, :class:`InsufficientValidity`
        when too little is left. Call it before each side effect, with the
        time the side effect may take."""
        self._native.ensure_held_for(_required(seconds, "seconds"))

    def release(self) -> None:
        """Releases the lock (the next holder gets token + 1). Raises
        :class:`LeaseLost` if it was lost before; releasing twice is a no-op."""
        _forget(self._native)
        self._native.release()

    async def release_async(self) -> None:
        """:meth:`release` for asyncio."""
        _forget(self._native)
        await _run(self._native.release_start)

    def abandon(self) -> None:
        """Stops renewing without releasing, as a crashed holder would: the
        lock expires after its TTL."""
        _forget(self._native)
        self._native.abandon()

    def __enter__(self) -> "Held":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _finish(self.release, exc)

    async def __aenter__(self) -> "Held":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _finish_async(self.release_async, exc)

    def __repr__(self) -> str:
        state = "held" if not self.lost else f"lost: {self.lost_reason}"
        return f"<casaas.Held key={self.key!r} token={self.token} {state}>"


def _finish(release: Callable[[], None], exc: Optional[BaseException]) -> None:
    """Releases on leaving a block. A lock lost while the block ran raises
    :class:`LeaseLost` (the block ran partly unprotected), unless the block
    already raised: then the block's own exception goes on, and what the
    release said is added to it as a note."""
    try:
        release()
    except Error as e:
        if exc is None:
            raise
        _note(exc, e)


def _note(exc: BaseException, e: BaseException) -> None:
    add_note = getattr(exc, "add_note", None)  # Python 3.11+
    if add_note is not None:
        add_note(f"casaas, on leaving the block: {type(e).__name__}: {e}")
    _log.warning("on leaving a block that raised, casaas: %s: %s", type(e).__name__, e)


async def _finish_async(
    release: Callable[[], Awaitable[None]], exc: Optional[BaseException]
) -> None:
    """:func:`_finish` for asyncio. The release is shielded: a task
    cancelled while it releases still releases (the release runs on; its
    outcome is logged), rather than leaving the lock to expire."""
    task = asyncio.ensure_future(release())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_log_outcome)
        raise
    except Error as e:
        if exc is None:
            raise
        _note(exc, e)


def _log_outcome(task: "asyncio.Future[None]") -> None:
    if task.cancelled():
        return
    e = task.exception()
    if e is not None:
        _log.warning("a release shielded from cancellation failed: %s: %s", type(e).__name__, e)


class Lease:
    """A lease (lock) on one key of a store.

    ``ttl`` is how long the lock outlives its holder's last renewal;
    renewal runs every ``ttl / 3``. ``owner`` defaults to ``HOST/PID``.
    """

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        ttl: Optional[Seconds] = None,
        owner: Optional[str] = None,
        value: Any = None,
        **options: Any,
    ) -> None:
        self._native = _casaas.Lease(
            _resolve(store, options), key, owner, _seconds(ttl, "ttl"), _value_text(value)
        )

    @property
    def value(self) -> Any:
        """The value this lease publishes while held (``None``: none)."""
        return _value_of(self._native.value)

    @property
    def key(self) -> str:
        """The lock's key."""
        key: str = self._native.key
        return key

    @property
    def owner(self) -> str:
        """The owner id this lease writes."""
        owner: str = self._native.owner
        return owner

    def acquire(self, wait: Optional[Seconds] = None) -> Held:
        """Acquires the lock. ``wait=None`` waits for ever, ``wait=0`` tries
        once (:class:`LockHeld` when held), otherwise waits at most ``wait``
        (:class:`LockTimeout`, a :class:`LockHeld` and a
        :class:`TimeoutError`, when it runs out). Ctrl-C while waiting
        cancels the wait cleanly (nothing is held afterwards).

        The lock stays held until :meth:`Held.release` or interpreter exit,
        whether or not the returned :class:`Held` is kept."""
        return Held(self._native.acquire(_seconds(wait, "wait")))

    def try_acquire(self) -> Optional[Held]:
        """One attempt: the held lock, or ``None`` when someone holds it.
        ``if lease.try_acquire(): ...`` holds the lock until released or
        interpreter exit (keep the result to release it)."""
        try:
            return self.acquire(0)
        except LockHeld:
            return None

    async def acquire_async(self, wait: Optional[Seconds] = None) -> Held:
        """:meth:`acquire` for asyncio; cancelling the task cancels the wait."""
        w = _seconds(wait, "wait")
        native = await _run(lambda: self._native.acquire_start(w))
        return Held(native)

    def holder(self) -> Optional["Leader"]:
        """Who holds the lock by its record (``owner``, ``token``), or
        ``None`` when it is free (never held, or released). One read: a
        holder that stopped renewing is still named until someone takes the
        lock over after its TTL."""
        return _leader(self._native.holder())

    async def holder_async(self) -> Optional["Leader"]:
        """:meth:`holder` for asyncio."""
        return _leader(await _run(self._native.holder_start))


# The holds a `Lock` made in the current thread or asyncio task, per
# `Lock`: a `Lock` shared by threads or tasks releases only the hold of the
# one leaving the block. Mappings are replaced, never changed in place
# (tasks copy their context, and so share its values).
_HOLDS: "contextvars.ContextVar[Dict[int, tuple[Held, ...]]]" = contextvars.ContextVar(
    "casaas_holds", default={}
)


class _Holds:
    """Holds taken by ``with`` / ``async with`` on one shared object, kept
    per thread and per asyncio task (a context variable), so that leaving a
    block releases the hold of the thread or task leaving it, never
    another's. Subclasses define ``__enter__`` and ``__aenter__``, which
    :meth:`_push` what they take."""

    def _push(self, held: Held) -> None:
        holds = dict(_HOLDS.get())
        holds[id(self)] = holds.get(id(self), ()) + (held,)
        _HOLDS.set(holds)

    def _pop(self) -> Optional[Held]:
        holds = dict(_HOLDS.get())
        mine = holds.get(id(self), ())
        if not mine:
            return None
        if len(mine) > 1:
            holds[id(self)] = mine[:-1]
        else:
            del holds[id(self)]
        _HOLDS.set(holds)
        return mine[-1]

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        held = self._pop()
        if held is not None:
            _finish(held.release, exc)

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        held = self._pop()
        if held is not None:
            await _finish_async(held.release_async, exc)


class Lock(_Holds):
    """``with casaas.lock(...) as held:`` and ``async with``: acquires on
    entry, releases on exit (see :func:`lock`).

    One ``Lock`` may be shared by threads and asyncio tasks: each entry is
    its own hold, and leaving a block releases the hold of the thread (or
    task) leaving it, never another's. Enter and leave a block in the same
    thread or task.
    """

    def __init__(self, lease: Optional[Lease], wait: Optional[Seconds], fair: bool = False) -> None:
        self._lease = lease
        self._wait = wait
        self._opener: "Optional[tuple[str, str, Dict[str, Any], Optional[Seconds], Optional[str], Any]]" = None
        self._opening = threading.Lock()
        self._fair = fair
        self._fair_lease: Optional[FairLease] = None

    @classmethod
    def _deferred(
        cls,
        url: str,
        key: str,
        options: Dict[str, Any],
        ttl: Optional[Seconds],
        owner: Optional[str],
        wait: Optional[Seconds],
        value: Any = None,
        fair: bool = False,
    ) -> "Lock":
        """A lock whose store is opened on first use: by ``open`` in
        ``with``, by ``open_async`` in ``async with`` (never blocking the
        event loop)."""
        _seconds(ttl, "ttl")
        _seconds(wait, "wait")
        lock = cls(None, wait, fair)
        _value_text(value)
        lock._opener = (url, key, options, ttl, owner, value)
        return lock

    @property
    def lease(self) -> Lease:
        """The lease this lock takes (its store opened on first use)."""
        if self._lease is None:
            with self._opening:
                if self._lease is None:
                    assert self._opener is not None
                    url, key, options, ttl, owner, value = self._opener
                    self._lease = Lease(open(url, **options), key, ttl=ttl, owner=owner, value=value)
        return self._lease

    async def _lease_async(self) -> Lease:
        if self._lease is None:
            assert self._opener is not None
            url, key, options, ttl, owner, value = self._opener
            store = await open_async(url, **options)
            if self._lease is None:
                self._lease = Lease(store, key, ttl=ttl, owner=owner, value=value)
        return self._lease

    @property
    def fair(self) -> bool:
        """Whether waiters take turns in arrival order (``fair=True``)."""
        return self._fair

    def _taker(self, lease: Lease) -> "Union[Lease, FairLease]":
        if not self._fair:
            return lease
        with self._opening:
            if self._fair_lease is None:
                self._fair_lease = FairLease._of(lease)
        return self._fair_lease

    def __enter__(self) -> Held:
        held = self._taker(self.lease).acquire(self._wait)
        self._push(held)
        return held

    async def __aenter__(self) -> Held:
        lease = await self._lease_async()
        held = await self._taker(lease).acquire_async(self._wait)
        self._push(held)
        return held


def lock(
    url: Union[str, Store],
    key: Optional[str] = None,
    *,
    ttl: Optional[Seconds] = None,
    wait: Optional[Seconds] = None,
    owner: Optional[str] = None,
    value: Any = None,
    fair: bool = False,
    **options: Any,
) -> Lock:
    """A lock, used as ``with casaas.lock(url) as held:`` or ``async with``.

    ``url`` names the store and, as its last path segment, the lock
    (``s3://bucket/locks/nightly`` is the lock ``nightly`` in
    ``s3://bucket/locks``); or pass an open :class:`Store` (or a store URL)
    and ``key``. ``ttl`` (default 15 s) is how long the lock outlives a
    holder that stopped renewing. ``wait=None`` (the default) waits for
    ever, ``wait=0`` tries once, otherwise waits at most ``wait``; a lock
    not acquired in time raises :class:`LockHeld`. Keyword ``options`` are
    the store's (credentials among them; see :func:`open`).

    Inside the block, ``held.token`` is the fencing token and
    ``held.ensure_held_for(seconds)`` raises :class:`LeaseLost` or
    :class:`InsufficientValidity` when the lock may not last that long.
    Leaving the block releases the lock; a lock lost while the block ran
    raises :class:`LeaseLost` on exit.

    ``fair=True`` serves waiters in arrival order (see :class:`FairLease`):
    each waiter takes a ticket under ``KEY.queue/`` and acquires once every
    ticket before it has ended; a wait given up ends its ticket.
    """
    if not isinstance(fair, bool):
        raise TypeError(f"fair must be True or False, not {type(fair).__name__}")
    target, name = _store_and_key(url, key, options)
    if isinstance(target, str):
        # Opened on entry: `async with` opens it without blocking the loop.
        _check_call_options(options)
        return Lock._deferred(target, name, options, ttl, owner, wait, value, fair)
    return Lock(Lease(_resolve(target, options), name, ttl=ttl, owner=owner, value=value), wait, fair)


class FairLease:
    """A lock whose waiters are served in arrival order: no waiter starves.

    A waiter first takes a ticket, a small lease of its own at
    ``KEY.queue/NNNNNNNNNNNNNNNNNNNN`` one past the highest listed, renewed
    while it waits; once no ticket before its own is left, it acquires the
    lock through the ordinary lease (exclusion and the fencing token are
    exactly :class:`Lease`'s) and ends its ticket. A ticket whose waiter
    crashed is passed once it has been seen unchanged for its TTL. Only
    waiters that use :class:`FairLease` (or ``casaas.lock(..., fair=True)``,
    ``casaas lock --fair``) queue: a plain :class:`Lease` can still take the
    lock ahead of them. The store must list keys (and keep lease records in
    place: not a create-only store, :class:`Unsupported`).
    """

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        ttl: Optional[Seconds] = None,
        owner: Optional[str] = None,
        value: Any = None,
        **options: Any,
    ) -> None:
        self._lease = Lease(store, key, ttl=ttl, owner=owner, value=value, **options)
        self._native = _casaas.FairLease(self._lease._native)

    @classmethod
    def _of(cls, lease: Lease) -> "FairLease":
        fair = cls.__new__(cls)
        fair._lease = lease
        fair._native = _casaas.FairLease(lease._native)
        return fair

    @property
    def lease(self) -> Lease:
        """The lease taken in turn (its own ``acquire`` does not queue)."""
        return self._lease

    @property
    def key(self) -> str:
        """The lock's key."""
        key: str = self._native.key
        return key

    @property
    def queue_prefix(self) -> str:
        """Where the waiters' tickets live: the key followed by ``.queue/``."""
        prefix: str = self._native.queue_prefix
        return prefix

    def acquire(self, wait: Optional[Seconds] = None) -> Held:
        """Acquires the lock in turn. ``wait=None`` waits for ever;
        ``wait=0`` tries the lock once without queueing (:class:`LockHeld`
        when held); otherwise waits at most ``wait`` (:class:`LockTimeout`
        when it runs out). A wait given up (its ``wait`` run out, Ctrl-C)
        ends its ticket, so the waiters behind it move up at once."""
        return Held(self._native.acquire(_seconds(wait, "wait")))

    def try_acquire(self) -> Optional[Held]:
        """One attempt on the lock: the held lock, or ``None`` when held."""
        try:
            return self.acquire(0)
        except LockHeld:
            return None

    async def acquire_async(self, wait: Optional[Seconds] = None) -> Held:
        """:meth:`acquire` for asyncio; cancelling the task ends the ticket."""
        w = _seconds(wait, "wait")
        native = await _run(lambda: self._native.acquire_start(w))
        return Held(native)

    def holder(self) -> Optional["Leader"]:
        """Who holds the lock by its record (see :meth:`Lease.holder`)."""
        return self._lease.holder()


class Semaphore:
    """A counting semaphore: up to ``slots`` holders at once under one key.

    Each holder takes one slot, a lease of its own at ``KEY.slots/I`` with
    its own fencing token (``held.token``; ``held.key`` names the slot).
    Waiters take turns. Every holder of one key must count the same
    ``slots``: the first records it, and another count raises
    :class:`InvalidConfig`.
    """

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        slots: int,
        ttl: Optional[Seconds] = None,
        owner: Optional[str] = None,
        **options: Any,
    ) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int):
            raise TypeError(f"slots must be an int, not {type(slots).__name__}")
        self._native = _casaas.Semaphore(
            _resolve(store, options), key, slots, owner, _seconds(ttl, "ttl")
        )

    @property
    def key(self) -> str:
        """The semaphore's name."""
        key: str = self._native.key
        return key

    @property
    def slots(self) -> int:
        """How many slots it has."""
        slots: int = self._native.slots
        return slots

    def acquire(self, wait: Optional[Seconds] = None) -> Held:
        """Takes a slot. ``wait=None`` waits for ever, ``wait=0`` tries
        once (:class:`LockHeld` when every slot is held), otherwise waits
        at most ``wait`` (:class:`LockTimeout` when it runs out)."""
        return Held(self._native.acquire(_seconds(wait, "wait")))

    def try_acquire(self) -> Optional[Held]:
        """One pass over the slots: a held slot, or ``None`` when all are held."""
        try:
            return self.acquire(0)
        except LockHeld:
            return None

    async def acquire_async(self, wait: Optional[Seconds] = None) -> Held:
        """:meth:`acquire` for asyncio; cancelling the task cancels the wait."""
        w = _seconds(wait, "wait")
        native = await _run(lambda: self._native.acquire_start(w))
        return Held(native)


class SemaphoreLock(_Holds):
    """``with casaas.semaphore(...) as held:`` and ``async with``: takes a
    slot on entry, releases it on exit (see :func:`semaphore`). Shared by
    threads or tasks, each entry is its own hold, as with :class:`Lock`."""

    def __init__(self, semaphore: Semaphore, wait: Optional[Seconds]) -> None:
        self._semaphore = semaphore
        self._wait = wait

    @property
    def semaphore(self) -> Semaphore:
        """The semaphore whose slots this takes."""
        return self._semaphore

    def __enter__(self) -> Held:
        held = self._semaphore.acquire(self._wait)
        self._push(held)
        return held

    async def __aenter__(self) -> Held:
        held = await self._semaphore.acquire_async(self._wait)
        self._push(held)
        return held


def semaphore(
    url: Union[str, Store],
    key: Optional[str] = None,
    *,
    slots: int,
    ttl: Optional[Seconds] = None,
    wait: Optional[Seconds] = None,
    owner: Optional[str] = None,
    **options: Any,
) -> SemaphoreLock:
    """A counting semaphore of ``slots`` slots, used as ``with
    casaas.semaphore(url, slots=3) as held:`` or ``async with``: at most
    ``slots`` blocks run at once, across processes and machines.

    ``url``, ``key``, ``ttl``, ``wait``, ``owner`` and ``options`` are as
    for :func:`lock` (the store is opened at once). Inside the block,
    ``held.token`` is the fencing token of the slot taken (``held.key``
    names it: ``NAME.slots/I``); every slot has tokens of its own.
    """
    target, name = _store_and_key(url, key, options)
    store = _resolve(target, options)
    return SemaphoreLock(Semaphore(store, name, slots=slots, ttl=ttl, owner=owner), wait)


class RwLock:
    """A read-write lock: many readers at once, or one writer.

    The writer holds the lock object itself (a lease at ``key``), and its
    ``held.token`` is the writer's fencing token. Each reader holds a slot
    of its own under ``KEY.readers/`` (its token numbers that slot's
    holdings and fences nothing). A writer that waits keeps new readers
    out, so readers cannot starve it. The store must list keys.

    Use :meth:`read` and :meth:`write` as context managers (``with`` or
    ``async with``), or :meth:`acquire_read` / :meth:`acquire_write` for a
    :class:`Held` to release yourself.
    """

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        ttl: Optional[Seconds] = None,
        owner: Optional[str] = None,
        wait: Optional[Seconds] = None,
        **options: Any,
    ) -> None:
        self._native = _casaas.RwLock(_resolve(store, options), key, owner, _seconds(ttl, "ttl"))
        self._wait = wait

    @property
    def key(self) -> str:
        """The lock's name (the writer's lock object)."""
        key: str = self._native.key
        return key

    @property
    def readers_prefix(self) -> str:
        """Where the readers' slots live: the key followed by ``.readers/``."""
        prefix: str = self._native.readers_prefix
        return prefix

    def acquire_read(self, wait: Optional[Seconds] = None) -> Held:
        """Holds the lock shared. ``wait=None`` waits for ever, ``wait=0``
        tries once (:class:`LockHeld` while a writer holds or waits),
        otherwise waits at most ``wait`` (:class:`LockTimeout`)."""
        return Held(self._native.read(_seconds(wait, "wait")))

    def acquire_write(self, wait: Optional[Seconds] = None) -> Held:
        """Holds the lock exclusively, once every reader has left; ``wait``
        as for :meth:`acquire_read`. ``held.token`` is the fencing token."""
        return Held(self._native.write(_seconds(wait, "wait")))

    async def acquire_read_async(self, wait: Optional[Seconds] = None) -> Held:
        """:meth:`acquire_read` for asyncio; cancelling the task cancels the wait."""
        w = _seconds(wait, "wait")
        native = await _run(lambda: self._native.read_start(w))
        return Held(native)

    async def acquire_write_async(self, wait: Optional[Seconds] = None) -> Held:
        """:meth:`acquire_write` for asyncio; cancelling the task cancels the wait."""
        w = _seconds(wait, "wait")
        native = await _run(lambda: self._native.write_start(w))
        return Held(native)

    def read(self, wait: Optional[Seconds] = None) -> "RwLockHold":
        """``with lock.read() as held:`` (or ``async with``): shared for the
        block. ``wait`` defaults to the one the lock was made with."""
        return RwLockHold(self, False, self._wait if wait is None else wait)

    def write(self, wait: Optional[Seconds] = None) -> "RwLockHold":
        """``with lock.write() as held:`` (or ``async with``): exclusive for
        the block, ``held.token`` the fencing token. ``wait`` as for :meth:`read`."""
        return RwLockHold(self, True, self._wait if wait is None else wait)


class RwLockHold(_Holds):
    """One side of a :class:`RwLock` as a context manager (see
    :meth:`RwLock.read`, :meth:`RwLock.write`): holds on entry, releases on
    exit. Shared by threads or tasks, each entry is its own hold."""

    def __init__(self, lock: RwLock, write: bool, wait: Optional[Seconds]) -> None:
        self._lock = lock
        self._write = write
        self._wait = wait

    @property
    def lock(self) -> RwLock:
        """The read-write lock this holds."""
        return self._lock

    @property
    def exclusive(self) -> bool:
        """True for the writer's side."""
        return self._write

    def __enter__(self) -> Held:
        if self._write:
            held = self._lock.acquire_write(self._wait)
        else:
            held = self._lock.acquire_read(self._wait)
        self._push(held)
        return held

    async def __aenter__(self) -> Held:
        if self._write:
            held = await self._lock.acquire_write_async(self._wait)
        else:
            held = await self._lock.acquire_read_async(self._wait)
        self._push(held)
        return held


def rwlock(
    url: Union[str, Store],
    key: Optional[str] = None,
    *,
    ttl: Optional[Seconds] = None,
    wait: Optional[Seconds] = None,
    owner: Optional[str] = None,
    **options: Any,
) -> RwLock:
    """A read-write lock, used as ``with casaas.rwlock(url).read():`` or
    ``with casaas.rwlock(url).write() as held:`` (and ``async with``): many
    readers at once, or one writer whose ``held.token`` is its fencing
    token.

    ``url``, ``key``, ``ttl``, ``wait``, ``owner`` and ``options`` are as
    for :func:`lock` (the store is opened at once); ``wait`` is the default
    of :meth:`RwLock.read` and :meth:`RwLock.write`.
    """
    target, name = _store_and_key(url, key, options)
    store = _resolve(target, options)
    return RwLock(store, name, ttl=ttl, owner=owner, wait=wait)


class Leader(NamedTuple):
    """Who holds a lock or leads an election, and the value it publishes
    (``None``: none)."""

    owner: str
    token: int
    value: Any = None


# The most a published value may take as JSON text (UTF-8 bytes).
MAX_VALUE_BYTES = 4096


def _value_text(value: Any) -> Optional[str]:
    """A published value as the JSON text the record carries; ``None``
    publishes nothing. Over :data:`MAX_VALUE_BYTES` raises :class:`InvalidConfig`."""
    if value is None:
        return None
    text = _dumps(value)
    size = len(text.encode("utf-8"))
    if size > MAX_VALUE_BYTES:
        raise InvalidConfig(
            f"a published value may take at most {MAX_VALUE_BYTES} bytes as JSON; "
            f"this one takes {size}: publish a reference to the data instead"
        )
    return text


def _value_of(text: Optional[str]) -> Any:
    """A published value read back: JSON decoded, and text another client
    wrote that is not JSON as the text itself."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class Session:
    """Many locks under one heartbeat: one renewal keeps them all, and when
    the session is lost every lock under it is lost at the same moment.

    ``with casaas.Session(store, "sessions/worker-1") as session:`` opens it
    (waiting like :meth:`Lease.acquire`) and closes it on exit;
    ``session.lock("locks/a")`` is a lock held under it. For asyncio,
    ``async with await casaas.Session.open_async(store, key) as session:``.

    Like a held lock, a session stays open until :meth:`close` (or the end
    of its block) or interpreter exit, not merely until Python drops it;
    dropping it open warns with a :class:`ResourceWarning`.
    """

    _native: Any

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        ttl: Optional[Seconds] = None,
        wait: Optional[Seconds] = None,
        owner: Optional[str] = None,
        **options: Any,
    ) -> None:
        self._adopt(
            _casaas.Session.open(
                _resolve(store, options), key, owner, _seconds(ttl, "ttl"), _seconds(wait, "wait")
            )
        )

    def _adopt(self, native: Any) -> None:
        self._native = native
        _watch(self, native, f"session {native.key!r} (term {native.term})")

    @classmethod
    async def open_async(
        cls,
        store: Union[str, Store],
        key: str,
        *,
        ttl: Optional[Seconds] = None,
        wait: Optional[Seconds] = None,
        owner: Optional[str] = None,
        **options: Any,
    ) -> "Session":
        """Opens the session for asyncio (the store too, when ``store`` is a
        URL); cancelling the task cancels the wait."""
        t, w = _seconds(ttl, "ttl"), _seconds(wait, "wait")
        opened = await _resolve_async(store, options)
        native = await _run(lambda: _casaas.Session.open_start(opened, key, owner, t, w))
        session = cls.__new__(cls)
        session._adopt(native)
        return session

    @property
    def term(self) -> int:
        """The session's term (its heartbeat's fencing token)."""
        term: int = self._native.term
        return term

    @property
    def lost(self) -> bool:
        """True once the session is no longer held."""
        return not self._native.is_held()

    def lease(self, key: str) -> Lease:
        """A lease on ``key`` held under this session."""
        lease = Lease.__new__(Lease)
        lease._native = self._native.lease(key)
        return lease

    def lock(self, key: str, wait: Optional[Seconds] = None) -> Lock:
        """A lock on ``key`` under this session (``with session.lock(k):``)."""
        return Lock(self.lease(key), wait)

    def held_locks(self) -> int:
        """Locks held under the session now."""
        n: int = self._native.held_locks()
        return n

    def ensure_held_for(self, seconds: Seconds) -> None:
        """Raises unless the session is held with ``seconds`` of validity left."""
        self._native.ensure_held_for(_required(seconds, "seconds"))

    def close(self) -> None:
        """Closes the session: every lock under it ends."""
        _forget(self._native)
        self._native.close()

    async def close_async(self) -> None:
        """:meth:`close` for asyncio."""
        _forget(self._native)
        await _run(self._native.close_start)

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _finish(self.close, exc)

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _finish_async(self.close_async, exc)


class Leadership:
    """A won election (a term). Resigns on leaving a ``with`` (or ``async
    with``) block. Like a held lock, the term lasts until :meth:`resign` or
    interpreter exit, not merely until Python drops this object (which
    warns with a :class:`ResourceWarning`)."""

    def __init__(self, native: Any) -> None:
        self._native = native
        _watch(self, native, f"term (token {native.token})")

    @property
    def token(self) -> int:
        """The term's fencing token."""
        token: int = self._native.token
        return token

    @property
    def value(self) -> Any:
        """The value this term publishes, or ``None``."""
        return _value_of(self._native.value)

    def proclaim(self, value: Any) -> None:
        """Publishes ``value`` (JSON-able, at most :data:`MAX_VALUE_BYTES`
        as JSON) with this term, without a new election: :meth:`Election.leader`
        and :meth:`Election.observe` report it. Raises :class:`LeaseLost`
        once the term has ended."""
        self._native.proclaim(_value_text(value))

    async def proclaim_async(self, value: Any) -> None:
        """:meth:`proclaim` for asyncio."""
        text = _value_text(value)
        await _run(lambda: self._native.proclaim_start(text))

    @property
    def lost(self) -> bool:
        """True once the term has ended."""
        return not self._native.is_held()

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the term has ended."""
        self._native.ensure_held_for(0.0)

    def ensure_held_for(self, seconds: Seconds) -> None:
        """Raises unless the term lasts at least ``seconds`` more."""
        self._native.ensure_held_for(_required(seconds, "seconds"))

    def resign(self) -> None:
        """Ends the term (the next leader's token is greater)."""
        _forget(self._native)
        self._native.resign()

    async def resign_async(self) -> None:
        """:meth:`resign` for asyncio."""
        _forget(self._native)
        await _run(self._native.resign_start)

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _finish(self.resign, exc)

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _finish_async(self.resign_async, exc)


def _leader(got: Optional["tuple[str, int, Optional[str]]"]) -> Optional[Leader]:
    return None if got is None else Leader(got[0], got[1], _value_of(got[2]))


class Election:
    """Leader election on one key: :meth:`campaign` until elected,
    :meth:`leader` to observe, :meth:`Leadership.resign` to step down."""

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        ttl: Optional[Seconds] = None,
        owner: Optional[str] = None,
        value: Any = None,
        **options: Any,
    ) -> None:
        self._native = _casaas.Election(
            Lease(store, key, ttl=ttl, owner=owner, value=value, **options)._native
        )

    def campaign(self, wait: Optional[Seconds] = None) -> Leadership:
        """Campaigns until elected (``wait=None``) or for at most ``wait``
        (then :class:`Timeout`). Ctrl-C cancels the campaign cleanly."""
        return Leadership(self._native.campaign(_seconds(wait, "wait")))

    async def campaign_async(self, wait: Optional[Seconds] = None) -> Leadership:
        """:meth:`campaign` for asyncio; cancelling the task cancels the
        campaign (a term won at that moment is resigned)."""
        w = _seconds(wait, "wait")
        return Leadership(await _run(lambda: self._native.campaign_start(w)))

    def leader(self) -> Optional[Leader]:
        """The leader by the record, one read: ``None`` when nobody leads
        (never elected, or resigned). A leader that stopped renewing is
        still named until another takes over after its TTL;
        :meth:`observe` reports it gone once it has seen the record
        unchanged for the TTL."""
        return _leader(self._native.leader())

    async def leader_async(self) -> Optional[Leader]:
        """:meth:`leader` for asyncio."""
        return _leader(await _run(self._native.leader_start))

    def observe(self, timeout: Optional[Seconds] = None) -> Iterator[Optional[Leader]]:
        """Yields the current leader, then every change (``None`` when
        nobody leads: resigned, or seen unchanged for its TTL, so an
        expired holder is reported gone a TTL after observing starts at
        the latest). The first value is a read of the record, never a
        placeholder. Stops after ``timeout`` without a change (``None``:
        never). Reading only; the record is polled while the iterator
        lives."""
        limit = _seconds(timeout, "timeout")
        observer = self._native.observe()
        seen = observer.first()
        yield _leader(seen)
        while True:
            changed, seen = observer.next(seen, limit)
            if not changed:
                return
            yield _leader(seen)

    async def observe_async(self, timeout: Optional[Seconds] = None) -> AsyncIterator[Optional[Leader]]:
        """:meth:`observe` for asyncio (``async for leader in ...``)."""
        limit = _seconds(timeout, "timeout")
        observer = self._native.observe()
        seen = await _run(observer.first_start)
        yield _leader(seen)
        while True:
            changed, seen = await _run(lambda: observer.next_start(seen, limit))
            if not changed:
                return
            yield _leader(seen)


class RunnerTerm:
    """A term as the leader's work sees it (see :class:`ElectionRunner`):
    its fencing :attr:`token`, and whether the work must stop."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def token(self) -> int:
        """The term's fencing token: pass it with every write the leader makes."""
        token: int = self._native.token
        return token

    @property
    def stopping(self) -> bool:
        """True once the work must stop: the term is lost or the runner stops."""
        stopping: bool = self._native.stopping
        return stopping

    def wait(self, timeout: Optional[Seconds] = None) -> bool:
        """Sleeps until the work must stop (``True``) or ``timeout`` has
        passed (``False``; ``None``: no limit). The GIL is released."""
        stop: bool = self._native.wait(_seconds(timeout, "timeout"))
        return stop

    def __repr__(self) -> str:
        return f"<casaas.RunnerTerm token={self.token}{' stopping' if self.stopping else ''}>"


# Runners started in the background, stopped (and their terms resigned) at
# interpreter exit.
_RUNNERS: "weakref.WeakSet[ElectionRunner]" = weakref.WeakSet()


class ElectionRunner:
    """Campaigns, leads while elected, steps down when the term is lost and
    campaigns again: Kubernetes' leader elector over :class:`Election`,
    with the Rust ``ElectionRunner``'s guarantees.

    - ``on_started_leading(term)`` is the leader's work, called on a thread
      of its own when a term begins, with a :class:`RunnerTerm`. It must
      return soon after ``term.stopping`` becomes true (``term.wait()``
      sleeps until then): the term is lost, or the runner stops. A work
      that returns by itself ends the run: the term is resigned and
      :meth:`run` returns.
    - ``on_stopped_leading(reason)`` runs after the work has returned and
      the term has ended: ``"released"`` after a resignation, otherwise why
      the term was lost. The lease is never released while the work runs,
      so the next leader never starts beside it.
    - ``on_new_leader(leader)`` runs at each change of leader seen (a
      :class:`Leader`, ``None`` when nobody leads), this runner's included.
    - After a loss the runner campaigns again, unless ``recampaign=False``
      (then :meth:`run` returns after the first term).

    The first exception a callback raises stops the run (the work is told
    to stop and awaited, the term resigned) and is raised by :meth:`run`.
    Callbacks run on casaas's threads, never on one that renews leases.

    :meth:`run` blocks (Ctrl-C stops it cleanly: the work is stopped, the
    term resigned, then ``KeyboardInterrupt`` is raised); :meth:`run_async`
    is its asyncio form; :meth:`start` runs it on a thread and
    :meth:`stop` (or leaving a ``with`` block) stops it and waits. A runner
    runs once: after :meth:`stop`, make a new one.
    """

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        on_started_leading: Optional[Callable[[RunnerTerm], None]] = None,
        on_stopped_leading: Optional[Callable[[str], None]] = None,
        on_new_leader: Optional[Callable[[Optional[Leader]], None]] = None,
        recampaign: bool = True,
        ttl: Optional[Seconds] = None,
        owner: Optional[str] = None,
        value: Any = None,
        **options: Any,
    ) -> None:
        for name, fn in (
            ("on_started_leading", on_started_leading),
            ("on_stopped_leading", on_stopped_leading),
            ("on_new_leader", on_new_leader),
        ):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, not {type(fn).__name__}")
        self._lease = Lease(store, key, ttl=ttl, owner=owner, value=value, **options)
        self._native = _casaas.ElectionRunner(self._lease._native)
        self._stop = _casaas.RunnerStop()
        self._started = on_started_leading
        self._stopped = on_stopped_leading
        self._new_leader = on_new_leader
        self._recampaign = bool(recampaign)
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    @property
    def key(self) -> str:
        """The election's key."""
        return self._lease.key

    @property
    def owner(self) -> str:
        """The owner id this runner campaigns as."""
        return self._lease.owner

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        stopped: bool = self._stop.stopped
        return stopped

    def _callbacks(self) -> "tuple[Any, Any, Any]":
        started, new_leader = self._started, self._new_leader

        def work(native: Any) -> None:
            assert started is not None
            started(RunnerTerm(native))

        def leader(raw: Optional["tuple[str, int, Optional[str]]"]) -> None:
            assert new_leader is not None
            new_leader(_leader(raw))

        return (
            None if started is None else work,
            self._stopped,
            None if new_leader is None else leader,
        )

    def run(self, timeout: Optional[Seconds] = None) -> None:
        """Runs until :meth:`stop`, ``timeout`` (then stops as :meth:`stop`
        does), the work returning by itself, a callback raising (raised
        here) or, with ``recampaign=False``, the end of the first term."""
        t = _seconds(timeout, "timeout")
        started, stopped, new_leader = self._callbacks()
        self._native.run(self._stop, started, stopped, new_leader, self._recampaign, t)

    async def run_async(self, timeout: Optional[Seconds] = None) -> None:
        """:meth:`run` for asyncio; cancelling the task stops the run (the
        work is stopped and the term resigned on casaas's threads)."""
        t = _seconds(timeout, "timeout")
        started, stopped, new_leader = self._callbacks()
        await _run(
            lambda: self._native.run_start(
                self._stop, started, stopped, new_leader, self._recampaign, t
            )
        )

    def start(self) -> "ElectionRunner":
        """Runs :meth:`run` on a thread of its own and returns at once."""
        if self._thread is not None:
            raise RuntimeFailure("this runner was started already: make a new one")

        def background() -> None:
            try:
                self.run()
            except BaseException as e:  # noqa: BLE001 - raised again by stop()
                self._error = e
                _log.error("election runner for %r stopped: %s: %s", self.key, type(e).__name__, e)

        self._thread = threading.Thread(
            target=background, name=f"casaas-runner-{self.key}", daemon=True
        )
        _RUNNERS.add(self)
        self._thread.start()
        return self

    def stop(self, timeout: Optional[Seconds] = None) -> None:
        """Stops the run: the work is told to stop and awaited, the term
        resigned. Waits for a run :meth:`start` began (at most ``timeout``,
        ``None``: no limit) and raises what it raised."""
        self._stop.stop()
        thread = self._thread
        if thread is None:
            return
        thread.join(_seconds(timeout, "timeout"))
        if thread.is_alive():
            raise Timeout(f"the election runner for {self.key!r} has not stopped yet")
        _RUNNERS.discard(self)
        error, self._error = self._error, None
        if error is not None:
            raise error

    @property
    def running(self) -> bool:
        """True while a run :meth:`start` began is still going."""
        return self._thread is not None and self._thread.is_alive()

    def check_health(self, tolerance: Seconds = 0) -> Optional[str]:
        """For a liveness probe: ``None`` when healthy (not leading, or
        leading with the lease's renewal alive and its last success within
        the renew deadline, plus ``tolerance``), otherwise what is wrong."""
        problem: Optional[str] = self._native.check_health(_required(tolerance, "tolerance"))
        return problem

    def __enter__(self) -> "ElectionRunner":
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.stop()
        except Exception as e:
            if exc is None:
                raise
            _note(exc, e)


@atexit.register
def _stop_runners_at_exit() -> None:
    """Stops runners still going at interpreter exit (their terms
    resigned), within ``_EXIT_BOUND`` seconds in all; registered after the
    holdings' release, so it runs before it."""
    runners = list(_RUNNERS)
    deadline = time.monotonic() + _EXIT_BOUND
    for runner in runners:
        runner._stop.stop()
    for runner in runners:
        thread = runner._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))


def run_election(
    url: Union[str, Store],
    key: Optional[str] = None,
    *,
    on_started_leading: Optional[Callable[[RunnerTerm], None]] = None,
    on_stopped_leading: Optional[Callable[[str], None]] = None,
    on_new_leader: Optional[Callable[[Optional[Leader]], None]] = None,
    recampaign: bool = True,
    timeout: Optional[Seconds] = None,
    ttl: Optional[Seconds] = None,
    owner: Optional[str] = None,
    value: Any = None,
    **options: Any,
) -> None:
    """Runs an :class:`ElectionRunner` until it stops: ``url`` names the
    election as :func:`lock` names a lock (or pass a store and ``key``).
    Blocks; Ctrl-C stops it cleanly (the work stopped, the term resigned)."""
    target, name = _store_and_key(url, key, options)
    ElectionRunner(
        target,
        name,
        on_started_leading=on_started_leading,
        on_stopped_leading=on_stopped_leading,
        on_new_leader=on_new_leader,
        recampaign=recampaign,
        ttl=ttl,
        owner=owner,
        value=value,
        **options,
    ).run(timeout)


class Fenced(NamedTuple):
    """A fenced resource's value and the highest token it has accepted."""

    value: Any
    token: int


class LogEntry(NamedTuple):
    """One record of a fenced log: entry ``seq`` (from 1), its place
    ``offset`` in the entry (group commit writes several), the writer's
    token and the value."""

    seq: int
    offset: int
    token: int
    value: Any


# Integers the native side keeps exactly (serde_json's i64 and u64).
_INT_RANGE = (-(2**63), 2**64 - 1)


def _dumps(value: Any) -> str:
    """``value`` as JSON text, refusing what would not come back as it went:
    integers beyond 64 bits (stored as floats otherwise). Objects come back
    with their keys sorted: the native side holds values as serde_json's,
    whose objects are ordered by key."""
    _check_ints(value)
    return json.dumps(value)


def _check_ints(value: Any) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise InvalidConfig(
                f"the integer {value} does not fit 64 bits and would not be kept exactly: "
                "store it as a string"
            )
    elif isinstance(value, dict):
        for v in value.values():
            _check_ints(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_ints(v)


def _entry(raw: "tuple[int, int, int, str]") -> LogEntry:
    return LogEntry(raw[0], raw[1], raw[2], json.loads(raw[3]))


class FencedResource:
    """A JSON value whose every write is refused (:class:`FencedOut`) from a
    token lower than the highest one it has accepted: a holder paused past
    its lease cannot overwrite its successor's work."""

    def __init__(self, store: Union[str, Store], key: str, **options: Any) -> None:
        self._native = _casaas.FencedResource(_resolve(store, options), key)

    def read(self) -> Optional[Fenced]:
        """The value and token, or ``None`` when never written."""
        got = self._native.read()
        return None if got is None else Fenced(json.loads(got[0]), got[1])

    def write(self, token: int, value: Any) -> Fenced:
        """Writes ``value`` (JSON-encodable) under ``token``."""
        got = self._native.write(token, _dumps(value))
        return Fenced(json.loads(got[0]), got[1])

    async def read_async(self) -> Optional[Fenced]:
        """:meth:`read` for asyncio."""
        got = await _run(self._native.read_start)
        return None if got is None else Fenced(json.loads(got[0]), got[1])

    async def write_async(self, token: int, value: Any) -> Fenced:
        """:meth:`write` for asyncio. Cancelling the task abandons the write
        where it is: it may or may not land (read before writing again)."""
        data = _dumps(value)
        got = await _run(lambda: self._native.write_start(token, data))
        return Fenced(json.loads(got[0]), got[1])

    def grouped(
        self, *, max_queued: Optional[int] = None, max_batch_records: Optional[int] = None
    ) -> "GroupResource":
        """A group-commit handle on this resource: updates from many threads
        share one conditional write (see :class:`GroupResource`). Share the
        handle between the threads; each call makes a queue of its own."""
        return GroupResource._on(self, max_queued, max_batch_records)


class Applied(NamedTuple):
    """A group update that landed: the ``value`` right after it (later
    updates of the same batch may have changed it since), the ``token`` its
    batch was fenced with (the one it was submitted with), its ``offset``
    in the batch (from 0) and the batch's length ``batch_len``."""

    value: Any
    token: int
    offset: int
    batch_len: int


def _applied(raw: "tuple[str, int, int, int]") -> Applied:
    return Applied(json.loads(raw[0]), raw[1], raw[2], raw[3])


def _count(value: Optional[int], name: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfig(f"{name} must be a positive int, not {value!r}")
    return value


def _json_update(fn: Callable[[Any], Any]) -> Callable[[Optional[str]], str]:
    """``fn`` on values as the native module passes them: JSON text."""

    def call(old: Optional[str]) -> str:
        return json.dumps(fn(None if old is None else json.loads(old)))

    return call


class GroupTicket:
    """A queued group update (see :meth:`GroupResource.submit`)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def wait(self) -> Applied:
        """Waits until the write carrying the update has landed, then answers
        as :meth:`GroupResource.update` (raising as it does)."""
        return _applied(self._native.wait())

    def cancel(self) -> bool:
        """Removes the update if it is still queued: ``True``, it is never
        written. ``False`` when its batch was already sealed: it may still be
        applied, with the rest of its batch; :meth:`wait` to learn."""
        removed: bool = self._native.cancel()
        return removed


class GroupResource:
    """A :class:`FencedResource` with group commit: updates from many threads
    of this process are applied in queue order and written together, one
    conditional write per batch, with the same fencing and exactly-once as
    one update per write. A store takes only a few conditional writes per
    second on one object; a batch makes many updates one of them.

    ``GroupResource(store, key)`` or ``resource.grouped()``. At most
    ``max_queued`` updates (default 4096) wait for a batch, a caller beyond
    that waits for room; at most ``max_batch_records`` (default 1024) go in
    one write. A batch carries updates of one token: an update with another
    token waits for the next batch.

    The update function ``fn(value) -> new value`` runs on casaas's thread
    (holding the GIL), once per attempt of its batch's write; only one
    result is ever stored. It must not call casaas itself. If it raises,
    the value is left as it was for that attempt (the rest of the batch
    still applies; an absent value becomes ``null``) and the exception is
    raised to its caller: the update was not applied. One that raised in
    some attempts only raises :class:`MayHaveTakenEffect`. Errors are the batch's: :class:`FencedOut` for every
    update of a deposed holder's batch, :class:`MayHaveTakenEffect` when the
    whole batch may or may not have been applied.
    """

    def __init__(
        self,
        store: Union[str, Store],
        key: str,
        *,
        max_queued: Optional[int] = None,
        max_batch_records: Optional[int] = None,
        **options: Any,
    ) -> None:
        self.resource = FencedResource(store, key, **options)
        """The resource, for reads and single writes."""
        self._native = _casaas.GroupResource(
            self.resource._native,
            _count(max_queued, "max_queued"),
            _count(max_batch_records, "max_batch_records"),
        )

    @classmethod
    def _on(
        cls,
        resource: FencedResource,
        max_queued: Optional[int],
        max_batch_records: Optional[int],
    ) -> "GroupResource":
        group = cls.__new__(cls)
        group.resource = resource
        group._native = _casaas.GroupResource(
            resource._native,
            _count(max_queued, "max_queued"),
            _count(max_batch_records, "max_batch_records"),
        )
        return group

    def read(self) -> Optional[Fenced]:
        """The value and token, or ``None`` when never written."""
        return self.resource.read()

    def update(self, token: int, fn: Callable[[Any], Any]) -> Applied:
        """Applies ``fn`` (the current value, ``None`` when absent, to the new
        JSON-encodable value) in the next batch fenced by ``token``; returns
        once that batch's write has landed. The GIL is released while it
        waits. Ctrl-C abandons the wait: an update still queued is removed,
        one already in a sealed batch may still be applied."""
        return _applied(self._native.update(token, _json_update(fn)))

    def submit(self, token: int, fn: Callable[[Any], Any]) -> GroupTicket:
        """Queues ``fn`` as :meth:`update` does (waiting while the queue is
        full) and returns at once with its ticket: one thread can queue many
        updates, then wait on each ticket. A ticket dropped before its batch
        is sealed removes its update."""
        return GroupTicket(self._native.submit(token, _json_update(fn)))


class FencedLog:
    """An append-only log of JSON records under ``prefix``: each append
    creates the next entry exactly once, refused (:class:`FencedOut`) from
    a token lower than the latest entry's."""

    def __init__(self, store: Union[str, Store], prefix: str, **options: Any) -> None:
        self._native = _casaas.FencedLog(_resolve(store, options), prefix)

    def append(self, token: int, value: Any, *, grouped: bool = False) -> LogEntry:
        """Appends ``value``. With ``grouped=True``, concurrent appends from
        several threads share one conditional write (group commit)."""
        data = _dumps(value)
        raw = (
            self._native.append_grouped(token, data)
            if grouped
            else self._native.append(token, data)
        )
        return _entry(raw)

    def read(self, seq: int) -> List[LogEntry]:
        """The records of entry ``seq`` (empty when absent)."""
        return [_entry(r) for r in self._native.read(seq)]

    def entries(self, start: int = 1) -> List[LogEntry]:
        """Every record from entry ``start`` on."""
        return [_entry(r) for r in self._native.entries(start)]

    def latest_seq(self) -> Optional[int]:
        """The latest entry's number, or ``None`` when the log is empty."""
        seq: Optional[int] = self._native.latest_seq()
        return seq

    async def append_async(self, token: int, value: Any, *, grouped: bool = False) -> LogEntry:
        """:meth:`append` for asyncio. Cancelling the task abandons the
        append where it is: it may or may not land."""
        data = _dumps(value)
        begin = self._native.append_grouped_start if grouped else self._native.append_start
        return _entry(await _run(lambda: begin(token, data)))

    async def read_async(self, seq: int) -> List[LogEntry]:
        """:meth:`read` for asyncio."""
        return [_entry(r) for r in await _run(lambda: self._native.read_start(seq))]

    async def entries_async(self, start: int = 1) -> List[LogEntry]:
        """:meth:`entries` for asyncio."""
        return [_entry(r) for r in await _run(lambda: self._native.entries_start(start))]

    async def latest_seq_async(self) -> Optional[int]:
        """:meth:`latest_seq` for asyncio."""
        seq: Optional[int] = await _run(self._native.latest_seq_start)
        return seq


def create_once(
    store: Union[str, Store],
    key: str,
    make_body: Callable[[str], bytes],
    nonce_in: Callable[[bytes], Optional[str]],
    **options: Any,
) -> bool:
    """Creates ``key`` exactly once, in the caller's format.

    ``make_body(nonce)`` returns the body carrying ``nonce``;
    ``nonce_in(body)`` finds the nonce in a stored body (``None`` when it
    carries none). Returns True when our body holds the key, False when
    another writer's does. A lost answer is settled by reading the key
    back; while a write of ours may still land, raises
    :class:`MayHaveTakenEffect`.
    """
    created: bool = _casaas.create_once(_resolve(store, options), key, make_body, nonce_in)
    return created



def _utc(unix_ms: Optional[int]) -> Optional[datetime.datetime]:
    if unix_ms is None:
        return None
    return datetime.datetime.fromtimestamp(unix_ms / 1000, tz=datetime.timezone.utc)


class LockEntry(NamedTuple):
    """One object under a prefix, as :func:`list_locks` (and ``casaas
    ls``) shows it."""

    key: str
    """The key, relative to the listed prefix."""
    state: str
    """``held``, ``waiting`` (a fair-mode queue ticket whose waiter is live:
    a waiter, not a holder), ``expired`` (its holder's last write plus its
    TTL is past on this machine's clock; advisory), ``released``,
    ``foreign`` (not a casaas lock) or ``unknown`` (a lock under a session
    whose heartbeat cannot be read from here)."""
    holder: Optional[str]
    """Who holds (or last held, or waits in) it; ``None`` for a foreign object."""
    token: Optional[int]
    """The fencing token of the holding."""
    ttl: Optional[float]
    """The holder's TTL in seconds."""
    acquired_at: Optional[datetime.datetime]
    """The holder's wall clock at acquisition (UTC, advisory)."""
    renewed_at: Optional[datetime.datetime]
    """The holder's wall clock at its last write (UTC, advisory)."""
    version: str
    """The object's version as read (for the ``epochs`` layout, its epoch)."""
    layout: Optional[str]
    """``record`` or ``epochs`` (the create-only layout); ``None`` for a
    foreign object."""
    waiting_for: Optional[str] = None
    """For a fair-mode queue ticket: the key of the lock it waits for."""
    found: Optional[str] = None
    """What a foreign object starts with."""
    session: Optional[str] = None
    """The heartbeat key of the session the lock is held under (as the
    lock names it when it lies above the store's root)."""
    session_term: Optional[int] = None
    """The session term the lock names."""
    session_state: Optional[str] = None
    """What the heartbeat says of that term: ``alive``, ``expired``,
    ``released``, ``superseded``, ``missing`` or ``unreadable``; ``None``
    for a released lock, whose session is not read."""


def _lock_entry(raw: Any) -> LockEntry:
    key, state, holder, token, ttl, acquired, renewed, version, layout, waiting_for, found, session = raw
    name, term, liveness = session if session is not None else (None, None, None)
    return LockEntry(
        key,
        state,
        holder,
        token,
        ttl,
        _utc(acquired),
        _utc(renewed),
        version,
        layout,
        waiting_for,
        found,
        name,
        term,
        liveness,
    )


def list_locks(url: Union[str, Store], *, prefix: str = "", **options: Any) -> List[LockEntry]:
    """Every lock under a prefix, as ``casaas ls`` lists it: one
    :class:`LockEntry` per object, sorted by key; each object is read once
    and nothing is written.

    ``url`` is a prefix URL (the directory that holds the locks, as for
    :func:`open`: ``s3://bucket/locks``), with ``options`` beside it, or an
    open :class:`Store`; ``prefix`` lists only the keys under it. A lock
    held under a session is judged by its session's heartbeat; a heartbeat
    above the store's root cannot be read, and such a lock is ``unknown``
    (list from the directory that holds both). The store guard's objects
    are left out; a read-write lock's reader slots and a semaphore's slots
    are leases of their own, listed as such.
    """
    store = _resolve(url, options)
    return [_lock_entry(r) for r in _casaas.list_locks(store, prefix)]


async def list_locks_async(url: Union[str, Store], *, prefix: str = "", **options: Any) -> List[LockEntry]:
    """:func:`list_locks` for asyncio."""
    store = await _resolve_async(url, options)
    rows = await _run(lambda: _casaas.list_locks_start(store, prefix))
    return [_lock_entry(r) for r in rows]


def lance_commit_lock(
    url: Union[str, Store],
    key: Optional[str] = None,
    *,
    ttl: Optional[Seconds] = 30,
    wait: Optional[Seconds] = 120,
    min_validity: Optional[Seconds] = None,
    owner: Optional[str] = None,
    **options: Any,
) -> Callable[[int], contextlib.AbstractContextManager[None]]:
    """A commit lock for Lance: ``lance.write_dataset(..., commit_lock=lock)``
    and ``LanceDataset.commit(..., commit_lock=lock)``.

    Lance calls it with the version it is about to commit and holds the
    returned context manager while it checks that the version's manifest is
    absent and writes it. The lock makes that check-then-write exclusive
    across processes on a store where Lance's own conditional put is refused
    or ignored. On entry the lock must be held with at least
    ``min_validity`` left (the time a manifest write may take; default a
    third of ``ttl``, and it must stay well below ``ttl``); a lock not
    acquired within ``wait`` raises Lance's ``CommitConflictError``, which
    Lance answers by reloading and retrying. So does any failure to acquire
    that a retry may cure (throttled, unreachable, contended): nothing of
    the commit is written yet. Refused credentials and an unsafe store
    raise as they are.

    A landed commit is never reported as failed: once Lance's body ran, an
    error of the lock's release is logged (logger ``casaas``) and not
    raised; the lock then expires after its TTL. The first commit of a new
    dataset is not retried by Lance: writers creating it at once get
    Lance's ``OSError`` "Dataset already exists" but one; create the
    dataset once first, or append again on that error (docs/python.md).

    What stays unfenced: Lance writes the manifest itself, so a holder that
    pauses past its TTL *during* that write can still land it after a
    successor has committed. ``min_validity`` and the lease's drift margin
    narrow the window; they cannot close it. See docs/python.md.
    """
    target, name = _store_and_key(url, key, options)
    store = _resolve(target, options)
    lease = Lease(store, name, ttl=ttl, owner=owner)
    lease_ttl = lease._native.ttl
    need = lease_ttl / 3 if min_validity is None else _required(min_validity, "min_validity")
    if need >= lease_ttl * 0.9:
        raise InvalidConfig(
            f"min_validity ({need} s) must be well below the lock's ttl ({lease_ttl} s): "
            "raise ttl or lower min_validity"
        )

    @contextlib.contextmanager
    def commit_lock(version: int) -> Iterator[None]:
        from lance.commit import CommitConflictError

        try:
            held = lease.acquire(wait)
        except (Unauthorized, UnsafeStore, Unsupported):
            raise  # no retry can help: Lance's retries would only repeat it
        except (LockHeld, StoreError, Contended, Timeout) as e:
            # Nothing of this commit is written yet: Lance reloads and retries.
            raise CommitConflictError(
                f"version {version}: the commit lock was not acquired: {e}"
            ) from e
        body_ran = False
        try:
            try:
                held.ensure_held_for(need)
            except (LeaseLost, InsufficientValidity) as e:
                raise CommitConflictError(
                    f"version {version}: the commit lock may not last the commit: {e}"
                ) from e
            body_ran = True
            yield
        finally:
            try:
                held.release()
            except Error as e:
                # Never raised: once Lance's body ran, its manifest may be
                # written, and an error here would make Lance report a landed
                # commit as failed (a caller that retries appends twice). The
                # lock expires after its TTL; the next holder's token is
                # higher and Lance's existence check sees this manifest.
                _log.warning(
                    "lance commit of version %d: the commit lock's release failed (%s); "
                    "it expires after its TTL%s",
                    version,
                    e,
                    "" if body_ran else " (nothing was committed)",
                )

    return commit_lock


class Probe(NamedTuple):
    """One check of :func:`doctor` or :func:`conformance`."""

    name: str
    """A stable id (``create_conflict``, ``lease_protocol``, ...); the store
    guard's checks are named ``guard.NAME``."""
    severity: str
    """``critical`` (a failure makes the store unsafe for leases),
    ``warning`` or ``info``."""
    outcome: str
    """``pass``, ``fail``, ``note``, ``unsupported`` or ``error``."""
    detail: str
    """What was observed, in a sentence or two."""
    evidence: Dict[str, Any]
    """The facts behind the outcome (statuses, error codes, counts,
    timings)."""


class Verdict:
    """What :func:`doctor` or :func:`conformance` found about a store.

    ``verdict`` is ``"safe"``, ``"not_safe"`` or ``"inconclusive"`` (a
    critical check could not complete); ``safe`` is ``verdict == "safe"``;
    ``summary`` is the verdict line the command prints; ``probes`` lists
    every check. ``json`` (and :meth:`to_json`) is the report the command
    prints with ``--format json`` (``casaas doctor``, ``casaas
    conformance``), secrets redacted; ``exit_code`` is the command's
    exit status for it (0, 1 or 3).
    """

    __slots__ = ("verdict", "summary", "probes", "json", "_data")

    verdict: str
    summary: str
    probes: List[Probe]
    json: str

    def __init__(self, verdict: str, report_json: str) -> None:
        data: Dict[str, Any] = json.loads(report_json)
        self.verdict = verdict
        self.json = report_json
        self._data = data
        probes: List[Probe] = []
        guard = data.get("guard")
        if isinstance(guard, dict):
            # doctor: the guard's checks, then the probes' report.
            for check in guard.get("checks", []):
                probes.append(
                    Probe(
                        f"guard.{check['name']}",
                        "critical",
                        "pass" if check["passed"] else "fail",
                        check["detail"],
                        {},
                    )
                )
            report: Dict[str, Any] = data.get("report") or {}
            self.summary = str(data.get("verdict", ""))
        else:
            report = data
            self.summary = str(data.get("summary", ""))
        for p in report.get("probes", []):
            probes.append(
                Probe(p["id"], p["severity"], p["verdict"], p["detail"], dict(p.get("evidence", {})))
            )
        self.probes = probes

    @property
    def safe(self) -> bool:
        """Whether the store is safe for leases (possibly with the
        recommended options)."""
        return self.verdict == "safe"

    @property
    def exit_code(self) -> int:
        """The command's exit status for this verdict: 0 safe, 1 not safe,
        3 inconclusive."""
        return {"safe": 0, "not_safe": 1}.get(self.verdict, 3)

    @property
    def recommended_options(self) -> List[str]:
        """casaas options (``name=value``) the store needs to be safe."""
        report = self._data.get("report") if "guard" in self._data else self._data
        return [str(r["option"]) for r in (report or {}).get("recommended_options", [])]

    def failed(self) -> List[Probe]:
        """The critical checks that did not pass: why the store is not safe
        (or why the verdict is inconclusive)."""
        return [p for p in self.probes if p.severity == "critical" and p.outcome not in ("pass", "note")]

    def to_dict(self) -> Dict[str, Any]:
        """The JSON report as a dict (a fresh copy)."""
        out: Dict[str, Any] = json.loads(self.json)
        return out

    def to_json(self) -> str:
        """The JSON report, as the command prints it."""
        return self.json

    def __bool__(self) -> bool:
        return self.safe

    def __repr__(self) -> str:
        return f"<casaas.Verdict {self.verdict}: {self.summary}>"


def doctor(
    url: str,
    *,
    guard_deadline: Optional[Seconds] = None,
    **options: Any,
) -> Verdict:
    """Checks whether the store ``url`` names is safe for leases, as
    ``casaas doctor`` does: the store guard (a few conditional writes,
    retried for at most ``guard_deadline``, 30 s by default, while the
    store's answers are ambiguous), then the quick probes. Takes seconds on
    a healthy store.

    ``options`` go beside the URL as for :func:`open` (credentials among
    them). A ``file://`` store must exist: the doctor creates no directory.
    Returns a :class:`Verdict`; raises only when no check could run (an
    unreachable store, bad credentials, a malformed URL), as
    :class:`InvalidUrl`, :class:`Unauthorized` or :class:`StoreError`.
    The GIL is released while it runs; Ctrl-C abandons the run (the
    objects it wrote under its own prefix may stay behind).
    """
    verdict, report = _casaas.doctor(url, _options(options), _seconds(guard_deadline, "guard_deadline"))
    return Verdict(verdict, report)


def conformance(
    url: str,
    quick: bool = True,
    *,
    only: Optional[List[str]] = None,
    **options: Any,
) -> Verdict:
    """Runs the conformance suite of ``casaas conformance`` on the store
    ``url`` names: every probe of conditional-write semantics, races,
    throttling, latency and the lease protocol, with the quick settings
    (``--quick``: fewer race rounds, shorter budgets) unless
    ``quick=False``.
    ``only`` runs the named probes alone (an unknown name raises
    :class:`InvalidConfig` before the store is touched).

    The suite writes under a fresh key prefix of the store and removes what
    it wrote; recommended options are proven by running the probes they
    affect again with them. ``options`` go beside the URL as for
    :func:`open`. Returns a :class:`Verdict` whose ``json`` is the
    command's ``--format json`` report (schema in docs/conformance.md). The GIL is
    released while it runs; Ctrl-C abandons the run (its prefix may keep
    the objects written so far).
    """
    verdict, report = _casaas.conformance(url, _options(options), quick, list(only or []))
    return Verdict(verdict, report)
