//! One maintenance runner at a time per table, fenced by a lease token.
//!
//! `vacuum`, checkpointing and log cleanup are jobs a table wants run by
//! one process at a time. [`Maintenance`] holds a casaas lease on
//! `_casaas/maintenance` in the table's commit store for the length of a
//! job, and records each step of the job in a fenced record
//! (`_casaas/maintenance.steps`, a [`FencedResource`]): a runner whose
//! token is older than the newest that recorded a step is refused there
//! before it acts.
//!
//! What this fences and what it cannot:
//!
//! - **Fenced**: the start of every step ([`MaintenanceFence::step`]).
//!   Once a newer runner has recorded a step, an older one (paused past
//!   its lease, then resumed) gets [`LeaseError::FencedOut`] at its next
//!   step, whatever its clock believes.
//! - **Checked, not fenced**: what a step does after it started. delta-rs
//!   deletes files (vacuum, log cleanup) with unconditional object store
//!   deletes and commits with a create of the next log entry; neither can
//!   be made conditional on another object, so a runner paused *inside* a
//!   step can still act when it resumes. The step's check
//!   ([`LeaseGuard::ensure_held_for`] with the step's expected length)
//!   keeps that window to pauses longer than the lease's safety margin.
//!   What keeps such a late action harmless is Delta's own rules: vacuum
//!   deletes only files that no version within the retention period
//!   references, and every commit goes through delta-rs's conflict checks
//!   (and, with this crate's log store, is written exactly once).

use std::sync::Arc;
use std::time::Duration;

use casaas_core::CasStore;
use casaas_core::lease::{
    Clock, FencedResource, Lease, LeaseConfig, LeaseError, LeaseGuard, WaitOptions,
};
use serde::{Deserialize, Serialize};

/// The lease key in the table's commit store.
pub const MAINTENANCE_LEASE_KEY: &str = "_casaas/maintenance";
/// The fenced record of steps, beside the lease.
pub const MAINTENANCE_STEPS_KEY: &str = "_casaas/maintenance.steps";

/// The last step a runner recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MaintenanceStep {
    /// The runner.
    pub owner: String,
    /// Its lease token.
    pub token: u64,
    /// The job ("vacuum").
    pub job: String,
    /// The step within it ("delete unreferenced files").
    pub step: String,
}

/// The maintenance runner of one table (see the [module](self)).
#[derive(Debug, Clone)]
pub struct Maintenance {
    lease: Lease,
    steps: FencedResource<MaintenanceStep>,
}

impl Maintenance {
    /// The runner `owner` of the table whose commit store is `store` (rooted
    /// at the table, as [`CasaasLogStore`](crate::CasaasLogStore) uses it).
    pub fn new(
        store: Arc<dyn CasStore>,
        owner: impl Into<String>,
        config: LeaseConfig,
    ) -> Result<Self, LeaseError> {
        Ok(Maintenance {
            lease: Lease::new(store.clone(), MAINTENANCE_LEASE_KEY, owner, config)?,
            steps: FencedResource::new(store, MAINTENANCE_STEPS_KEY)?,
        })
    }

    /// Uses `clock` for the lease and the fenced record (tests: a runner
    /// whose clock runs slow believes its lease for too long, and the
    /// fence still stops it).
    #[must_use]
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Maintenance {
            lease: self.lease.with_clock(clock.clone()),
            steps: self.steps.with_clock(clock),
        }
    }

    /// The lease (to read who runs, or to tune acquiring).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The last step recorded, by any runner.
    pub async fn last_step(&self) -> Result<Option<MaintenanceStep>, LeaseError> {
        Ok(self.steps.read().await?.map(|fenced| fenced.value))
    }

    /// Runs `job` as the only runner: acquires the lease (waiting as
    /// `options` say), hands the job a [`MaintenanceFence`], and releases
    /// the lease when the job returns.
    ///
    /// The job returns its own error type `E` (a vacuum's error, say),
    /// which needs only `From<LeaseError>` so that the fence's errors
    /// convert with `?` inside the job; `run` hands it back untouched.
    ///
    /// # Errors
    ///
    /// The lease's errors (another runner holds it past the deadline), as
    /// `E`, or the job's.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it acquires is
    /// [`Lease::acquire`]'s case; dropping it while the job runs drops the
    /// job and the lease guard, which stops renewing and releases the lease
    /// in the background (best effort: at worst the lease expires after its
    /// TTL). Steps the job recorded stay recorded.
    pub async fn run<F, Fut, T, E>(&self, job: &str, options: WaitOptions, body: F) -> Result<T, E>
    where
        F: FnOnce(MaintenanceFence) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
        E: From<LeaseError>,
    {
        let guard = Arc::new(self.lease.acquire(options).await?);
        let fence = MaintenanceFence {
            guard: guard.clone(),
            steps: Arc::new(self.steps.clone()),
            job: job.to_string(),
        };
        let result = body(fence).await;
        // The job's fence is gone with the job; the guard is ours again.
        match Arc::try_unwrap(guard) {
            Ok(guard) => {
                if let Err(err) = guard.release().await {
                    tracing::warn!(%err, "could not release the maintenance lease");
                }
            }
            Err(_) => tracing::warn!("the maintenance job kept its fence; the lease expires"),
        }
        result
    }
}

/// What a maintenance job checks before each step.
#[derive(Debug, Clone)]
pub struct MaintenanceFence {
    guard: Arc<LeaseGuard>,
    steps: Arc<FencedResource<MaintenanceStep>>,
    job: String,
}

impl MaintenanceFence {
    /// This runner's lease token (higher for every later runner).
    pub fn token(&self) -> u64 {
        self.guard.token()
    }

    /// The lease this job runs under.
    pub fn guard(&self) -> &LeaseGuard {
        &self.guard
    }

    /// Starts a step expected to take at most `expected`: fails unless the
    /// lease is held for that long, and records the step in the fenced
    /// record, which refuses it if a newer runner recorded one.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`]-style errors of
    /// [`ensure_held_for`](LeaseGuard::ensure_held_for), or
    /// [`LeaseError::FencedOut`] when a newer runner has started.
    pub async fn step(&self, step: &str, expected: Duration) -> Result<(), LeaseError> {
        let record = MaintenanceStep {
            owner: self.guard.owner().to_string(),
            token: self.guard.token(),
            job: self.job.clone(),
            step: step.to_string(),
        };
        self.steps
            .update_guarded(&self.guard, expected, |_| record.clone())
            .await?;
        Ok(())
    }
}
