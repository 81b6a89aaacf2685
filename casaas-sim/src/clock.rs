//! True time, process freezes, and the clients' drifting clocks.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use casaas_core::lease::{Clock, SleepFuture};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::lock;

/// True (simulated) time since the start of the run.
#[derive(Debug, Clone, Copy)]
pub struct TrueTime {
    epoch: Instant,
}

impl TrueTime {
    /// True time starts now.
    pub fn start() -> Self {
        TrueTime {
            epoch: Instant::now(),
        }
    }

    /// Now, in true time.
    pub fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.epoch)
    }

    /// The tokio instant of true time `t`.
    pub fn at(&self, t: Duration) -> Instant {
        self.epoch + t
    }
}

/// A client's process-wide freeze: until this true time, nothing of the
/// client runs.
#[derive(Debug, Default)]
pub struct Freeze {
    until: Mutex<Duration>,
}

impl Freeze {
    /// Freezes the client from now until `until` (true time).
    pub fn until(&self, until: Duration) {
        *lock(&self.until) = until;
    }

    /// Waits until the client is not frozen, then `extra` more if it was
    /// (answers that arrived during a freeze are handled before timers that
    /// expired during it, as a real process would find them waiting).
    pub async fn gate(&self, time: TrueTime, extra: Duration) {
        loop {
            let until = *lock(&self.until);
            if time.now() >= until {
                return;
            }
            tokio::time::sleep_until(time.at(until + extra)).await;
        }
    }
}

/// A client's clock: monotonic time runs at `rate` times true time; the wall
/// clock is a fixed fictional epoch plus true time plus an offset (never the
/// host's clock, so runs replay); sleeps do not end while the client is
/// frozen.
#[derive(Debug, Clone)]
pub struct SimClock {
    pub time: TrueTime,
    pub rate: f64,
    pub wall_offset: Duration,
    pub freeze: Arc<Freeze>,
}

impl SimClock {
    /// Converts a reading of this clock to true time.
    pub fn to_true(&self, local: Duration) -> Duration {
        local.div_f64(self.rate)
    }

    /// Sleeps `d` of true time, as measured on this clock.
    pub async fn pause(&self, d: Duration) {
        self.sleep(d.mul_f64(self.rate)).await;
    }

    /// Freezes the whole client for `d` of true time and waits it out.
    pub async fn freeze_for(&self, d: Duration) {
        self.freeze.until(self.time.now() + d);
        self.freeze.gate(self.time, Duration::ZERO).await;
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        self.time.now().mul_f64(self.rate)
    }

    fn wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + self.time.now()
            - self.wall_offset
    }

    fn sleep(&self, d: Duration) -> SleepFuture {
        let base = d.div_f64(self.rate) + Duration::from_nanos(1);
        let freeze = self.freeze.clone();
        let time = self.time;
        Box::pin(async move {
            tokio::time::sleep(base).await;
            freeze.gate(time, Duration::from_millis(1)).await;
        })
    }
}

/// Clock rates for `n` clients, spread evenly over `[1 − d, 1 + d]`, both
/// extremes included, in a seeded order.
pub fn spread_rates(n: usize, deviation: f64, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let n = n.max(2);
    let mut rates: Vec<f64> = (0..n)
        .map(|i| 1.0 - deviation + 2.0 * deviation * i as f64 / (n - 1) as f64)
        .collect();
    for i in (1..n).rev() {
        rates.swap(i, rng.random_range(0..=i));
    }
    rates
}

/// A uniformly random duration in `[0, max]`.
pub fn random_duration(rng: &mut ChaCha8Rng, max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=nanos))
}
