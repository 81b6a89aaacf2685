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
