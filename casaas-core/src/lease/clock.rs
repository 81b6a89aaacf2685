//! Time and randomness, injectable so that runs replay.
//!
//! Every timing decision of the lease protocol (how long a version was
//! observed unchanged, how much validity a holder has left, when to renew,
//! how long to back off) is measured on a [`Clock`], and every random choice
//! (write nonces, jitter) comes from an [`Entropy`]. Production code uses
//! [`SystemClock`] and [`Entropy::from_os`]; a simulation injects drifting
//! clocks ([`DriftingClock`]) and seeded entropy ([`Entropy::seeded`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A boxed, sendable future, as returned by [`Clock::sleep`].
pub type SleepFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of time for the lease protocol. Object safe.
///
/// `now` must be monotonic (never goes backwards) and advance at a rate
/// within the configured drift bound of real time; it need not agree with
/// any other machine's clock. `wall` is only used for advisory timestamps
/// in records and for the opt-in wall-clock expiry mode.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Monotonic time since an arbitrary, fixed epoch of this clock.
    fn now(&self) -> Duration;
    /// Wall-clock time (advisory).
    fn wall(&self) -> SystemTime;
    /// Sleeps for `d` as measured by this clock.
    fn sleep(&self, d: Duration) -> SleepFuture;
}

/// The default clock: tokio's monotonic clock (so tokio's paused test time
/// drives it) and the system wall clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    epoch: tokio::time::Instant,
}

impl SystemClock {
    /// A clock whose epoch is now.
    pub fn new() -> Self {
        SystemClock {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.epoch)
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, d: Duration) -> SleepFuture {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A clock that runs at `rate` times the speed of a base clock (and whose
/// wall clock is offset by `wall_offset_ms`), to simulate rate drift and
/// wall-clock skew between machines.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use casaas_core::lease::{Clock, DriftingClock, SystemClock};
///
/// // A clock 1% fast.
/// let fast = DriftingClock::new(Arc::new(SystemClock::new()), 1.01, 0);
/// assert!(fast.now() < Duration::from_secs(1));
/// ```
#[derive(Debug, Clone)]
pub struct DriftingClock {
    base: Arc<dyn Clock>,
    rate: f64,
    wall_offset_ms: i64,
}

impl DriftingClock {
    /// Wraps `base`. `rate` must be positive (1.0 = no drift); it is clamped
    /// to at least 1e-6.
    pub fn new(base: Arc<dyn Clock>, rate: f64, wall_offset_ms: i64) -> Self {
        let rate = if rate.is_finite() {
            rate.max(1e-6)
        } else {
            1.0
        };
        DriftingClock {
            base,
            rate,
            wall_offset_ms,
        }
    }

    /// The rate relative to the base clock.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

impl Clock for DriftingClock {
    fn now(&self) -> Duration {
        self.base.now().mul_f64(self.rate)
    }

    fn wall(&self) -> SystemTime {
        let base = self.base.wall();
        let offset = Duration::from_millis(self.wall_offset_ms.unsigned_abs());
        if self.wall_offset_ms >= 0 {
            base + offset
        } else {
            base.checked_sub(offset).unwrap_or(base)
        }
    }

    fn sleep(&self, d: Duration) -> SleepFuture {
        // d on this clock is d / rate on the base clock; round up so that a
        // sleep never ends early as measured here.
        let base = d.div_f64(self.rate) + Duration::from_nanos(1);
        self.base.sleep(base)
    }
}

/// Randomness for nonces and jitter: a ChaCha generator shared by clones,
/// seeded from the OS or from a fixed seed so that a simulation replays.
#[derive(Clone)]
pub struct Entropy {
    rng: Arc<Mutex<ChaCha8Rng>>,
}

impl fmt::Debug for Entropy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Entropy")
    }
}

impl Default for Entropy {
    fn default() -> Self {
        Self::from_os()
    }
}

impl Entropy {
    /// Seeded from the operating system.
    pub fn from_os() -> Self {
        Entropy {
            rng: Arc::new(Mutex::new(ChaCha8Rng::from_os_rng())),
        }
    }

    /// Deterministic from `seed`.
    pub fn seeded(seed: u64) -> Self {
        Entropy {
            rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ChaCha8Rng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An independent source that starts where this one stands, without
    /// advancing it: a side task (the store guard) then draws the same in a
    /// replayed run without shifting this source's later draws.
    pub(crate) fn fork(&self) -> Self {
        Entropy {
            rng: Arc::new(Mutex::new(self.lock().clone())),
        }
    }

    /// A fresh 128-bit nonce as 32 hex digits.
    pub fn nonce(&self) -> String {
        let mut bytes = [0u8; 16];
        self.lock().fill_bytes(&mut bytes);
        hex::encode(bytes)
    }

    /// A uniformly random duration in `[0, max]`.
    pub fn jitter(&self, max: Duration) -> Duration {
        if max.is_zero() {
            return Duration::ZERO;
        }
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.lock().random_range(0..=nanos))
    }

    /// A uniformly random `u64`.
    pub fn next_u64(&self) -> u64 {
        self.lock().next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_entropy_replays() {
        let a = Entropy::seeded(3);
        let b = Entropy::seeded(3);
        assert_eq!(a.nonce(), b.nonce());
        assert_eq!(
            a.jitter(Duration::from_secs(1)),
            b.jitter(Duration::from_secs(1))
        );
        assert_eq!(a.nonce().len(), 32);
        assert_ne!(a.nonce(), a.nonce());
    }

    #[tokio::test(start_paused = true)]
    async fn drifting_clock_sleeps_on_its_own_time() {
        let base: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let slow = DriftingClock::new(base.clone(), 0.5, -1000);
        let t0 = slow.now();
        slow.sleep(Duration::from_secs(1)).await;
        assert!(slow.now() - t0 >= Duration::from_secs(1));
        assert!(base.now() >= Duration::from_secs(2));
        assert!(slow.wall() < base.wall());
    }
}
