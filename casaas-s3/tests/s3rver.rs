//! s3rver (`cargo xtask servers up s3rver`) ignores `If-None-Match` and
//! `If-Match`: it is the control that lies. These tests pass only while
//! casaas notices the lie; if s3rver ever honoured the conditions they
//! would fail, and the vendor notes would need updating.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::testkit::contract::{Check, run_check};
use casaas_core::{CasStore, ErrorKind};

#[tokio::test]
async fn losing_create_overwrites() {
    let store = common::store("s3rver", "s3-s3rver-lie").await;
    let v1 = store
        .create("k", Bytes::from_static(b"first"))
        .await
        .unwrap();
    let second = store.create("k", Bytes::from_static(b"second")).await;
    let now = store.get("k").await.unwrap().unwrap();
    // Honest: second create fails with 412 and "first" stays.
    let lie = second.is_ok() || now.body != Bytes::from_static(b"first") || now.version != v1;
    assert!(
        lie,
        "s3rver honoured If-None-Match (second create: {second:?}); it is no longer a lying control"
    );
    assert_eq!(
        now.body,
        Bytes::from_static(b"second"),
        "the losing create overwrote"
    );
}

#[tokio::test]
async fn stale_replace_overwrites() {
    let store = common::store("s3rver", "s3-s3rver-stale").await;
    let v1 = store.create("k", Bytes::from_static(b"1")).await.unwrap();
    store
        .replace("k", &v1, Bytes::from_static(b"2"))
        .await
        .unwrap();
    let stale = store.replace("k", &v1, Bytes::from_static(b"stale")).await;
    assert!(
        stale.is_ok(),
        "s3rver rejected a stale If-Match ({:?}); it is no longer a lying control",
        stale.map_err(|e| e.kind())
    );
}

#[test]
fn race_has_several_winners() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store: Arc<dyn CasStore> = common::dyn_store("s3rver", "s3-s3rver-race").await;
        let mut most = 0;
        for round in 0..5 {
            let key = format!("race/{round}");
            let barrier = Arc::new(tokio::sync::Barrier::new(8));
            let tasks: Vec<_> = (0..8)
                .map(|t| {
                    let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        store.create(&key, Bytes::from(format!("task {t}"))).await
                    })
                })
                .collect();
            let mut winners = 0;
            for task in tasks {
                match task.await.unwrap() {
                    Ok(_) => winners += 1,
                    Err(e) => assert!(
                        matches!(
                            e.kind(),
                            ErrorKind::PreconditionFailed | ErrorKind::ConcurrentRequest
                        ),
                        "{e}"
                    ),
                }
            }
            most = most.max(winners);
        }
        assert!(
            most > 1,
            "every race had one winner: s3rver looks honest now"
        );
    });
}

/// The contract suite itself must reject s3rver: its create-conflict
/// check has to fail there.
#[test]
fn contract_suite_catches_the_lie() {
    let outcome = std::thread::spawn(|| {
        run_check(
            Check::CreateConflictLeavesObject,
            || common::dyn_store("s3rver", "s3-s3rver-suite"),
            2,
            1,
        )
    })
    .join();
    assert!(
        outcome.is_err(),
        "the contract suite passed s3rver's create-if-absent"
    );
}
