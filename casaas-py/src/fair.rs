//! `casaas.FairLease`: a lock whose waiters are served in arrival order,
//! on core's `FairLease` (a queue of tickets under `KEY.queue/`).

use std::time::Duration;

use casaas::LeaseGuard;
use casaas::lease::{FairLease as CoreFairLease, WaitOptions};
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::errors::Fail;
use crate::runtime::{Birth, Task, start};
use crate::{Held, Lease, lock_held, seconds};

/// A lock taken in turn: see `casaas.FairLease`.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct FairLease {
    fair: CoreFairLease,
    birth: Birth,
}

#[pymethods]
impl FairLease {
    /// Fair turns for `lease` (its key, owner, TTL and value). Raises
    /// `Unsupported` on a store that cannot list keys or keeps leases as
    /// epochs (create-only).
    #[new]
    fn new(lease: &Lease) -> Result<Self, Fail> {
        lease.birth.check("lease")?;
        Ok(FairLease {
            fair: CoreFairLease::new(lease.lease.clone())?,
            birth: Birth::now(),
        })
    }

    /// The lock's key.
    #[getter]
    fn key(&self) -> String {
        self.fair.lease().key().to_string()
    }

    /// Where the waiters' tickets live (`KEY.queue/`).
    #[getter]
    fn queue_prefix(&self) -> String {
        self.fair.queue_prefix().to_string()
    }

    /// Waits in turn: `wait=None` for ever, `wait=0` one attempt on the
    /// lock (no ticket), otherwise at most `wait` seconds. A wait given up
    /// (deadline, Ctrl-C) ends its ticket before answering.
    #[pyo3(signature = (wait=None))]
    fn acquire(&self, py: Python<'_>, wait: Option<f64>) -> Result<Held, Fail> {
        self.birth.check("fair lease")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let guard = crate::runtime::wait(
            py,
            Some(cancel.clone()),
            acquire(self.fair.clone(), wait_for, cancel),
        )?;
        Ok(Held::new(guard))
    }

    /// `acquire` for asyncio; cancelling the task ends the ticket.
    #[pyo3(signature = (wait))]
    fn acquire_start(&self, wait: Option<f64>) -> Result<Task, Fail> {
        self.birth.check("fair lease")?;
        let wait_for = wait.map(|w| seconds(w, "wait")).transpose()?;
        let cancel = CancellationToken::new();
        let fair = self.fair.clone();
        start(Some(cancel.clone()), async move {
            acquire(fair, wait_for, cancel).await.map(Held::new)
        })
    }
}

/// Takes the lock in turn: one attempt (`Some(0)`: a single attempt has
/// nobody to queue behind, as `casaas lock --fair -n`), until a deadline,
/// or for ever. A guard got at the moment `cancel` fires is released
/// before answering; the ticket of a wait given up is ended by the core.
async fn acquire(
    fair: CoreFairLease,
    wait: Option<Duration>,
    cancel: CancellationToken,
) -> Result<LeaseGuard, Fail> {
    if wait.is_some_and(|w| w.is_zero()) {
        return crate::acquire(fair.lease().clone(), wait, cancel).await;
    }
    let mut options = WaitOptions::default().with_cancel(cancel.clone());
    options.deadline = wait;
    let got = match fair.acquire(options).await {
        Err(casaas::LeaseError::DeadlineExceeded(waited)) => {
            let holder = fair
                .lease()
                .read()
                .await
                .ok()
                .flatten()
                .and_then(|(record, _)| {
                    (!record.released)
                        .then(|| casaas::HeldBy::new(record.owner, record.token, Duration::ZERO))
                });
            return Err(match holder {
                Some(holder) => lock_held(&holder, Some(waited)),
                None => Fail::Named(
                    "LockTimeout",
                    format!(
                        "the lock was not reached in turn within {:.3} s: waiters queued before this one still wait or hold it",
                        waited.as_secs_f64()
                    ),
                    Vec::new(),
                ),
            });
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
