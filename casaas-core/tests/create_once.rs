#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! `CreateOnce`: a create whose answer is lost, late, duplicated or refused
//! is settled by reading the key back, so each body is written exactly once
//! and a refusal is reported as `Taken` only when another writer's body
//! holds the key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{CreateOnce, Created, LeaseError};
use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};
use casaas_core::{CasStore, ErrorKind, MemoryStore};

/// A body of the test's format: the transaction, then the nonce.
fn body(txn: &str) -> impl Fn(&str) -> Result<Bytes, LeaseError> + '_ {
    move |nonce| Ok(Bytes::from(format!("{txn}\n{nonce}")))
}

fn nonce_in(stored: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(stored).ok()?;
    Some(text.split_once('\n')?.1.to_string())
}

fn txn_in(stored: &[u8]) -> String {
    let text = std::str::from_utf8(stored).unwrap();
    text.split_once('\n').map_or(text, |(t, _)| t).to_string()
}

async fn faulty() -> Arc<FaultyStore<MemoryStore>> {
    let store = Arc::new(FaultyStore::new(
        MemoryStore::new(),
        7,
        FaultConfig::default(),
    ));
    pass_guard(store.clone()).await;
    store
}

/// Passes the store guard CreateOnce runs (on the store's create-only
/// view) before any fault is scripted.
async fn pass_guard(store: Arc<dyn CasStore>) {
    use casaas_core::layout::{LeaseLayout, lease_view, with_layout};
    let view = lease_view(with_layout(store, LeaseLayout::Epochs));
    casaas_core::testkit::pass_store_guard(view.as_ref())
        .await
        .unwrap();
}

fn writer(store: Arc<dyn CasStore>) -> CreateOnce {
    CreateOnce::new(store).with_retry_policy(
        casaas_core::lease::RetryPolicy::default()
            .with_request_timeout(Duration::from_secs(1))
            .with_retry_period(Duration::from_millis(1))
            .with_max_attempts(8),
    )
}

async fn stored_txn(store: &dyn CasStore, key: &str) -> Option<String> {
    store.get(key).await.unwrap().map(|o| txn_in(&o.body))
}

#[tokio::test]
async fn a_create_whose_answer_is_lost_is_found_again_not_taken() {
    let store = faulty().await;
    store.inject(Fault::LoseResponse);
    let created = writer(store.clone())
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap();
    assert!(matches!(created, Created::Ours(_)), "{created:?}");
    assert_eq!(
        stored_txn(store.as_ref(), "log/0").await.as_deref(),
        Some("t1")
    );
    assert_eq!(store.counts().lost_responses, 1);
}

#[tokio::test]
async fn a_create_seen_twice_by_the_store_is_ours_although_refused() {
    let store = faulty().await;
    // The second copy is refused (the first created the key): a plain
    // create-if-absent would report a conflict for its own write.
    store.inject(Fault::Duplicate);
    let created = writer(store.clone())
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap();
    assert!(matches!(created, Created::Ours(_)), "{created:?}");
    assert_eq!(store.counts().duplicated, 1);
}

#[tokio::test]
async fn another_writers_body_is_taken_and_ours_is_never_written() {
    let store = faulty().await;
    let first = writer(store.clone());
    let second = writer(store.clone());
    assert!(matches!(
        first.create("log/0", body("a"), nonce_in).await.unwrap(),
        Created::Ours(_)
    ));
    // Lose the second writer's answer too: it must read, find `a`, and say
    // Taken rather than Ours.
    store.inject(Fault::LoseResponse);
    let created = second.create("log/0", body("b"), nonce_in).await.unwrap();
    assert!(matches!(created, Created::Taken(_)), "{created:?}");
    assert_eq!(
        stored_txn(store.as_ref(), "log/0").await.as_deref(),
        Some("a")
    );
}

/// A `nonce_in` that misses the nonce in our own body could never settle
/// a lost answer (ours would read as another writer's): refused before
/// anything is written, with what to fix, in every build. It used to be a
/// debug assertion: a panic in debug builds, and in release a lost answer
/// reported as `Taken` while our body held the key.
#[tokio::test]
async fn a_nonce_in_that_misses_our_own_nonce_is_refused_before_writing() {
    let store = faulty().await;
    let blind = |_: &[u8]| -> Option<String> { None };
    let err = writer(store.clone())
        .create("log/0", body("t1"), blind)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LeaseError::Codec { message, .. } if message.contains("nonce_in(&body(n)) must be Some(n)")),
        "{err:?}"
    );
    assert!(!err.may_have_taken_effect(), "{err:?}");
    assert_eq!(stored_txn(store.as_ref(), "log/0").await, None);
}

#[tokio::test]
async fn a_foreign_body_without_a_nonce_is_taken_and_kept() {
    let store = faulty().await;
    store
        .create("log/0", Bytes::from_static(b"written by another tool"))
        .await
        .unwrap();
    let created = writer(store.clone())
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap();
    assert!(matches!(created, Created::Taken(_)), "{created:?}");
    let kept = store.get("log/0").await.unwrap().unwrap();
    assert_eq!(&kept.body[..], b"written by another tool");
}

#[tokio::test]
async fn refusals_that_wrote_nothing_are_retried() {
    let store = faulty().await;
    store.inject(Fault::Throttle);
    store.inject(Fault::ServerErrorNotApplied);
    store.inject(Fault::FailBeforeApply);
    let created = writer(store.clone())
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap();
    assert!(matches!(created, Created::Ours(_)), "{created:?}");
    assert_eq!(
        stored_txn(store.as_ref(), "log/0").await.as_deref(),
        Some("t1")
    );
}

#[tokio::test]
async fn while_a_write_may_still_land_the_error_is_ambiguous_never_taken() {
    let store = faulty().await;
    // Every write answered 5xx without landing, for all eight attempts: the
    // key stays absent, and the writer cannot know that nothing landed.
    for _ in 0..8 {
        store.inject(Fault::ServerErrorNotApplied);
    }
    let err = writer(store.clone())
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap_err();
    assert_eq!(err.store_kind(), Some(ErrorKind::Ambiguous), "{err}");
    assert!(err.to_string().contains("may or may not"), "{err}");
}

#[tokio::test]
async fn a_write_that_lands_after_its_caller_timed_out_is_found_by_the_next_read() {
    let store = faulty().await;
    // The first write lands 300 ms later, long after the 50 ms timeout; the
    // retry (conditioned on the same absence) is refused, and the read
    // finds the first one: ours, once.
    store.inject(Fault::Delay(Duration::from_millis(300)));
    let writer = CreateOnce::new(store.clone()).with_retry_policy(
        casaas_core::lease::RetryPolicy::default()
            .with_request_timeout(Duration::from_millis(50))
            .with_retry_period(Duration::from_millis(100))
            .with_max_attempts(16),
    );
    let created = writer.create("log/0", body("t1"), nonce_in).await.unwrap();
    assert!(matches!(created, Created::Ours(_)), "{created:?}");
    assert_eq!(
        stored_txn(store.as_ref(), "log/0").await.as_deref(),
        Some("t1")
    );
}

#[tokio::test]
async fn a_store_that_ignores_create_if_absent_is_refused_by_the_guard() {
    let store = Arc::new(casaas_core::testkit::CreateOnlyStore(MemoryStore::new()));
    // A create-only store is fine: create-if-absent is all this needs.
    let created = CreateOnce::new(store)
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap();
    assert!(matches!(created, Created::Ours(_)));
    let ignoring = Arc::new(IgnoresConditions(MemoryStore::new()));
    let err = CreateOnce::new(ignoring)
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err:?}");
}

/// Writers race to commit transactions at consecutive versions, the Delta
/// way, through a store that loses, duplicates, delays and refuses writes
/// at random: every transaction reported committed is at exactly the
/// version it was told, none is at two versions, and there are no holes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_committers_through_faults_commit_each_transaction_once() {
    for seed in 0..4u64 {
        let store = Arc::new(FaultyStore::new(
            MemoryStore::new(),
            seed,
            FaultConfig::default(),
        ));
        pass_guard(store.clone()).await;
        store.set_config(FaultConfig::uniform(0.08, Duration::from_millis(20)));
        let mut tasks = Vec::new();
        for w in 0..4 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let writer = CreateOnce::new(store).with_retry_policy(
                    casaas_core::lease::RetryPolicy::default()
                        .with_request_timeout(Duration::from_millis(200))
                        .with_retry_period(Duration::from_millis(2))
                        .with_max_attempts(64),
                );
                let mut told = Vec::new();
                let mut version = 0u64;
                for c in 0..10 {
                    let txn = format!("w{w}-c{c}");
                    loop {
                        let key = format!("log/{version:020}");
                        match writer.create(&key, body(&txn), nonce_in).await {
                            Ok(Created::Ours(_)) => {
                                told.push((txn.clone(), version));
                                version += 1;
                                break;
                            }
                            Ok(Created::Taken(_)) => version += 1,
                            Err(err) => panic!("{txn} at {version}: {err}"),
                        }
                    }
                }
                told
            }));
        }
        let mut told = BTreeMap::new();
        for task in tasks {
            for (txn, version) in task.await.unwrap() {
                told.insert(txn, version);
            }
        }
        store.set_config(FaultConfig::default());
        // Delayed writes may still be in flight: let them land first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let entries = store.inner().list("log/").await.unwrap();
        assert_eq!(entries.len(), 40, "seed {seed}: 40 commits, no more");
        let mut found = BTreeMap::new();
        for (index, entry) in entries.iter().enumerate() {
            assert_eq!(entry.key, format!("log/{index:020}"), "seed {seed}: a hole");
            let txn = stored_txn(store.inner(), &entry.key).await.unwrap();
            assert!(
                found.insert(txn.clone(), index as u64).is_none(),
                "seed {seed}: {txn} twice"
            );
        }
        assert_eq!(found, told, "seed {seed}: each at the version it was told");
        let counts = store.counts();
        assert!(
            counts.lost_responses + counts.duplicated > 0,
            "seed {seed}: no unknown answer was settled, the run proves nothing: {counts:?}"
        );
    }
}

/// Accepts every create, even over an existing object.
#[derive(Debug)]
struct IgnoresConditions(MemoryStore);

#[async_trait::async_trait]
impl CasStore for IgnoresConditions {
    async fn get(
        &self,
        key: &str,
    ) -> Result<Option<casaas_core::StoredObject>, casaas_core::CasError> {
        self.0.get(key).await
    }
    async fn create(
        &self,
        key: &str,
        body: Bytes,
    ) -> Result<casaas_core::Version, casaas_core::CasError> {
        match self.0.get(key).await? {
            Some(old) => self.0.replace(key, &old.version, body).await,
            None => self.0.create(key, body).await,
        }
    }
    async fn replace(
        &self,
        key: &str,
        expected: &casaas_core::Version,
        body: Bytes,
    ) -> Result<casaas_core::Version, casaas_core::CasError> {
        self.0.replace(key, expected, body).await
    }
    async fn delete(
        &self,
        key: &str,
        expected: &casaas_core::Version,
    ) -> Result<(), casaas_core::CasError> {
        self.0.delete(key, expected).await
    }
    async fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<casaas_core::ListEntry>, casaas_core::CasError> {
        self.0.list(prefix).await
    }
    fn capabilities(&self) -> casaas_core::Capabilities {
        casaas_core::Capabilities::full()
    }
    fn describe(&self) -> String {
        "ignores-conditions://".into()
    }
}

#[tokio::test]
async fn out_of_attempts_after_an_answer_that_the_key_exists_still_settles() {
    let store = faulty().await;
    // One attempt only; its answer is a refusal (our own request seen
    // twice): one read tells that the entry is ours, not "unknown".
    store.inject(Fault::Duplicate);
    let one_attempt = CreateOnce::new(store.clone()).with_retry_policy(
        casaas_core::lease::RetryPolicy::default()
            .with_request_timeout(Duration::from_secs(1))
            .with_retry_period(Duration::ZERO)
            .with_max_attempts(1),
    );
    let created = one_attempt
        .create("log/0", body("t1"), nonce_in)
        .await
        .unwrap();
    assert!(matches!(created, Created::Ours(_)), "{created:?}");
    // And another writer's entry, with one attempt: Taken.
    let created = one_attempt
        .create("log/0", body("t2"), nonce_in)
        .await
        .unwrap();
    assert!(matches!(created, Created::Taken(_)), "{created:?}");
}
