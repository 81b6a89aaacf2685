//! Lease timing, validated.

use std::time::Duration;

use super::LeaseError;
use crate::Capabilities;

/// The longest default [`LeaseConfig::poll_period`]: a lock released
/// gracefully sits idle about half of it on average, which a `flock` user
/// does not notice, at 10 GETs per waiting second.
const DEFAULT_POLL_PERIOD: Duration = Duration::from_millis(100);

/// How a contender decides that a held lease has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpiryMode {
    /// The default: a contender may take over only after it has observed the
    /// same version unchanged for the record's full TTL on its own monotonic
    /// clock, plus the drift margin. Needs only bounded clock-rate drift.
    ObservedUnchanged,
    /// Opt-in and faster: trust the record's wall-clock expiry
    /// (`renewed_at + ttl`), waiting an extra `max_skew`. Safe only if every
    /// participant's wall clock is within `max_skew` of every other's.
    WallClock {
        /// The declared maximum wall-clock skew between any two participants.
        max_skew: Duration,
    },
}

/// Timing of a lease. Build with [`LeaseConfig::from_ttl`] (or
/// `default()`), adjust with the chained `with_*` setters named after the fields,
/// and [`validate`](LeaseConfig::validate) (done by `Lease::new`). The fields
/// are public to read; new ones may be added, so the struct cannot be built
/// by a literal outside this crate.
///
/// ```
/// use std::time::Duration;
/// use casaas_core::lease::LeaseConfig;
///
/// let config = LeaseConfig::from_ttl(Duration::from_secs(15));
/// assert_eq!(config.renew_interval, Duration::from_secs(5));
/// assert!(config.validate().is_ok());
/// assert!(config.holder_validity() < Duration::from_secs(15));
///
/// let tuned = LeaseConfig::from_ttl(Duration::from_secs(15))
///     .with_renew_interval(Duration::from_secs(4))
///     .with_request_timeout(Duration::from_secs(2));
/// assert_eq!(tuned.renew_interval, Duration::from_secs(4));
/// assert!(tuned.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeaseConfig {
    /// How long a lease lasts after the holder's last successful write.
    pub ttl: Duration,
    /// How often the holder renews (about `ttl / 3`).
    pub renew_interval: Duration,
    /// If no renewal has succeeded this long after the send time of the last
    /// successful write, the holder steps down. Must be less than
    /// [`holder_validity`](LeaseConfig::holder_validity), so the holder steps
    /// down before its validity ends.
    pub renew_deadline: Duration,
    /// Pause between retries of a failed request (a renewal, or an
    /// acquisition attempt that met a store error), before its backoff.
    pub retry_period: Duration,
    /// How often a waiting [`Lease::acquire`](crate::lease::Lease::acquire)
    /// reads a lock someone else holds (plus up to
    /// [`poll_jitter`](LeaseConfig::poll_jitter), so waiters do not poll in
    /// step). Each poll is one GET, so a waiter costs `1 s / poll_period`
    /// GETs per second it waits: 10 with the default 100 ms. A lock
    /// released gracefully is taken by a waiter about half a poll later on
    /// average, a whole poll at worst. Default `min(ttl/10, 100 ms)`.
    pub poll_period: Duration,
    /// Bound on clock-rate drift relative to real time, as a fraction
    /// (0.01 = clocks may run 1% fast or slow). Holders shorten their
    /// validity by it and contenders lengthen their wait by it.
    pub drift_margin: f64,
    /// Extra time the holder subtracts from its validity (covers scheduling
    /// delays between a check and the side effect it guards).
    pub safety_margin: Duration,
    /// Longest wait for one store request; a write that does not answer in
    /// time is treated as ambiguous and resolved by reading.
    pub request_timeout: Duration,
    /// How contenders decide expiry.
    pub expiry: ExpiryMode,
    /// Run the [store guard](crate::guard) before the first write (default
    /// true): once per store per process, a few requests prove that the
    /// store honours conditional writes. Turning it off is logged at warn.
    pub verify_store: bool,
}

impl Default for LeaseConfig {
    /// A 15 s TTL (see [`LeaseConfig::from_ttl`]).
    fn default() -> Self {
        Self::from_ttl(Duration::from_secs(15))
    }
}

/// Chained setters, one per field, each named `with_` and the field.
impl LeaseConfig {
    /// Sets [`ttl`](LeaseConfig::ttl); the derived timings are not recomputed (use [`from_ttl`](LeaseConfig::from_ttl) for those).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets [`renew_interval`](LeaseConfig::renew_interval).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_renew_interval(mut self, renew_interval: Duration) -> Self {
        self.renew_interval = renew_interval;
        self
    }

    /// Sets [`renew_deadline`](LeaseConfig::renew_deadline).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_renew_deadline(mut self, renew_deadline: Duration) -> Self {
        self.renew_deadline = renew_deadline;
        self
    }

    /// Sets [`retry_period`](LeaseConfig::retry_period).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_retry_period(mut self, retry_period: Duration) -> Self {
        self.retry_period = retry_period;
        self
    }

    /// Sets [`poll_period`](LeaseConfig::poll_period).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_poll_period(mut self, poll_period: Duration) -> Self {
        self.poll_period = poll_period;
        self
    }

    /// Sets [`drift_margin`](LeaseConfig::drift_margin).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_drift_margin(mut self, drift_margin: f64) -> Self {
        self.drift_margin = drift_margin;
        self
    }

    /// Sets [`safety_margin`](LeaseConfig::safety_margin).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_safety_margin(mut self, safety_margin: Duration) -> Self {
        self.safety_margin = safety_margin;
        self
    }

    /// Sets [`request_timeout`](LeaseConfig::request_timeout).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    /// Sets [`expiry`](LeaseConfig::expiry).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_expiry(mut self, expiry: ExpiryMode) -> Self {
        self.expiry = expiry;
        self
    }

    /// Sets [`verify_store`](LeaseConfig::verify_store).
    #[must_use = "the setter returns the changed configuration"]
    pub fn with_verify_store(mut self, verify_store: bool) -> Self {
        self.verify_store = verify_store;
        self
    }
}

impl LeaseConfig {
    /// Derived defaults for `ttl`: renew every `ttl/3`, renew deadline
    /// `2·ttl/3`, retry every `ttl/10`, poll a held lock every
    /// `min(ttl/10, 100 ms)`, 1% drift, safety margin `ttl/20`, request
    /// timeout `ttl/5`, observed-unchanged expiry.
    pub fn from_ttl(ttl: Duration) -> Self {
        LeaseConfig {
            ttl,
            renew_interval: ttl / 3,
            renew_deadline: ttl / 3 * 2,
            retry_period: ttl / 10,
            poll_period: (ttl / 10).min(DEFAULT_POLL_PERIOD),
            drift_margin: 0.01,
            safety_margin: ttl / 20,
            request_timeout: ttl / 5,
            expiry: ExpiryMode::ObservedUnchanged,
            verify_store: true,
        }
    }

    /// How long after sending its last successful write the holder may
    /// consider the lease valid: `ttl·(1 − drift) − safety_margin`.
    pub fn holder_validity(&self) -> Duration {
        scale(self.ttl, 1.0 - drift_fraction(self.drift_margin)).saturating_sub(self.safety_margin)
    }

    /// How long a contender must observe one version unchanged, on its own
    /// clock, before taking over a lease whose record declares `record_ttl`:
    /// `record_ttl·(1 + drift)`.
    pub fn takeover_wait(&self, record_ttl: Duration) -> Duration {
        scale(record_ttl, 1.0 + drift_fraction(self.drift_margin))
    }

    /// The most a waiting [`Lease::acquire`](crate::lease::Lease::acquire)
    /// adds to each wait between polls, so that contenders woken by one
    /// event do not poll in step: `poll_period / 5`.
    pub fn poll_jitter(&self) -> Duration {
        self.poll_period / 5
    }

    /// The longest a contender already waiting in
    /// [`Lease::acquire`](crate::lease::Lease::acquire) can take to hold the
    /// lease after its holder (with this configuration's TTL) crashed, on a
    /// store whose read takes at most `read` and write at most `write`:
    /// `takeover_wait(ttl) + poll_period + 2·poll_jitter + read + write`.
    ///
    /// The worst case is a holder that renewed just after the contender's
    /// poll and died at once. The contender sees that renewal at its next
    /// poll, at most `poll_period + poll_jitter` later; it then waits
    /// `takeover_wait(ttl)` on its own clock, wakes at most `poll_jitter`
    /// past that moment, and reads and writes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use casaas_core::lease::LeaseConfig;
    ///
    /// let config = LeaseConfig::from_ttl(Duration::from_secs(2));
    /// // 2020 ms of waiting out the TTL with its 1% drift margin, 100 ms of
    /// // polling, 2 × 20 ms of jitter, and the two requests.
    /// let bound = config.failover_bound(Duration::from_millis(5), Duration::from_millis(10));
    /// assert_eq!(bound, Duration::from_millis(2020 + 100 + 40 + 15));
    /// ```
    pub fn failover_bound(&self, read: Duration, write: Duration) -> Duration {
        self.takeover_wait(self.ttl)
            .saturating_add(self.poll_period)
            .saturating_add(self.poll_jitter().saturating_mul(2))
            .saturating_add(read)
            .saturating_add(write)
    }

    /// Checks the relations between the numbers; the error names which one
    /// to change.
    pub fn validate(&self) -> Result<(), LeaseError> {
        let bad = |m: String| Err(LeaseError::InvalidConfig(m));
        if self.ttl < Duration::from_millis(1) {
            return bad(format!("ttl ({:?}) must be at least 1ms", self.ttl));
        }
        if !(0.0..0.5).contains(&self.drift_margin) {
            return bad(format!(
                "drift_margin ({}) must be a fraction in [0, 0.5); 0.01 means clocks run within 1% of real time",
                self.drift_margin
            ));
        }
        if self.retry_period.is_zero() {
            return bad("retry_period must be positive".to_string());
        }
        if self.poll_period.is_zero() {
            return bad(
                "poll_period must be positive: it is the pause between a waiter's reads of a held lock (e.g. 100ms)"
                    .to_string(),
            );
        }
        if self.poll_period > self.ttl {
            return bad(format!(
                "poll_period ({:?}) must not exceed ttl ({:?}): a waiter would notice a released lock later than a crashed holder's lease expires; lower poll_period",
                self.poll_period, self.ttl
            ));
        }
        if self.renew_interval.is_zero() {
            return bad("renew_interval must be positive".to_string());
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout must be positive".to_string());
        }
        let validity = self.holder_validity();
        if self.renew_deadline >= validity {
            return bad(format!(
                "renew_deadline ({:?}) must be less than the holder's validity ttl*(1-drift_margin)-safety_margin ({:?}): lower renew_deadline or safety_margin, or raise ttl",
                self.renew_deadline, validity
            ));
        }
        if self
            .renew_interval
            .checked_add(self.retry_period)
            .is_none_or(|sum| sum > self.renew_deadline)
        {
            return bad(format!(
                "renew_interval ({:?}) + retry_period ({:?}) must not exceed renew_deadline ({:?}), so a failed renewal is retried at least once before stepping down: lower renew_interval or retry_period, or raise renew_deadline",
                self.renew_interval, self.retry_period, self.renew_deadline
            ));
        }
        if self.request_timeout > self.renew_deadline {
            return bad(format!(
                "request_timeout ({:?}) must not exceed renew_deadline ({:?}): lower request_timeout",
                self.request_timeout, self.renew_deadline
            ));
        }
        if let ExpiryMode::WallClock { max_skew } = self.expiry {
            if max_skew >= self.ttl {
                return bad(format!(
                    "expiry max_skew ({max_skew:?}) must be less than ttl ({:?}): the wall-clock mode is pointless otherwise",
                    self.ttl
                ));
            }
            // A contender's wall clock may run fast by the drift bound too.
            let needed = scale(self.ttl, drift_fraction(self.drift_margin) * 2.0);
            if self.safety_margin < needed {
                return bad(format!(
                    "safety_margin ({:?}) must be at least 2*drift_margin*ttl ({needed:?}) in the wall-clock expiry mode: raise safety_margin",
                    self.safety_margin
                ));
            }
        }
        Ok(())
    }

    /// [`validate`](LeaseConfig::validate), and also checks that renewals
    /// are no more frequent than the store tolerates.
    pub fn validate_for(&self, capabilities: &Capabilities) -> Result<(), LeaseError> {
        self.validate()?;
        if let Some(min) = capabilities.min_write_interval
            && self.renew_interval < min
        {
            return Err(LeaseError::InvalidConfig(format!(
                "renew_interval ({:?}) is below the store's minimum interval between writes to one key ({min:?}): raise renew_interval (and ttl)",
                self.renew_interval
            )));
        }
        Ok(())
    }
}

/// The drift margin as a fraction in [0, 1]; NaN counts as the worst case.
fn drift_fraction(margin: f64) -> f64 {
    if margin.is_nan() {
        1.0
    } else {
        margin.clamp(0.0, 1.0)
    }
}

/// `duration * factor` for a finite, non-negative factor, saturating at
/// `Duration::MAX` instead of panicking.
fn scale(duration: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(duration.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_numbers_are_rejected_not_panicked_on() {
        let huge = LeaseConfig::from_ttl(Duration::MAX);
        let _ = huge.validate();
        let _ = huge.holder_validity();
        assert_eq!(huge.takeover_wait(Duration::MAX), Duration::MAX);
        let overflow = LeaseConfig {
            renew_interval: Duration::MAX,
            retry_period: Duration::MAX,
            ..LeaseConfig::default()
        };
        assert!(overflow.validate().is_err());
        let nan = LeaseConfig {
            drift_margin: f64::NAN,
            ..LeaseConfig::default()
        };
        assert!(nan.validate().is_err());
        assert!(nan.holder_validity() < nan.ttl);
        assert!(nan.takeover_wait(nan.ttl) > nan.ttl);
    }

    fn message(c: &LeaseConfig) -> String {
        match c.validate() {
            Err(LeaseError::InvalidConfig(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_across_scales() {
        for ms in [10, 100, 1_000, 15_000, 600_000] {
            LeaseConfig::from_ttl(Duration::from_millis(ms))
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn errors_name_the_number_to_change() {
        let mut c = LeaseConfig::default();
        c.renew_deadline = c.ttl;
        assert!(message(&c).starts_with("renew_deadline"));
        let c = LeaseConfig {
            retry_period: Duration::from_secs(6),
            ..LeaseConfig::default()
        };
        assert!(message(&c).contains("retry_period"));
        let c = LeaseConfig {
            drift_margin: 0.7,
            ..LeaseConfig::default()
        };
        assert!(message(&c).starts_with("drift_margin"));
        let c = LeaseConfig::default();
        let caps = Capabilities::full().with_min_write_interval(Duration::from_secs(10));
        let Err(LeaseError::InvalidConfig(m)) = c.validate_for(&caps) else {
            panic!()
        };
        assert!(m.starts_with("renew_interval"));
    }

    #[test]
    fn the_poll_period_is_its_own_setting_and_checked() {
        let c = LeaseConfig::default();
        assert_eq!(c.poll_period, Duration::from_millis(100));
        assert_eq!(c.retry_period, Duration::from_millis(1_500));
        assert_eq!(c.poll_jitter(), Duration::from_millis(20));
        // Below a 1 s TTL the poll follows the retry period, as it used to.
        let short = LeaseConfig::from_ttl(Duration::from_millis(500));
        assert_eq!(short.poll_period, Duration::from_millis(50));
        let zero = LeaseConfig::default().with_poll_period(Duration::ZERO);
        assert!(message(&zero).starts_with("poll_period must be positive"));
        let slow = LeaseConfig::default().with_poll_period(Duration::from_secs(16));
        assert!(message(&slow).starts_with("poll_period (16s) must not exceed ttl"));
        let tuned = LeaseConfig::default().with_poll_period(Duration::from_millis(20));
        assert!(tuned.validate().is_ok());
        assert_eq!(tuned.retry_period, Duration::from_millis(1_500));
    }

    #[test]
    fn margins() {
        let c = LeaseConfig::from_ttl(Duration::from_secs(10));
        assert_eq!(c.holder_validity(), Duration::from_millis(9_400));
        assert_eq!(
            c.takeover_wait(Duration::from_secs(10)),
            Duration::from_millis(10_100)
        );
    }
}
