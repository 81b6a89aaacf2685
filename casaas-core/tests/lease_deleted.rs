#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! A lock object deleted from outside the protocol (an operator removes
//! it) is not created again at token 1 by a process that saw it: fenced
//! resources recorded a higher token, and would refuse every new holder.

use std::sync::Arc;

use casaas_core::lease::{Lease, LeaseConfig, LeaseError};
use casaas_core::{CasStore, ErrorKind, MemoryStore};

async fn delete_from_outside(store: &MemoryStore, key: &str) {
    let object = store.get(key).await.unwrap().expect("the lock object");
    store.delete(key, &object.version).await.unwrap();
}

#[tokio::test]
async fn a_deleted_lock_object_is_refused_not_restarted_at_token_1() {
    let store = Arc::new(MemoryStore::new());
    let a = Lease::new(store.clone(), "locks/deleted", "a", LeaseConfig::default()).unwrap();
    let b = Lease::new(store.clone(), "locks/deleted", "b", LeaseConfig::default()).unwrap();
    let first = a.try_acquire().await.unwrap().into_result().unwrap();
    assert_eq!(first.token(), 1);
    first.release().await.unwrap();
    let second = b.try_acquire().await.unwrap().into_result().unwrap();
    assert_eq!(second.token(), 2);
    second.release().await.unwrap();

    delete_from_outside(&store, "locks/deleted").await;
    for (who, lease) in [("b", &b), ("a", &a)] {
        match lease.try_acquire().await {
            Err(LeaseError::Store(err)) => {
                assert_eq!(err.kind(), ErrorKind::Misconfigured, "{who}: {err}");
                let text = err.to_string();
                assert!(text.contains("deleted from outside the protocol"), "{text}");
                assert!(text.contains("token 2"), "{text}");
                assert!(text.contains("casaas release"), "{text}");
            }
            Ok(outcome) => panic!(
                "{who}: the deleted lock was created again: {:?}",
                outcome.into_result().map(|g| g.token())
            ),
            Err(other) => panic!("{who}: {other}"),
        }
    }
    // A handle made after the deletion, in the same process, refuses too.
    let c = Lease::new(store.clone(), "locks/deleted", "c", LeaseConfig::default()).unwrap();
    assert!(c.try_acquire().await.is_err());
    // `acquire` does not retry it as a lost race.
    let waited = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        c.acquire(Default::default()),
    )
    .await
    .expect("acquire gave up");
    assert!(waited.is_err());
    // Another lock, never seen deleted, starts at token 1 as always.
    let d = Lease::new(store, "locks/fresh", "d", LeaseConfig::default()).unwrap();
    assert_eq!(
        d.try_acquire()
            .await
            .unwrap()
            .into_result()
            .unwrap()
            .token(),
        1
    );
}

/// Leases of one process racing to create a fresh lock object: one that
/// read the key absent just before another of the process created it must
/// lose the create (Held), not be told that the object was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_of_one_process_racing_on_a_fresh_key_are_not_refused() {
    // The file store: a read takes long enough for another task to create.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(casaas_core::FileStore::open(dir.path()).await.unwrap());
    for round in 0..50 {
        let key = format!("locks/fresh-{round}");
        let tasks: Vec<_> = (0..8)
            .map(|n| {
                let lease = Lease::new(
                    store.clone(),
                    key.as_str(),
                    format!("t{n}"),
                    LeaseConfig::default(),
                )
                .unwrap();
                tokio::spawn(async move { lease.try_acquire().await.map(|o| o.into_result().ok()) })
            })
            .collect();
        // Guards kept until every task is done: one holder per round.
        let mut guards = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(guard) => guards.extend(guard),
                Err(err) => {
                    panic!("round {round}: a racing lease of this process was refused: {err}")
                }
            }
        }
        assert_eq!(guards.len(), 1, "round {round}");
    }
}
