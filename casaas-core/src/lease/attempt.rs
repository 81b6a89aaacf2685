//! The one attempt loop every fenced writer runs.
//!
//! A fenced write is a sequence of attempts: read, settle the writes whose
//! outcome is unknown (see [`super::pending`]), write, and on failure either
//! retry after a jittered pause or give up. [`Attempts`] owns what is common
//! to all of them (the knobs, the pause before a retry, the count that ends
//! in [`LeaseError::Contended`], the writes that may still land, and the rule
//! that an error returned while one of them may land is
//! [`ErrorKind::Ambiguous`]); each writer supplies only what its layout
//! needs (what to read, where to write, how to tell whether a nonce landed).
//!
//! ```text
//! let mut attempts = Attempts::new(&policy, key, UPDATE);
//! while attempts.next().await {
//!     // read; settle attempts.pending; on a retryable read error:
//!     //     attempts.retry(err); continue;
//!     match attempts.send(write, key, request).await {
//!         Sent::Written(version) => return Ok(..),
//!         Sent::Unknown(err) => attempts.retry(err),   // settled next round
//!         Sent::Refused(err) => ..,                    // nothing was written
//!     }
//! }
//! Err(attempts.give_up())
//! ```

use std::future::Future;
use std::time::Duration;

use crate::{CasError, ErrorKind, Version};

use super::LeaseError;
use super::pending::{PendingWrite, PendingWrites};
use super::retry::{RequestPolicy, backoff, needs_resolution, timed};

/// How an error is worded while a write of the operation may still land.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unresolved {
    /// What may or may not have happened ("the update may or may not have
    /// been applied").
    pub(crate) what: &'static str,
    /// What the caller should do ("read the resource to find out").
    pub(crate) advice: &'static str,
}

/// What became of one write sent by [`Attempts::send`].
#[derive(Debug)]
pub(crate) enum Sent {
    /// The store answered success: the write holds the object.
    Written(Version),
    /// The outcome is unknown (or a precondition failure that may be our own
    /// duplicate): the write stays pending, for the next read to settle.
    Unknown(CasError),
    /// The store answered that nothing was written: the write is forgotten.
    Refused(CasError),
}

/// One operation's attempts: the loop state shared by every fenced writer.
#[derive(Debug)]
pub(crate) struct Attempts<'a, P> {
    policy: &'a RequestPolicy,
    key: &'a str,
    unresolved: Unresolved,
    made: u32,
    /// The error that ended the last attempt, if the next one must wait.
    last_err: Option<CasError>,
    /// This operation's writes whose outcome is unknown.
    pub(crate) pending: PendingWrites<P>,
}

impl<'a, P> Attempts<'a, P> {
    /// The attempts of one operation on `key` (named in
    /// [`LeaseError::Contended`] and in an unresolved error).
    pub(crate) fn new(policy: &'a RequestPolicy, key: &'a str, unresolved: Unresolved) -> Self {
        Attempts {
            policy,
            key,
            unresolved,
            made: 0,
            last_err: None,
            pending: PendingWrites::default(),
        }
    }

    /// Starts the next attempt: false once `max_attempts` were made.
    /// After an attempt that ended in [`retry`](Attempts::retry), first
    /// sleeps the retry period (or the store's retry-after) plus jitter.
    pub(crate) async fn next(&mut self) -> bool {
        if self.made >= self.policy.max_attempts {
            return false;
        }
        self.made += 1;
        if let Some(err) = self.last_err.take() {
            let pause = backoff(&self.policy.entropy, self.policy.retry_period, Some(&err));
            self.policy.clock.sleep(pause).await;
        }
        true
    }

    /// Ends the current attempt with `err`: the next one waits first.
    pub(crate) fn retry(&mut self, err: CasError) {
        self.last_err = Some(err);
    }

    /// Sends `write` (remembered as pending until its answer says nothing
    /// was written) with the policy's request timeout.
    pub(crate) async fn send(
        &mut self,
        write: PendingWrite<P>,
        key: &str,
        request: impl Future<Output = Result<Version, CasError>>,
    ) -> Sent {
        let nonce = write.nonce.clone();
        self.pending.push(write);
        let policy = self.policy;
        match timed(policy.clock.as_ref(), policy.request_timeout, key, request).await {
            Ok(version) => Sent::Written(version),
            Err(err) if needs_resolution(&err) => Sent::Unknown(err),
            Err(err) => {
                self.pending.forget(&nonce);
                Sent::Refused(err)
            }
        }
    }

    /// What a create-if-absent's answer means for the loop: `Some(version)`
    /// once written; `None` to go on, at once after a refusal that may hide
    /// our own write (the next round reads whose it is), after a pause
    /// after an unknown answer or a retryable refusal; an error for a
    /// refusal that is final (nothing was written).
    pub(crate) fn created(&mut self, sent: Sent) -> Result<Option<Version>, LeaseError> {
        match sent {
            Sent::Written(version) => Ok(Some(version)),
            Sent::Unknown(err) if err.kind() == ErrorKind::PreconditionFailed => Ok(None),
            Sent::Refused(err) if !err.is_retryable() => Err(self.fail(err.into())),
            Sent::Unknown(err) | Sent::Refused(err) => {
                self.retry(err);
                Ok(None)
            }
        }
    }

    /// The send time to stamp on a write about to be sent.
    pub(crate) fn now(&self) -> Duration {
        self.policy.clock.now()
    }

    /// `err`, as the operation must report it: [`ErrorKind::Ambiguous`] while
    /// a write of this operation may still land, since the caller must not
    /// take it for "not applied".
    pub(crate) fn fail(&self, err: LeaseError) -> LeaseError {
        if self.pending.is_empty() {
            return err;
        }
        LeaseError::Store(
            CasError::new(
                ErrorKind::Ambiguous,
                format!(
                    "{} ({err}); {}",
                    self.unresolved.what, self.unresolved.advice
                ),
            )
            .with_key(self.key),
        )
    }

    /// Every attempt was used (through [`fail`](Attempts::fail)):
    /// [`LeaseError::Contended`] when the last one lost a race, or was not
    /// refused at all; the store's own error when the last one failed
    /// otherwise (unreachable, throttled), which was no race.
    pub(crate) fn give_up(&mut self) -> LeaseError {
        let attempts = self.policy.max_attempts;
        match self.last_err.take() {
            Some(err)
                if !matches!(
                    err.kind(),
                    ErrorKind::PreconditionFailed | ErrorKind::ConcurrentRequest
                ) =>
            {
                let kind = err.kind();
                self.fail(LeaseError::Store(
                    CasError::new(kind, format!("gave up after {attempts} attempts: {err}"))
                        .with_key(self.key),
                ))
            }
            _ => self.fail(LeaseError::Contended {
                key: self.key.to_string(),
                attempts,
            }),
        }
    }
}

/// The knobs of a fenced writer's [`Attempts`] (clock, entropy, store guard,
/// timeout / retry period / attempts), written once for every handle that
/// has a `store` and a `policy: RequestPolicy`; `$what` names the handle in
/// the store guard's warning.
macro_rules! attempt_knobs {
    ($what:literal) => {
        /// Uses `clock` for timeouts and backoff.
        #[must_use = "the setter returns the changed handle"]
        pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
            self.policy.clock = clock;
            self
        }

        /// Uses `entropy` for nonces and jitter.
        #[must_use = "the setter returns the changed handle"]
        pub fn with_entropy(mut self, entropy: Entropy) -> Self {
            self.policy.entropy = entropy;
            self
        }

        /// Turns the [store guard](crate::guard) off for this handle (it is on
        /// by default: the first write checks, once per store per process, that
        /// the store honours conditional writes). Logged at warn.
        #[must_use = "the setter returns the changed handle"]
        pub fn with_verify_store(mut self, verify: bool) -> Self {
            if !verify {
                super::retry::warn_unverified(self.store.as_ref(), $what);
            }
            self.policy.verify_store = verify;
            self
        }

        /// Sets how requests are timed and retried (see [`RetryPolicy`](super::RetryPolicy)).
        #[must_use = "the setter returns the changed handle"]
        pub fn with_retry_policy(mut self, retries: super::RetryPolicy) -> Self {
            self.policy.request_timeout = retries.request_timeout;
            self.policy.retry_period = retries.retry_period;
            self.policy.max_attempts = retries.max_attempts.max(1);
            self
        }

        /// How requests are timed and retried.
        pub fn retry_policy(&self) -> super::RetryPolicy {
            super::RetryPolicy::default()
                .with_request_timeout(self.policy.request_timeout)
                .with_retry_period(self.policy.retry_period)
                .with_max_attempts(self.policy.max_attempts)
        }
    };
}
pub(crate) use attempt_knobs;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lease::{Clock, SystemClock};

    const OP: Unresolved = Unresolved {
        what: "the test may or may not have been applied",
        advice: "read to find out",
    };

    fn policy(clock: Arc<SystemClock>) -> RequestPolicy {
        RequestPolicy {
            clock,
            max_attempts: 3,
            retry_period: Duration::from_millis(100),
            ..RequestPolicy::default()
        }
    }

    fn write(nonce: &str) -> PendingWrite<()> {
        PendingWrite {
            nonce: nonce.to_string(),
            sent_at: Duration::ZERO,
            condition: None,
            payload: (),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stops_after_max_attempts_and_pauses_only_after_a_retry() {
        let clock = Arc::new(SystemClock::new());
        let policy = policy(clock.clone());
        let mut attempts: Attempts<'_, ()> = Attempts::new(&policy, "k", OP);
        assert!(attempts.next().await);
        assert_eq!(clock.now(), Duration::ZERO, "the first attempt never waits");
        assert!(attempts.next().await);
        assert_eq!(clock.now(), Duration::ZERO, "no retry asked, no pause");
        attempts.retry(CasError::new(ErrorKind::Throttled, "slow down"));
        assert!(attempts.next().await);
        assert!(clock.now() >= Duration::from_millis(100));
        assert!(!attempts.next().await);
        assert!(matches!(
            attempts.give_up(),
            LeaseError::Contended { attempts: 3, .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_that_never_reached_the_store_give_up_with_its_error_not_a_race() {
        let clock = Arc::new(SystemClock::new());
        let policy = policy(clock);
        let mut attempts: Attempts<'_, ()> = Attempts::new(&policy, "k", OP);
        while attempts.next().await {
            let sent = attempts
                .send(write("a"), "k", async {
                    Err(CasError::new(ErrorKind::NotSent, "connection refused"))
                })
                .await;
            let Sent::Refused(err) = sent else {
                panic!("a request not sent is a refusal")
            };
            attempts.retry(err);
        }
        let err = attempts.give_up();
        assert_eq!(err.store_kind(), Some(ErrorKind::NotSent), "{err}");
        assert!(
            err.to_string().contains("gave up after 3 attempts"),
            "{err}"
        );
        assert!(!err.to_string().contains("races"), "{err}");
        // Lost races stay a contention.
        let mut attempts: Attempts<'_, ()> = Attempts::new(&policy, "k", OP);
        while attempts.next().await {
            attempts.retry(CasError::new(ErrorKind::PreconditionFailed, "moved"));
        }
        assert!(matches!(
            attempts.give_up(),
            LeaseError::Contended { attempts: 3, .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_while_a_write_may_land_is_ambiguous() {
        let clock = Arc::new(SystemClock::new());
        let policy = policy(clock);
        let mut attempts: Attempts<'_, ()> = Attempts::new(&policy, "k", OP);
        assert!(attempts.next().await);
        let lost = attempts
            .send(write("a"), "k", async {
                Err(CasError::new(ErrorKind::Ambiguous, "reset"))
            })
            .await;
        assert!(matches!(lost, Sent::Unknown(_)));
        let err = attempts.give_up();
        assert_eq!(err.store_kind(), Some(ErrorKind::Ambiguous));
        assert!(err.to_string().contains("may or may not"), "{err}");
        let refused = attempts
            .send(write("b"), "k", async {
                Err(CasError::new(ErrorKind::Throttled, "slow down"))
            })
            .await;
        assert!(matches!(refused, Sent::Refused(_)));
        assert!(!attempts.pending.contains("b"), "nothing was written");
        assert!(attempts.pending.contains("a"), "still live");
    }
}
