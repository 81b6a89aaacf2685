//! `list_locks`: every object under a prefix as `casaas ls` shows it, read
//! once and nothing written: held, released, expired, foreign, a lock under
//! a session judged by its heartbeat, a fair-mode queue ticket as a waiter,
//! and the store guard's objects left out.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use casaas_core::layout::LeaseLayout;
use casaas_core::lease::{
    Lease, LeaseConfig, LeaseRecord, LockEntry, LockListing, LockState, Session, SessionLiveness,
    list_locks,
};
use casaas_core::testkit::CountingStore;
use casaas_core::{CasStore, FileStore, MemoryStore};

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn find<'a>(entries: &'a [LockEntry], key: &str) -> &'a LockEntry {
    entries
        .iter()
        .find(|e| e.key == key)
        .unwrap_or_else(|| panic!("{key} not listed: {entries:#?}"))
}

fn lease(store: &Arc<dyn CasStore>, key: &str, owner: &str) -> Lease {
    Lease::new(
        store.clone(),
        key,
        owner,
        LeaseConfig::from_ttl(Duration::from_secs(30)),
    )
    .unwrap()
}

async fn held_released_expired_and_foreign(store: Arc<dyn CasStore>) {
    let held = lease(&store, "locks/held", "worker-1")
        .acquire(Default::default())
        .await
        .unwrap();
    let released = lease(&store, "locks/released", "worker-2")
        .acquire(Default::default())
        .await
        .unwrap();
    released.release().await.unwrap();
    // A holder that stopped renewing an hour ago.
    let old = now_ms() - 3_600_000;
    store
        .create(
            "locks/expired",
            LeaseRecord::new("gone", "n1", 4, 10_000, old).encode(),
        )
        .await
        .unwrap();
    store
        .create("locks/notes.txt", b"hello, not a lock".to_vec().into())
        .await
        .unwrap();
    // Outside the prefix: not listed.
    store
        .create(
            "other/x",
            LeaseRecord::new("o", "n", 1, 10_000, old).encode(),
        )
        .await
        .unwrap();

    let entries = list_locks(store.clone(), "locks/").await.unwrap();
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["expired", "held", "notes.txt", "released"]);

    let e = find(&entries, "held");
    assert_eq!(e.state, LockState::Held);
    assert_eq!(e.holder.as_deref(), Some("worker-1"));
    assert_eq!(e.token, Some(held.token()));
    assert_eq!(e.ttl, Some(Duration::from_secs(30)));
    assert_eq!(e.layout, Some(LeaseLayout::Record));
    assert!(e.acquired_at.is_some() && e.renewed_at >= e.acquired_at);
    assert!(!e.version.is_empty());
    assert!(e.session.is_none() && e.waiting_for.is_none() && e.found.is_none());

    let e = find(&entries, "released");
    assert_eq!(e.state, LockState::Released);
    assert_eq!(e.holder.as_deref(), Some("worker-2"));

    let e = find(&entries, "expired");
    assert_eq!(e.state, LockState::Expired);
    assert_eq!((e.token, e.ttl), (Some(4), Some(Duration::from_secs(10))));
    assert_eq!(e.renewed_at, Some(UNIX_EPOCH + Duration::from_millis(old)));

    let e = find(&entries, "notes.txt");
    assert_eq!(e.state, LockState::Foreign);
    assert_eq!((e.holder.as_ref(), e.token, e.layout), (None, None, None));
    assert!(e.found.as_deref().unwrap().contains("hello"), "{e:?}");
    held.release().await.unwrap();
}

#[tokio::test]
async fn held_released_expired_and_foreign_on_the_memory_store() {
    held_released_expired_and_foreign(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn held_released_expired_and_foreign_on_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    held_released_expired_and_foreign(Arc::new(FileStore::open(dir.path()).await.unwrap())).await;
}

#[tokio::test]
async fn listing_writes_nothing_and_reads_each_object_once() {
    let counting = Arc::new(CountingStore::new(MemoryStore::new()));
    let store: Arc<dyn CasStore> = counting.clone();
    for i in 0..20 {
        store
            .create(
                &format!("k{i:02}"),
                LeaseRecord::new("o", format!("n{i}"), 1, 60_000, now_ms()).encode(),
            )
            .await
            .unwrap();
    }
    let before = counting.counts();
    let entries = LockListing::new(store)
        .with_concurrency(3)
        .list()
        .await
        .unwrap();
    let after = counting.counts();
    assert_eq!(entries.len(), 20);
    assert!(entries.iter().all(|e| e.state == LockState::Held));
    assert_eq!(after.get - before.get, 20);
    assert_eq!(after.list - before.list, 1);
    assert_eq!(
        (after.create, after.replace, after.delete),
        (before.create, before.replace, before.delete)
    );
}

#[tokio::test]
async fn the_store_guard_objects_are_left_out() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    store
        .create(".casaas-guard/probe-1", b"guard".to_vec().into())
        .await
        .unwrap();
    store
        .create("sub/.casaas-guard/probe-2", b"guard".to_vec().into())
        .await
        .unwrap();
    // Verified by the guard, which writes its own objects.
    let held = lease(&store, "a", "w")
        .acquire(Default::default())
        .await
        .unwrap();
    let entries = list_locks(store.clone(), "").await.unwrap();
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["a"], "{entries:#?}");
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_fair_queue_ticket_is_a_waiter_never_a_holder() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let ticket = "jobs/report.queue/00000000000000000003";
    store
        .create(
            ticket,
            LeaseRecord::new("waiter", "n", 1, 60_000, now_ms()).encode(),
        )
        .await
        .unwrap();
    // Not twenty digits: an ordinary lock that happens to be named so.
    store
        .create(
            "jobs/x.queue/7",
            LeaseRecord::new("o", "n", 1, 60_000, now_ms()).encode(),
        )
        .await
        .unwrap();
    let entries = list_locks(store.clone(), "jobs/").await.unwrap();
    let e = find(&entries, "report.queue/00000000000000000003");
    assert_eq!(e.state, LockState::Waiting);
    assert_eq!(e.waiting_for.as_deref(), Some("report"));
    assert_eq!(e.holder.as_deref(), Some("waiter"));
    let e = find(&entries, "x.queue/7");
    assert_eq!((e.state, e.waiting_for.as_ref()), (LockState::Held, None));
}

#[tokio::test]
async fn a_lock_under_a_session_is_judged_by_its_heartbeat() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let heartbeat = Lease::new(
        store.clone(),
        "sessions/worker-1",
        "worker-1",
        LeaseConfig::from_ttl(Duration::from_secs(30)),
    )
    .unwrap();
    let session = Session::open(heartbeat, Default::default()).await.unwrap();
    let guard = session
        .lease("shards/7")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .into_result()
        .expect("the lock is free");

    let entries = list_locks(store.clone(), "").await.unwrap();
    let e = find(&entries, "shards/7");
    assert_eq!(e.state, LockState::Held);
    let s = e.session.as_ref().unwrap();
    assert_eq!(s.name(), "sessions/worker-1");
    assert_eq!(s.named.term, session.term());
    assert_eq!(s.liveness, Some(SessionLiveness::Alive));
    // The heartbeat itself is an ordinary lease.
    let beat = find(&entries, "sessions/worker-1");
    assert_eq!((beat.state, beat.session.as_ref()), (LockState::Held, None));

    // Listed from inside `shards/`, the heartbeat is out of reach.
    let entries = list_locks(store.clone(), "shards/").await.unwrap();
    let e = find(&entries, "7");
    assert_eq!(e.state, LockState::Held, "judged from the store's root");

    guard.release().await.unwrap();
    session.close().await.unwrap();

    // Each judgement of a term from its heartbeat, on records written as a
    // holder would have left them.
    let lock_under = |heartbeat: &str, term: u64| {
        let named = casaas_core::lease::SessionRef::new("s/k", heartbeat, term);
        LeaseRecord::new("o", "n", 1, 1_000, 0).under_session(named)
    };
    let beat = |token: u64, renewed_ms: u64, released: bool| {
        let mut r = LeaseRecord::new("o", "n", token, 60_000, renewed_ms);
        r.released = released;
        r.encode()
    };
    store
        .create("s/k", lock_under("beats/b", 1).encode())
        .await
        .unwrap();
    store
        .create("beats/b", beat(2, now_ms(), false))
        .await
        .unwrap();
    for (lock, heartbeat, body, state, liveness) in [
        (
            "r/k",
            "beats/r",
            Some(beat(1, now_ms(), true)),
            LockState::Released,
            SessionLiveness::Released,
        ),
        (
            "x/k",
            "beats/x",
            Some(beat(1, 0, false)),
            LockState::Expired,
            SessionLiveness::Expired,
        ),
        (
            "m/k",
            "beats/m",
            None,
            LockState::Held,
            SessionLiveness::Missing,
        ),
        (
            "f/k",
            "beats/f",
            Some(b"not json".to_vec().into()),
            LockState::Unknown,
            SessionLiveness::Unreadable,
        ),
    ] {
        let named = casaas_core::lease::SessionRef::new(lock, heartbeat, 1);
        let record = LeaseRecord::new("o", "n", 1, 1_000, 0).under_session(named);
        store.create(lock, record.encode()).await.unwrap();
        if let Some(body) = body {
            store.create(heartbeat, body).await.unwrap();
        }
        let entries = list_locks(store.clone(), "").await.unwrap();
        let e = find(&entries, lock);
        assert_eq!(
            (e.state, e.session.as_ref().unwrap().liveness),
            (state, Some(liveness)),
            "{e:#?}"
        );
    }

    let entries = list_locks(store.clone(), "").await.unwrap();
    let e = find(&entries, "s/k");
    assert_eq!(e.state, LockState::Expired);
    assert_eq!(
        e.session.as_ref().unwrap().liveness,
        Some(SessionLiveness::Superseded)
    );
    // A heartbeat named above the store's root (the holder opened the
    // store higher up) cannot be judged from here.
    let mut above = casaas_core::lease::SessionRef::new("u/k", "beats/b", 1);
    above.heartbeat = "../../beats/b".to_string();
    let record = LeaseRecord::new("o", "n", 1, 1_000, 0).under_session(above);
    store.create("u/k", record.encode()).await.unwrap();
    let entries = list_locks(store.clone(), "u/").await.unwrap();
    let e = find(&entries, "k");
    assert_eq!(e.state, LockState::Unknown);
    let s = e.session.as_ref().unwrap();
    assert_eq!(
        (s.liveness, s.heartbeat_key.as_ref()),
        (Some(SessionLiveness::Unreadable), None)
    );
    assert!(s.problem.as_deref().unwrap().contains("above"), "{s:?}");
}

#[tokio::test]
async fn a_create_only_layout_lock_is_listed_once_as_the_lock() {
    let store = casaas_core::layout::with_layout(Arc::new(MemoryStore::new()), LeaseLayout::Epochs);
    let l = lease(&store, "locks/e", "w");
    for _ in 0..3 {
        l.acquire(Default::default())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let held = l.acquire(Default::default()).await.unwrap();
    let entries = list_locks(store.clone(), "locks/").await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:#?}");
    let e = &entries[0];
    assert_eq!(e.key, "e");
    assert_eq!(e.state, LockState::Held);
    assert_eq!(e.layout, Some(LeaseLayout::Epochs));
    assert_eq!(e.token, Some(held.token()));
    held.release().await.unwrap();
}

#[tokio::test]
async fn reader_and_semaphore_slots_are_leases_of_their_own() {
    use casaas_core::lease::{RwLock, Semaphore};

    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let rw = RwLock::new(lease(&store, "db", "reader")).unwrap();
    let read = rw.read(Default::default()).await.unwrap();
    let sem = Semaphore::new(lease(&store, "jobs", "worker"), 2).unwrap();
    let slot = sem.acquire(Default::default()).await.unwrap();
    let entries = list_locks(store.clone(), "").await.unwrap();
    let e = find(&entries, read.key());
    assert!(e.key.starts_with("db.readers/"), "{e:?}");
    assert_eq!(
        (e.state, e.holder.as_deref()),
        (LockState::Held, Some("reader"))
    );
    let e = find(&entries, slot.key());
    assert!(e.key.starts_with("jobs.slots/"), "{e:?}");
    assert_eq!(
        (e.state, e.holder.as_deref()),
        (LockState::Held, Some("worker"))
    );
    assert!(entries.iter().all(|e| e.waiting_for.is_none()));
    read.release().await.unwrap();
    slot.release().await.unwrap();
}
