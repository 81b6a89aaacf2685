//! Native blob leases against Azurite. Bounded in time: breaks instead of
//! waiting, except one expiry test that waits out the shortest lease (15 s).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use casaas_azure::{NativeLeaseDuration, NativeLeaseError};
use casaas_core::{CasStore, ErrorKind};

#[tokio::test]
async fn acquire_second_acquire_renew_release() {
    let store = common::fresh("native-lease").await;
    let lease = store.native_lease("lock").unwrap();
    let d30 = NativeLeaseDuration::seconds(30).unwrap();

    // Acquire creates the (empty) blob a lease needs.
    let id = lease.acquire(d30).await.unwrap();
    assert!(store.get("lock").await.unwrap().is_some());

    // A second holder is refused while the lease is active.
    let err = lease.acquire(d30).await.unwrap_err();
    assert!(
        matches!(&err, NativeLeaseError::HeldByAnother { code } if code == "LeaseAlreadyPresent"),
        "{err:?}"
    );

    lease.renew(id).await.unwrap();

    // Another id cannot renew or release it.
    let stranger = "00000000-0000-4000-8000-000000000001".parse().unwrap();
    let err = lease.renew(stranger).await.unwrap_err();
    assert!(matches!(err, NativeLeaseError::Lost { .. }), "{err:?}");
    let err = lease.release(stranger).await.unwrap_err();
    assert!(matches!(err, NativeLeaseError::Lost { .. }), "{err:?}");

    lease.release(id).await.unwrap();
    let id2 = lease.acquire(d30).await.unwrap();
    assert_ne!(id, id2, "a new acquisition gets a new id");
    lease.release(id2).await.unwrap();
}

#[tokio::test]
async fn leased_blob_refuses_plain_conditional_writes() {
    let store = common::fresh("native-lease").await;
    let v = store
        .create("guarded", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let lease = store.native_lease("guarded").unwrap();
    let id = lease.acquire(NativeLeaseDuration::Infinite).await.unwrap();
    let err = store
        .replace("guarded", &v, Bytes::from_static(b"y"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(err.status(), Some(412));
    assert_eq!(err.code(), Some("LeaseIdMissing"));
    lease.release(id).await.unwrap();
    store
        .replace("guarded", &v, Bytes::from_static(b"y"))
        .await
        .unwrap();
}

#[tokio::test]
async fn break_ends_a_lease_without_its_id() {
    let store = common::fresh("native-lease").await;
    let lease = store.native_lease("lock").unwrap();

    // An infinite lease broken with no period ends at once.
    let id = lease.acquire(NativeLeaseDuration::Infinite).await.unwrap();
    assert_eq!(lease.break_lease(None).await.unwrap(), Duration::ZERO);
    let err = lease.renew(id).await.unwrap_err();
    assert!(matches!(err, NativeLeaseError::Lost { .. }), "{err:?}");
    let id2 = lease
        .acquire(NativeLeaseDuration::seconds(60).unwrap())
        .await
        .unwrap();

    // A break with a period leaves the lease breaking: nobody can acquire
    // until it ends, and the old holder cannot renew.
    let left = lease
        .break_lease(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        left <= Duration::from_secs(10) && left > Duration::ZERO,
        "{left:?}"
    );
    let err = lease
        .acquire(NativeLeaseDuration::seconds(15).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(err, NativeLeaseError::HeldByAnother { .. }),
        "{err:?}"
    );
    let err = lease.renew(id2).await.unwrap_err();
    assert!(matches!(err, NativeLeaseError::Lost { .. }), "{err:?}");

    // Breaking again with period 0 ends it now.
    assert_eq!(
        lease.break_lease(Some(Duration::ZERO)).await.unwrap(),
        Duration::ZERO
    );
    let id3 = lease.acquire(NativeLeaseDuration::Infinite).await.unwrap();
    lease.release(id3).await.unwrap();

    assert!(
        lease
            .break_lease(Some(Duration::from_secs(61)))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn renew_and_break_on_a_missing_blob() {
    let store = common::fresh("native-lease").await;
    let lease = store.native_lease("never-written").unwrap();
    let id = "00000000-0000-4000-8000-000000000002".parse().unwrap();
    let err = lease.renew(id).await.unwrap_err();
    assert!(matches!(err, NativeLeaseError::BlobNotFound), "{err:?}");
    let err = lease.break_lease(None).await.unwrap_err();
    assert!(matches!(err, NativeLeaseError::BlobNotFound), "{err:?}");
}

/// The one slow test: a 15 s lease, unrenewed, lets another holder in
/// after it expires on the service's clock (waits about 16 s).
#[tokio::test]
async fn an_unrenewed_lease_expires() {
    let store = common::fresh("native-lease").await;
    let lease = store.native_lease("lock").unwrap();
    let d15 = NativeLeaseDuration::seconds(15).unwrap();
    let started = Instant::now();
    let first = lease.acquire(d15).await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    drop_stale_connection(&store).await;
    assert!(
        matches!(
            lease.acquire(d15).await,
            Err(NativeLeaseError::HeldByAnother { .. })
        ),
        "still held after 10 s"
    );
    tokio::time::sleep(Duration::from_secs(16).saturating_sub(started.elapsed())).await;
    drop_stale_connection(&store).await;
    let second = lease.acquire(d15).await.unwrap();
    assert_ne!(first, second);
    let err = lease.renew(first).await.unwrap_err();
    assert!(matches!(err, NativeLeaseError::Lost { .. }), "{err:?}");
    lease.release(second).await.unwrap();
}

/// Azurite (a Node.js server) closes connections idle for 5 s, and a
/// request sent on one just as it closes is reset: for a write that is an
/// honest "may have taken effect", which a native lease call cannot resolve.
/// After each idle pause, a throwaway read takes such a connection out of
/// the pool (its error, if any, is the point), so that the lease calls
/// below test the lease, not that race.
async fn drop_stale_connection(store: &casaas_azure::AzureBlobStore) {
    let _ = store.get("lock").await;
}
