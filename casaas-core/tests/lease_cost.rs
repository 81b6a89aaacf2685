#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Request floors: every lease operation costs exactly the requests listed
//! in docs/protocol.md ("Request cost"), counted with `CountingStore` on
//! the in-memory store under paused tokio time. A change that adds a
//! request to a hot path fails here.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use casaas_core::lease::{
    AcquireOutcome, Clock, Election, Entropy, FencedLog, FencedResource, Lease, LeaseConfig,
    LeaseError, LeaseGuard, LeaseRecord, SleepFuture, SystemClock, WaitOptions,
};
use casaas_core::testkit::{CountingStore, RequestCounts};
use casaas_core::{CasStore, MemoryStore};

const KEY: &str = "locks/cost";
const TTL: Duration = Duration::from_secs(10);

struct Setup {
    counting: CountingStore<MemoryStore>,
    store: Arc<dyn CasStore>,
}

/// A counted store that has passed the store guard (whose own cost is
/// pinned by `the_store_guard_costs_eight_requests_once_per_store`).
async fn setup() -> Setup {
    let s = fresh();
    casaas_core::testkit::pass_store_guard(s.store.as_ref())
        .await
        .unwrap();
    s
}

/// A counted store on which nothing has run yet.
fn fresh() -> Setup {
    let counting = CountingStore::new(MemoryStore::new());
    let store: Arc<dyn CasStore> = Arc::new(counting.clone());
    Setup { counting, store }
}

fn lease(store: &Arc<dyn CasStore>, owner: &str, seed: u64) -> Lease {
    Lease::new(store.clone(), KEY, owner, LeaseConfig::from_ttl(TTL))
        .unwrap()
        .with_entropy(Entropy::seeded(seed))
}

fn acquired(outcome: AcquireOutcome) -> LeaseGuard {
    match outcome {
        AcquireOutcome::Acquired(g) => g,
        AcquireOutcome::Held(h) => panic!("expected to acquire, held by {h:?}"),
        other => panic!("unexpected outcome {other:?}"),
    }
}

/// Requests sent between two snapshots.
fn since(before: RequestCounts, after: RequestCounts) -> RequestCounts {
    RequestCounts {
        get: after.get - before.get,
        create: after.create - before.create,
        replace: after.replace - before.replace,
        delete: after.delete - before.delete,
        list: after.list - before.list,
    }
}

/// Shorthand for an expected count: (get, create, replace, delete, list).
fn counts(get: u64, create: u64, replace: u64, delete: u64, list: u64) -> RequestCounts {
    RequestCounts {
        get,
        create,
        replace,
        delete,
        list,
    }
}

impl Setup {
    /// Runs `op` and returns what it cost.
    async fn cost<T>(&self, op: impl std::future::Future<Output = T>) -> (T, RequestCounts) {
        let before = self.counting.counts();
        let out = op.await;
        (out, since(before, self.counting.counts()))
    }
}

#[tokio::test(start_paused = true)]
async fn acquire_of_an_absent_lock_is_one_get_and_one_create() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    let (outcome, c) = s.cost(a.try_acquire()).await;
    let guard = acquired(outcome.unwrap());
    assert_eq!(c, counts(1, 1, 0, 0, 0), "try_acquire on an absent lock");
    assert_eq!(guard.token(), 1);
    guard.release().await.unwrap();

    // The blocking form costs the same when the lock is free.
    let b = Lease::new(
        s.store.clone(),
        "locks/other",
        "b",
        LeaseConfig::from_ttl(TTL),
    )
    .unwrap();
    let (guard, c) = s.cost(b.acquire(WaitOptions::default())).await;
    assert_eq!(c, counts(1, 1, 0, 0, 0), "acquire on an absent lock");
    guard.unwrap().release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_store_guard_costs_eight_requests_once_per_store() {
    let s = fresh();
    // First write on a store: the guard's 8 requests (2 creates, 3
    // replaces, 2 reads, 1 delete of its own key), then the acquire's 2.
    let a = lease(&s.store, "a", 1);
    let (outcome, c) = s.cost(a.try_acquire()).await;
    let guard = acquired(outcome.unwrap());
    assert_eq!(c, counts(1 + 2, 1 + 2, 3, 1, 0), "first acquire on a store");

    // Every later handle on the same store, of any kind, pays nothing more.
    let b = Lease::new(
        s.store.clone(),
        "locks/other",
        "b",
        LeaseConfig::from_ttl(TTL),
    )
    .unwrap();
    let (outcome, c) = s.cost(b.try_acquire()).await;
    let other = acquired(outcome.unwrap());
    assert_eq!(c, counts(1, 1, 0, 0, 0), "second lease on the store");
    let r = FencedResource::<u64>::new(s.store.clone(), "fenced/value").unwrap();
    let (v, c) = s.cost(r.update(1, |v| v.copied().unwrap_or(0) + 1)).await;
    v.unwrap();
    assert_eq!(
        c,
        counts(1, 1, 0, 0, 0),
        "fenced resource on a guarded store"
    );

    // A second handle on the same objects (another `open_store` of one URL)
    // shares the verdict.
    let same: Arc<dyn CasStore> = Arc::new(s.counting.clone());
    let c2 = Lease::new(same, "locks/third", "c", LeaseConfig::from_ttl(TTL)).unwrap();
    let (outcome, c) = s.cost(c2.try_acquire()).await;
    acquired(outcome.unwrap()).release().await.unwrap();
    assert_eq!(c, counts(1, 1, 0, 0, 0), "a second handle on the store");

    // Renewals pay nothing for it either.
    let (_, c) = s.cost(tokio::time::sleep(TTL)).await;
    assert_eq!(c.total(), c.replace, "renewals are replaces only");
    guard.release().await.unwrap();
    other.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn acquire_of_a_released_lock_is_one_get_and_one_replace() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    acquired(a.try_acquire().await.unwrap())
        .release()
        .await
        .unwrap();
    let b = lease(&s.store, "b", 2);
    let (outcome, c) = s.cost(b.try_acquire()).await;
    let guard = acquired(outcome.unwrap());
    assert_eq!(c, counts(1, 0, 1, 0, 0));
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn acquiring_again_after_our_release_is_one_replace_so_a_lock_costs_two_requests() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    acquired(a.try_acquire().await.unwrap())
        .release()
        .await
        .unwrap();
    for round in 2..=4 {
        let (outcome, c) = s.cost(a.try_acquire()).await;
        let guard = acquired(outcome.unwrap());
        assert_eq!(c, counts(0, 0, 1, 0, 0), "re-acquire, round {round}");
        assert_eq!(guard.token(), round, "each holding gets the next token");
        let (released, c) = s.cost(guard.release()).await;
        released.unwrap();
        assert_eq!(c, counts(0, 0, 1, 0, 0), "release, round {round}");
    }
    // The blocking acquire takes the same path.
    let (guard, c) = s.cost(a.acquire(WaitOptions::default())).await;
    assert_eq!(c, counts(0, 0, 1, 0, 0), "acquire after release");
    assert_eq!(guard.unwrap().token(), 5);
}

#[tokio::test(start_paused = true)]
async fn acquiring_again_after_the_lock_moved_on_reads_it_and_keeps_tokens_growing() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    let b = lease(&s.store, "b", 2);
    acquired(a.try_acquire().await.unwrap())
        .release()
        .await
        .unwrap();
    // b holds and releases in between: a's remembered version is stale.
    let held_by_b = acquired(b.try_acquire().await.unwrap());
    assert_eq!(held_by_b.token(), 2);
    let (outcome, c) = s.cost(a.try_acquire()).await;
    assert!(
        matches!(outcome.unwrap(), AcquireOutcome::Held(_)),
        "b holds it"
    );
    assert_eq!(
        c,
        counts(1, 0, 1, 0, 0),
        "the refused replace, then the read"
    );
    held_by_b.release().await.unwrap();
    let (outcome, c) = s.cost(a.try_acquire()).await;
    let guard = acquired(outcome.unwrap());
    assert_eq!(c, counts(1, 0, 1, 0, 0), "a read, then the replace");
    assert_eq!(guard.token(), 3);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_attempt_on_a_held_lock_is_one_get() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    let guard = acquired(a.try_acquire().await.unwrap());
    let b = lease(&s.store, "b", 2);
    let (outcome, c) = s.cost(b.try_acquire()).await;
    assert!(matches!(outcome.unwrap(), AcquireOutcome::Held(_)));
    assert_eq!(c, counts(1, 0, 0, 0, 0));
    // So does `Lease::read` and `Election::leader`.
    let (_, c) = s.cost(b.read()).await;
    assert_eq!(c, counts(1, 0, 0, 0, 0), "Lease::read");
    let election = Election::new(b.clone());
    let (leader, c) = s.cost(election.leader()).await;
    assert_eq!(leader.unwrap().unwrap().owner, "a");
    assert_eq!(c, counts(1, 0, 0, 0, 0), "Election::leader");
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn taking_over_an_expired_lock_is_one_get_and_one_replace() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    acquired(a.try_acquire().await.unwrap()).abandon();

    let b = lease(&s.store, "b", 2);
    let (outcome, c) = s.cost(b.try_acquire()).await;
    let AcquireOutcome::Held(held) = outcome.unwrap() else {
        panic!("a fresh record must not be taken over")
    };
    assert_eq!(c, counts(1, 0, 0, 0, 0), "first observation");
    // The record's TTL plus the 1% drift margin, from the first observation.
    assert_eq!(held.takeover_in, Duration::from_millis(10_100));
    tokio::time::sleep(held.takeover_in).await;

    let (outcome, c) = s.cost(b.try_acquire()).await;
    let guard = acquired(outcome.unwrap());
    assert_eq!(c, counts(1, 0, 1, 0, 0), "the taking attempt");
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
}

/// A clock that records every sleep, to count the polls of a blocking
/// acquire independently of the store.
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

#[tokio::test(start_paused = true)]
async fn waiting_out_a_crashed_holder_is_one_get_per_poll_and_one_replace() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    acquired(a.try_acquire().await.unwrap()).abandon();

    let clock = Arc::new(RecordingClock::default());
    let b = lease(&s.store, "b", 2).with_clock(clock.clone());
    let config = b.config().clone();
    let start = clock.now();
    let (guard, c) = s.cost(b.acquire(WaitOptions::default())).await;
    let guard = guard.unwrap();
    let waited = clock.now() - start;

    // Every request arms one timeout of `request_timeout`; the waits between
    // polls are at most `poll_period` plus 20% jitter, which is shorter.
    let pauses = clock
        .sleeps
        .lock()
        .unwrap()
        .iter()
        .filter(|d| **d <= config.poll_period.mul_f64(1.2))
        .count() as u64;
    let polls = pauses + 1;
    assert!(config.poll_period.mul_f64(1.2) < config.request_timeout);
    assert_eq!(c, counts(polls, 0, 1, 0, 0), "waited {waited:?}");
    // ttl·(1+ρ) = 10.1 s of observation, polled every 100 ms to 120 ms:
    // the first poll plus 85 to 101 more (the last wait may be cut short).
    eprintln!("{polls} polls over {waited:?}");
    assert!((86..=103).contains(&polls), "{polls} polls");
    assert!(waited >= Duration::from_millis(10_100), "{waited:?}");
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn renewal_is_one_replace_per_interval_and_no_reads() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    let guard = acquired(a.try_acquire().await.unwrap());
    let interval = a.config().renew_interval;
    let before = s.counting.counts();
    // Ten renew intervals and a half: exactly ten renewals.
    tokio::time::sleep(interval * 10 + interval / 2).await;
    let c = since(before, s.counting.counts());
    assert_eq!(c, counts(0, 0, 10, 0, 0));
    assert!(guard.is_held());
    assert!(guard.health().is_healthy());
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn release_is_one_replace_and_no_delete() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    let guard = acquired(a.try_acquire().await.unwrap());
    let token = guard.token();
    let (result, c) = s.cost(guard.release()).await;
    result.unwrap();
    assert_eq!(c, counts(0, 0, 1, 0, 0));
    let object = s.counting.inner().get(KEY).await.unwrap().unwrap();
    let record = LeaseRecord::decode(KEY, &object.body).unwrap();
    assert!(record.released);
    assert_eq!(record.token, token, "the release keeps the token");
}

#[tokio::test(start_paused = true)]
async fn dropping_a_guard_releases_with_one_replace() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1);
    let guard = acquired(a.try_acquire().await.unwrap());
    let before = s.counting.counts();
    drop(guard);
    // Let the spawned best-effort release run.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(since(before, s.counting.counts()), counts(0, 0, 1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn fenced_resource_update_is_one_get_and_one_write() {
    let s = setup().await;
    let r = FencedResource::<u64>::new(s.store.clone(), "fenced/value")
        .unwrap()
        .with_entropy(Entropy::seeded(3));
    let (v, c) = s.cost(r.update(1, |v| v.copied().unwrap_or(0) + 1)).await;
    assert_eq!(v.unwrap().value, 1);
    assert_eq!(c, counts(1, 1, 0, 0, 0), "first update creates");
    let (v, c) = s.cost(r.update(2, |v| v.copied().unwrap_or(0) + 1)).await;
    assert_eq!(v.unwrap().value, 2);
    assert_eq!(c, counts(1, 0, 1, 0, 0), "update");
    let (v, c) = s.cost(r.read()).await;
    assert_eq!(v.unwrap().unwrap().token, 2);
    assert_eq!(c, counts(1, 0, 0, 0, 0), "read");
    let (v, c) = s.cost(r.update(1, |_| 0)).await;
    assert!(matches!(
        v,
        Err(LeaseError::FencedOut {
            presented: 1,
            recorded: 2
        })
    ));
    assert_eq!(
        c,
        counts(1, 0, 0, 0, 0),
        "a fenced-out update writes nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn fenced_log_append_costs_one_create_on_a_warm_handle() {
    let s = setup().await;
    let log = FencedLog::<String>::new(s.store.clone(), "fenced/log")
        .unwrap()
        .with_entropy(Entropy::seeded(4));
    // A new handle on an empty log: no hint, one listing.
    let (e, c) = s.cost(log.append(1, "first".into())).await;
    assert_eq!(e.unwrap().seq, 1);
    assert_eq!(c, counts(1, 1, 0, 0, 1), "append to an empty log");
    for seq in 2..=4 {
        let (e, c) = s.cost(log.append(1, format!("entry {seq}"))).await;
        assert_eq!(e.unwrap().seq, seq);
        assert_eq!(c, counts(0, 1, 0, 0, 0), "append after entry {}", seq - 1);
    }
    let (latest, c) = s.cost(log.latest()).await;
    assert_eq!(latest.unwrap().unwrap().seq, 4);
    assert_eq!(
        c,
        counts(2, 0, 0, 0, 0),
        "latest: probe the next entry, read the head"
    );
    let (e, c) = s.cost(log.read(2)).await;
    assert_eq!(e.unwrap()[0].value, "entry 2");
    assert_eq!(c, counts(1, 0, 0, 0, 0), "read");
    let (_, c) = s.cost(log.append(2, "new holder".into())).await;
    assert_eq!(c, counts(0, 1, 0, 0, 0));
    let (e, c) = s.cost(log.append(1, "zombie".into())).await;
    assert!(matches!(e, Err(LeaseError::FencedOut { .. })));
    assert_eq!(
        c,
        counts(0, 0, 0, 0, 0),
        "a zombie is refused by the head this handle knows"
    );
    // Another handle appended meanwhile: one lost race, read who won, find
    // the end, create.
    let other = FencedLog::<String>::new(s.store.clone(), "fenced/log").unwrap();
    other.append(2, "by another handle".into()).await.unwrap();
    let (e, c) = s.cost(log.append(2, "after the other".into())).await;
    assert_eq!(e.unwrap().seq, 7);
    assert_eq!(c, counts(2, 2, 0, 0, 0), "a lost race");
    // A new handle finds the end without listing once the hint exists.
    for n in 0..64 {
        log.append(2, format!("filler {n}")).await.unwrap();
    }
    let fresh = FencedLog::<String>::new(s.store.clone(), "fenced/log").unwrap();
    let (_, c) = s.cost(fresh.append(2, "from a fresh handle".into())).await;
    assert_eq!(c.list, 0, "{c:?}");
    assert!(c.get <= 16, "{c:?}");
}

#[tokio::test(start_paused = true)]
async fn a_published_value_costs_no_request_of_its_own_and_proclaim_is_one_replace() {
    let s = setup().await;
    let a = lease(&s.store, "a", 1).with_value("10.0.0.7:5432").unwrap();
    let (outcome, c) = s.cost(a.try_acquire()).await;
    let guard = acquired(outcome.unwrap());
    assert_eq!(c, counts(1, 1, 0, 0, 0), "acquire with a value");
    let interval = a.config().renew_interval;
    let before = s.counting.counts();
    tokio::time::sleep(interval * 10 + interval / 2).await;
    assert_eq!(since(before, s.counting.counts()), counts(0, 0, 10, 0, 0));
    let (proclaimed, c) = s.cost(guard.proclaim("10.0.0.8:5432")).await;
    proclaimed.unwrap();
    assert_eq!(c, counts(0, 0, 1, 0, 0), "proclaim");
    let (record, _) = a.read().await.unwrap().unwrap();
    assert_eq!(record.value.as_deref(), Some("10.0.0.8:5432"));
    assert_eq!(record.token, 1, "proclaim is not a new election");
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_slot_costs_a_lease_acquisition_and_its_count_one_read_per_value() {
    use casaas_core::lease::Semaphore;
    let s = setup().await;
    let sem = |owner: &str, seed: u64| {
        Semaphore::new(lease(&s.store, owner, seed), 3)
            .unwrap()
            .with_entropy(Entropy::seeded(seed))
    };
    // First use: the count created, then a free slot (1 GET + 1 create).
    let a = sem("a", 1);
    let (outcome, c) = s.cost(a.try_acquire()).await;
    let first = acquired(outcome.unwrap());
    assert_eq!(
        c,
        counts(2, 2, 0, 0, 0),
        "first try_acquire of a new semaphore"
    );
    // Warm: the count is not read again.
    let (outcome, c) = s.cost(a.try_acquire()).await;
    let second = acquired(outcome.unwrap());
    assert!(
        c.get <= 2 && c.create + c.replace == 1 && c.list == 0,
        "warm try_acquire: {c:?}"
    );
    // Another value: 1 GET of the count, 1 LIST of the queue, then a slot.
    let b = sem("b", 2);
    let (guard, c) = s.cost(b.acquire(WaitOptions::default())).await;
    let third = guard.unwrap();
    assert_eq!(
        (c.list, c.create + c.replace),
        (1, 1),
        "acquire by a new value: {c:?}"
    );
    assert!(c.get <= 4, "acquire by a new value: {c:?}");
    // Full: one pass reads every slot and writes nothing.
    let d = sem("d", 4);
    let (outcome, c) = s.cost(d.try_acquire()).await;
    assert!(matches!(outcome.unwrap(), AcquireOutcome::Held(_)));
    assert_eq!(c, counts(4, 0, 0, 0, 0), "a pass over three held slots");
    // Retaking the slot this value released: one write.
    let key = first.key().to_string();
    first.release().await.unwrap();
    let (outcome, c) = s.cost(a.try_acquire()).await;
    let again = acquired(outcome.unwrap());
    assert_eq!(again.key(), key);
    assert_eq!(c, counts(0, 0, 1, 0, 0), "retaking our released slot");
    for g in [again, second, third] {
        g.release().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_read_write_lock_costs_four_requests_to_read_and_three_to_write_when_free() {
    let s = setup().await;
    let rw = |owner: &str, seed: u64| {
        casaas_core::lease::RwLock::new(lease(&s.store, owner, seed)).unwrap()
    };
    let (reader, c) = s.cost(rw("r", 1).read(WaitOptions::default())).await;
    // The lock object, the slot (read, create), the lock object again.
    assert_eq!(c, counts(3, 1, 0, 0, 0), "read on a free lock");
    let (released, c) = s.cost(reader.unwrap().release()).await;
    released.unwrap();
    assert_eq!(c, counts(0, 0, 1, 0, 0), "a reader's release");
    let (writer, c) = s.cost(rw("w", 2).write(WaitOptions::default())).await;
    // The lease's read and create, a LIST of the slots, and the released
    // slot cleared once (read, delete), then a LIST that finds none.
    assert_eq!(c, counts(2, 1, 0, 1, 2), "write after a reader left");
    writer.unwrap().release().await.unwrap();
    let (writer, c) = s.cost(rw("w", 3).write(WaitOptions::default())).await;
    assert_eq!(c, counts(1, 0, 1, 0, 1), "write on a free lock");
    writer.unwrap().release().await.unwrap();
}
