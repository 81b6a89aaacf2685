//! The native module of the `casaas` Python package (`casaas._casaas`).
//!
//! Thin bindings over the `casaas` crate: every protocol runs in Rust, on a
//! tokio runtime of the module's own, with the GIL released while Python
//! waits. The Python package (`python/casaas`) wraps these classes in the
//! Pythonic API (context managers, `timedelta`, asyncio) and holds the
//! exception hierarchy this module raises.

mod doctor;
mod errors;
mod fair;
mod group;
mod listing;
mod runner;
mod runtime;
mod rwlock;
mod semaphore;
mod swap;
mod values;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use casaas::lease::WaitOptions;
use casaas::{CasStore, LeaseConfig, LeaseGuard};
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use errors::{Attr, Fail, invalid_argument};
use runtime::{Birth, Task, drop_in_runtime, start, wait};

/// Seconds from Python as a duration.
fn seconds(value: f64, what: &str) -> Result<Duration, Fail> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        invalid_argument(format!(
            "{what} must be a finite, non-negative number of seconds (got {value})"
        ))
    })
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An open store (see `casaas.open`).
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Store {
    store: Arc<dyn CasStore>,
    birth: Birth,
}

impl Store {
    fn get(&self) -> Result<Arc<dyn CasStore>, Fail> {
        self.birth.check("store")?;
        Ok(self.store.clone())
    }
}

#[pymethods]
impl Store {
    /// The store as a URL, without credentials.
    fn describe(&self) -> String {
        self.store.describe()
    }

    fn __repr__(&self) -> String {
        format!("<casaas.Store {}>", self.store.describe())
    }
}

async fn open_store(url: String, options: HashMap<String, String>) -> Result<Store, Fail> {
    let store = casaas::open_store_with(&url, options)
        .await
        .map_err(|e| match e.kind() {
            casaas::ErrorKind::Misconfigured | casaas::ErrorKind::InvalidInput => {
                Fail::Named("InvalidUrl", e.to_string(), Vec::new())
            }
            _ => Fail::Cas(e),
        })?;
    Ok(Store {
        store,
        birth: Birth::now(),
    })
}

/// Opens the store `url` names, with `options` (credentials among them)
/// beside it.
#[pyfunction]
fn open(py: Python<'_>, url: String, options: HashMap<String, String>) -> Result<Store, Fail> {
    wait(py, None, open_store(url, options))
}

/// `open` for asyncio.
#[pyfunction]
fn open_start(url: String, options: HashMap<String, String>) -> Result<Task, Fail> {
    start(None, open_store(url, options))
}

/// Splits a lock URL into the store URL of its directory and the lock's
/// key: the library's split, the one the `casaas` command uses (the key
/// decoded once; a trailing `/` or a `#fragment` refused).
#[pyfunction]
fn split_key(url: &str) -> Result<(String, String), Fail> {
    casaas::StoreUrl::split_lock_url(url).map_err(|e| {
        Fail::Named(
            "InvalidUrl",
            format!(
                "{}; or pass the store URL and key= (for example \
                 casaas.lock(\"s3://bucket/locks\", key=\"NAME\"))",
                e.message()
            ),
            Vec::new(),
        )
    })
}

/// A lease (lock) on one key of a store.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Lease {
    lease: casaas::Lease,
    birth: Birth,
}

#[pymethods]
impl Lease {
    /// A lease on `key` for `owner` (default `HOST/PID`) with a TTL of
    /// `ttl` seconds (default 15), publishing `value` (text) while held.
    #[new]
    #[pyo3(signature = (store, key, owner=None, ttl=None, value=None))]
    fn new(
        store: &Store,
        key: String,
        owner: Option<String>,
        ttl: Option<f64>,
        value: Option<String>,
    ) -> Result<Self, Fail> {
        let config = match ttl {
            Some(ttl) => LeaseConfig::from_ttl(seconds(ttl, "ttl")?),
            None => LeaseConfig::default(),
        };
        let owner = owner.unwrap_or_else(casaas::default_owner_id);
        let mut lease = casaas::Lease::new(store.get()?, key, owner, config)?;
        if let Some(value) = value {
            lease = lease.with_value(value)?;
        }
        Ok(Lease {
            lease,
            birth: Birth::now(),
        })
    }

    /// The value this lease publishes when it acquires, if any.
    #[getter]
    fn value(&self) -> Option<String> {
        self.lease.value().map(str::to_string)
    }

    /// The key.
    #[getter]
    fn key(&self) -> String {
        self.lease.key().to_string()
    }

    /// The owner id written in the record.
    #[getter]
    fn owner(&self) -> String {
        self.lease.owner().to_string()
    }

    /// The TTL, seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.lease.config().ttl.as_secs_f64()
    }

    /// Acquires the lease: `wait=None` waits for ever, `wait=0` tries once,
    /// otherwise waits at most `wait` seconds. Raises `LockHeld` when it is
    /// not acquired in time.
    #[pyo3(signature = (wait=None))]
    fn acquire(&self, py: Python<'_>, wait: Option<f64>) -> Result<Held, Fail> {
        self.birth.check("lease")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let guard = runtime::wait(
            py,
            Some(cancel.clone()),
            acquire(self.lease.clone(), wait_for, cancel),
        )?;
        Ok(Held::new(guard))
    }

    /// `acquire` for asyncio.
    #[pyo3(signature = (wait))]
    fn acquire_start(&self, wait: Option<f64>) -> Result<Task, Fail> {
        self.birth.check("lease")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let lease = self.lease.clone();
        start(Some(cancel.clone()), async move {
            acquire(lease, wait_for, cancel).await.map(Held::new)
        })
    }

    /// Who holds the lease now: `(owner, token)`, or `None` when it is
    /// free (never held, released or expired by the holder's own account).
    fn holder(&self, py: Python<'_>) -> Result<LeaderTuple, Fail> {
        self.birth.check("lease")?;
        let lease = self.lease.clone();
        wait(py, None, async move {
            Ok(lease
                .read()
                .await?
                .filter(|(record, _)| !record.released)
                .map(|(record, _)| (record.owner, record.token, record.value)))
        })
    }

    /// `holder` for asyncio.
    fn holder_start(&self) -> Result<Task, Fail> {
        self.birth.check("lease")?;
        let lease = self.lease.clone();
        start(None, async move {
            Ok(lease
                .read()
                .await?
                .filter(|(record, _)| !record.released)
                .map(|(record, _)| (record.owner, record.token, record.value)))
        })
    }
}

fn lock_held(holder: &casaas::HeldBy, waited: Option<Duration>) -> Fail {
    let message = match waited {
        Some(waited) if !waited.is_zero() => format!(
            "the lock is still held by '{}' (token {}) after waiting {:.3} s",
            holder.owner,
            holder.token,
            waited.as_secs_f64()
        ),
        _ => format!(
            "the lock is held by '{}' (token {}); a takeover is possible in {:.3} s if it stops renewing",
            holder.owner,
            holder.token,
            holder.takeover_in.as_secs_f64()
        ),
    };
    // A bounded wait that ran out is also a `TimeoutError` (`LockTimeout`).
    let class = match waited {
        Some(waited) if !waited.is_zero() => "LockTimeout",
        _ => "LockHeld",
    };
    Fail::Named(
        class,
        message,
        vec![
            ("owner", Attr::Str(holder.owner.clone())),
            ("token", Attr::U64(holder.token)),
        ],
    )
}

/// Acquires `lease`: once (`Some(0)`), until a deadline, or for ever. A
/// guard got at the moment `cancel` fires is released before answering.
async fn acquire(
    lease: casaas::Lease,
    wait: Option<Duration>,
    cancel: CancellationToken,
) -> Result<LeaseGuard, Fail> {
    let got = match wait {
        Some(w) if w.is_zero() => match lease.try_acquire().await?.into_result() {
            Ok(guard) => Ok(guard),
            Err(holder) => return Err(lock_held(&holder, None)),
        },
        Some(deadline) => {
            let options = WaitOptions::default()
                .with_deadline(deadline)
                .with_cancel(cancel.clone());
            match lease.acquire(options).await {
                Err(casaas::LeaseError::DeadlineExceeded(waited)) => {
                    let holder = lease.read().await.ok().flatten().map(|(record, _)| {
                        casaas::HeldBy::new(record.owner, record.token, Duration::ZERO)
                    });
                    return Err(match holder {
                        Some(holder) => lock_held(&holder, Some(waited)),
                        None => Fail::Named(
                            "LockTimeout",
                            format!(
                                "the lock was not acquired within {:.3} s",
                                waited.as_secs_f64()
                            ),
                            Vec::new(),
                        ),
                    });
                }
                other => other,
            }
        }
        None => {
            lease
                .acquire(WaitOptions::default().with_cancel(cancel.clone()))
                .await
        }
    }?;
    if cancel.is_cancelled() {
        // Nobody is waiting for this guard any more.
        let _ = got.release().await;
        return Err(casaas::LeaseError::Cancelled.into());
    }
    Ok(got)
}

/// A held lease (a lock): its token fences writes; renewal runs in the
/// background until `release()`.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Held {
    guard: Mutex<Option<LeaseGuard>>,
    /// Set by `abandon()`: a later release must say the lock was not held.
    abandoned: std::sync::atomic::AtomicBool,
    token: u64,
    key: String,
    owner: String,
    birth: Birth,
}

impl Held {
    fn new(guard: LeaseGuard) -> Self {
        Held {
            token: guard.token(),
            key: guard.key().to_string(),
            owner: guard.owner().to_string(),
            guard: Mutex::new(Some(guard)),
            abandoned: std::sync::atomic::AtomicBool::new(false),
            birth: Birth::now(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(Option<&LeaseGuard>) -> T) -> T {
        f(locked(&self.guard).as_ref())
    }

    fn take(&self) -> Result<Option<LeaseGuard>, Fail> {
        self.birth.check("held lock")?;
        Ok(locked(&self.guard).take())
    }
}

impl Held {
    /// The write `proclaim` sends, not borrowing the guard (a release from
    /// another thread meanwhile makes it answer `LeaseLost`).
    fn proclaim_write(
        &self,
        value: String,
    ) -> Result<
        impl std::future::Future<Output = Result<(), casaas::LeaseError>> + Send + 'static + use<>,
        Fail,
    > {
        self.birth.check("held lock")?;
        self.with(|g| g.map(|g| g.proclaim_detached(value)))
            .ok_or_else(released)
    }

    /// What releasing a guard already taken answers: nothing after a
    /// release (releasing twice is harmless), `LeaseLost` after `abandon()`.
    fn after_end(&self) -> Result<(), Fail> {
        if self.abandoned.load(std::sync::atomic::Ordering::SeqCst) {
            Err(casaas::LeaseError::Lost(casaas::LostReason::Dropped).into())
        } else {
            Ok(())
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(guard) = locked(&self.guard).take() {
            drop_in_runtime(self.birth, guard);
        }
    }
}

fn released() -> Fail {
    casaas::LeaseError::Lost(casaas::LostReason::Released).into()
}

#[pymethods]
impl Held {
    /// The fencing token: pass it with every write the lock protects.
    #[getter]
    fn token(&self) -> u64 {
        self.token
    }

    /// The lock's key.
    #[getter]
    fn key(&self) -> String {
        self.key.clone()
    }

    /// The owner id.
    #[getter]
    fn owner(&self) -> String {
        self.owner.clone()
    }

    /// Validity left, seconds (0 once lost).
    fn remaining(&self) -> f64 {
        self.with(|g| g.map_or(0.0, |g| g.remaining().as_secs_f64()))
    }

    /// The value this holding publishes, if any (`None` once released).
    #[getter]
    fn value(&self) -> Option<String> {
        self.with(|g| g.and_then(LeaseGuard::value))
    }

    /// Publishes `value` with this holding (one conditional write, the
    /// token unchanged). Raises `LeaseLost` once released or lost.
    fn proclaim(&self, py: Python<'_>, value: String) -> Result<(), Fail> {
        let write = self.proclaim_write(value)?;
        wait(py, None, async move { write.await.map_err(Fail::from) })
    }

    /// `proclaim` for asyncio.
    fn proclaim_start(&self, value: String) -> Result<Task, Fail> {
        let write = self.proclaim_write(value)?;
        start(None, async move { write.await.map_err(Fail::from) })
    }

    /// Is the lock held with validity left?
    fn is_held(&self) -> bool {
        self.birth.in_this_process() && self.with(|g| g.is_some_and(LeaseGuard::is_held))
    }

    /// Why the lock ended, or `None` while it is held.
    fn lost_reason(&self) -> Option<String> {
        self.with(|g| match g {
            Some(g) => g.lost_reason().map(|r| r.to_string()),
            None => Some(casaas::LostReason::Released.to_string()),
        })
    }

    /// Raises unless the lock is held with at least `seconds` of validity
    /// left: `LeaseLost` when it is gone, `InsufficientValidity` when too
    /// little is left.
    fn ensure_held_for(&self, seconds_left: f64) -> Result<(), Fail> {
        self.birth.check("held lock")?;
        let required = seconds(seconds_left, "seconds")?;
        self.with(|g| match g {
            Some(g) => g.ensure_held_for(required).map_err(Fail::from),
            None => Err(released()),
        })
    }

    /// Releases the lock (a conditional write that keeps the token).
    /// Raises `LeaseLost` if it was lost before.
    fn release(&self, py: Python<'_>) -> Result<(), Fail> {
        let Some(guard) = self.take()? else {
            return self.after_end();
        };
        wait(py, None, async move {
            guard.release().await.map_err(Fail::from)
        })
    }

    /// `release` for asyncio.
    fn release_start(&self) -> Result<Task, Fail> {
        let guard = self.take()?;
        let after_end = self.after_end();
        start(None, async move {
            match guard {
                Some(guard) => guard.release().await.map_err(Fail::from),
                None => after_end,
            }
        })
    }

    /// Stops renewing without releasing: the lock expires after its TTL.
    fn abandon(&self) -> Result<(), Fail> {
        if let Some(guard) = self.take()? {
            self.abandoned
                .store(true, std::sync::atomic::Ordering::SeqCst);
            guard.abandon();
        }
        Ok(())
    }
}

/// Many locks under one heartbeat (see `casaas.Session`).
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Session {
    session: Mutex<Option<casaas::lease::Session>>,
    key: String,
    birth: Birth,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(session) = locked(&self.session).take() {
            drop_in_runtime(self.birth, session);
        }
    }
}

/// Opens a session on `heartbeat`: once (`Some(0)`), until a deadline, or
/// for ever. A session opened at the moment `cancel` fires is closed before
/// answering.
async fn open_session(
    heartbeat: casaas::Lease,
    wait: Option<Duration>,
    cancel: CancellationToken,
) -> Result<casaas::lease::Session, Fail> {
    let opened = match wait {
        Some(w) if w.is_zero() => {
            match casaas::lease::Session::try_open(heartbeat)
                .await?
                .into_result()
            {
                Ok(s) => s,
                Err(holder) => return Err(lock_held(&holder, None)),
            }
        }
        Some(w) => casaas::lease::Session::open(
            heartbeat,
            WaitOptions::default()
                .with_deadline(w)
                .with_cancel(cancel.clone()),
        )
        .await
        .map_err(|e| match e {
            casaas::LeaseError::DeadlineExceeded(waited) => Fail::Named(
                "LockTimeout",
                format!(
                    "the session was not opened within {:.3} s: another process holds it",
                    waited.as_secs_f64()
                ),
                Vec::new(),
            ),
            other => other.into(),
        })?,
        None => {
            casaas::lease::Session::open(
                heartbeat,
                WaitOptions::default().with_cancel(cancel.clone()),
            )
            .await?
        }
    };
    if cancel.is_cancelled() {
        let _ = opened.close().await;
        return Err(casaas::LeaseError::Cancelled.into());
    }
    Ok(opened)
}

impl Session {
    fn new(session: casaas::lease::Session, key: String) -> Self {
        Session {
            session: Mutex::new(Some(session)),
            key,
            birth: Birth::now(),
        }
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&casaas::lease::Session) -> Result<T, Fail>,
    ) -> Result<T, Fail> {
        self.birth.check("session")?;
        match locked(&self.session).as_ref() {
            Some(s) => f(s),
            None => Err(Fail::Named(
                "LeaseLost",
                format!("the session '{}' was closed", self.key),
                vec![("reason", Attr::Str("closed".to_string()))],
            )),
        }
    }
}

#[pymethods]
impl Session {
    /// Opens the session `key` (its heartbeat lease), waiting like
    /// `Lease.acquire`.
    #[staticmethod]
    #[pyo3(signature = (store, key, owner=None, ttl=None, wait=None))]
    fn open(
        py: Python<'_>,
        store: &Store,
        key: String,
        owner: Option<String>,
        ttl: Option<f64>,
        wait: Option<f64>,
    ) -> Result<Session, Fail> {
        let heartbeat = Lease::new(store, key.clone(), owner, ttl, None)?.lease;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let session = runtime::wait(
            py,
            Some(cancel.clone()),
            open_session(heartbeat, wait_for, cancel),
        )?;
        Ok(Session::new(session, key))
    }

    /// `open` for asyncio.
    #[staticmethod]
    #[pyo3(signature = (store, key, owner=None, ttl=None, wait=None))]
    fn open_start(
        store: &Store,
        key: String,
        owner: Option<String>,
        ttl: Option<f64>,
        wait: Option<f64>,
    ) -> Result<Task, Fail> {
        let heartbeat = Lease::new(store, key.clone(), owner, ttl, None)?.lease;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        start(Some(cancel.clone()), async move {
            open_session(heartbeat, wait_for, cancel)
                .await
                .map(|s| Session::new(s, key))
        })
    }

    /// A lease on `key` held under this session.
    fn lease(&self, key: String) -> Result<Lease, Fail> {
        self.with(|s| {
            Ok(Lease {
                lease: s.lease(key)?,
                birth: Birth::now(),
            })
        })
    }

    /// The heartbeat key.
    #[getter]
    fn key(&self) -> String {
        self.key.clone()
    }

    /// The session's term (the heartbeat's fencing token).
    #[getter]
    fn term(&self) -> Result<u64, Fail> {
        self.with(|s| Ok(s.term()))
    }

    /// Locks held under the session now.
    fn held_locks(&self) -> Result<usize, Fail> {
        self.with(|s| Ok(s.held_locks()))
    }

    /// Is the session held with validity left?
    fn is_held(&self) -> bool {
        self.with(|s| Ok(s.is_held())).unwrap_or(false)
    }

    /// Validity left, seconds.
    fn remaining(&self) -> f64 {
        self.with(|s| Ok(s.remaining().as_secs_f64()))
            .unwrap_or(0.0)
    }

    /// Why the session ended, or `None` while it is held.
    fn lost_reason(&self) -> Option<String> {
        self.with(|s| Ok(s.lost_reason().map(|r| r.to_string())))
            .unwrap_or_else(|_| Some("closed".to_string()))
    }

    /// Raises unless the session is held with `seconds` of validity left.
    fn ensure_held_for(&self, seconds_left: f64) -> Result<(), Fail> {
        let required = seconds(seconds_left, "seconds")?;
        self.with(|s| s.ensure_held_for(required).map_err(Fail::from))
    }

    /// Closes the session: every lock under it ends.
    fn close(&self, py: Python<'_>) -> Result<(), Fail> {
        self.birth.check("session")?;
        let Some(session) = locked(&self.session).take() else {
            return Ok(());
        };
        wait(py, None, async move {
            session.close().await.map_err(Fail::from)
        })
    }

    /// `close` for asyncio.
    fn close_start(&self) -> Result<Task, Fail> {
        self.birth.check("session")?;
        let session = locked(&self.session).take();
        start(None, async move {
            match session {
                Some(session) => session.close().await.map_err(Fail::from),
                None => Ok(()),
            }
        })
    }
}

/// Leader election on one lease (see `casaas.Election`).
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Election {
    election: casaas::Election,
    birth: Birth,
}

#[pymethods]
impl Election {
    /// An election over `lease`'s key.
    #[new]
    fn new(lease: &Lease) -> Result<Self, Fail> {
        lease.birth.check("lease")?;
        Ok(Election {
            election: casaas::Election::new(lease.lease.clone()),
            birth: Birth::now(),
        })
    }

    /// Campaigns until elected (`wait=None`) or for at most `wait`
    /// seconds (`Timeout`). Returns the leadership.
    #[pyo3(signature = (wait=None))]
    fn campaign(&self, py: Python<'_>, wait: Option<f64>) -> Result<Leadership, Fail> {
        self.birth.check("election")?;
        let limit = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let won = runtime::wait(
            py,
            Some(cancel.clone()),
            campaign(self.election.clone(), limit, cancel),
        )?;
        Ok(Leadership::new(won))
    }

    /// `campaign` for asyncio.
    #[pyo3(signature = (wait=None))]
    fn campaign_start(&self, wait: Option<f64>) -> Result<Task, Fail> {
        self.birth.check("election")?;
        let limit = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let election = self.election.clone();
        start(Some(cancel.clone()), async move {
            campaign(election, limit, cancel).await.map(Leadership::new)
        })
    }

    /// A watch of who leads (polling while it lives).
    fn observe(&self) -> Result<Observer, Fail> {
        self.birth.check("election")?;
        let runtime = runtime::runtime()?;
        let _entered = runtime.enter();
        let rx = self.election.observe();
        // A leader in the watch came from a read (the polling task's or a
        // campaign's); its first value, `None`, may be no read's answer yet.
        let primed = rx.borrow().is_some();
        Ok(Observer {
            watch: Arc::new(tokio::sync::Mutex::new(Watch { rx, primed })),
            election: self.election.clone(),
            birth: Birth::now(),
        })
    }

    /// The current leader as `(owner, token, value)`, or `None`.
    fn leader(&self, py: Python<'_>) -> Result<LeaderTuple, Fail> {
        self.birth.check("election")?;
        let election = self.election.clone();
        wait(py, None, async move {
            Ok(election
                .leader()
                .await?
                .map(|l| (l.owner, l.token, l.value)))
        })
    }

    /// `leader` for asyncio.
    fn leader_start(&self) -> Result<Task, Fail> {
        self.birth.check("election")?;
        let election = self.election.clone();
        start(None, async move {
            Ok(election
                .leader()
                .await?
                .map(|l| (l.owner, l.token, l.value)))
        })
    }
}

/// Campaigns on `election` until elected, for at most `limit`; a term won
/// at the moment `cancel` fires is resigned before answering.
async fn campaign(
    election: casaas::Election,
    limit: Option<Duration>,
    cancel: CancellationToken,
) -> Result<casaas::Leadership, Fail> {
    let mut options = WaitOptions::default().with_cancel(cancel.clone());
    if let Some(limit) = limit {
        options = options.with_deadline(limit);
    }
    let won = election.campaign(options).await?;
    if cancel.is_cancelled() {
        let _ = won.resign().await;
        return Err(casaas::LeaseError::Cancelled.into());
    }
    Ok(won)
}

/// An observer's receiver, and whether its value is a read's answer yet.
struct Watch {
    rx: tokio::sync::watch::Receiver<Option<casaas::Leader>>,
    primed: bool,
}

/// `(owner, token, value)` of a leader or a lock's holder.
type LeaderTuple = Option<(String, u64, Option<String>)>;

fn leader_tuple(leader: Option<&casaas::Leader>) -> LeaderTuple {
    leader.map(|l| (l.owner.clone(), l.token, l.value.clone()))
}

/// A watch of who leads an election (see `Election.observe`).
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Observer {
    watch: Arc<tokio::sync::Mutex<Watch>>,
    election: casaas::Election,
    birth: Birth,
}

impl Drop for Observer {
    fn drop(&mut self) {
        // The receiver's drop lets the election's polling task stop.
        drop_in_runtime(self.birth, self.watch.clone());
    }
}

/// The leader the watch reports first: its value once a read put it
/// there, otherwise one read of the record (what the first poll reads).
async fn first_leader(
    watch: Arc<tokio::sync::Mutex<Watch>>,
    election: casaas::Election,
) -> Result<LeaderTuple, Fail> {
    let mut watch = watch.lock().await;
    if !watch.primed && watch.rx.has_changed().unwrap_or(false) {
        watch.primed = true;
    }
    if watch.primed {
        return Ok(leader_tuple(watch.rx.borrow_and_update().as_ref()));
    }
    let now = election.leader().await?;
    if now.is_none() {
        // The watch's `None` agrees with the record.
        watch.primed = true;
    }
    Ok(leader_tuple(now.as_ref()))
}

/// Waits until the watch reports a leader other than `seen`; the watch's
/// first value counts only once a read has put it there.
async fn next_leader(
    watch: Arc<tokio::sync::Mutex<Watch>>,
    seen: LeaderTuple,
    limit: Option<Duration>,
    cancel: CancellationToken,
) -> Result<(bool, LeaderTuple), Fail> {
    let mut watch = watch.lock().await;
    let change = async {
        loop {
            if !watch.primed && watch.rx.has_changed().unwrap_or(false) {
                watch.primed = true;
            }
            if watch.primed {
                let now = leader_tuple(watch.rx.borrow_and_update().as_ref());
                if now != seen {
                    return Ok((true, now));
                }
            }
            if watch.rx.changed().await.is_err() {
                return Err(errors::runtime_error(
                    "the election's observer stopped".to_string(),
                ));
            }
            watch.primed = true;
        }
    };
    let limit = limit.unwrap_or(Duration::MAX);
    tokio::select! {
        got = change => got,
        () = cancel.cancelled() => Err(casaas::LeaseError::Cancelled.into()),
        () = tokio::time::sleep(limit.min(Duration::from_secs(u32::MAX.into()))) => Ok((false, seen.clone())),
    }
}

#[pymethods]
impl Observer {
    /// The leader to report first: `(owner, token)` or `None`.
    fn first(&self, py: Python<'_>) -> Result<LeaderTuple, Fail> {
        self.birth.check("election observer")?;
        wait(
            py,
            None,
            first_leader(self.watch.clone(), self.election.clone()),
        )
    }

    /// `first` for asyncio.
    fn first_start(&self) -> Result<Task, Fail> {
        self.birth.check("election observer")?;
        start(
            None,
            first_leader(self.watch.clone(), self.election.clone()),
        )
    }

    /// Waits until the leader differs from `seen` (`(owner, token)` or
    /// `None`) and returns `(True, leader)`; after `timeout` seconds without
    /// a change, `(False, seen)`. Ctrl-C cancels the wait.
    #[pyo3(signature = (seen, timeout=None))]
    fn next(
        &self,
        py: Python<'_>,
        seen: LeaderTuple,
        timeout: Option<f64>,
    ) -> Result<(bool, LeaderTuple), Fail> {
        self.birth.check("election observer")?;
        let limit = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let cancel = CancellationToken::new();
        wait(
            py,
            Some(cancel.clone()),
            next_leader(self.watch.clone(), seen, limit, cancel),
        )
    }

    /// `next` for asyncio.
    #[pyo3(signature = (seen, timeout=None))]
    fn next_start(&self, seen: LeaderTuple, timeout: Option<f64>) -> Result<Task, Fail> {
        self.birth.check("election observer")?;
        let limit = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let cancel = CancellationToken::new();
        start(
            Some(cancel.clone()),
            next_leader(self.watch.clone(), seen, limit, cancel),
        )
    }
}

/// A won election: the leader's term.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Leadership {
    leadership: Mutex<Option<casaas::Leadership>>,
    token: u64,
    birth: Birth,
}

impl Leadership {
    fn new(won: casaas::Leadership) -> Self {
        Leadership {
            token: won.token(),
            leadership: Mutex::new(Some(won)),
            birth: Birth::now(),
        }
    }
}

impl Leadership {
    /// The write `proclaim` sends, not borrowing the term.
    fn proclaim_write(
        &self,
        value: String,
    ) -> Result<
        impl std::future::Future<Output = Result<(), casaas::LeaseError>> + Send + 'static + use<>,
        Fail,
    > {
        self.birth.check("leadership")?;
        locked(&self.leadership)
            .as_ref()
            .map(|l| l.proclaim_detached(value))
            .ok_or_else(released)
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(l) = locked(&self.leadership).take() {
            drop_in_runtime(self.birth, l);
        }
    }
}

#[pymethods]
impl Leadership {
    /// The term's fencing token.
    #[getter]
    fn token(&self) -> u64 {
        self.token
    }

    /// Is the term still held with validity left?
    fn is_held(&self) -> bool {
        self.birth.in_this_process()
            && locked(&self.leadership)
                .as_ref()
                .is_some_and(|l| l.guard().is_held())
    }

    /// Why the term ended, or `None` while it lasts.
    fn lost_reason(&self) -> Option<String> {
        match locked(&self.leadership).as_ref() {
            Some(l) => l.guard().lost_reason().map(|r| r.to_string()),
            None => Some("resigned".to_string()),
        }
    }

    /// The value this term publishes, if any.
    #[getter]
    fn value(&self) -> Option<String> {
        locked(&self.leadership)
            .as_ref()
            .and_then(|l| l.guard().value())
    }

    /// Publishes `value` with this term, without a new election. Raises
    /// `LeaseLost` once the term has ended.
    fn proclaim(&self, py: Python<'_>, value: String) -> Result<(), Fail> {
        let write = self.proclaim_write(value)?;
        wait(py, None, async move { write.await.map_err(Fail::from) })
    }

    /// `proclaim` for asyncio.
    fn proclaim_start(&self, value: String) -> Result<Task, Fail> {
        let write = self.proclaim_write(value)?;
        start(None, async move { write.await.map_err(Fail::from) })
    }

    /// Raises unless the term is held with `seconds` of validity left.
    fn ensure_held_for(&self, seconds_left: f64) -> Result<(), Fail> {
        self.birth.check("leadership")?;
        let required = seconds(seconds_left, "seconds")?;
        match locked(&self.leadership).as_ref() {
            Some(l) => l.ensure_held_for(required).map_err(Fail::from),
            None => Err(released()),
        }
    }

    /// Ends the term (releases the lease).
    fn resign(&self, py: Python<'_>) -> Result<(), Fail> {
        self.birth.check("leadership")?;
        let Some(l) = locked(&self.leadership).take() else {
            return Ok(());
        };
        wait(
            py,
            None,
            async move { l.resign().await.map_err(Fail::from) },
        )
    }

    /// `resign` for asyncio.
    fn resign_start(&self) -> Result<Task, Fail> {
        self.birth.check("leadership")?;
        let l = locked(&self.leadership).take();
        start(None, async move {
            match l {
                Some(l) => l.resign().await.map_err(Fail::from),
                None => Ok(()),
            }
        })
    }
}

/// The native module.
#[pymodule]
fn _casaas(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(open_start, m)?)?;
    m.add_function(wrap_pyfunction!(split_key, m)?)?;
    m.add_class::<Store>()?;
    m.add_class::<Lease>()?;
    m.add_class::<Held>()?;
    m.add_class::<semaphore::Semaphore>()?;
    m.add_class::<rwlock::RwLock>()?;
    m.add_class::<fair::FairLease>()?;
    m.add_class::<runner::ElectionRunner>()?;
    m.add_class::<runner::RunnerStop>()?;
    m.add_class::<runner::RunnerTerm>()?;
    m.add_class::<Session>()?;
    m.add_class::<Election>()?;
    m.add_class::<Leadership>()?;
    m.add_class::<Observer>()?;
    m.add_class::<Task>()?;
    values::register(m)?;
    group::register(m)?;
    swap::register(m)?;
    doctor::register(m)?;
    listing::register(m)?;
    Ok(())
}
