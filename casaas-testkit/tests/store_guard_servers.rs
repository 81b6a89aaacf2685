#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The store guard against the real servers `cargo xtask servers up`
//! starts: the sound ones pass (moto, Ceph RGW with the options xtask gives
//! it, Azurite, fake-gcs; memory and file too), the ones that ignore
//! conditions (s3rver, gcp-storage-emulator) are refused before any
//! protocol write, by every primitive, with a one-line message; with
//! `verify=false` the primitives behave as they did before the guard.

use std::sync::Arc;
use std::time::Duration;

use casaas_core::guard::{GUARD_PREFIX, StoreGuard};
use casaas_core::layout::{LeaseLayout, layout_of, lease_view};
use casaas_core::lease::{
    AcquireOutcome, Election, FencedLog, FencedResource, Lease, LeaseConfig, LeaseError,
    WaitOptions,
};
use casaas_core::testkit::{test_server, unique_prefix};
use casaas_core::{CasStore, ErrorKind, StoreUrl};
use casaas_testkit::chaos_proxy::rewrite_store_url;

/// The server's store under a fresh prefix, with `options` set in its URL.
async fn open(server: &str, options: &[&str]) -> Arc<dyn CasStore> {
    open_at(server, &unique_prefix("guard"), options).await
}

/// The server's store under `prefix`, with `options` set in its URL.
async fn open_at(server: &str, prefix: &str, options: &[&str]) -> Arc<dyn CasStore> {
    let server = test_server(server);
    let url = rewrite_store_url(&server.url, None, None, prefix).unwrap();
    let url = StoreUrl::parse(&url)
        .unwrap()
        .with_options(options)
        .unwrap();
    casaas_testkit::open_with_env(url.as_unredacted_str(), &server.env)
        .await
        .unwrap()
}

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

async fn assert_passes(store: &Arc<dyn CasStore>) {
    let view = lease_view(store.clone());
    let report = StoreGuard::new().check(view.as_ref()).await.unwrap();
    assert!(report.passed(), "{}: {report:?}", store.describe());
    assert_eq!(report.attempts(), 1, "{}", store.describe());
    // It removes what it wrote where the store can delete (conditionally,
    // or its own key without a condition); what is left is what it says.
    let left = store.list(GUARD_PREFIX).await.unwrap();
    for entry in &left {
        assert!(
            report
                .left_behind()
                .iter()
                .any(|key| entry.key.starts_with(key.as_str())),
            "{}: {} left but not reported: {:?}",
            store.describe(),
            entry.key,
            report.left_behind()
        );
    }
    if layout_of(store.as_ref()) == LeaseLayout::Record {
        assert_eq!(
            left.len(),
            report.left_behind().len(),
            "{}: {left:?}",
            store.describe()
        );
    }
}

#[tokio::test]
async fn sound_servers_pass() {
    for (server, options) in [
        ("moto", &[][..]),
        ("ceph", &[]),
        ("azurite", &[]),
        ("fake-gcs", &[]),
        ("seaweedfs", &[]),
        ("createonly", &["layout=epochs"]),
    ] {
        let store = open(server, options).await;
        assert_passes(&store).await;
        // And a lease then works as before.
        let lease = Lease::new(store, "locks/guarded", "a", config()).unwrap();
        let AcquireOutcome::Acquired(guard) = lease.try_acquire().await.unwrap() else {
            panic!("{server}: not acquired");
        };
        guard.release().await.unwrap();
    }
}

/// Ceph RGW refuses conditional delete (xtask opens it with
/// `conditional_delete=false`): the guard deletes its own key without a
/// condition, and leaves nothing.
#[tokio::test]
async fn on_ceph_the_guard_leaves_nothing_behind() {
    let store = open("ceph", &[]).await;
    assert!(!store.capabilities().conditional_delete);
    let report = StoreGuard::new().check(store.as_ref()).await.unwrap();
    assert!(report.passed(), "{report:?}");
    assert!(report.left_behind().is_empty(), "{report:?}");
    assert!(store.list(GUARD_PREFIX).await.unwrap().is_empty());
}

/// One process opens Ceph without `etag_unquoted` first, then with it: the
/// first opening's verdict does not decide the second's.
#[tokio::test]
async fn ceph_opened_wrongly_first_and_rightly_later_gets_two_verdicts() {
    let prefix = unique_prefix("guard-two-openings");
    let wrong = open_at("ceph", &prefix, &["etag_unquoted=false"]).await;
    let err = StoreGuard::new().ensure(wrong.as_ref()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeStore, "{err}");
    let right = open_at("ceph", &prefix, &[]).await;
    StoreGuard::new().ensure(right.as_ref()).await.unwrap();
    let lease = Lease::new(right, "locks/l", "a", config()).unwrap();
    let AcquireOutcome::Acquired(guard) = lease.try_acquire().await.unwrap() else {
        panic!("not acquired");
    };
    guard.release().await.unwrap();
}

#[tokio::test]
async fn embedded_backends_pass() {
    let memory = casaas_core::open_store("memory://guard-servers/p")
        .await
        .unwrap();
    assert_passes(&memory).await;
    let dir = tempfile::tempdir().unwrap();
    let file = casaas_core::open_store(&format!("file://{}", dir.path().display()))
        .await
        .unwrap();
    assert_passes(&file).await;
}

/// Ceph RGW without the `etag_unquoted` option xtask's URL carries cannot
/// match its own ETags: the guard says so instead of every renewal failing.
#[tokio::test]
async fn ceph_without_its_option_is_refused_with_the_reason() {
    let store = open("ceph", &["etag_unquoted=false"]).await;
    let report = StoreGuard::new().check(store.as_ref()).await.unwrap();
    let failed = report.failure().expect("Ceph without etag_unquoted passed");
    assert_eq!(failed.name, "replace_current", "{failed:?}");
    assert!(
        failed.detail.contains("does not accept its own versions"),
        "{}",
        failed.detail
    );
}

#[tokio::test]
async fn servers_that_ignore_conditions_are_refused_by_every_primitive() {
    for server in ["s3rver", "gcs-liar"] {
        let store = open(server, &[]).await;
        let report = StoreGuard::new().check(store.as_ref()).await.unwrap();
        let failed = report
            .failure()
            .unwrap_or_else(|| panic!("{server} passed"));
        assert_eq!(failed.name, "create_if_absent", "{server}: {failed:?}");

        let lease = Lease::new(store.clone(), "locks/guarded", "a", config()).unwrap();
        let err = lease.try_acquire().await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{server}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(
                "a create on an existing key succeeded: this store ignores If-None-Match"
            ),
            "{message}"
        );
        assert!(message.contains("casaas conformance"), "{message}");
        assert!(!message.contains('\n'), "{message}");
        assert_eq!(err.store_kind(), Some(ErrorKind::UnsafeStore));
        // The blocking acquire too.
        let err = lease.acquire(WaitOptions::default()).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{server}: {err}");

        let election = Election::new(Lease::new(store.clone(), "locks/e", "a", config()).unwrap());
        let err = election.campaign(Default::default()).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{server}: {err}");
        let resource = FencedResource::<u64>::new(store.clone(), "fenced/r").unwrap();
        let err = resource.update(1, |_| 1).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{server}: {err}");
        let log = FencedLog::<u64>::new(store.clone(), "fenced/log").unwrap();
        let err = log.append(1, 1).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{server}: {err}");

        // No protocol object was written.
        for key in ["locks/guarded", "locks/e", "fenced/r"] {
            assert!(store.get(key).await.unwrap().is_none(), "{server}: {key}");
        }
    }
}

use casaas_core::testkit::logged;

#[tokio::test(flavor = "current_thread")]
async fn verify_false_behaves_as_before_the_guard_and_warns() {
    for server in ["s3rver", "gcs-liar"] {
        let (store, logs) = logged(open(server, &["verify=false"])).await;
        assert!(
            logs.contains(" WARN ") && logs.contains("the store guard is off (verify=false)"),
            "{server}: {logs}"
        );
        assert!(casaas_core::guard::is_trusted(store.as_ref()), "{server}");
        let lease = Lease::new(store.clone(), "locks/unguarded", "a", config()).unwrap();
        let guard = lease.acquire(WaitOptions::default()).await.unwrap();
        assert_eq!(guard.token(), 1);
        guard.release().await.unwrap();
        let election = Election::new(Lease::new(store.clone(), "locks/e", "a", config()).unwrap());
        let leader = election.campaign(Default::default()).await.unwrap();
        assert_eq!(leader.token(), 1, "{server}");
        leader.resign().await.unwrap();
        let resource = FencedResource::<u64>::new(store.clone(), "fenced/r").unwrap();
        assert_eq!(resource.update(1, |_| 5).await.unwrap().value, 5);
        let log = FencedLog::<u64>::new(store.clone(), "fenced/log").unwrap();
        assert_eq!(log.append(1, 3).await.unwrap().seq, 1, "{server}");
        // The guard wrote nothing.
        assert!(
            store.list(GUARD_PREFIX).await.unwrap().is_empty(),
            "{server}"
        );
    }
}
