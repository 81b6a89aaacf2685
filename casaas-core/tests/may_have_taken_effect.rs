#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! "This write may have taken effect" is one method call away on every
//! writer's error: a lost answer says yes, a refusal says no, for the
//! lease, the fenced resource, the fenced log and CreateOnce alike.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{CreateOnce, FencedLog, FencedResource, Lease, LeaseConfig, LeaseError};
use casaas_core::testkit::{FaultConfig, FaultyStore};
use casaas_core::{CasStore, MemoryStore};

/// A store that passed the store guard, then answers every write 5xx
/// without applying it (when `lost` is set) or refuses it as throttled.
async fn store(lost: bool) -> Arc<FaultyStore<MemoryStore>> {
    let store = Arc::new(FaultyStore::new(
        MemoryStore::new(),
        11,
        FaultConfig::default(),
    ));
    casaas_core::testkit::pass_store_guard(store.as_ref())
        .await
        .unwrap();
    {
        use casaas_core::layout::{LeaseLayout, lease_view, with_layout};
        let view = lease_view(with_layout(store.clone(), LeaseLayout::Epochs));
        casaas_core::testkit::pass_store_guard(view.as_ref())
            .await
            .unwrap();
    }
    store.set_config(if lost {
        FaultConfig {
            server_error: 1.0,
            ..FaultConfig::default()
        }
    } else {
        FaultConfig {
            throttle: 1.0,
            ..FaultConfig::default()
        }
    });
    store
}

/// Each writer's error after its writes were answered as `lost` says.
async fn errors(lost: bool) -> Vec<(&'static str, LeaseError)> {
    let faults = store(lost).await;
    let store: Arc<dyn CasStore> = faults.clone();
    let mut errors = Vec::new();

    let lease = Lease::new(store.clone(), "locks/a", "a", LeaseConfig::default()).unwrap();
    errors.push(("lease", lease.try_acquire().await.unwrap_err()));

    let resource = FencedResource::<u64>::new(store.clone(), "counter")
        .unwrap()
        .with_retry_policy(
            casaas_core::lease::RetryPolicy::default()
                .with_request_timeout(Duration::from_secs(1))
                .with_retry_period(Duration::from_millis(1))
                .with_max_attempts(3),
        );
    errors.push((
        "fenced resource",
        resource.update(1, |_| 1).await.unwrap_err(),
    ));

    let log = FencedLog::<String>::new(store.clone(), "log/")
        .unwrap()
        .with_retry_policy(
            casaas_core::lease::RetryPolicy::default()
                .with_request_timeout(Duration::from_secs(1))
                .with_retry_period(Duration::from_millis(1))
                .with_max_attempts(3),
        );
    errors.push(("fenced log", log.append(1, "x".into()).await.unwrap_err()));

    let writer = CreateOnce::new(store).with_retry_policy(
        casaas_core::lease::RetryPolicy::default()
            .with_request_timeout(Duration::from_secs(1))
            .with_retry_period(Duration::from_millis(1))
            .with_max_attempts(3),
    );
    let body = |nonce: &str| Ok::<_, LeaseError>(Bytes::from(nonce.to_string()));
    let nonce_in = |b: &[u8]| Some(String::from_utf8_lossy(b).into_owned());
    errors.push((
        "create once",
        writer.create("entry", body, nonce_in).await.unwrap_err(),
    ));
    errors
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_may_have_taken_effect_for_every_writer() {
    for (writer, err) in errors(true).await {
        assert!(err.may_have_taken_effect(), "{writer}: {err:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_did_not_take_effect_for_any_writer() {
    for (writer, err) in errors(false).await {
        assert!(!err.may_have_taken_effect(), "{writer}: {err:?}");
    }
}
