#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The one API shape, held to what its documentation claims: a runner
//! stopped by its deadline, a session tried in the lease's try shape, the
//! caller's own error type through CreateOnce, and what a dropped fair
//! waiter leaves behind.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{
    AcquireOutcome, CreateOnce, Created, Election, Entropy, FairLease, Lease, LeaseConfig,
    LeaseError, RetryPolicy, Session, WaitOptions,
};
use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};
use casaas_core::{CasStore, MemoryStore};
use tokio::time::Instant;

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

#[tokio::test(start_paused = true)]
async fn a_runner_past_its_deadline_stops_its_work_releases_and_returns_ok() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let lease = Lease::new(store.clone(), "election/x", "a", config()).unwrap();
    let election = Election::new(lease);
    let observer = election.clone();
    let start = Instant::now();
    let stopped = Arc::new(std::sync::Mutex::new(None));
    let seen = stopped.clone();
    election
        .runner()
        .on_started_leading(|_, cancel| async move { cancel.cancelled().await })
        .on_stopped_leading(move |reason| *seen.lock().unwrap() = Some(reason))
        .run(WaitOptions::default().with_deadline(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(start.elapsed() >= Duration::from_secs(30));
    assert!(start.elapsed() < Duration::from_secs(31));
    assert_eq!(
        *stopped.lock().unwrap(),
        Some(casaas_core::lease::LostReason::Released)
    );
    assert_eq!(observer.leader().await.unwrap(), None, "released");
}

#[tokio::test(start_paused = true)]
async fn a_session_is_tried_in_the_shape_of_a_lease() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let heartbeat = |owner: &str| Lease::new(store.clone(), "sessions/s", owner, config()).unwrap();
    let AcquireOutcome::Acquired(session) = Session::try_open(heartbeat("a")).await.unwrap() else {
        panic!("a free session key opens");
    };
    match Session::try_open(heartbeat("b")).await.unwrap() {
        AcquireOutcome::Held(by) => assert_eq!((by.owner.as_str(), by.token), ("a", 1)),
        other => panic!("expected held, got {other:?}"),
    }
    session.close().await.unwrap();
}

/// The caller's own error: what its body failed with, or the protocol's.
#[derive(Debug)]
enum CommitError {
    Encode(String),
    Lease(LeaseError),
}

impl From<LeaseError> for CommitError {
    fn from(err: LeaseError) -> Self {
        CommitError::Lease(err)
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Encode(m) => write!(f, "could not encode the commit: {m}"),
            CommitError::Lease(e) => write!(f, "{e}"),
        }
    }
}

fn nonce_in(stored: &[u8]) -> Option<String> {
    Some(String::from_utf8_lossy(stored).into_owned())
}

async fn faulty() -> Arc<FaultyStore<MemoryStore>> {
    use casaas_core::layout::{LeaseLayout, lease_view, with_layout};
    let store = Arc::new(FaultyStore::new(
        MemoryStore::new(),
        3,
        FaultConfig::default(),
    ));
    let view = lease_view(with_layout(store.clone(), LeaseLayout::Epochs));
    casaas_core::testkit::pass_store_guard(view.as_ref())
        .await
        .unwrap();
    store
}

fn writer(store: Arc<FaultyStore<MemoryStore>>) -> CreateOnce {
    CreateOnce::new(store).with_retry_policy(
        RetryPolicy::default()
            .with_request_timeout(Duration::from_secs(1))
            .with_retry_period(Duration::from_millis(1))
            .with_max_attempts(4),
    )
}

#[tokio::test(start_paused = true)]
async fn a_body_error_comes_back_as_the_callers_own_when_nothing_was_sent() {
    let store = faulty().await;
    let body = |_: &str| Err::<Bytes, _>(CommitError::Encode("bad schema".into()));
    match writer(store.clone()).create("log/0", body, nonce_in).await {
        Err(CommitError::Encode(m)) => assert_eq!(m, "bad schema"),
        other => panic!("expected the body's own error, got {other:?}"),
    }
    assert!(store.inner().get("log/0").await.unwrap().is_none());
    // The protocol's answers reach the same type through From.
    let ok = |n: &str| Ok::<_, CommitError>(Bytes::from(n.to_string()));
    let created: Result<Created, CommitError> =
        writer(store.clone()).create("log/0", ok, nonce_in).await;
    assert!(matches!(created, Ok(Created::Ours(_))), "{created:?}");
    let again = writer(store).create("log/0", ok, nonce_in).await.unwrap();
    assert!(matches!(again, Created::Taken(_)), "{again:?}");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_fails_while_a_write_may_land_is_reported_as_may_have_taken_effect() {
    let store = faulty().await;
    // The first create is answered 5xx without landing: live, for all we
    // know. The body then fails on the retry.
    store.inject(Fault::ServerErrorNotApplied);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let body = |n: &str| {
        if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            Ok(Bytes::from(n.to_string()))
        } else {
            Err(CommitError::Encode("disk full".into()))
        }
    };
    match writer(store).create("log/0", body, nonce_in).await {
        Err(CommitError::Lease(err)) => {
            assert!(err.may_have_taken_effect(), "{err:?}");
            assert!(err.to_string().contains("disk full"), "{err}");
        }
        other => panic!("expected may-have-taken-effect, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_fair_waiter_does_not_hold_up_the_waiters_behind_it() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let fair = |owner: &str, seed: u64| {
        let lease = Lease::new(store.clone(), "locks/f", owner, config())
            .unwrap()
            .with_entropy(Entropy::seeded(seed));
        FairLease::new(lease)
            .unwrap()
            .with_entropy(Entropy::seeded(seed + 100))
    };
    let holder = fair("holder", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    // A waiter takes a ticket, then its future is dropped mid-wait.
    let dropped = fair("dropped", 2);
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        dropped.acquire(WaitOptions::default()),
    )
    .await;
    assert!(gave_up.is_err());
    // The next waiter queues behind the dropped ticket.
    let next = fair("next", 3);
    let waiting = tokio::spawn(async move {
        next.acquire(WaitOptions::default().with_deadline(Duration::from_secs(60)))
            .await
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    // Well within one TTL: the dropped ticket was released in the
    // background, not left to expire.
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        released_at.elapsed()
    );
    assert_eq!(guard.owner(), "next");
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dropped_release_leaves_the_record_until_it_expires() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let mine = Lease::new(store.clone(), "locks/r", "a", config()).unwrap();
    let other = Lease::new(store.clone(), "locks/r", "b", config()).unwrap();
    let guard = mine.try_acquire().await.unwrap().into_result().unwrap();
    let lost = guard.lost();
    // Dropped at its first wait, before the release write is sent.
    let dropped = tokio::time::timeout(Duration::ZERO, guard.release()).await;
    assert!(dropped.is_err());
    lost.await;
    let (record, _) = mine.read().await.unwrap().unwrap();
    assert!(!record.released, "the release was never sent");
    // Given up here, but held in the store: both contenders wait it out.
    assert!(matches!(
        other.try_acquire().await.unwrap(),
        AcquireOutcome::Held(_)
    ));
    assert!(matches!(
        mine.try_acquire().await.unwrap(),
        AcquireOutcome::Held(_)
    ));
    let start = Instant::now();
    let taken = other
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(60)))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited <= Duration::from_secs(11),
        "taken over after one TTL of not renewing: {waited:?}"
    );
    assert_eq!(taken.token(), 2);
    taken.release().await.unwrap();
}
