#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Sessions: many locks under one heartbeat (docs/protocol.md, "Sessions").
//! In-memory store under paused tokio time; requests counted with
//! `CountingStore`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{
    AcquireOutcome, Election, Entropy, FencedResource, Lease, LeaseConfig, LeaseError, LeaseGuard,
    LeaseRecord, LostReason, Semaphore, Session,
};
use casaas_core::testkit::{CountingStore, RequestCounts};
use casaas_core::{CasStore, MemoryStore};

const TTL: Duration = Duration::from_secs(10);

struct Setup {
    counting: CountingStore<MemoryStore>,
    store: Arc<dyn CasStore>,
}

async fn setup() -> Setup {
    let counting = CountingStore::new(MemoryStore::new());
    let store: Arc<dyn CasStore> = Arc::new(counting.clone());
    casaas_core::testkit::pass_store_guard(store.as_ref())
        .await
        .unwrap();
    Setup { counting, store }
}

fn heartbeat(store: &Arc<dyn CasStore>, owner: &str, seed: u64) -> Lease {
    Lease::new(
        store.clone(),
        format!("sessions/{owner}"),
        owner,
        LeaseConfig::from_ttl(TTL),
    )
    .unwrap()
    .with_entropy(Entropy::seeded(seed))
}

async fn open(store: &Arc<dyn CasStore>, owner: &str, seed: u64) -> Session {
    Session::open(heartbeat(store, owner, seed), Default::default())
        .await
        .unwrap()
}

fn acquired(outcome: AcquireOutcome) -> LeaseGuard {
    match outcome {
        AcquireOutcome::Acquired(g) => g,
        AcquireOutcome::Held(h) => panic!("expected to acquire, held by {h:?}"),
        other => panic!("unexpected outcome {other:?}"),
    }
}

fn held(outcome: AcquireOutcome) -> casaas_core::lease::HeldBy {
    match outcome {
        AcquireOutcome::Held(h) => h,
        AcquireOutcome::Acquired(g) => panic!("expected held, acquired token {}", g.token()),
        other => panic!("unexpected outcome {other:?}"),
    }
}

async fn stored(store: &dyn CasStore, key: &str) -> LeaseRecord {
    let object = store.get(key).await.unwrap().unwrap();
    LeaseRecord::decode(key, &object.body).unwrap()
}

fn since(before: RequestCounts, after: RequestCounts) -> RequestCounts {
    RequestCounts {
        get: after.get - before.get,
        create: after.create - before.create,
        replace: after.replace - before.replace,
        delete: after.delete - before.delete,
        list: after.list - before.list,
    }
}

#[tokio::test(start_paused = true)]
async fn a_thousand_locks_cost_only_the_heartbeat_while_held() {
    let s = setup().await;
    let session = open(&s.store, "w1", 1).await;
    let mut guards = Vec::new();
    for i in 0..1000 {
        let lock = session.lease(format!("shards/{i}")).unwrap();
        guards.push(acquired(lock.try_acquire().await.unwrap()));
    }
    assert_eq!(session.held_locks(), 1000);
    let record = stored(s.store.as_ref(), "shards/500").await;
    let named = record
        .session
        .clone()
        .expect("a session lock names its session");
    assert_eq!(
        (named.heartbeat.as_str(), named.term),
        ("../sessions/w1", 1)
    );
    assert_eq!(
        named.heartbeat_key("shards/500").as_deref(),
        Some("sessions/w1")
    );
    assert_eq!(record.schema, 2);

    // An hour held: only the heartbeat writes, every TTL/3.
    let before = s.counting.counts();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let cost = since(before, s.counting.counts());
    let renew_interval = LeaseConfig::from_ttl(TTL).renew_interval;
    let renewals = (3600.0 / renew_interval.as_secs_f64()) as u64;
    assert_eq!(cost.total(), cost.replace, "only renewals: {cost:?}");
    assert!(
        (renewals - 2..=renewals + 2).contains(&cost.replace),
        "about {renewals} heartbeat writes for 1000 locks in an hour, got {}",
        cost.replace
    );
    for g in &guards {
        g.ensure_held_for(Duration::from_secs(1)).unwrap();
        assert_eq!(g.token(), 1);
    }
    // The locks' records were never rewritten.
    assert_eq!(stored(s.store.as_ref(), "shards/500").await, record);

    // Releasing one is one write; the session holds the rest.
    let before = s.counting.counts();
    guards.pop().unwrap().release().await.unwrap();
    assert_eq!(since(before, s.counting.counts()).total(), 1);
    assert_eq!(session.held_locks(), 999);
    session.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn closing_a_session_ends_every_lock_and_contenders_take_them_at_once() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let locks: Vec<_> = (0..5)
        .map(|i| a.lease(format!("jobs/{i}")).unwrap())
        .collect();
    let mut guards = Vec::new();
    for lock in &locks {
        guards.push(acquired(lock.try_acquire().await.unwrap()));
    }
    let watch = guards[2].lost();

    let b = open(&s.store, "b", 2).await;
    let b_lock = b.lease("jobs/2").unwrap();
    let by = held(b_lock.try_acquire().await.unwrap());
    assert_eq!((by.owner.as_str(), by.token), ("a", 1));

    let before = s.counting.counts();
    a.close().await.unwrap();
    assert_eq!(
        since(before, s.counting.counts()).total(),
        1,
        "one write ends the session"
    );
    for g in &guards {
        match g.lost_reason() {
            Some(LostReason::SessionLost { session, reason }) => {
                assert_eq!(session, "sessions/a");
                assert_eq!(*reason, LostReason::Released);
            }
            other => panic!("{other:?}"),
        }
        assert!(g.ensure_held_for(Duration::ZERO).is_err());
    }
    assert!(matches!(watch.await, LostReason::SessionLost { .. }));

    // No waiting: the lock, then its session (released), then the replace.
    let before = s.counting.counts();
    let taken = acquired(b_lock.try_acquire().await.unwrap());
    let cost = since(before, s.counting.counts());
    assert_eq!(
        (cost.get, cost.replace, cost.total()),
        (2, 1, 3),
        "{cost:?}"
    );
    assert_eq!(taken.token(), 2, "the lock's own token grows");
    // A guard of the ended session can no longer release (it is lost).
    let old = guards.remove(2);
    assert!(matches!(
        old.release().await,
        Err(LeaseError::Lost(LostReason::SessionLost { .. }))
    ));
    assert_eq!(stored(s.store.as_ref(), "jobs/2").await.owner, "b");
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crashed_session_is_ended_by_a_write_on_its_heartbeat_before_a_lock_is_taken() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let a_guard = acquired(a.lease("jobs/x").unwrap().try_acquire().await.unwrap());
    let a_token = a_guard.token();
    a.abandon();
    assert!(matches!(
        a_guard.lost_reason(),
        Some(LostReason::SessionLost { .. })
    ));

    let b = open(&s.store, "b", 2).await;
    let lock = b.lease("jobs/x").unwrap();
    // Observed unchanged for the heartbeat's TTL·(1 + drift), not sooner.
    let first = held(lock.try_acquire().await.unwrap());
    assert!(first.takeover_in > TTL, "{first:?}");
    tokio::time::sleep(TTL).await;
    held(lock.try_acquire().await.unwrap());
    tokio::time::sleep(first.takeover_in).await;
    let guard = acquired(lock.try_acquire().await.unwrap());
    assert_eq!(guard.token(), a_token + 1);
    // The heartbeat now says the term is over: a restarted "a" opens term 2.
    let beat = stored(s.store.as_ref(), "sessions/a").await;
    assert!(beat.released && beat.token == 1, "{beat:?}");
    let again = open(&s.store, "a", 3).await;
    assert_eq!(again.term(), 2);
    guard.release().await.unwrap();
    again.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_renewing_session_keeps_its_locks_however_long_a_contender_waits() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let a_guard = acquired(a.lease("jobs/x").unwrap().try_acquire().await.unwrap());
    let b = open(&s.store, "b", 2).await;
    let lock = b.lease("jobs/x").unwrap();
    for _ in 0..20 {
        let by = held(lock.try_acquire().await.unwrap());
        assert_eq!(by.owner, "a");
        tokio::time::sleep(by.takeover_in).await;
    }
    a_guard.ensure_held_for(Duration::from_secs(1)).unwrap();
    assert!(!stored(s.store.as_ref(), "sessions/a").await.released);
    a_guard.release().await.unwrap();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_plain_lease_waits_for_the_session_of_a_session_lock() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let a_guard = acquired(
        a.lease("locks/shared")
            .unwrap()
            .try_acquire()
            .await
            .unwrap(),
    );
    let plain = Lease::new(
        s.store.clone(),
        "locks/shared",
        "plain",
        LeaseConfig::from_ttl(TTL),
    )
    .unwrap();
    // The lock object is never rewritten, yet the plain lease does not take
    // it after the lock's TTL: it judges the session.
    for _ in 0..5 {
        let by = held(plain.try_acquire().await.unwrap());
        tokio::time::sleep(by.takeover_in.max(TTL)).await;
    }
    a_guard.ensure_held_for(Duration::from_secs(1)).unwrap();
    drop(a_guard); // best-effort release of one lock, the session lives on
    tokio::task::yield_now().await;
    let guard = acquired(plain.try_acquire().await.unwrap());
    assert_eq!(guard.token(), 2);
    assert!(guard.session().is_none());
    guard.release().await.unwrap();
    a.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_superseded_heartbeat_loses_every_lock_and_says_why() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let guards: Vec<_> = {
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(acquired(
                a.lease(format!("k/{i}"))
                    .unwrap()
                    .try_acquire()
                    .await
                    .unwrap(),
            ));
        }
        v
    };
    // Someone outside the protocol overwrites the heartbeat.
    let version = s.store.get("sessions/a").await.unwrap().unwrap().version;
    let intruder = LeaseRecord::new("intruder", "0bad", 9, 10_000, 0);
    s.store
        .replace("sessions/a", &version, intruder.encode())
        .await
        .unwrap();
    let reason = a.lost().await;
    assert!(
        matches!(reason, LostReason::Superseded { .. }),
        "{reason:?}"
    );
    for g in &guards {
        let lost = g.lost_reason().unwrap();
        assert!(
            lost.to_string()
                .starts_with("the session 'sessions/a' it was held under ended: superseded"),
            "{lost}"
        );
    }
    // Nothing more can be locked under it.
    assert!(matches!(a.lease("k/9"), Err(LeaseError::Lost(_))));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_session_ends_its_locks() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let g = acquired(a.lease("k/1").unwrap().try_acquire().await.unwrap());
    drop(a);
    assert!(matches!(
        g.lost_reason(),
        Some(LostReason::SessionLost { ref reason, .. }) if **reason == LostReason::Dropped
    ));
}

#[tokio::test(start_paused = true)]
async fn fencing_refuses_the_token_of_a_lock_whose_session_ended() {
    let s = setup().await;
    let resource = FencedResource::<u64>::new(s.store.clone(), "data/counter").unwrap();
    let a = open(&s.store, "a", 1).await;
    let a_guard = acquired(
        a.lease("locks/counter")
            .unwrap()
            .try_acquire()
            .await
            .unwrap(),
    );
    resource
        .update_guarded(&a_guard, Duration::from_millis(100), |v| {
            v.copied().unwrap_or(0) + 1
        })
        .await
        .unwrap();
    let stale_token = a_guard.token();
    a.abandon();
    // The guard refuses at once; a paused holder that ignored it is fenced.
    assert!(matches!(
        resource
            .update_guarded(&a_guard, Duration::ZERO, |v| v.copied().unwrap_or(0) + 1)
            .await,
        Err(LeaseError::Lost(LostReason::SessionLost { .. }))
    ));
    let b = open(&s.store, "b", 2).await;
    let lock = b.lease("locks/counter").unwrap();
    let b_guard = lock
        .acquire(Default::default())
        .await
        .expect("taken over after the session's TTL");
    resource
        .update_guarded(&b_guard, Duration::from_millis(100), |v| {
            v.copied().unwrap_or(0) + 10
        })
        .await
        .unwrap();
    assert!(matches!(
        resource
            .update(stale_token, |v| v.copied().unwrap_or(0) + 1)
            .await,
        Err(LeaseError::FencedOut { .. })
    ));
    assert_eq!(resource.read().await.unwrap().unwrap().value, 11);
    b_guard.release().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_election_runs_under_a_session() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let election = Election::new(a.lease("elections/leader").unwrap());
    let leadership = election
        .campaign(Default::default())
        .await
        .expect("elected");
    assert_eq!(leadership.token(), 1);
    assert_eq!(
        election.leader().await.unwrap().map(|l| l.owner),
        Some("a".to_string())
    );
    let lost = leadership.lost();
    a.close().await.unwrap();
    assert!(matches!(lost.await, LostReason::SessionLost { .. }));
}

#[tokio::test(start_paused = true)]
async fn bad_uses_get_errors_that_say_what_to_do() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let err = a.lease("sessions/a").unwrap_err();
    assert!(
        err.to_string().contains("session's own heartbeat key"),
        "{err}"
    );
    let bound = a.lease("k/1").unwrap();
    let err = Session::open(bound, Default::default()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot itself be held under a session"),
        "{err}"
    );

    // A session key holding a foreign object is never overwritten: the
    // contender of a lock naming it gets an error naming that key.
    let g = acquired(a.lease("k/2").unwrap().try_acquire().await.unwrap());
    a.abandon();
    drop(g);
    let version = s.store.get("sessions/a").await.unwrap().unwrap().version;
    s.store
        .replace("sessions/a", &version, Bytes::from_static(b"not a record"))
        .await
        .unwrap();
    let b = open(&s.store, "b", 2).await;
    let err = b.lease("k/2").unwrap().try_acquire().await.unwrap_err();
    assert!(
        matches!(&err, LeaseError::ForeignObject { key, .. } if key == "sessions/a"),
        "{err}"
    );
    assert_eq!(
        s.store.get("sessions/a").await.unwrap().unwrap().body,
        Bytes::from_static(b"not a record")
    );
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_deleted_heartbeat_ends_its_term_only_after_the_ttl() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let g = acquired(a.lease("k/1").unwrap().try_acquire().await.unwrap());
    let version = s.store.get("sessions/a").await.unwrap().unwrap().version;
    s.store.delete("sessions/a", &version).await.unwrap();
    let b = open(&s.store, "b", 2).await;
    let lock = b.lease("k/1").unwrap();
    let by = held(lock.try_acquire().await.unwrap());
    assert!(by.takeover_in > TTL, "{by:?}");
    // The holder learns at its next renewal that its heartbeat is gone.
    let reason = a.lost().await;
    assert_eq!(reason, LostReason::Deleted);
    assert!(g.lost_reason().is_some());
    tokio::time::sleep(by.takeover_in).await;
    let taken = acquired(lock.try_acquire().await.unwrap());
    assert_eq!(taken.token(), 2);
    taken.release().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn sessions_work_in_the_create_only_layout() {
    // A store with create-if-absent alone: every write of the heartbeat and
    // of each lock is a new epoch, and the same rules hold.
    let memory = Arc::new(MemoryStore::new());
    let store: Arc<dyn CasStore> = Arc::new(casaas_core::testkit::CreateOnlyStore(memory));
    let a = open(&store, "a", 1).await;
    let lock = a.lease("jobs/x").unwrap();
    let g = acquired(lock.try_acquire().await.unwrap());
    let b = open(&store, "b", 2).await;
    let contender = b.lease("jobs/x").unwrap();
    held(contender.try_acquire().await.unwrap());
    tokio::time::sleep(TTL * 3).await;
    g.ensure_held_for(Duration::from_secs(1)).unwrap();
    held(contender.try_acquire().await.unwrap());
    a.abandon();
    let taken = contender
        .acquire(Default::default())
        .await
        .expect("taken after the session's TTL");
    assert_eq!(taken.token(), 2);
    assert!(g.lost_reason().is_some());
    taken.release().await.unwrap();
    // Our own release: acquiring again is one write here too.
    let again = acquired(contender.try_acquire().await.unwrap());
    assert_eq!(again.token(), 3);
    again.release().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_contender_whose_store_cannot_see_the_heartbeat_refuses_instead_of_guessing() {
    // The holder opened the store at its root; the contender opened it one
    // prefix lower ("shards/"), where the heartbeat is out of reach. An
    // object named like the heartbeat inside that prefix must not be read
    // as it, nor its absence taken for an ended session.
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("root");
    std::fs::create_dir(&dir).unwrap();
    let file_store = |path: std::path::PathBuf| async move {
        let store: Arc<dyn CasStore> = Arc::new(casaas_core::FileStore::open(path).await.unwrap());
        store
    };
    let root = file_store(dir.clone()).await;
    let a = open(&root, "a", 1).await;
    let g = acquired(a.lease("shards/7").unwrap().try_acquire().await.unwrap());
    let inner = file_store(dir.join("shards")).await;
    let plain = Lease::new(inner, "7", "plain", LeaseConfig::from_ttl(TTL)).unwrap();
    for _ in 0..3 {
        let err = plain.try_acquire().await.unwrap_err();
        assert!(
            err.to_string().contains("outside this store's prefix"),
            "{err}"
        );
        tokio::time::sleep(TTL * 2).await;
    }
    g.ensure_held_for(Duration::from_secs(1)).unwrap();
    // The blocking acquire gives up at once with the same error.
    let err = plain.acquire(Default::default()).await.unwrap_err();
    assert!(
        matches!(&err, LeaseError::HeartbeatOutOfReach { key, heartbeat }
            if key == "7" && heartbeat == "../sessions/a"),
        "{err}"
    );
    assert!(!err.may_have_taken_effect());
    // Seen from a prefix above the holder's, both keys gain it and the
    // session is judged as usual.
    let outer = file_store(top.path().to_path_buf()).await;
    let above = Lease::new(outer, "root/shards/7", "above", LeaseConfig::from_ttl(TTL)).unwrap();
    let by = held(above.try_acquire().await.unwrap());
    assert_eq!(by.owner, "a");
    g.release().await.unwrap();
    a.close().await.unwrap();
}

/// A semaphore built from a session's lease holds its slots under that
/// session: the slots' records name the heartbeat, the heartbeat alone is
/// renewed, and closing the session frees every slot at once.
#[tokio::test(start_paused = true)]
async fn a_semaphore_holds_its_slots_under_a_session() {
    let s = setup().await;
    let a = open(&s.store, "a", 1).await;
    let a_jobs = Semaphore::new(a.lease("jobs").unwrap(), 2).unwrap();
    let first = acquired(a_jobs.try_acquire().await.unwrap());
    let second = acquired(a_jobs.try_acquire().await.unwrap());
    assert_ne!(first.key(), second.key());
    for guard in [&first, &second] {
        let record = stored(s.store.as_ref(), guard.key()).await;
        let session = record.session.expect("a slot held under the session");
        assert!(session.heartbeat.ends_with("sessions/a"), "{session:?}");
    }

    // Full for another session; the slots are never rewritten while a's
    // heartbeat is renewed.
    let b = open(&s.store, "b", 2).await;
    let b_jobs = Semaphore::new(b.lease("jobs").unwrap(), 2).unwrap();
    held(b_jobs.try_acquire().await.unwrap());
    let versions = |key: String| {
        let store = s.store.clone();
        async move { store.get(&key).await.unwrap().unwrap().version }
    };
    let before = (
        versions(first.key().to_owned()).await,
        versions(second.key().to_owned()).await,
    );
    tokio::time::sleep(TTL * 3).await;
    let after = (
        versions(first.key().to_owned()).await,
        versions(second.key().to_owned()).await,
    );
    assert_eq!(
        before, after,
        "a slot under a session is not renewed itself"
    );
    assert!(first.ensure_held_for(Duration::ZERO).is_ok());
    held(b_jobs.try_acquire().await.unwrap());

    // Closing the session ends both slots; b takes one without waiting.
    a.close().await.unwrap();
    for guard in [&first, &second] {
        assert!(matches!(
            guard.lost_reason(),
            Some(LostReason::SessionLost { .. })
        ));
    }
    let taken = acquired(b_jobs.try_acquire().await.unwrap());
    assert_eq!(taken.token(), 2, "a slot's own token grows");
    b.close().await.unwrap();
}
