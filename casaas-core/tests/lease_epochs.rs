#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The lease protocol and its helpers on stores that honour create-if-absent
//! alone, where leases use the epoch layout (`casaas_core::layout`): the
//! same promises as the record layout, on a store that refuses every
//! conditional replace.

use std::sync::Arc;
use std::time::Duration;

use casaas_core::layout::{EpochStore, LeaseLayout, layout_of, with_layout};
use casaas_core::lease::{
    AcquireOutcome, Election, Entropy, FencedLog, FencedResource, Lease, LeaseConfig, LeaseError,
    LeaseRecord, WaitOptions,
};
use casaas_core::testkit::{CountingStore, CreateOnlyStore, Fault, FaultConfig, FaultyStore};
use casaas_core::{CasStore, ErrorKind, FileStore, MemoryStore};

const KEY: &str = "locks/leader";

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

fn lease(store: &Arc<dyn CasStore>, owner: &str) -> Lease {
    Lease::new(store.clone(), KEY, owner, config())
        .unwrap()
        .with_entropy(Entropy::seeded(
            owner.len() as u64 * 31 + owner.as_bytes()[0] as u64,
        ))
}

fn create_only() -> (Arc<MemoryStore>, Arc<dyn CasStore>) {
    let memory = Arc::new(MemoryStore::new());
    (memory.clone(), Arc::new(CreateOnlyStore(memory)))
}

/// The lease record a fresh reader sees (through its own epoch view).
async fn stored(store: &Arc<dyn CasStore>) -> LeaseRecord {
    let view: Arc<dyn CasStore> = match layout_of(store.as_ref()) {
        LeaseLayout::Epochs => Arc::new(EpochStore::new(store.clone())),
        _ => store.clone(),
    };
    let object = view.get(KEY).await.unwrap().unwrap();
    LeaseRecord::decode(KEY, &object.body).unwrap()
}

fn acquired(outcome: AcquireOutcome) -> casaas_core::lease::LeaseGuard {
    match outcome {
        AcquireOutcome::Acquired(g) => g,
        AcquireOutcome::Held(h) => panic!("expected to acquire, held by {h:?}"),
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[test]
fn the_layout_follows_what_the_store_honours() {
    let (_, store) = create_only();
    assert_eq!(layout_of(store.as_ref()), LeaseLayout::Epochs);
    assert_eq!(layout_of(&MemoryStore::new()), LeaseLayout::Record);
    let forced = with_layout(Arc::new(MemoryStore::new()), LeaseLayout::Epochs);
    assert_eq!(layout_of(forced.as_ref()), LeaseLayout::Epochs);
    // The epoch view is itself a store with replace: leases use it as it is.
    let view = EpochStore::new(forced);
    assert!(view.describe().contains("create-only layout"));
    assert_eq!(layout_of(&view), LeaseLayout::Record);
}

async fn lifecycle(store: Arc<dyn CasStore>) {
    let a = lease(&store, "a");
    let guard = a.acquire(WaitOptions::default()).await.unwrap();
    assert_eq!(guard.token(), 1);
    let first_version = guard.version();

    // Renewals keep it alive well past the TTL, each a new epoch.
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert!(guard.is_held(), "{:?}", guard.lost_reason());
    assert_ne!(guard.version(), first_version);
    let record = stored(&store).await;
    assert_eq!(
        (record.owner.as_str(), record.token, record.released),
        ("a", 1, false)
    );

    // Someone else cannot take it while it is renewed.
    let b = lease(&store, "b");
    let err = b
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(25)))
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::DeadlineExceeded(_)), "{err:?}");
    assert!(guard.is_held());

    // Release keeps the token; the next holder gets token + 1 at once.
    guard.release().await.unwrap();
    assert!(stored(&store).await.released);
    let guard = acquired(b.try_acquire().await.unwrap());
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn acquire_renew_release_on_a_create_only_store() {
    let (memory, store) = create_only();
    lifecycle(store).await;
    // Nothing was replaced: the lock is a marker and a chain of epochs.
    let epochs = memory.list(&EpochStore::epochs_prefix(KEY)).await.unwrap();
    assert!(epochs.len() > 10, "{epochs:?}");
}

#[tokio::test(start_paused = true)]
async fn acquire_renew_release_on_the_file_store_forced_to_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let file: Arc<dyn CasStore> = Arc::new(FileStore::open(dir.path()).await.unwrap());
    lifecycle(with_layout(file, LeaseLayout::Epochs)).await;
}

#[tokio::test(start_paused = true)]
async fn takeover_only_after_the_ttl_observed() {
    let (_, store) = create_only();
    let crashed = lease(&store, "crashed");
    let guard = acquired(crashed.try_acquire().await.unwrap());
    guard.abandon();
    let b = lease(&store, "b");
    let AcquireOutcome::Held(held) = b.try_acquire().await.unwrap() else {
        panic!("took over at once")
    };
    assert_eq!((held.owner.as_str(), held.token), ("crashed", 1));
    assert_eq!(held.takeover_in, Duration::from_millis(10_100));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(matches!(
        b.try_acquire().await.unwrap(),
        AcquireOutcome::Held(_)
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let guard = acquired(b.try_acquire().await.unwrap());
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
}

/// A fault-injecting create-only store that has passed the store guard.
async fn faulty() -> (FaultyStore<MemoryStore>, Arc<dyn CasStore>) {
    let faults = FaultyStore::new(MemoryStore::new(), 5, FaultConfig::default());
    let store: Arc<dyn CasStore> = Arc::new(CreateOnlyStore(faults.clone()));
    let view = EpochStore::new(store.clone());
    casaas_core::testkit::pass_store_guard(&view).await.unwrap();
    (faults, store)
}

#[tokio::test(start_paused = true)]
async fn ambiguous_writes_resolve_by_nonce() {
    for fault in [Fault::LoseResponse, Fault::Duplicate] {
        let (faults, store) = faulty().await;
        let a = lease(&store, "a");
        // Read of the marker, create of the marker, then the epoch's create.
        faults.inject(Fault::Delay(Duration::ZERO));
        faults.inject(Fault::Delay(Duration::ZERO));
        faults.inject(fault);
        let guard = acquired(a.try_acquire().await.unwrap());
        assert_eq!(guard.token(), 1, "{fault:?}");
        // Renewals through lost and duplicated answers.
        faults.inject(fault);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(guard.is_held(), "{fault:?}: {:?}", guard.lost_reason());
        guard.release().await.unwrap();
        assert!(stored(&store).await.released);
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_in_one_layout_is_refused_in_the_other() {
    let memory: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let record = Lease::new(memory.clone(), KEY, "r", config()).unwrap();
    let guard = acquired(record.try_acquire().await.unwrap());
    let epochs = Lease::new(
        with_layout(memory.clone(), LeaseLayout::Epochs),
        KEY,
        "e",
        config(),
    )
    .unwrap();
    let err = epochs.try_acquire().await.unwrap_err();
    assert_eq!(err.store_kind(), Some(ErrorKind::Misconfigured), "{err}");
    assert!(err.to_string().contains("layout=record"), "{err}");
    guard.release().await.unwrap();

    let other = "locks/other";
    let epochs = Lease::new(
        with_layout(memory.clone(), LeaseLayout::Epochs),
        other,
        "e",
        config(),
    )
    .unwrap();
    let guard = acquired(epochs.try_acquire().await.unwrap());
    let record = Lease::new(memory.clone(), other, "r", config()).unwrap();
    let err = record.try_acquire().await.unwrap_err();
    assert_eq!(err.store_kind(), Some(ErrorKind::Misconfigured), "{err}");
    assert!(err.to_string().contains("layout=epochs"), "{err}");
    // Neither refusal touched the lock.
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_foreign_object_is_never_overwritten() {
    let (memory, store) = create_only();
    memory.create(KEY, "not a lock".into()).await.unwrap();
    let err = lease(&store, "a").try_acquire().await.unwrap_err();
    assert!(matches!(err, LeaseError::ForeignObject { .. }), "{err:?}");
    assert_eq!(memory.get(KEY).await.unwrap().unwrap().body, "not a lock");
    assert!(
        memory
            .list(&EpochStore::epochs_prefix(KEY))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_that_ignores_create_if_absent_is_refused() {
    /// Creates overwrite: nothing conditional at all.
    #[derive(Debug)]
    struct Overwrites(MemoryStore);
    #[async_trait::async_trait]
    impl casaas_core::ForwardingStore for Overwrites {
        type Inner = MemoryStore;
        fn inner(&self) -> &MemoryStore {
            &self.0
        }
        async fn wrap_create(
            &self,
            key: &str,
            body: bytes::Bytes,
        ) -> Result<casaas_core::Version, casaas_core::CasError> {
            if let Some(o) = self.0.get(key).await? {
                self.0.delete(key, &o.version).await?;
            }
            self.0.create(key, body).await
        }
    }
    let store: Arc<dyn CasStore> = Arc::new(CreateOnlyStore(Overwrites(MemoryStore::new())));
    let err = lease(&store, "a").try_acquire().await.unwrap_err();
    assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err:?}");
    assert!(err.to_string().contains("If-None-Match"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn renewals_are_collected_and_cost_a_create_and_a_get() {
    let memory = Arc::new(MemoryStore::new());
    let counting = Arc::new(CountingStore::new(CreateOnlyStore(memory.clone())));
    let store: Arc<dyn CasStore> = counting.clone();
    casaas_core::testkit::pass_store_guard(&EpochStore::new(store.clone()))
        .await
        .unwrap();
    // Small collection blocks, so that the test sees several collections.
    let small: Arc<dyn CasStore> = Arc::new(EpochStore::with_collection(store.clone(), 8, 4));
    let a = Lease::new(small, KEY, "a", config())
        .unwrap()
        .with_entropy(Entropy::seeded(1));
    let guard = acquired(a.try_acquire().await.unwrap());
    counting.reset();
    // About 3 renewals per TTL: 10 minutes is about 180 epochs.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(guard.is_held());
    let counts = counting.counts();
    let renewals = counts.create;
    assert!(renewals >= 150, "{counts:?}");
    // Per renewal: one create and one GET of the block's marker, plus the
    // collection (a marker create and a LIST per block of 8, and deletes).
    assert!(counts.get <= renewals + 2, "{counts:?}");
    assert!(counts.list <= renewals / 8 + 2, "{counts:?}");
    let live = memory.list(&EpochStore::epochs_prefix(KEY)).await.unwrap();
    assert!(
        live.len() <= 4 + 2 * 8 + 1,
        "{} epochs left: {live:?}",
        live.len()
    );
    let markers = memory.list(&format!("{KEY}.collected/")).await.unwrap();
    assert!(markers.len() as u64 >= renewals / 8 - 3, "{markers:?}");
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn fenced_resource_and_log_work_on_a_create_only_store() {
    let (_, store) = create_only();
    let resource = FencedResource::<u64>::new(store.clone(), "counter").unwrap();
    let mut value = 0;
    for _ in 0..5 {
        resource
            .update(3, |v| v.copied().unwrap_or(0) + 1)
            .await
            .unwrap();
        value += 1;
    }
    assert_eq!(resource.read().await.unwrap().unwrap().value, value);
    let err = resource
        .update(2, |v| v.copied().unwrap_or(0) + 1)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LeaseError::FencedOut {
                presented: 2,
                recorded: 3
            }
        ),
        "{err:?}"
    );

    let log = FencedLog::<String>::new(store.clone(), "table/_log").unwrap();
    assert_eq!(log.append(1, "one".into()).await.unwrap().seq, 1);
    assert_eq!(log.append(2, "two".into()).await.unwrap().seq, 2);
    let err = log.append(1, "zombie".into()).await.unwrap_err();
    assert!(matches!(err, LeaseError::FencedOut { .. }), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn election_on_a_create_only_store() {
    let (_, store) = create_only();
    let election = Election::new(lease(&store, "n1"));
    let leadership = election.campaign(Default::default()).await.unwrap();
    assert_eq!(leadership.token(), 1);
    let other = Election::new(lease(&store, "n2"));
    let leader = other.leader().await.unwrap().unwrap();
    assert_eq!((leader.owner.as_str(), leader.token), ("n1", 1));
    leadership.resign().await.unwrap();
}

#[tokio::test]
async fn a_new_process_does_not_mark_a_long_history_again() {
    let memory = Arc::new(MemoryStore::new());
    let first = EpochStore::with_collection(memory.clone(), 4, 2);
    let mut version = first.create("k", "0".into()).await.unwrap();
    for i in 1..200 {
        version = first
            .replace("k", &version, format!("{i}").into())
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let markers = memory.list("k.collected/").await.unwrap().len();
    assert!(markers >= 45, "{markers}");
    // Another process continues the chain: its first collection starts at
    // the lowest epoch still there, not at block 0.
    let counting = Arc::new(CountingStore::new(memory.clone()));
    let second = EpochStore::with_collection(counting.clone(), 4, 2);
    let head = second.get("k").await.unwrap().unwrap().version;
    counting.reset();
    let mut version = head;
    for i in 0..8 {
        version = second
            .replace("k", &version, format!("b{i}").into())
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let counts = counting.counts();
    // 8 epochs and at most a few markers, not one per block of history.
    assert!(counts.create <= 8 + 4, "{counts:?}");
    assert!(memory.list("k.epochs/").await.unwrap().len() <= 2 + 2 * 4 + 1);
}
