//! The contract suite and GCS specifics against fake-gcs-server
//! (`cargo xtask servers up fake-gcs`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::testkit::{test_server, unique_prefix};
use casaas_core::{CasStore, ErrorKind};
use casaas_gcs::GcsStore;

/// The server's test URL with its path replaced by `prefix`.
fn url_with_prefix(url: &str, prefix: &str) -> String {
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_path(&format!("/{prefix}"));
    parsed.to_string()
}

async fn open(label: &str) -> GcsStore {
    let server = test_server("fake-gcs");
    GcsStore::open(&url_with_prefix(&server.url, &unique_prefix(label)))
        .await
        .unwrap()
}

async fn fresh_store() -> Arc<dyn CasStore> {
    Arc::new(open("contract").await)
}

casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 20);

/// The same contract in the create-only layout (`layout=epochs`), whose
/// objects are chains of create-if-absent epochs on this server.
mod epochs {
    use std::sync::Arc;

    use casaas_core::CasStore;
    use casaas_core::layout::EpochStore;

    async fn fresh_store() -> Arc<dyn CasStore> {
        Arc::new(EpochStore::with_collection(
            super::fresh_store().await,
            4,
            2,
        ))
    }

    casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 10, layout = epochs);
}

/// Races `tasks` creates of one key per round, then `tasks` replaces from
/// one generation per round; returns the winner counts of each round.
async fn race(store: Arc<GcsStore>, tasks: usize, rounds: usize) -> (Vec<usize>, Vec<usize>) {
    let mut create_winners = Vec::new();
    for round in 0..rounds {
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
            match h.await.unwrap() {
                Ok(_) => winners += 1,
                Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}"),
            }
        }
        create_winners.push(winners);
    }
    let mut replace_winners = Vec::new();
    let mut version = store
        .create("race/replace", Bytes::from("0"))
        .await
        .unwrap();
    for round in 0..rounds {
        let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
        let handles: Vec<_> = (0..tasks)
            .map(|task| {
                let (store, barrier, from) = (store.clone(), barrier.clone(), version.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .replace(
                            "race/replace",
                            &from,
                            Bytes::from(format!("{round}/{task}")),
                        )
                        .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for h in handles {
            match h.await.unwrap() {
                Ok(v) => winners.push(v),
                Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}"),
            }
        }
        replace_winners.push(winners.len());
        if let Some(v) = winners.pop() {
            version = v;
        }
    }
    (create_winners, replace_winners)
}

/// The upload path casaas-gcs uses (multipart) is one fake-gcs-server
/// enforces: every round of 16 racers has exactly one winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_have_one_winner_per_round() {
    let store = Arc::new(open("race").await);
    let (creates, replaces) = race(store, 16, 20).await;
    eprintln!("fake-gcs, 16 racers x 20 rounds: create winners per round {creates:?}");
    eprintln!("fake-gcs, 16 racers x 20 rounds: replace winners per round {replaces:?}");
    assert!(
        creates.iter().all(|w| *w == 1),
        "create winners {creates:?}"
    );
    assert!(
        replaces.iter().all(|w| *w == 1),
        "replace winners {replaces:?}"
    );
}

/// Documents why the test URL says `conditional_delete=false`: this
/// emulator deletes even when `ifGenerationMatch` names a stale generation.
/// If it starts refusing, drop the option from xtask's fake-gcs URL.
#[tokio::test]
async fn emulator_ignores_delete_precondition() {
    let server = test_server("fake-gcs");
    let url = url_with_prefix(&server.url, &unique_prefix("delete-lie"))
        .replace("conditional_delete=false", "conditional_delete=true");
    let store = GcsStore::open(&url).await.unwrap();
    assert!(store.capabilities().conditional_delete);
    let v1 = store.create("k", Bytes::from("1")).await.unwrap();
    let v2 = store.replace("k", &v1, Bytes::from("2")).await.unwrap();
    assert_ne!(v1, v2);
    match store.delete("k", &v1).await {
        Ok(()) => assert!(store.get("k").await.unwrap().is_none()),
        Err(e) => panic!(
            "fake-gcs-server now honours ifGenerationMatch on DELETE ({e}); \
             remove conditional_delete=false from its test URL and the docs"
        ),
    }
    // The test URL's store refuses instead of pretending.
    let honest = open("delete-honest").await;
    let v = honest.create("k", Bytes::from("1")).await.unwrap();
    let err = honest.delete("k", &v).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
}

#[tokio::test]
async fn missing_bucket_is_misconfigured() {
    let server = test_server("fake-gcs");
    let store = GcsStore::builder("casaas-no-such-bucket")
        .emulator(server.var("GCS_ENDPOINT"))
        .timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let err = store.create("k", Bytes::from("x")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(err.to_string().contains("casaas-no-such-bucket"), "{err}");
    assert_eq!(err.status(), Some(404));
    let err = store.list("").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
}

#[tokio::test]
async fn bodies_and_prefixes_round_trip() {
    let server = test_server("fake-gcs");
    let prefix = unique_prefix("builder");
    let store = GcsStore::builder(server.var("GCS_BUCKET"))
        .prefix(&prefix)
        .emulator(server.var("GCS_ENDPOINT"))
        .build()
        .await
        .unwrap();
    // A 2 MiB body still goes up in one multipart request.
    let big = Bytes::from(
        (0..2 * 1024 * 1024)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<_>>(),
    );
    let v = store.create("dir/big", big.clone()).await.unwrap();
    let got = store.get("dir/big").await.unwrap().unwrap();
    assert_eq!((got.body, got.version), (big, v.clone()));
    let listed = store.list("dir/").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].key.as_str(), &listed[0].version),
        ("dir/big", &v)
    );
    // Keys needing escapes.
    let v = store
        .create("sp ace/ü+%?#", Bytes::from("e"))
        .await
        .unwrap();
    assert_eq!(store.get("sp ace/ü+%?#").await.unwrap().unwrap().version, v);
}

/// A percent-encoded prefix is decoded once: `gs://b/x%2541` stores objects
/// under `x%41/`, not `xA/`.
#[tokio::test]
async fn percent_encoded_prefix_is_decoded_once() {
    let server = test_server("fake-gcs");
    let store = GcsStore::open(&url_with_prefix(&server.url, "x%2541"))
        .await
        .unwrap();
    assert_eq!(store.config().prefix, "x%41");
    let key = unique_prefix("decode-once");
    store.create(&key, Bytes::from_static(b"1")).await.unwrap();
    // The same object through a store whose prefix is set without a URL.
    let raw = GcsStore::builder(store.config().bucket.clone())
        .prefix("x%41")
        .emulator(store.config().endpoint.clone())
        .build()
        .await
        .unwrap();
    assert!(raw.get(&key).await.unwrap().is_some());
    let wrong = GcsStore::builder(store.config().bucket.clone())
        .prefix("xA")
        .emulator(store.config().endpoint.clone())
        .build()
        .await
        .unwrap();
    assert!(wrong.get(&key).await.unwrap().is_none());
}
