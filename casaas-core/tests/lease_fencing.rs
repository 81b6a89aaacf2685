#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Fenced resources and the fenced log: the protection the lock alone cannot give.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{FencedLog, FencedResource, Lease, LeaseConfig, LeaseError, WaitOptions};
use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};
use casaas_core::{CasStore, FileStore, MemoryStore};

#[tokio::test]
async fn fenced_resource_refuses_lower_tokens() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let head = FencedResource::<Vec<String>>::new(store.clone(), "table/head").unwrap();
    assert!(head.read().await.unwrap().is_none());
    let v = head
        .update(3, |v| {
            let mut v = v.cloned().unwrap_or_default();
            v.push("commit-1".into());
            v
        })
        .await
        .unwrap();
    assert_eq!((v.token, v.value.len()), (3, 1));
    // Same token: fine. Higher: fine and recorded.
    head.update(3, |v| v.cloned().unwrap()).await.unwrap();
    head.update(5, |v| v.cloned().unwrap()).await.unwrap();
    let before = store.get("table/head").await.unwrap().unwrap();
    let err = head.update(4, |_| vec!["zombie".into()]).await.unwrap_err();
    assert!(
        matches!(
            err,
            LeaseError::FencedOut {
                presented: 4,
                recorded: 5
            }
        ),
        "{err:?}"
    );
    assert_eq!(store.get("table/head").await.unwrap().unwrap(), before);
}

#[tokio::test]
async fn fenced_resource_serializes_concurrent_updates() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let counter = FencedResource::<u64>::new(store, "counter").unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                c.update(1, |v| v.copied().unwrap_or(0) + 1).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(counter.read().await.unwrap().unwrap().value, 80);
}

#[tokio::test]
async fn fenced_resource_resolves_ambiguous_writes() {
    let faults = FaultyStore::new(MemoryStore::new(), 3, FaultConfig::default());
    let store: Arc<dyn CasStore> = Arc::new(faults.clone());
    let counter = FencedResource::<u64>::new(store, "counter")
        .unwrap()
        .with_retry_policy(
            casaas_core::lease::RetryPolicy::default()
                .with_request_timeout(Duration::from_secs(1))
                .with_retry_period(Duration::from_millis(1))
                .with_max_attempts(8),
        );
    for fault in [
        Fault::LoseResponse,
        Fault::Duplicate,
        Fault::ServerErrorNotApplied,
    ] {
        faults.inject(Fault::Delay(Duration::ZERO)); // the read
        faults.inject(fault); // the write
        counter
            .update(1, |v| v.copied().unwrap_or(0) + 1)
            .await
            .unwrap();
    }
    // Each update applied exactly once.
    assert_eq!(counter.read().await.unwrap().unwrap().value, 3);
}

#[tokio::test]
async fn fenced_resource_refuses_foreign_objects() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    store
        .create("head", Bytes::from_static(b"not ours"))
        .await
        .unwrap();
    let head = FencedResource::<u64>::new(store.clone(), "head").unwrap();
    let err = head.update(1, |_| 1).await.unwrap_err();
    assert!(matches!(err, LeaseError::ForeignObject { .. }), "{err:?}");
    assert_eq!(store.get("head").await.unwrap().unwrap().body, "not ours");
}

/// A paused old leader resumes after a new leader took over: the lease alone
/// cannot stop its write, the fenced resource does.
#[tokio::test(start_paused = true)]
async fn paused_leader_is_fenced_out() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let config = LeaseConfig::from_ttl(Duration::from_secs(10));
    let head = FencedResource::<String>::new(store.clone(), "table/head").unwrap();
    let old = Lease::new(store.clone(), "table/lock", "old", config.clone()).unwrap();
    let old_guard = old.acquire(WaitOptions::default()).await.unwrap();
    // The old leader checks its lease, then pauses before writing.
    old_guard.ensure_held_for(Duration::from_secs(1)).unwrap();
    let old_token = old_guard.token();
    old_guard.abandon();

    let new = Lease::new(store.clone(), "table/lock", "new", config).unwrap();
    let new_guard = new.acquire(WaitOptions::default()).await.unwrap();
    assert_eq!(new_guard.token(), old_token + 1);
    head.update_guarded(&new_guard, Duration::from_secs(1), |_| "new-commit".into())
        .await
        .unwrap();

    let err = head
        .update(old_token, |_| "stale".into())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LeaseError::FencedOut {
                presented: 1,
                recorded: 2
            }
        ),
        "{err:?}"
    );
    assert_eq!(head.read().await.unwrap().unwrap().value, "new-commit");
}

async fn log_fencing(store: Arc<dyn CasStore>) {
    let log = FencedLog::<String>::new(store.clone(), "table/_log").unwrap();
    assert!(log.latest().await.unwrap().is_none());
    for (i, token) in [1, 1, 2].into_iter().enumerate() {
        let e = log.append(token, format!("commit {i}")).await.unwrap();
        assert_eq!(e.seq, i as u64 + 1);
    }
    let err = log.append(1, "zombie".into()).await.unwrap_err();
    assert!(
        matches!(
            err,
            LeaseError::FencedOut {
                presented: 1,
                recorded: 2
            }
        ),
        "{err:?}"
    );
    let entries = log.entries(1).await.unwrap();
    assert_eq!(
        entries.iter().map(|e| (e.seq, e.token)).collect::<Vec<_>>(),
        vec![(1, 1), (2, 1), (3, 2)]
    );
    assert_eq!(log.latest().await.unwrap().unwrap().value, "commit 2");
    assert_eq!(log.entry_key(3), "table/_log/00000000000000000003");
}

#[tokio::test]
async fn log_append_is_fenced_memory() {
    log_fencing(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn log_append_is_fenced_file() {
    let dir = tempfile::tempdir().unwrap();
    log_fencing(Arc::new(FileStore::open(dir.path()).await.unwrap())).await;
}

#[tokio::test]
async fn log_appends_race_to_distinct_sequence_numbers() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let log = FencedLog::<u32>::new(store, "log").unwrap();
    let mut tasks = Vec::new();
    for w in 0..6u32 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..5u32 {
                log.append(1, w * 100 + i).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let entries = log.entries(1).await.unwrap();
    assert_eq!(entries.len(), 30);
    assert!(
        entries
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64 + 1)
    );
}

#[tokio::test]
async fn log_append_resolves_ambiguous_creates() {
    let faults = FaultyStore::new(MemoryStore::new(), 9, FaultConfig::default());
    let store: Arc<dyn CasStore> = Arc::new(faults.clone());
    let log = FencedLog::<String>::new(store, "log")
        .unwrap()
        .with_retry_policy(
            casaas_core::lease::RetryPolicy::default()
                .with_request_timeout(Duration::from_secs(1))
                .with_retry_period(Duration::from_millis(1))
                .with_max_attempts(8),
        );
    for fault in [
        Fault::LoseResponse,
        Fault::Duplicate,
        Fault::ServerErrorNotApplied,
    ] {
        // The handle knows where the log ends, so the create is the
        // append's first request.
        log.latest_seq().await.unwrap();
        faults.inject(fault);
        log.append(1, format!("{fault:?}")).await.unwrap();
    }
    let entries = log.entries(1).await.unwrap();
    assert_eq!(
        entries.iter().map(|e| e.value.as_str()).collect::<Vec<_>>(),
        vec!["LoseResponse", "Duplicate", "ServerErrorNotApplied"]
    );
}
