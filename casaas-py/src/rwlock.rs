//! `casaas.RwLock`: many readers at once, or one writer with a fencing
//! token, on core's `RwLock`.

use std::time::Duration;

use casaas::lease::{RwLock as CoreRwLock, WaitOptions};
use casaas::{LeaseConfig, LeaseGuard};
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::errors::Fail;
use crate::runtime::{Birth, Task, start};
use crate::{Held, Store, seconds};

/// A read-write lock named `key`.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct RwLock {
    lock: CoreRwLock,
    birth: Birth,
}

/// Which side of the lock a holder takes.
#[derive(Clone, Copy)]
enum Side {
    Read,
    Write,
}

#[pymethods]
impl RwLock {
    /// A read-write lock at `key` for `owner` (default `HOST/PID`): the
    /// writer takes the lock object (a lease with a TTL of `ttl` seconds,
    /// default 15), readers take slots of their own under `KEY.readers/`.
    #[new]
    #[pyo3(signature = (store, key, owner=None, ttl=None))]
    fn new(
        store: &Store,
        key: String,
        owner: Option<String>,
        ttl: Option<f64>,
    ) -> Result<Self, Fail> {
        let config = match ttl {
            Some(ttl) => LeaseConfig::from_ttl(seconds(ttl, "ttl")?),
            None => LeaseConfig::default(),
        };
        let owner = owner.unwrap_or_else(casaas::default_owner_id);
        let lease = casaas::Lease::new(store.get()?, key, owner, config)?;
        Ok(RwLock {
            lock: CoreRwLock::new(lease)?,
            birth: Birth::now(),
        })
    }

    /// The lock's name.
    #[getter]
    fn key(&self) -> String {
        self.lock.lease().key().to_string()
    }

    /// Where the readers' slots live (`KEY.readers/`).
    #[getter]
    fn readers_prefix(&self) -> String {
        self.lock.readers_prefix().to_string()
    }

    /// Holds the lock shared: `wait=None` waits for ever, `wait=0` tries
    /// once, otherwise waits at most `wait` seconds.
    #[pyo3(signature = (wait=None))]
    fn read(&self, py: Python<'_>, wait: Option<f64>) -> Result<Held, Fail> {
        self.hold(py, Side::Read, wait)
    }

    /// Holds the lock exclusively; the holding's token is the writer's
    /// fencing token. `wait` as for `read`.
    #[pyo3(signature = (wait=None))]
    fn write(&self, py: Python<'_>, wait: Option<f64>) -> Result<Held, Fail> {
        self.hold(py, Side::Write, wait)
    }

    /// `read` for asyncio.
    #[pyo3(signature = (wait))]
    fn read_start(&self, wait: Option<f64>) -> Result<Task, Fail> {
        self.hold_start(Side::Read, wait)
    }

    /// `write` for asyncio.
    #[pyo3(signature = (wait))]
    fn write_start(&self, wait: Option<f64>) -> Result<Task, Fail> {
        self.hold_start(Side::Write, wait)
    }
}

impl RwLock {
    fn hold(&self, py: Python<'_>, side: Side, wait: Option<f64>) -> Result<Held, Fail> {
        self.birth.check("read-write lock")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let guard = crate::runtime::wait(
            py,
            Some(cancel.clone()),
            hold(self.lock.clone(), side, wait_for, cancel),
        )?;
        Ok(Held::new(guard))
    }

    fn hold_start(&self, side: Side, wait: Option<f64>) -> Result<Task, Fail> {
        self.birth.check("read-write lock")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let lock = self.lock.clone();
        start(Some(cancel.clone()), async move {
            hold(lock, side, wait_for, cancel).await.map(Held::new)
        })
    }
}

/// Holds `side` of the lock: one attempt (`Some(0)`), until a deadline, or
/// for ever. A guard got at the moment `cancel` fires is released before
/// answering.
async fn hold(
    lock: CoreRwLock,
    side: Side,
    wait: Option<Duration>,
    cancel: CancellationToken,
) -> Result<LeaseGuard, Fail> {
    let mut options = WaitOptions::default().with_cancel(cancel.clone());
    options.deadline = wait;
    let got = match side {
        Side::Read => lock.read(options).await,
        Side::Write => lock.write(options).await,
    };
    let got = match got {
        Err(casaas::LeaseError::DeadlineExceeded(waited)) => {
            let what = match side {
                Side::Read => "a writer still holds or waits for the read-write lock",
                Side::Write => "the read-write lock is still held",
            };
            // A single attempt that failed is LockHeld, as for a lock.
            let name = if wait.is_some_and(|w| w.is_zero()) {
                "LockHeld"
            } else {
                "LockTimeout"
            };
            return Err(Fail::Named(
                name,
                format!("{what} after waiting {:.3} s", waited.as_secs_f64()),
                Vec::new(),
            ));
        }
        other => other?,
    };
    if cancel.is_cancelled() {
        // Nobody is waiting for this guard any more.
        let _ = got.release().await;
        return Err(casaas::LeaseError::Cancelled.into());
    }
    Ok(got)
}
