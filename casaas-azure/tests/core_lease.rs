//! The core lease protocol end to end on Azurite: casaas records, not
//! native leases, give the fencing token.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use casaas_core::CasStore;
use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig};

#[tokio::test]
async fn tokens_increase_across_acquisitions() {
    let store: Arc<dyn CasStore> = Arc::new(common::fresh("azure-core-lease").await);
    let config = LeaseConfig::from_ttl(Duration::from_secs(6));
    let a = Lease::new(store.clone(), "locks/leader", "worker-a", config.clone()).unwrap();
    let b = Lease::new(store.clone(), "locks/leader", "worker-b", config).unwrap();

    let guard = a.acquire(Default::default()).await.unwrap();
    assert_eq!(guard.token(), 1);
    assert!(
        !matches!(b.try_acquire().await.unwrap(), AcquireOutcome::Acquired(_)),
        "held by a"
    );
    guard.release().await.unwrap();

    let guard = b.acquire(Default::default()).await.unwrap();
    assert_eq!(guard.token(), 2, "the token survives release and grows");
    guard.release().await.unwrap();
}
