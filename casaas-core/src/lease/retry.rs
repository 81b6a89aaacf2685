//! Shared plumbing: timed requests, record reads, jittered backoff.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::{CasError, CasStore, ErrorKind, Version};

use super::clock::{Clock, Entropy, SystemClock};
use super::record::LeaseRecord;
use super::{LeaseError, metric_names};

/// Runs a store request, giving up after `timeout` on `clock`. A request that
/// does not answer in time may still take effect, so the timeout is reported
/// as [`ErrorKind::Ambiguous`].
pub(crate) async fn timed<T>(
    clock: &dyn Clock,
    timeout: Duration,
    key: &str,
    request: impl Future<Output = Result<T, CasError>>,
) -> Result<T, CasError> {
    tokio::select! {
        // Polled in order, so that a replayed run takes the same branch.
        biased;
        result = request => result,
        () = clock.sleep(timeout) => Err(CasError::new(
            ErrorKind::Ambiguous,
            format!("no answer within the request timeout ({timeout:?})"),
        )
        .with_key(key)),
    }
}

/// Reads and decodes the lease record at `key`.
pub(crate) async fn read_record(
    store: &dyn CasStore,
    clock: &dyn Clock,
    timeout: Duration,
    key: &str,
) -> Result<Option<(LeaseRecord, Version)>, LeaseError> {
    match timed(clock, timeout, key, store.get(key)).await? {
        None => Ok(None),
        Some(object) => Ok(Some((
            LeaseRecord::decode(key, &object.body)?,
            object.version,
        ))),
    }
}

/// How long to wait before retrying after `err`: the store's retry-after if
/// it gave one, else `period`, plus up to 20% jitter.
pub(crate) fn backoff(entropy: &Entropy, period: Duration, err: Option<&CasError>) -> Duration {
    let base = err
        .and_then(CasError::retry_after)
        .map_or(period, |after| after.max(period));
    base + entropy.jitter(base / 5)
}

/// Counts an ambiguous (or self-inflicted precondition-failed) write and how
/// it was resolved.
pub(crate) fn count_ambiguous(resolution: &'static str) {
    metrics::counter!(metric_names::AMBIGUOUS_WRITES, "resolution" => resolution).increment(1);
}

/// Does this error call for reading to find out whether our write landed?
/// Ambiguous answers, and precondition failures: a transport-level duplicate
/// of our own successful write answers 412.
pub(crate) fn needs_resolution(err: &CasError) -> bool {
    err.may_have_taken_effect() || err.kind() == ErrorKind::PreconditionFailed
}

/// How the fenced helpers time and retry their requests; shared so that
/// `FencedResource` and `FencedLog` cannot drift apart.
#[derive(Debug, Clone)]
pub(crate) struct RequestPolicy {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Entropy,
    pub(crate) request_timeout: Duration,
    pub(crate) retry_period: Duration,
    pub(crate) max_attempts: u32,
    /// Run the store guard before the first write (see [`crate::guard`]).
    pub(crate) verify_store: bool,
}

impl Default for RequestPolicy {
    fn default() -> Self {
        let retries = super::RetryPolicy::default();
        RequestPolicy {
            clock: Arc::new(SystemClock::new()),
            entropy: Entropy::from_os(),
            request_timeout: retries.request_timeout,
            retry_period: retries.retry_period,
            max_attempts: retries.max_attempts,
            verify_store: true,
        }
    }
}

impl RequestPolicy {
    /// The store guard before a write, unless it was turned off.
    pub(crate) async fn verify(&self, store: &dyn CasStore) -> Result<(), LeaseError> {
        if !self.verify_store {
            return Ok(());
        }
        verify_store(store, &self.clock, &self.entropy, self.request_timeout).await
    }
}

/// Runs the [store guard](crate::guard) once per store per process; a store
/// that fails it is [`LeaseError::UnsafeStore`].
pub(crate) async fn verify_store(
    store: &dyn CasStore,
    clock: &Arc<dyn Clock>,
    entropy: &Entropy,
    request_timeout: Duration,
) -> Result<(), LeaseError> {
    crate::guard::StoreGuard::new()
        .with_clock(clock.clone())
        .with_entropy(entropy.fork())
        .with_request_timeout(request_timeout)
        .ensure(store)
        .await
        .map_err(|e| {
            if e.kind() == ErrorKind::UnsafeStore {
                LeaseError::UnsafeStore(e)
            } else {
                LeaseError::Store(e)
            }
        })
}

/// Says, at warn, that a handle was built with the store guard off.
pub(crate) fn warn_unverified(store: &dyn CasStore, what: &str) {
    tracing::warn!(
        store = %store.describe(),
        "{what} was built with the store guard off: casaas will not check that this store \
         honours conditional writes; on a store that ignores them, locks exclude no one"
    );
}
