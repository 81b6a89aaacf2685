//! The adapter on OpenDAL's embedded services (`memory`, `fs`): what they
//! can and cannot do, and opening by URL.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::testkit::contract::Check;
use casaas_core::{CasStore, ErrorKind};
use casaas_opendal::OpendalCas;
use opendal::{Operator, services};

fn memory_store() -> Arc<dyn CasStore> {
    let op = Operator::new(services::Memory::default()).unwrap();
    Arc::new(OpendalCas::new(op, "tables/t1").unwrap())
}

/// The checks that need no conditional replace or delete.
const CREATE_ONLY_CHECKS: [Check; 7] = [
    Check::GetAbsent,
    Check::CreateThenGet,
    Check::CreateConflictLeavesObject,
    Check::LosingCreate,
    Check::ListPrefix,
    Check::InvalidKeyRejected,
    Check::RaceCreate,
];

async fn create_only_backend_honours_create(store: impl Fn() -> Arc<dyn CasStore>) {
    for check in CREATE_ONLY_CHECKS {
        check.run(store(), 8, 20).await;
    }
    let store = store();
    let caps = store.capabilities();
    assert!(caps.create_if_absent, "{caps:?}");
    assert!(
        !caps.replace_if_match && !caps.conditional_delete,
        "{caps:?}"
    );
    let v = store.create("k", Bytes::from_static(b"x")).await.unwrap();
    let err = store
        .replace("k", &v, Bytes::from_static(b"y"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    let err = store.delete("k", &v).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    // Leases take the create-only layout on it: every write a new object.
    assert_eq!(
        casaas_core::layout::layout_of(store.as_ref()),
        casaas_core::layout::LeaseLayout::Epochs
    );
    let lease = casaas_core::lease::Lease::new(
        store,
        "leader",
        "me",
        casaas_core::lease::LeaseConfig::default(),
    )
    .unwrap();
    for token in 1..=2 {
        let guard = lease.acquire(Default::default()).await.unwrap();
        assert_eq!(guard.token(), token);
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_service_honours_create_and_reports_no_replace() {
    // One operator per check run: each check wants an empty store.
    create_only_backend_honours_create(memory_store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_service_honours_create_and_reports_no_replace() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let make = || {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let op = Operator::new(services::Fs::default().root(&root)).unwrap();
        Arc::new(OpendalCas::new(op, format!("run-{n}")).unwrap()) as Arc<dyn CasStore>
    };
    create_only_backend_honours_create(make).await;
}

#[tokio::test]
async fn content_versions_name_the_bytes() {
    let store = memory_store();
    let v = store
        .create("a", Bytes::from_static(b"same"))
        .await
        .unwrap();
    let w = store
        .create("b", Bytes::from_static(b"same"))
        .await
        .unwrap();
    assert_eq!(v, w);
    assert!(v.to_string().starts_with("sha256:"), "{v}");
    assert_eq!(store.get("a").await.unwrap().unwrap().version, v);
}

#[tokio::test]
async fn open_by_url() {
    casaas_opendal::register();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("opendal+fs://{}/locks", dir.path().display());
    let store = casaas_core::open_store(&url).await.unwrap();
    store.create("k", Bytes::from_static(b"x")).await.unwrap();
    assert!(
        dir.path().join("locks").join("k").is_file(),
        "{}",
        store.describe()
    );

    let err = casaas_core::open_store("opendal+nosuchservice://x/y")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    let err = casaas_core::open_store("opendal+memory:///?conditional_delete=maybe")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("conditional_delete"), "{err}");
}

/// A conditional write larger than the single-part limit may go multipart
/// or chunked, where a store can drop its condition: refused with a clear
/// error, nothing written, unless the caller opts in.
#[tokio::test]
async fn unproven_large_conditional_writes_are_refused() {
    let op = Operator::new(services::Memory::default()).unwrap();
    let store = OpendalCas::new(op.clone(), "large").unwrap();
    let big = Bytes::from(vec![
        b'x';
        casaas_opendal::CONDITIONAL_SINGLE_PART_LIMIT + 1
    ]);
    let err = store.create("big", big.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let text = err.to_string();
    assert!(text.contains("single-part limit"), "{text}");
    assert!(text.contains("allow_large_conditional_writes"), "{text}");
    assert!(!err.may_have_taken_effect());
    assert!(store.get("big").await.unwrap().is_none());

    // At the limit, the write goes through.
    let at_limit = Bytes::from(vec![b'y'; casaas_opendal::CONDITIONAL_SINGLE_PART_LIMIT]);
    store.create("fits", at_limit).await.unwrap();

    // Opted in, the large write is sent.
    let store = OpendalCas::new(op, "large")
        .unwrap()
        .allow_large_conditional_writes(true);
    store.create("big", big).await.unwrap();
}

/// An `opendal+` URL opened with a capability profile follows it: NOT SAFE
/// refuses, a profile proving multipart conditions lets a large conditional
/// write through, one that does not keeps it refused.
#[tokio::test]
async fn large_conditional_writes_follow_the_capability_profile() {
    casaas_opendal::register();
    let dir = tempfile::tempdir().unwrap();
    casaas_core::testkit::check_large_writes_follow_the_profile("opendal+memory:///", dir.path())
        .await;
}
