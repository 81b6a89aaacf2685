//! The adapter on object_store's embedded stores: the contract suite on
//! `InMemory`, what `LocalFileSystem` can and cannot do (both in
//! `shared/embedded.rs`, which `embedded_0_13.rs` runs on 0.13), and opening
//! by URL.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::{CasStore, ErrorKind};
use casaas_object_store::ObjectStoreCas;
use object_store as os;

/// The object_store line these tests run on.
const LINE: &str = "0.14";

include!("shared/embedded.rs");

#[tokio::test]
async fn open_by_url() {
    casaas_object_store::register();
    let store = casaas_core::open_store("object_store+memory:///app/locks")
        .await
        .unwrap();
    assert_eq!(store.describe(), "object_store InMemory /app/locks");
    store.create("k", Bytes::from_static(b"x")).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let url = format!("object_store+file://{}/locks", dir.path().display());
    let store = casaas_core::open_store(&url).await.unwrap();
    assert!(!store.capabilities().replace_if_match);
    store.create("k", Bytes::from_static(b"x")).await.unwrap();
    assert!(dir.path().join("locks").join("k").is_file());

    // object_store's own configuration keys are checked, not ignored.
    let err = casaas_core::open_store(
        "object_store+s3://bucket/p?aws_endpoint=http://127.0.0.1:1&aws_no_such_key=1",
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(err.to_string().contains("aws_no_such_key"), "{err}");

    // An S3 client with conditional put disabled claims no conditions.
    let store = casaas_core::open_store(
        "object_store+s3://bucket/p?aws_endpoint=http://127.0.0.1:1&aws_access_key_id=k\
         &aws_secret_access_key=s&aws_region=us-east-1&aws_conditional_put=disabled",
    )
    .await
    .unwrap();
    let caps = store.capabilities();
    assert!(!caps.create_if_absent && !caps.replace_if_match, "{caps:?}");
}

/// A conditional write larger than the single-part limit may go multipart
/// or chunked, where a store can drop its condition: refused with a clear
/// error, nothing written, unless the caller opts in.
#[tokio::test]
async fn unproven_large_conditional_writes_are_refused() {
    let client: Arc<dyn os::ObjectStore> = Arc::new(os::memory::InMemory::new());
    let store = ObjectStoreCas::new(client.clone(), "large").unwrap();
    let limit = casaas_object_store::CONDITIONAL_SINGLE_PART_LIMIT;
    let big = Bytes::from(vec![b'x'; limit + 1]);
    let err = store.create("big", big.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let text = err.to_string();
    assert!(text.contains("single-part limit"), "{text}");
    assert!(text.contains("allow_large_conditional_writes"), "{text}");
    assert!(!err.may_have_taken_effect());
    assert!(store.get("big").await.unwrap().is_none());

    // A replace is refused the same way, and the object stays.
    let v = store
        .create("small", Bytes::from_static(b"s"))
        .await
        .unwrap();
    let err = store.replace("small", &v, big.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(store.get("small").await.unwrap().unwrap().body, "s");

    // At the limit, the write goes through.
    store
        .create("fits", Bytes::from(vec![b'y'; limit]))
        .await
        .unwrap();

    // Opted in, the large write is sent.
    let store = ObjectStoreCas::new(client, "large")
        .unwrap()
        .allow_large_conditional_writes(true);
    store.create("big", big).await.unwrap();
}

/// An `object_store+` URL opened with a capability profile follows it: NOT
/// SAFE refuses, a profile proving multipart conditions lets a large
/// conditional write through, one that does not keeps it refused.
#[tokio::test]
async fn large_conditional_writes_follow_the_capability_profile() {
    casaas_object_store::register();
    let dir = tempfile::tempdir().unwrap();
    casaas_core::testkit::check_large_writes_follow_the_profile(
        "object_store+memory:///profiled",
        dir.path(),
    )
    .await;
}

/// Two stores over two `InMemory` clients hold different objects: a lock
/// taken in one is no sign that the same key of the other was deleted (the
/// process's token floor is kept by store identity).
#[tokio::test]
async fn two_in_memory_stores_are_two_stores() {
    use casaas_core::lease::{Lease, LeaseConfig};
    let open = || -> Arc<dyn CasStore> {
        Arc::new(ObjectStoreCas::new(Arc::new(os::memory::InMemory::new()), "p").unwrap())
    };
    let (first, second) = (open(), open());
    assert_ne!(first.identity(), second.identity());
    for store in [first, second] {
        let lease = Lease::new(store, "leader", "node", LeaseConfig::default()).unwrap();
        let guard = lease.try_acquire().await.unwrap().into_result().unwrap();
        assert_eq!(guard.token(), 1);
        guard.release().await.unwrap();
    }
}
