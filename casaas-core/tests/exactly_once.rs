#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Exactly once, and never two holders, at every public entry point: each
//! test is a schedule of events under which a helper used to apply twice or
//! hand out a second holder (writes whose answer is late, writes that land
//! after their caller gave up, read-backs that fail, futures that are
//! dropped, tasks that share one handle).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{
    AcquireOutcome, Election, Entropy, FencedLog, FencedResource, Lease, LeaseConfig, LeaseError,
    LeaseRecord, LostReason, WaitOptions,
};
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, MemoryStore, StoredObject, Version,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What happens to the next write (create or replace) the store receives.
#[derive(Debug, Clone, Copy)]
enum WriteScript {
    /// Apply at once; the answer reaches the caller after this long.
    AnswerAfter(Duration),
    /// Answer "no answer" (ambiguous) at once; apply this long afterwards,
    /// as a request stuck in the network would.
    LandAfter(Duration),
    /// Apply, then lose the answer.
    LoseAnswer,
}

/// A memory store whose writes follow a script, and whose reads can be
/// made to fail.
#[derive(Debug)]
struct Scripted {
    inner: Arc<MemoryStore>,
    writes: Mutex<VecDeque<WriteScript>>,
    failing_reads: AtomicU32,
    /// How long each read's answer takes to come back (the read itself
    /// sees the store as it was when it was sent).
    read_delay: Mutex<Duration>,
}

impl Scripted {
    /// A new store that has passed the store guard, so that scripted
    /// writes meet the protocol's requests only.
    async fn new() -> Arc<Self> {
        let store = Arc::new(Scripted {
            inner: Arc::new(MemoryStore::new()),
            writes: Mutex::new(VecDeque::new()),
            failing_reads: AtomicU32::new(0),
            read_delay: Mutex::new(Duration::ZERO),
        });
        casaas_core::testkit::pass_store_guard(store.as_ref())
            .await
            .unwrap();
        store
    }

    fn script(&self, step: WriteScript) {
        self.writes.lock().unwrap().push_back(step);
    }

    fn delay_reads(&self, delay: Duration) {
        *self.read_delay.lock().unwrap() = delay;
    }

    async fn answer_read<T>(&self, result: T) -> T {
        let delay = *self.read_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        result
    }

    fn fail_next_reads(&self, n: u32) {
        self.failing_reads.store(n, Ordering::SeqCst);
    }

    async fn write<F, Fut>(&self, apply: F) -> Result<Version, CasError>
    where
        F: FnOnce(Arc<MemoryStore>) -> Fut,
        Fut: std::future::Future<Output = Result<Version, CasError>> + Send + 'static,
    {
        let step = self.writes.lock().unwrap().pop_front();
        let fut = apply(self.inner.clone());
        match step {
            None => fut.await,
            Some(WriteScript::AnswerAfter(delay)) => {
                let result = fut.await;
                tokio::time::sleep(delay).await;
                result
            }
            Some(WriteScript::LandAfter(delay)) => {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = fut.await;
                });
                Err(CasError::new(ErrorKind::Ambiguous, "scripted: no answer"))
            }
            Some(WriteScript::LoseAnswer) => {
                let _ = fut.await;
                Err(CasError::new(ErrorKind::Ambiguous, "scripted: answer lost"))
            }
        }
    }

    fn read_fails(&self) -> bool {
        self.failing_reads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

#[async_trait]
impl CasStore for Scripted {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        if self.read_fails() {
            return Err(CasError::new(ErrorKind::Ambiguous, "scripted: read failed"));
        }
        let result = self.inner.get(key).await;
        self.answer_read(result).await
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let key = key.to_string();
        self.write(|s| async move { s.create(&key, body).await })
            .await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let key = key.to_string();
        let expected = expected.clone();
        self.write(|s| async move { s.replace(&key, &expected, body).await })
            .await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.inner.delete(key, expected).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        let result = self.inner.list(prefix).await;
        self.answer_read(result).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn describe(&self) -> String {
        "scripted memory store".to_string()
    }

    fn identity(&self) -> String {
        format!("scripted({})", self.inner.identity())
    }
}

const KEY: &str = "locks/shared";

fn lease_on(store: Arc<Scripted>, owner: &str, seed: u64) -> Lease {
    Lease::new(
        store,
        KEY,
        owner,
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )
    .unwrap()
    .with_entropy(Entropy::seeded(seed))
}

// ---------------------------------------------------------------- leases

#[tokio::test(start_paused = true)]
async fn tasks_sharing_one_lease_never_both_hold_it() {
    let store = Scripted::new().await;
    // Task A's create lands at once but its answer takes 1 s (well under
    // the 2 s request timeout).
    store.script(WriteScript::AnswerAfter(Duration::from_secs(1)));
    let lease = lease_on(store.clone(), "node", 1);
    let a = lease.clone();
    let task_a = tokio::spawn(async move { a.try_acquire().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Task B reads the record A wrote while A's answer is in flight.
    let b = lease.try_acquire().await.unwrap();
    let a = task_a.await.unwrap().unwrap();
    let holders = [&a, &b]
        .iter()
        .filter(|o| matches!(o, AcquireOutcome::Acquired(_)))
        .count();
    assert_eq!(holders, 1, "a: {a:?}\nb: {b:?}");
    assert!(matches!(a, AcquireOutcome::Acquired(_)));
}

#[tokio::test(start_paused = true)]
async fn clones_of_a_lease_racing_to_acquire_get_one_guard() {
    let store = Scripted::new().await;
    let lease = lease_on(store.clone(), "node", 2);
    for _ in 0..4 {
        store.script(WriteScript::AnswerAfter(Duration::from_millis(300)));
    }
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let l = lease.clone();
            tokio::spawn(async move {
                l.acquire(WaitOptions::default().with_deadline(Duration::from_secs(3)))
                    .await
            })
        })
        .collect();
    let mut guards = Vec::new();
    for t in tasks {
        if let Ok(g) = t.await.unwrap() {
            guards.push(g);
        }
    }
    assert_eq!(
        guards.len(),
        1,
        "every acquisition within one TTL: {guards:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_attempt_whose_write_lands_later_is_claimed_once() {
    let store = Scripted::new().await;
    store.script(WriteScript::AnswerAfter(Duration::from_secs(1)));
    let lease = lease_on(store.clone(), "node", 3);
    // The attempt is abandoned while its write is in flight.
    let dropped = tokio::time::timeout(Duration::from_millis(500), lease.try_acquire()).await;
    assert!(dropped.is_err());
    // Its write landed; the next attempt recognises it and renews it
    // instead of waiting a whole TTL for itself.
    let start = Instant::now();
    let guard = match lease.try_acquire().await.unwrap() {
        AcquireOutcome::Acquired(g) => g,
        AcquireOutcome::Held(h) => panic!("our own landed write must be claimed: {h:?}"),
        other => panic!("unexpected outcome {other:?}"),
    };
    assert_eq!(guard.token(), 1);
    assert!(start.elapsed() < Duration::from_secs(1));
    // And nobody else claims it again.
    assert!(matches!(
        lease.try_acquire().await.unwrap(),
        AcquireOutcome::Held(_)
    ));
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn acquire_never_returns_a_guard_once_cancelled() {
    let store = Scripted::new().await;
    store.script(WriteScript::AnswerAfter(Duration::from_secs(1)));
    let lease = lease_on(store.clone(), "node", 4);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        canceller.cancel();
    });
    let result = lease
        .acquire(WaitOptions::default().with_cancel(cancel))
        .await;
    assert!(matches!(result, Err(LeaseError::Cancelled)), "{result:?}");
    // The lease it got meanwhile was given back.
    let object = store.inner.get(KEY).await.unwrap().unwrap();
    assert!(LeaseRecord::decode(KEY, &object.body).unwrap().released);
}

#[tokio::test(start_paused = true)]
async fn a_ttl_with_a_sub_millisecond_part_is_validated_as_recorded() {
    let store = Scripted::new().await;
    // The record keeps whole milliseconds (1 ms); a renew deadline derived
    // from 1.999 ms would outlive the validity of a 1 ms lease.
    let config = LeaseConfig::from_ttl(Duration::from_micros(1999));
    match Lease::new(store, KEY, "node", config) {
        Err(LeaseError::InvalidConfig(message)) => {
            assert!(message.contains("renew_deadline"), "{message}")
        }
        other => panic!("expected an invalid configuration, got {other:?}"),
    }
}

// ---------------------------------------------------- fenced resource

fn counter(store: Arc<Scripted>) -> FencedResource<u64> {
    FencedResource::<u64>::new(store, "table/counter")
        .unwrap()
        .with_entropy(Entropy::seeded(7))
        .with_retry_policy(
            casaas_core::lease::RetryPolicy::default()
                .with_request_timeout(Duration::from_secs(1))
                .with_retry_period(Duration::from_millis(100))
                .with_max_attempts(8),
        )
}

#[tokio::test(start_paused = true)]
async fn a_fenced_update_whose_write_lands_after_its_read_back_applies_once() {
    let store = Scripted::new().await;
    let counter = counter(store.clone());
    // The write gets no answer and lands 50 ms later: after the read-back
    // that finds nothing, before the retry.
    store.script(WriteScript::LandAfter(Duration::from_millis(50)));
    let result = counter.update(1, |v| v.copied().unwrap_or(0) + 1).await;
    let value = counter.read().await.unwrap().unwrap().value;
    assert_eq!(value, 1, "one increment, applied once (result {result:?})");
    assert_eq!(result.unwrap().value, 1);
}

#[tokio::test(start_paused = true)]
async fn a_fenced_update_racing_its_own_late_write_applies_once() {
    let store = Scripted::new().await;
    let counter = counter(store.clone());
    counter.update(1, |_| 10).await.unwrap();
    // Lands after the retry has read the old value, before the retry writes.
    store.script(WriteScript::LandAfter(Duration::from_millis(100)));
    store.script(WriteScript::AnswerAfter(Duration::ZERO));
    let result = counter.update(1, |v| v.copied().unwrap_or(0) + 1).await;
    assert_eq!(
        counter.read().await.unwrap().unwrap().value,
        11,
        "{result:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fenced_update_overwritten_after_landing_is_not_applied_again() {
    let store = Scripted::new().await;
    let counter = counter(store.clone());
    counter.update(1, |_| 0).await.unwrap();
    // Ours lands, its answer is lost and the read-back fails; meanwhile
    // another writer increments on top of ours.
    store.script(WriteScript::LoseAnswer);
    store.fail_next_reads(1);
    let other = counter.clone();
    let update = tokio::spawn({
        let c = counter.clone();
        async move { c.update(1, |v| v.copied().unwrap_or(0) + 1).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    other
        .update(1, |v| v.copied().unwrap_or(0) + 1)
        .await
        .unwrap();
    let result = update.await.unwrap();
    assert!(result.is_ok(), "ours is in the history: {result:?}");
    assert_eq!(counter.read().await.unwrap().unwrap().value, 2);
}

// ----------------------------------------------------------- fenced log

fn log(store: Arc<Scripted>) -> FencedLog<String> {
    FencedLog::<String>::new(store, "table/_log")
        .unwrap()
        .with_entropy(Entropy::seeded(9))
        .with_retry_policy(
            casaas_core::lease::RetryPolicy::default()
                .with_request_timeout(Duration::from_secs(1))
                .with_retry_period(Duration::from_millis(100))
                .with_max_attempts(8),
        )
}

async fn entries_in_store(store: &Scripted) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for entry in store.inner.list("table/_log/").await.unwrap() {
        let Some(seq) = entry
            .key
            .rsplit('/')
            .next()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let object = store.inner.get(&entry.key).await.unwrap().unwrap();
        let value: serde_json::Value = serde_json::from_slice(&object.body).unwrap();
        out.push((seq, value["value"].as_str().unwrap().to_string()));
    }
    out.sort();
    out
}

#[tokio::test(start_paused = true)]
async fn a_log_append_whose_answer_and_read_backs_are_lost_appends_once() {
    let store = Scripted::new().await;
    let log = log(store.clone());
    log.append(1, "first".into()).await.unwrap();
    store.script(WriteScript::LoseAnswer);
    store.fail_next_reads(2);
    let result = log.append(1, "second".into()).await;
    let stored = entries_in_store(&store).await;
    assert_eq!(
        stored,
        vec![(1, "first".to_string()), (2, "second".to_string())],
        "result {result:?}"
    );
    if let Ok(entry) = result {
        assert_eq!(entry.seq, 2);
    }
}

#[tokio::test(start_paused = true)]
async fn a_log_append_that_lands_after_its_check_appends_once() {
    let store = Scripted::new().await;
    let log = log(store.clone());
    log.append(1, "first".into()).await.unwrap();
    // No answer; the create lands 185 ms later: after the retry has looked
    // for it, before the retry reads where the log ends.
    store.delay_reads(Duration::from_millis(50));
    store.script(WriteScript::LandAfter(Duration::from_millis(185)));
    let result = log.append(1, "second".into()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stored = entries_in_store(&store).await;
    assert_eq!(
        stored,
        vec![(1, "first".to_string()), (2, "second".to_string())],
        "result {result:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_log_entry_that_vanished_is_an_error_not_a_skipped_fence() {
    let store = Scripted::new().await;
    let log = log(store.clone());
    log.append(5, "by token 5".into()).await.unwrap();
    log.append(5, "by token 5 again".into()).await.unwrap();
    // Someone outside the protocol deletes the latest entry.
    let key = log.entry_key(2);
    let version = store.inner.get(&key).await.unwrap().unwrap().version;
    store.inner.delete(&key, &version).await.unwrap();
    let fresh = FencedLog::<String>::new(store.clone(), "table/_log").unwrap();
    let result = fresh.append(1, "zombie".into()).await;
    assert!(result.is_err(), "{result:?}");
    assert!(
        !entries_in_store(&store)
            .await
            .iter()
            .any(|(_, v)| v == "zombie")
    );
}

// ------------------------------------------------------------- election

#[tokio::test(start_paused = true)]
async fn a_dropped_runner_releases_only_after_its_work_has_stopped() {
    let store = Scripted::new().await;
    let work_ended: Arc<Mutex<Option<Instant>>> = Arc::default();
    let a = Election::new(lease_on(store.clone(), "a", 11));
    let ended = work_ended.clone();
    let runner = a
        .runner()
        .on_started_leading(move |_token, cancel: CancellationToken| {
            let ended = ended.clone();
            async move {
                cancel.cancelled().await;
                // Cleaning up takes a while.
                tokio::time::sleep(Duration::from_secs(3)).await;
                *ended.lock().unwrap() = Some(Instant::now());
            }
        });
    // The runner is dropped one second into its term.
    let dropped =
        tokio::time::timeout(Duration::from_secs(1), runner.run(WaitOptions::default())).await;
    assert!(dropped.is_err());
    let b = Election::new(lease_on(store.clone(), "b", 12));
    let leadership = b.campaign(Default::default()).await.unwrap();
    let b_started = Instant::now();
    let a_ended = work_ended
        .lock()
        .unwrap()
        .expect("the dropped runner's work must be run to its end");
    assert!(
        a_ended <= b_started,
        "b started leading {:?} before a's work ended",
        a_ended - b_started
    );
    leadership.resign().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_work_stops_is_reported_as_lost() {
    let store = Scripted::new().await;
    let reasons: Arc<Mutex<Vec<LostReason>>> = Arc::default();
    let election = Election::new(lease_on(store.clone(), "a", 13));
    let seen = reasons.clone();
    let runner = election
        .runner()
        .with_recampaign(false)
        .on_started_leading(|_token, cancel: CancellationToken| async move {
            cancel.cancelled().await;
            // Ignores the cancellation for longer than the lease lives.
            tokio::time::sleep(Duration::from_secs(20)).await;
        })
        .on_stopped_leading(move |reason| seen.lock().unwrap().push(reason));
    let cancel = CancellationToken::new();
    let run = tokio::spawn(runner.run(WaitOptions::default().with_cancel(cancel.clone())));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cancel.cancel();
    // While the work winds down, someone else takes the lock object over.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let object = store.inner.get(KEY).await.unwrap().unwrap();
    let usurper = LeaseRecord::new("usurper", "0123456789abcdef", 99, 10_000, 0);
    store
        .inner
        .replace(KEY, &object.version, usurper.encode())
        .await
        .unwrap();
    run.await.unwrap().unwrap();
    let reasons = reasons.lock().unwrap().clone();
    assert_eq!(reasons.len(), 1);
    assert!(
        matches!(reasons[0], LostReason::Superseded { .. }),
        "{reasons:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn no_new_leader_news_of_ourselves_after_we_stopped_leading() {
    let store = Scripted::new().await;
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let election = Election::new(lease_on(store.clone(), "a", 14));
    let (on_new, on_stop) = (events.clone(), events.clone());
    let runner = election
        .runner()
        .on_new_leader(move |leader| {
            on_new
                .lock()
                .unwrap()
                .push(format!("leader {:?}", leader.map(|l| l.owner)))
        })
        .on_stopped_leading(move |reason| {
            on_stop.lock().unwrap().push(format!("stopped {reason}"))
        });
    let cancel = CancellationToken::new();
    let run = tokio::spawn(runner.run(WaitOptions::default().with_cancel(cancel.clone())));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Every write now goes unanswered: the renewal misses its deadline and
    // we step down while the record still names us; campaigning again
    // cannot succeed either.
    for _ in 0..1000 {
        store.script(WriteScript::LandAfter(Duration::from_secs(3600)));
    }
    tokio::time::sleep(Duration::from_secs(15)).await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    let events = events.lock().unwrap().clone();
    let stopped = events
        .iter()
        .position(|e| e.starts_with("stopped"))
        .unwrap_or_else(|| panic!("stopped leading: {events:?}"));
    assert!(
        !events[stopped..].iter().any(|e| e == "leader Some(\"a\")"),
        "{events:?}"
    );
}
