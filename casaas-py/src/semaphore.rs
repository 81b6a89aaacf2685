//! `casaas.Semaphore`: up to N holders at once, each holding one slot (a
//! lease of its own, with its own fencing token).

use std::time::Duration;

use casaas::lease::{Semaphore as CoreSemaphore, WaitOptions};
use casaas::{LeaseConfig, LeaseGuard};
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::errors::Fail;
use crate::runtime::{Birth, Task, start};
use crate::{Held, Store, lock_held, seconds};

/// A semaphore of `slots` slots named `key`.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Semaphore {
    semaphore: CoreSemaphore,
    birth: Birth,
}

#[pymethods]
impl Semaphore {
    /// A semaphore of `slots` slots at `key` for `owner` (default
    /// `HOST/PID`), each slot a lease with a TTL of `ttl` seconds
    /// (default 15).
    #[new]
    #[pyo3(signature = (store, key, slots, owner=None, ttl=None))]
    fn new(
        store: &Store,
        key: String,
        slots: u32,
        owner: Option<String>,
        ttl: Option<f64>,
    ) -> Result<Self, Fail> {
        let config = match ttl {
            Some(ttl) => LeaseConfig::from_ttl(seconds(ttl, "ttl")?),
            None => LeaseConfig::default(),
        };
        let owner = owner.unwrap_or_else(casaas::default_owner_id);
        let lease = casaas::Lease::new(store.get()?, key, owner, config)?;
        Ok(Semaphore {
            semaphore: CoreSemaphore::new(lease, slots)?,
            birth: Birth::now(),
        })
    }

    /// The semaphore's name.
    #[getter]
    fn key(&self) -> String {
        self.semaphore.name().to_string()
    }

    /// How many slots it has.
    #[getter]
    fn slots(&self) -> u32 {
        self.semaphore.slots()
    }

    /// Takes a slot: `wait=None` waits for ever, `wait=0` tries once,
    /// otherwise waits at most `wait` seconds. Raises `LockHeld` when
    /// every slot is still held.
    #[pyo3(signature = (wait=None))]
    fn acquire(&self, py: Python<'_>, wait: Option<f64>) -> Result<Held, Fail> {
        self.birth.check("semaphore")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let guard = crate::runtime::wait(
            py,
            Some(cancel.clone()),
            acquire(self.semaphore.clone(), wait_for, cancel),
        )?;
        Ok(Held::new(guard))
    }

    /// `acquire` for asyncio.
    #[pyo3(signature = (wait))]
    fn acquire_start(&self, wait: Option<f64>) -> Result<Task, Fail> {
        self.birth.check("semaphore")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let semaphore = self.semaphore.clone();
        start(Some(cancel.clone()), async move {
            acquire(semaphore, wait_for, cancel).await.map(Held::new)
        })
    }
}

/// Takes a slot: one pass (`Some(0)`), until a deadline, or for ever. A
/// guard got at the moment `cancel` fires is released before answering.
async fn acquire(
    semaphore: CoreSemaphore,
    wait: Option<Duration>,
    cancel: CancellationToken,
) -> Result<LeaseGuard, Fail> {
    let got = match wait {
        Some(w) if w.is_zero() => match semaphore.try_acquire().await?.into_result() {
            Ok(guard) => Ok(guard),
            Err(holder) => return Err(lock_held(&holder, None)),
        },
        _ => {
            let mut options = WaitOptions::default().with_cancel(cancel.clone());
            options.deadline = wait;
            match semaphore.acquire(options).await {
                Err(casaas::LeaseError::DeadlineExceeded(waited)) => {
                    return Err(Fail::Named(
                        "LockTimeout",
                        format!(
                            "every slot of the semaphore is still held after waiting {:.3} s",
                            waited.as_secs_f64()
                        ),
                        Vec::new(),
                    ));
                }
                other => other,
            }
        }
    }?;
    if cancel.is_cancelled() {
        // Nobody is waiting for this guard any more.
        let _ = got.release().await;
        return Err(casaas::LeaseError::Cancelled.into());
    }
    Ok(got)
}
