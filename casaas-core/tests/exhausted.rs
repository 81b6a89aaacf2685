#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! A counter the protocol only increases (fencing token, write count, log
//! sequence number) at `u64::MAX` refuses the next step instead of
//! repeating the number.

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::lease::{
    AcquireOutcome, Election, FencedLog, FencedResource, Lease, LeaseConfig, LeaseError,
    LeaseRecord,
};
use casaas_core::{CasStore, MemoryStore};

/// A released lease record whose token is `u64::MAX`.
async fn released_at_max(store: &dyn CasStore, key: &str) {
    let mut record = LeaseRecord::new("old", "n0", u64::MAX, 15_000, 0);
    record.released = true;
    store.create(key, record.encode()).await.unwrap();
}

fn is_exhausted(err: &LeaseError, counter: &str) -> bool {
    matches!(err, LeaseError::Exhausted { counter: c, .. } if *c == counter)
}

#[tokio::test]
async fn a_lease_at_the_last_token_is_refused_not_repeated() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    released_at_max(store.as_ref(), "lock").await;
    let before = store.get("lock").await.unwrap().unwrap();
    let lease = Lease::new(store.clone(), "lock", "me", LeaseConfig::default()).unwrap();
    let err = lease.try_acquire().await.unwrap_err();
    assert!(is_exhausted(&err, "fencing token"), "{err:?}");
    assert!(err.to_string().contains("cannot grow"), "{err}");
    // The blocking acquire gives up at once rather than retrying forever.
    let err = lease.acquire(Default::default()).await.unwrap_err();
    assert!(is_exhausted(&err, "fencing token"), "{err:?}");
    assert_eq!(store.get("lock").await.unwrap().unwrap(), before);
}

#[tokio::test]
async fn a_lease_below_the_last_token_still_reaches_it() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let mut record = LeaseRecord::new("old", "n0", u64::MAX - 1, 15_000, 0);
    record.released = true;
    store.create("lock", record.encode()).await.unwrap();
    let lease = Lease::new(store, "lock", "me", LeaseConfig::default()).unwrap();
    let AcquireOutcome::Acquired(guard) = lease.try_acquire().await.unwrap() else {
        panic!("released lease not acquired");
    };
    assert_eq!(guard.token(), u64::MAX);
    guard.release().await.unwrap();
    let err = lease.try_acquire().await.unwrap_err();
    assert!(is_exhausted(&err, "fencing token"), "{err:?}");
}

#[tokio::test]
async fn an_election_at_the_last_token_is_refused() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    released_at_max(store.as_ref(), "leader").await;
    let lease = Lease::new(store, "leader", "me", LeaseConfig::default()).unwrap();
    let election = Election::new(lease);
    let err = election.campaign(Default::default()).await.unwrap_err();
    assert!(is_exhausted(&err, "fencing token"), "{err:?}");
}

#[tokio::test]
async fn a_fenced_resource_at_the_last_write_count_is_refused() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let body = serde_json::json!({
        "kind": "casaas.fenced",
        "schema": 2,
        "token": 1,
        "nonce": "n0",
        "value": 7,
        "seq": u64::MAX,
    });
    store
        .create("head", Bytes::from(serde_json::to_vec(&body).unwrap()))
        .await
        .unwrap();
    let before = store.get("head").await.unwrap().unwrap();
    let head = FencedResource::<u64>::new(store.clone(), "head").unwrap();
    let err = head
        .update(1, |v| v.copied().unwrap_or(0) + 1)
        .await
        .unwrap_err();
    assert!(is_exhausted(&err, "write count"), "{err:?}");
    assert_eq!(store.get("head").await.unwrap().unwrap(), before);
}

#[tokio::test]
async fn a_fenced_log_at_the_last_index_is_refused() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let log = FencedLog::<String>::new(store.clone(), "log").unwrap();
    let body = serde_json::json!({
        "kind": "casaas.log",
        "schema": 1,
        "seq": u64::MAX,
        "token": 1,
        "nonce": "n0",
        "value": "last",
    });
    store
        .create(
            &log.entry_key(u64::MAX),
            Bytes::from(serde_json::to_vec(&body).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(log.latest_seq().await.unwrap(), Some(u64::MAX));
    let err = log.append(1, "next".into()).await.unwrap_err();
    assert!(is_exhausted(&err, "log sequence number"), "{err:?}");
    // A fresh handle (which discovers the end by listing) refuses too.
    let fresh = FencedLog::<String>::new(store, "log").unwrap();
    let err = fresh.append(1, "next".into()).await.unwrap_err();
    assert!(is_exhausted(&err, "log sequence number"), "{err:?}");
}
