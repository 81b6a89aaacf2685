//! The one shape of deadlines and cancellation.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long a call that waits for others may wait, and what stops it.
///
/// Every call that waits for other participants, for as long as they keep
/// what it wants, takes one: [`Lease::acquire`](super::Lease::acquire),
/// [`FairLease::acquire`](super::FairLease::acquire),
/// [`Session::open`](super::Session::open),
/// [`Election::campaign`](super::Election::campaign) and
/// [`ElectionRunner::run`](super::ElectionRunner::run). Calls whose length
/// is bounded by their own [`RetryPolicy`](super::RetryPolicy) (fenced
/// updates and appends, group commit, [`CreateOnce`](super::CreateOnce),
/// releases) take none: drop their future to stop them (each documents
/// what that leaves, under `# Cancel safety`).
///
/// Past the deadline a call ends with
/// [`LeaseError::DeadlineExceeded`](super::LeaseError::DeadlineExceeded),
/// once cancelled with [`LeaseError::Cancelled`](super::LeaseError::Cancelled)
/// (the runner, whose work is to run until stopped, returns `Ok` for
/// both). The default waits indefinitely and is never cancelled.
///
/// ```
/// use std::time::Duration;
/// use casaas_core::lease::WaitOptions;
/// use tokio_util::sync::CancellationToken;
///
/// let shutdown = CancellationToken::new();
/// let options = WaitOptions::default()
///     .with_deadline(Duration::from_secs(30))
///     .with_cancel(shutdown.clone());
/// assert_eq!(options.deadline, Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WaitOptions {
    /// Give up after this long (on the clock of the lease waited for).
    /// `None` waits indefinitely.
    pub deadline: Option<Duration>,
    /// Give up when this is cancelled. `None`: never cancelled.
    pub cancel: Option<CancellationToken>,
}

impl WaitOptions {
    /// Sets [`deadline`](WaitOptions::deadline).
    #[must_use = "the setter returns the changed options"]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Sets [`cancel`](WaitOptions::cancel).
    #[must_use = "the setter returns the changed options"]
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = Some(cancel);
        self
    }
}

/// How a writer bounded by its attempts ([`FencedResource`](super::FencedResource),
/// [`FencedLog`](super::FencedLog), [`CreateOnce`](super::CreateOnce)) times
/// and retries its requests; set with their `with_retry_policy`.
///
/// ```
/// use std::time::Duration;
/// use casaas_core::lease::RetryPolicy;
///
/// let patient = RetryPolicy::default()
///     .with_request_timeout(Duration::from_secs(2))
///     .with_retry_period(Duration::from_millis(50))
///     .with_max_attempts(8);
/// assert_eq!(patient.max_attempts, 8);
/// assert_eq!(RetryPolicy::default().max_attempts, 32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Longest wait for one request; a write not answered in time is
    /// treated as ambiguous and settled by reading. Default 10 s.
    pub request_timeout: Duration,
    /// Base pause before another attempt (jittered by up to 20%, or the
    /// store's retry-after when it gives one). Default 100 ms.
    pub retry_period: Duration,
    /// Attempts before [`LeaseError::Contended`](super::LeaseError::Contended)
    /// (at least 1). Default 32.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            request_timeout: Duration::from_secs(10),
            retry_period: Duration::from_millis(100),
            max_attempts: 32,
        }
    }
}

impl RetryPolicy {
    /// Sets [`request_timeout`](RetryPolicy::request_timeout).
    #[must_use = "the setter returns the changed policy"]
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    /// Sets [`retry_period`](RetryPolicy::retry_period).
    #[must_use = "the setter returns the changed policy"]
    pub fn with_retry_period(mut self, retry_period: Duration) -> Self {
        self.retry_period = retry_period;
        self
    }

    /// Sets [`max_attempts`](RetryPolicy::max_attempts) (at least 1).
    #[must_use = "the setter returns the changed policy"]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }
}
