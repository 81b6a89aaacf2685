#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! A waiter's poll period (`LeaseConfig::poll_period`) is its own setting:
//! a held lock is read every `poll_period` (jittered), retries after errors
//! keep `retry_period`, and a lock released gracefully is taken within one
//! poll. Time is the paused tokio clock behind an injected recording clock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use casaas_core::lease::{
    Clock, Entropy, Lease, LeaseConfig, LeaseError, SleepFuture, SystemClock, WaitOptions,
};
use casaas_core::testkit::CountingStore;
use casaas_core::{CasStore, MemoryStore};

const KEY: &str = "locks/poll";

/// Records every sleep asked of it: the waits between polls among them.
#[derive(Debug, Default)]
struct RecordingClock {
    inner: SystemClock,
    sleeps: Mutex<Vec<Duration>>,
}

impl Clock for RecordingClock {
    fn now(&self) -> Duration {
        self.inner.now()
    }
    fn wall(&self) -> SystemTime {
        self.inner.wall()
    }
    fn sleep(&self, d: Duration) -> SleepFuture {
        self.sleeps.lock().unwrap().push(d);
        self.inner.sleep(d)
    }
}

/// A 15 s TTL (retry period 1.5 s) polled every 50 ms.
fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(15))
        .with_poll_period(Duration::from_millis(50))
        .with_verify_store(false)
}

fn lease(store: &Arc<dyn CasStore>, owner: &str, seed: u64) -> Lease {
    Lease::new(store.clone(), KEY, owner, config())
        .unwrap()
        .with_entropy(Entropy::seeded(seed))
}

/// The waits the waiter chose between its polls (the request timeouts its
/// clock also arms are `request_timeout`, far longer).
fn pauses(clock: &RecordingClock, config: &LeaseConfig) -> Vec<Duration> {
    clock
        .sleeps
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|d| *d < config.request_timeout)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_waiter_polls_a_held_lock_at_the_poll_period_not_the_retry_period() {
    let memory = Arc::new(MemoryStore::new());
    let counting = Arc::new(CountingStore::new(memory));
    let store: Arc<dyn CasStore> = counting.clone();
    let holder = lease(&store, "holder", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();

    let clock = Arc::new(RecordingClock::default());
    let waiter = lease(&store, "waiter", 2).with_clock(clock.clone());
    let config = waiter.config().clone();
    assert_eq!(config.retry_period, Duration::from_millis(1_500));
    let gets_before = counting.counts().get;
    let err = waiter
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(3)))
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::DeadlineExceeded(_)), "{err:?}");

    let waits = pauses(&clock, &config);
    // The last wait is cut to the deadline; every other is one poll period
    // plus at most a fifth of it, and the jitter is really drawn.
    let (last, whole) = waits.split_last().unwrap();
    assert!(*last <= config.poll_period + config.poll_jitter());
    for wait in whole {
        assert!(
            *wait >= config.poll_period && *wait <= config.poll_period + config.poll_jitter(),
            "a wait of {wait:?} between polls, poll_period {:?}",
            config.poll_period
        );
    }
    assert!(
        whole.windows(2).any(|w| w[0] != w[1]),
        "no jitter: {whole:?}"
    );
    // 3 s at 50 to 60 ms a poll: 50 to 61 polls, where the retry period
    // would have made 2 or 3. The holder's renewals read nothing.
    let polls = whole.len() + 1;
    assert!((50..=61).contains(&polls), "{polls} polls in 3 s");
    let gets = counting.counts().get - gets_before;
    assert!(
        gets as usize >= polls && gets as usize <= polls + 1,
        "{gets} GETs for {polls} polls"
    );
    holder.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lock_released_gracefully_is_taken_within_one_poll() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let config = config();
    let bound = config.poll_period + config.poll_jitter();
    let mut longest = Duration::ZERO;
    for trial in 0..20u64 {
        let holder = lease(&store, "holder", 100 + trial)
            .acquire(WaitOptions::default())
            .await
            .unwrap();
        let waiter = lease(&store, "waiter", trial);
        let waiting = tokio::spawn(async move {
            let guard = waiter.acquire(WaitOptions::default()).await.unwrap();
            (guard, tokio::time::Instant::now())
        });
        // Release at a different phase of the waiter's polls each time.
        tokio::time::sleep(Duration::from_millis(200 + trial * 7)).await;
        let released_at = tokio::time::Instant::now();
        holder.release().await.unwrap();
        let (guard, held_at) = waiting.await.unwrap();
        let handoff = held_at.duration_since(released_at);
        assert!(
            handoff <= bound,
            "trial {trial}: held {handoff:?} after the release, bound {bound:?}"
        );
        longest = longest.max(handoff);
        guard.release().await.unwrap();
    }
    // Under the old tie of the poll to retry_period (1.5 s) the handoff
    // would reach past a second; the phases above reach most of one poll.
    assert!(
        longest > config.poll_period / 2,
        "longest handoff {longest:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_after_store_errors_keep_the_retry_period() {
    use casaas_core::testkit::{FaultConfig, FaultyStore};

    let memory: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    // Every read fails as throttled: the attempt never sees the lock.
    let faulty: Arc<dyn CasStore> = Arc::new(FaultyStore::new(
        memory,
        7,
        FaultConfig {
            throttle: 1.0,
            ..FaultConfig::default()
        },
    ));
    let clock = Arc::new(RecordingClock::default());
    let waiter = lease(&faulty, "waiter", 3).with_clock(clock.clone());
    let config = waiter.config().clone();
    let err = waiter
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(10)))
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::DeadlineExceeded(_)), "{err:?}");
    let waits = pauses(&clock, &config);
    let (_, whole) = waits.split_last().unwrap();
    assert!(!whole.is_empty());
    assert!(
        whole.iter().all(|wait| *wait > config.poll_period * 2),
        "an error was retried at the poll period: {whole:?}"
    );
}

/// Many contenders taking turns on the file store in real time, releasing
/// after a short hold: every release finds its own record (nobody took a
/// lease that was held), with the default poll and with the poll tied to
/// the retry period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_polling_fast_never_supersede_a_holder() {
    // A TTL long enough that a loaded machine's stalls do not expire a
    // holder: a superseded release here is a protocol fault, not load.
    for poll in [None, Some(Duration::from_secs(1))] {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn CasStore> =
            Arc::new(casaas_core::FileStore::open(dir.path()).await.unwrap());
        let mut config = LeaseConfig::from_ttl(Duration::from_secs(10));
        if let Some(poll) = poll {
            config = config.with_poll_period(poll);
        }
        let end = tokio::time::Instant::now() + Duration::from_secs(3);
        let mut tasks = Vec::new();
        for c in 0..32 {
            let lease = Lease::new(store.clone(), KEY, format!("c{c}"), config.clone()).unwrap();
            tasks.push(tokio::spawn(async move {
                let mut turns = 0u32;
                loop {
                    let left = end.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return Ok(turns);
                    }
                    match lease
                        .acquire(WaitOptions::default().with_deadline(left))
                        .await
                    {
                        Ok(guard) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            let token = guard.token();
                            guard
                                .release()
                                .await
                                .map_err(|e| format!("c{c} token {token}: {e}"))?;
                            turns += 1;
                        }
                        Err(LeaseError::DeadlineExceeded(_)) => return Ok(turns),
                        Err(e) => return Err(format!("c{c}: {e}")),
                    }
                }
            }));
        }
        let mut turns = 0;
        for task in tasks {
            turns += task
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("poll {poll:?}: {e}"));
        }
        assert!(turns > 10, "{turns} turns");
    }
}
