//! casaas-s3 against SeaweedFS (`cargo xtask servers up seaweedfs`): one
//! filer behind two S3 gateways. The contract suite runs through the first
//! gateway; the races and the lease below spread their writers over both,
//! since a store that serializes conditional writes only inside one gateway
//! would pass every single-endpoint check.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig};
use casaas_core::testkit::{test_server, unique_prefix};
use casaas_core::{CasStore, ErrorKind, Version};
use casaas_s3::S3Store;

/// The env-file variable with the other gateways' store URLs (xtask's
/// SeaweedFS server writes it).
const GATEWAYS_VAR: &str = "CASAAS_TEST_GATEWAY_URLS";

async fn fresh_store() -> Arc<dyn CasStore> {
    common::dyn_store("seaweedfs", "s3-seaweedfs").await
}

// Contended conditional writes take SeaweedFS about a second per round
// (see docs/vendors.md), so fewer rounds than on the other servers.
casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 10);

/// One store per gateway, all on the same fresh prefix.
async fn gateway_stores(label: &str) -> Vec<Arc<dyn CasStore>> {
    let server = test_server("seaweedfs");
    let prefix = unique_prefix(label);
    let mut urls = vec![server.url.clone()];
    urls.extend(
        server
            .var(GATEWAYS_VAR)
            .split_whitespace()
            .map(String::from),
    );
    assert!(urls.len() >= 2, "SeaweedFS runs two gateways");
    let mut stores: Vec<Arc<dyn CasStore>> = Vec::new();
    for url in urls {
        let store = S3Store::builder()
            .url(&url)
            .unwrap()
            .static_credentials(
                server.var("AWS_ACCESS_KEY_ID"),
                server.var("AWS_SECRET_ACCESS_KEY"),
            )
            .prefix(prefix.clone())
            .build()
            .await
            .unwrap();
        stores.push(Arc::new(store));
    }
    stores
}

const WRITERS: usize = 8;
const ROUNDS: usize = 10;

/// Runs `WRITERS` concurrent writes released together, writer `w` through
/// gateway `w % gateways`; returns the gateway of each winner.
async fn race<F, Fut>(stores: &[Arc<dyn CasStore>], op: F) -> Vec<usize>
where
    F: Fn(Arc<dyn CasStore>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<Version, casaas_core::CasError>> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let gateway = w % stores.len();
            let fut = op(stores[gateway].clone(), w);
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                (gateway, fut.await)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (gateway, Ok(_)) => winners.push(gateway),
            (_, Err(e)) if e.kind() == ErrorKind::PreconditionFailed => {}
            (_, Err(e)) => panic!("unexpected answer in a race: {e}"),
        }
    }
    winners
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_across_gateways_have_one_winner() {
    let stores = gateway_stores("seaweedfs-x-create").await;
    let mut by_gateway = vec![0usize; stores.len()];
    for round in 0..ROUNDS {
        let key = format!("create/{round}");
        let winners = race(&stores, |store, w| {
            let key = key.clone();
            async move {
                store
                    .create(&key, Bytes::from(format!("round {round} writer {w}")))
                    .await
            }
        })
        .await;
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        by_gateway[winners[0]] += 1;
    }
    eprintln!("create winners per gateway: {by_gateway:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replaces_across_gateways_have_one_winner() {
    let stores = gateway_stores("seaweedfs-x-replace").await;
    let key = "replace";
    let mut version = stores[0].create(key, Bytes::from("start")).await.unwrap();
    for round in 0..ROUNDS {
        let from = version.clone();
        let winners = race(&stores, |store, w| {
            let from = from.clone();
            async move {
                store
                    .replace(key, &from, Bytes::from(format!("round {round} writer {w}")))
                    .await
            }
        })
        .await;
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        // Read back through the other gateway: it must see the winner.
        version = stores[1].get(key).await.unwrap().unwrap().version;
    }
}

/// Contenders for one lease, half through each gateway: at most one holds
/// it at a time, and the token grows with every holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_across_gateways_has_one_holder() {
    let stores = gateway_stores("seaweedfs-x-lease").await;
    let config = LeaseConfig::from_ttl(Duration::from_secs(10));
    let mut last_token = 0;
    for round in 0..5 {
        let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let lease = Lease::new(
                    stores[w % stores.len()].clone(),
                    "lease",
                    format!("contender-{w}"),
                    config.clone(),
                )
                .unwrap();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    lease.try_acquire().await.unwrap()
                })
            })
            .collect();
        let mut guards = Vec::new();
        for task in tasks {
            if let AcquireOutcome::Acquired(guard) = task.await.unwrap() {
                guards.push(guard);
            }
        }
        assert_eq!(guards.len(), 1, "round {round}: holders");
        let guard = guards.pop().unwrap();
        assert!(guard.token() > last_token, "round {round}: token");
        last_token = guard.token();
        guard.release().await.unwrap();
    }
}
