//! The lying control: gcp-storage-emulator (`cargo xtask servers up
//! gcs-liar`) accepts `ifGenerationMatch` and ignores it. These tests expect
//! the lie, so a precondition that is silently dropped cannot go unnoticed,
//! and fail if the emulator stops lying (then it no longer controls anything).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::testkit::{test_server, unique_prefix};
use casaas_gcs::GcsStore;

async fn open(label: &str) -> GcsStore {
    let server = test_server("gcs-liar");
    let mut url = url::Url::parse(&server.url).unwrap();
    url.set_path(&format!("/{}", unique_prefix(label)));
    GcsStore::open(url.as_str()).await.unwrap()
}

#[tokio::test]
async fn losing_create_succeeds_on_the_liar() {
    let store = open("liar-create").await;
    let first = store.create("k", Bytes::from("first")).await.unwrap();
    match store.create("k", Bytes::from("second")).await {
        Ok(second) => assert_ne!(first, second, "the lie overwrote the object"),
        Err(e) => {
            panic!("gcs-liar honoured ifGenerationMatch=0 ({e}); it is no longer a lying control")
        }
    }
    // A stale replace is accepted too.
    let stale = store.replace("k", &first, Bytes::from("stale")).await;
    assert!(stale.is_ok(), "gcs-liar refused a stale replace: {stale:?}");
    // Its downloads carry no x-goog-generation header, so a read cannot
    // name the version: reported as unsupported, never guessed.
    let err = store.get("k").await.unwrap_err();
    assert_eq!(err.kind(), casaas_core::ErrorKind::Unsupported, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_have_several_winners_on_the_liar() {
    let store = Arc::new(open("liar-race").await);
    let tasks = 8;
    let mut winners_per_round = Vec::new();
    for round in 0..5 {
        let key = format!("race/{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
        let handles: Vec<_> = (0..tasks)
            .map(|task| {
                let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .create(&key, Bytes::from(format!("task {task}")))
                        .await
                })
            })
            .collect();
        let mut winners = 0;
        for h in handles {
            if h.await.unwrap().is_ok() {
                winners += 1;
            }
        }
        winners_per_round.push(winners);
    }
    eprintln!(
        "gcs-liar, {tasks} racers x 5 rounds: create winners per round {winners_per_round:?}"
    );
    assert!(
        winners_per_round.iter().all(|w| *w > 1),
        "expected the liar to let several racers win every round: {winners_per_round:?}"
    );
}
