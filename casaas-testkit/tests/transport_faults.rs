#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! How each provider classifies real transport faults, through the chaos
//! proxy in front of the real servers `cargo xtask servers up` started
//! (moto for S3, fake-gcs for GCS, Azurite for Azure). One test per
//! (provider, fault). The rule under test: a write that reached the server
//! is never reported as "not sent" (safe to retry blindly) and never as
//! "precondition failed" when nothing else wrote; a write that a transport
//! duplicated is resolved as ours by the lease protocol.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig};
use casaas_core::testkit::{TestServer, test_server, unique_prefix};
use casaas_core::{CasError, CasStore, ErrorKind};
use casaas_testkit::chaos_proxy::{endpoint_of, rewrite_store_url};
use casaas_testkit::{ChaosProxy, ProxyFault};

/// How long a store waits for an answer; stalls are longer than this.
const CLIENT_TIMEOUT_S: u64 = 1;
const STALL: Duration = Duration::from_secs(3);

/// A store through a new chaos proxy with a short timeout, and one on the
/// same prefix that talks to the server directly with its default timeout:
/// the second is how the test learns what the server really holds, so a
/// slow answer on a loaded machine is never mistaken for the fault's effect.
struct Stores {
    proxy: ChaosProxy,
    through: Arc<dyn CasStore>,
    direct: Arc<dyn CasStore>,
}

/// The test URLs of `server`: through a new proxy (short timeout) and
/// direct, both under one fresh prefix.
async fn proxied(server: &TestServer, label: &str) -> (ChaosProxy, String, String) {
    let (origin, path) = endpoint_of(&server.url).unwrap();
    let proxy = ChaosProxy::start(&origin).await.unwrap();
    let through = format!("{}{path}", proxy.endpoint());
    let prefix = unique_prefix(label);
    let via_proxy =
        rewrite_store_url(&server.url, Some(&through), Some(CLIENT_TIMEOUT_S), &prefix).unwrap();
    let direct = rewrite_store_url(&server.url, None, None, &prefix).unwrap();
    (proxy, via_proxy, direct)
}

/// Both stores of [`Stores`], opened by `open` from their URLs.
async fn both<F, Fut>(proxy: ChaosProxy, through: String, direct: String, open: F) -> Stores
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Arc<dyn CasStore>>,
{
    Stores {
        proxy,
        through: open(through).await,
        direct: open(direct).await,
    }
}

async fn s3(label: &str) -> Stores {
    let server = test_server("moto");
    let (proxy, through, direct) = proxied(&server, label).await;
    both(proxy, through, direct, |url| {
        let server = &server;
        async move {
            let store = casaas_s3::S3Store::builder()
                .url(&url)
                .unwrap()
                .static_credentials(
                    server.var("AWS_ACCESS_KEY_ID"),
                    server.var("AWS_SECRET_ACCESS_KEY"),
                )
                .build()
                .await
                .unwrap();
            Arc::new(store) as Arc<dyn CasStore>
        }
    })
    .await
}

async fn gcs(label: &str) -> Stores {
    let server = test_server("fake-gcs");
    let (proxy, through, direct) = proxied(&server, label).await;
    both(proxy, through, direct, |url| async move {
        Arc::new(casaas_gcs::GcsStore::open(&url).await.unwrap()) as Arc<dyn CasStore>
    })
    .await
}

async fn azure(label: &str) -> Stores {
    let server = test_server("azurite");
    let (proxy, through, direct) = proxied(&server, label).await;
    both(proxy, through, direct, |url| {
        let server = &server;
        async move {
            let store = casaas_azure::AzureBlobStoreBuilder::from_url_with_env(&url, |name| {
                server.env.get(name).cloned()
            })
            .unwrap()
            .build()
            .await
            .unwrap();
            Arc::new(store) as Arc<dyn CasStore>
        }
    })
    .await
}

fn assert_may_have_taken_effect(err: &CasError, what: &str) {
    assert!(
        err.may_have_taken_effect(),
        "{what}: a write that reached the server must be 'may have taken effect', got {:?}: {err}",
        err.kind()
    );
}

/// What the server holds at `key`, read past the proxy.
async fn body_of(direct: &Arc<dyn CasStore>, key: &str) -> Option<Bytes> {
    direct.get(key).await.unwrap().map(|o| o.body)
}

/// Runs one fault against a create, then against a replace, and checks the
/// answer's kind against what the server really holds.
async fn check(stores: Stores, fault: ProxyFault) {
    let Stores {
        proxy,
        through: store,
        direct,
    } = stores;
    let (create_key, replace_key) = ("create", "replace");
    // Create under the fault.
    proxy.script(fault);
    let created = store.create(create_key, Bytes::from_static(b"one")).await;
    if matches!(fault, ProxyFault::StallThenForward(_)) {
        tokio::time::sleep(STALL + Duration::from_secs(1)).await;
    }
    let held = body_of(&direct, create_key).await;
    judge(fault, created.map(|_| ()), held.is_some(), "create");

    // Replace under the fault.
    let version = store
        .create(replace_key, Bytes::from_static(b"v1"))
        .await
        .unwrap();
    proxy.script(fault);
    let replaced = store
        .replace(replace_key, &version, Bytes::from_static(b"v2"))
        .await;
    if matches!(fault, ProxyFault::StallThenForward(_)) {
        tokio::time::sleep(STALL + Duration::from_secs(1)).await;
    }
    let held = body_of(&direct, replace_key).await;
    judge(
        fault,
        replaced.map(|_| ()),
        held.as_deref() == Some(b"v2".as_slice()),
        "replace",
    );
    let log = proxy.log();
    assert!(
        log.iter().filter(|r| r.fault == fault).count() >= 2,
        "the fault was applied: {log:?}"
    );
}

fn judge(fault: ProxyFault, result: Result<(), CasError>, applied: bool, op: &str) {
    let what = format!("{op} under {fault:?}");
    match fault {
        ProxyFault::Forward => {
            result.unwrap();
            assert!(applied, "{what}");
        }
        ProxyFault::DropAfterForward
        | ProxyFault::TruncateResponse
        | ProxyFault::StallThenForward(_)
        | ProxyFault::ServerErrorAfterForward => {
            assert!(applied, "{what}: the server holds the write");
            let err = result.expect_err(&what);
            assert_may_have_taken_effect(&err, &what);
        }
        ProxyFault::ResetBeforeForward => {
            assert!(!applied, "{what}: nothing reached the server");
            let err = result.expect_err(&what);
            assert_ne!(err.kind(), ErrorKind::PreconditionFailed, "{what}: {err}");
            assert!(
                err.may_have_taken_effect() || err.is_retryable(),
                "{what}: a dropped connection is retried or resolved, got {:?}: {err}",
                err.kind()
            );
        }
        ProxyFault::TooManyRequests => {
            assert!(!applied, "{what}");
            let err = result.expect_err(&what);
            assert_eq!(err.kind(), ErrorKind::Throttled, "{what}: {err}");
            assert!(err.is_retryable(), "{what}");
        }
        ProxyFault::SlowDown => {
            // S3 documents 503 SlowDown as "nothing done, slow down"; GCS and
            // Azure give no such promise for a bare 503, and their crates
            // resolve it by reading. Either is safe; "not sent" or a
            // precondition failure would not be.
            assert!(!applied, "{what}");
            let err = result.expect_err(&what);
            assert!(
                err.kind() == ErrorKind::Throttled || err.may_have_taken_effect(),
                "{what}: {err}"
            );
            assert!(err.is_retryable(), "{what}");
        }
        ProxyFault::InternalError => {
            assert!(!applied, "{what}");
            let err = result.expect_err(&what);
            assert_may_have_taken_effect(&err, &what);
        }
        ProxyFault::Duplicate => {
            // The server applied the first copy; the second copy's answer
            // says the condition failed. The raw store cannot know better:
            // a precondition failure (which the protocols resolve by
            // reading), never success-then-nothing or "not sent".
            assert!(applied, "{what}");
            let err = result.expect_err(&what);
            assert!(
                err.kind() == ErrorKind::PreconditionFailed || err.may_have_taken_effect(),
                "{what}: {err}"
            );
        }
    }
}

/// A transport duplicate of the lease's create answers "precondition
/// failed"; the lease protocol must still recognise the lease as ours.
async fn duplicate_is_resolved_by_the_lease(store: Arc<dyn CasStore>, proxy: &ChaosProxy) {
    let lease = Lease::new(
        store,
        "lease",
        "chaos-test",
        LeaseConfig::from_ttl(Duration::from_secs(30)),
    )
    .unwrap();
    proxy.script(ProxyFault::Duplicate);
    match lease.try_acquire().await.unwrap() {
        AcquireOutcome::Acquired(guard) => {
            assert_eq!(guard.token(), 1);
            guard.release().await.unwrap();
        }
        AcquireOutcome::Held(held) => {
            panic!("our own duplicated create was not recognised: {held:?}")
        }
        other => panic!("unexpected outcome {other:?}"),
    }
}

macro_rules! provider_faults {
    ($provider:ident) => {
        mod $provider {
            use super::*;

            async fn run(fault: ProxyFault) {
                check(super::$provider(stringify!($provider)).await, fault).await;
            }

            #[tokio::test]
            async fn forwarded_writes_succeed() {
                run(ProxyFault::Forward).await;
            }

            #[tokio::test]
            async fn applied_then_dropped_may_have_taken_effect() {
                run(ProxyFault::DropAfterForward).await;
            }

            #[tokio::test]
            async fn reset_before_forwarding_is_never_precondition_failed() {
                run(ProxyFault::ResetBeforeForward).await;
            }

            #[tokio::test]
            async fn truncated_answer_may_have_taken_effect() {
                run(ProxyFault::TruncateResponse).await;
            }

            #[tokio::test]
            async fn write_landing_after_the_timeout_may_have_taken_effect() {
                run(ProxyFault::StallThenForward(STALL)).await;
            }

            #[tokio::test]
            async fn slow_down_is_throttled() {
                run(ProxyFault::SlowDown).await;
            }

            #[tokio::test]
            async fn too_many_requests_is_throttled() {
                run(ProxyFault::TooManyRequests).await;
            }

            #[tokio::test]
            async fn internal_error_may_have_taken_effect() {
                run(ProxyFault::InternalError).await;
            }

            #[tokio::test]
            async fn server_error_after_the_write_landed_may_have_taken_effect() {
                run(ProxyFault::ServerErrorAfterForward).await;
            }

            #[tokio::test]
            async fn duplicated_write_is_never_a_silent_success() {
                run(ProxyFault::Duplicate).await;
            }

            #[tokio::test]
            async fn duplicated_lease_create_is_resolved_as_ours() {
                let stores = super::$provider(concat!(stringify!($provider), "-lease")).await;
                duplicate_is_resolved_by_the_lease(stores.through, &stores.proxy).await;
            }
        }
    };
}

provider_faults!(s3);
provider_faults!(gcs);
provider_faults!(azure);
