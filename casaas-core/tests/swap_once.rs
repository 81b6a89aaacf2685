#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! `SwapOnce`: a replace whose answer is lost, late, duplicated or refused
//! is settled by reading the object back, so each body lands exactly once,
//! a write of ours that landed and was then built upon is reported as ours,
//! and a conflict is reported only when another writer's body, not
//! descending from ours, holds the object. Every case runs in both layouts.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::layout::{LeaseLayout, lease_view, with_layout};
use casaas_core::lease::{LeaseError, RetryPolicy, SwapOnce, Swapped};
use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};
use casaas_core::{
    CasError, CasStore, ErrorKind, ForwardingStore, MemoryStore, StoredObject, Version,
};

const KEY: &str = "tables/t/pointer";
const LAYOUTS: [LeaseLayout; 2] = [LeaseLayout::Record, LeaseLayout::Epochs];

/// A pointer body of the test's format: `value`, the nonce of the write,
/// then the nonces of the writes before it (its lineage), oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pointer {
    value: String,
    nonce: String,
    lineage: Vec<String>,
}

impl Pointer {
    fn parse(stored: &[u8]) -> Option<Pointer> {
        let text = std::str::from_utf8(stored).ok()?;
        let mut lines = text.lines();
        let value = lines.next()?.to_string();
        let nonce = lines.next()?.to_string();
        let lineage = lines
            .next()
            .map(|l| l.split(',').filter(|n| !n.is_empty()).map(String::from))
            .into_iter()
            .flatten()
            .collect();
        Some(Pointer {
            value,
            nonce,
            lineage,
        })
    }

    /// The body of a write of `value` on top of `previous`.
    fn next(previous: Option<&StoredObject>, value: &str, nonce: &str) -> Bytes {
        let mut lineage = previous
            .and_then(|o| Pointer::parse(&o.body))
            .map(|p| {
                let mut l = p.lineage;
                l.push(p.nonce);
                l
            })
            .unwrap_or_default();
        let excess = lineage.len().saturating_sub(64);
        lineage.drain(..excess);
        Bytes::from(format!("{value}\n{nonce}\n{}", lineage.join(",")))
    }
}

fn nonce_in(stored: &[u8]) -> Option<String> {
    Pointer::parse(stored).map(|p| p.nonce)
}

fn descends(stored: &[u8], nonce: &str) -> Result<bool, LeaseError> {
    Ok(Pointer::parse(stored).is_some_and(|p| p.lineage.iter().any(|n| n == nonce)))
}

/// A format that keeps no lineage.
fn no_lineage(_: &[u8], _: &str) -> Result<bool, LeaseError> {
    Ok(false)
}

fn faulty(seed: u64) -> Arc<FaultyStore<MemoryStore>> {
    Arc::new(FaultyStore::new(
        MemoryStore::new(),
        seed,
        FaultConfig::default(),
    ))
}

/// `store` in `layout`, with the store guard already passed on the view
/// the swap writes through (before any fault is scripted).
async fn in_layout(store: Arc<dyn CasStore>, layout: LeaseLayout) -> Arc<dyn CasStore> {
    let store = with_layout(store, layout);
    casaas_core::testkit::pass_store_guard(lease_view(store.clone()).as_ref())
        .await
        .unwrap();
    store
}

fn retries(request_timeout: Duration, retry_period: Duration, max_attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .with_request_timeout(request_timeout)
        .with_retry_period(retry_period)
        .with_max_attempts(max_attempts)
}

fn writer(store: Arc<dyn CasStore>) -> SwapOnce {
    SwapOnce::new(store).with_retry_policy(retries(
        Duration::from_secs(1),
        Duration::from_millis(1),
        8,
    ))
}

/// Reads, then swaps `value` on top of what was read (no fault yet).
async fn seed_pointer(w: &SwapOnce, value: &str) -> StoredObject {
    let current = w.read(KEY).await.unwrap();
    let expected = current.as_ref().map(|o| o.version.clone());
    let swapped = w
        .swap(
            KEY,
            expected.as_ref(),
            |n| Ok(Pointer::next(current.as_ref(), value, n)),
            nonce_in,
            descends,
        )
        .await
        .unwrap();
    assert!(swapped.is_ours(), "{swapped:?}");
    w.read(KEY).await.unwrap().unwrap()
}

async fn swap_on(w: &SwapOnce, read: &StoredObject, value: &str) -> Result<Swapped, LeaseError> {
    w.swap(
        KEY,
        Some(&read.version),
        |n| Ok(Pointer::next(Some(read), value, n)),
        nonce_in,
        descends,
    )
    .await
}

async fn current_value(w: &SwapOnce) -> String {
    Pointer::parse(&w.read(KEY).await.unwrap().unwrap().body)
        .unwrap()
        .value
}

#[tokio::test]
async fn a_swap_whose_answer_is_lost_is_found_again_not_a_conflict() {
    for layout in LAYOUTS {
        let raw = faulty(1);
        let store = in_layout(raw.clone(), layout).await;
        let w = writer(store);
        let read = seed_pointer(&w, "v1").await;
        raw.inject(Fault::LoseResponse);
        let swapped = swap_on(&w, &read, "v2").await.unwrap();
        assert!(
            matches!(
                swapped,
                Swapped::Ours {
                    replaced: false,
                    ..
                }
            ),
            "{layout}: {swapped:?}"
        );
        assert_eq!(current_value(&w).await, "v2", "{layout}");
        assert_eq!(raw.counts().lost_responses, 1, "{layout}");
    }
}

#[tokio::test]
async fn a_swap_seen_twice_by_the_store_is_ours_although_refused() {
    for layout in LAYOUTS {
        let raw = faulty(2);
        let store = in_layout(raw.clone(), layout).await;
        let w = writer(store);
        let read = seed_pointer(&w, "v1").await;
        // The second copy is refused as stale (the first one moved the
        // object on): a plain conditional replace reports a conflict for
        // its own write, and its caller commits twice.
        raw.inject(Fault::Duplicate);
        let swapped = swap_on(&w, &read, "v2").await.unwrap();
        assert!(swapped.is_ours(), "{layout}: {swapped:?}");
        assert_eq!(current_value(&w).await, "v2", "{layout}");
        assert_eq!(raw.counts().duplicated, 1, "{layout}");
    }
}

#[tokio::test]
async fn a_stale_read_is_a_conflict_carrying_the_current_object_and_writes_nothing() {
    for layout in LAYOUTS {
        let store = in_layout(faulty(3), layout).await;
        let w = writer(store);
        let read = seed_pointer(&w, "v1").await;
        let other = seed_pointer(&w, "other").await;
        let swapped = swap_on(&w, &read, "mine").await.unwrap();
        let Swapped::Conflict(Some(current)) = swapped else {
            panic!("{layout}: {swapped:?}")
        };
        assert_eq!(current, other, "{layout}: the object to rebase on");
        assert_eq!(current_value(&w).await, "other", "{layout}");
    }
}

#[tokio::test]
async fn a_lost_create_is_ours_and_a_taken_key_is_a_conflict() {
    for layout in LAYOUTS {
        let raw = faulty(4);
        let store = in_layout(raw.clone(), layout).await;
        let w = writer(store);
        raw.inject(Fault::LoseResponse);
        let created = w
            .swap(
                KEY,
                None,
                |n| Ok(Pointer::next(None, "v1", n)),
                nonce_in,
                descends,
            )
            .await
            .unwrap();
        assert!(created.is_ours(), "{layout}: {created:?}");
        let again = w
            .swap(
                KEY,
                None,
                |n| Ok(Pointer::next(None, "v1'", n)),
                nonce_in,
                descends,
            )
            .await
            .unwrap();
        assert!(
            matches!(&again, Swapped::Conflict(Some(o)) if o.body.starts_with(b"v1\n")),
            "{layout}: {again:?}"
        );
    }
}

/// Lets the first armed write through, then writes another writer's body
/// on top of it before answering with a lost response: the object has
/// moved past our write before we can read it back.
#[derive(Debug)]
struct Overtaken {
    inner: Arc<dyn CasStore>,
    armed: AtomicBool,
    /// Does the other writer's body list ours in its lineage?
    descendant: bool,
}

impl Overtaken {
    async fn overtake(&self) -> CasError {
        let other = SwapOnce::new(self.inner.clone()).with_verify_store(false);
        let read = other.read(KEY).await.unwrap().unwrap();
        let descendant = self.descendant;
        let swapped = other
            .swap(
                KEY,
                Some(&read.version),
                |n| {
                    Ok(if descendant {
                        Pointer::next(Some(&read), "theirs", n)
                    } else {
                        Pointer::next(None, "theirs", n)
                    })
                },
                nonce_in,
                descends,
            )
            .await
            .unwrap();
        assert!(swapped.is_ours());
        CasError::new(ErrorKind::Ambiguous, "injected: connection reset")
    }
}

#[async_trait::async_trait]
impl ForwardingStore for Overtaken {
    type Inner = dyn CasStore;
    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }
    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let written = self.inner.create(key, body).await?;
        if key != KEY && self.armed.swap(false, Ordering::SeqCst) {
            return Err(self.overtake().await);
        }
        Ok(written)
    }
    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let written = self.inner.replace(key, expected, body).await?;
        if self.armed.swap(false, Ordering::SeqCst) {
            return Err(self.overtake().await);
        }
        Ok(written)
    }
}

async fn overtaken(
    layout: LeaseLayout,
    descendant: bool,
) -> (Arc<Overtaken>, SwapOnce, StoredObject) {
    let inner = in_layout(Arc::new(MemoryStore::new()), layout).await;
    let store = Arc::new(Overtaken {
        inner,
        armed: AtomicBool::new(false),
        descendant,
    });
    let w = writer(store.clone()).with_verify_store(false);
    let read = seed_pointer(&w, "v1").await;
    store.armed.store(true, Ordering::SeqCst);
    (store, w, read)
}

#[tokio::test]
async fn a_write_of_ours_built_upon_before_we_read_is_ours_never_a_conflict() {
    for layout in LAYOUTS {
        let (store, w, read) = overtaken(layout, true).await;
        let swapped = swap_on(&w, &read, "mine").await.unwrap();
        assert!(
            matches!(swapped, Swapped::Ours { replaced: true, .. }),
            "{layout}: {swapped:?}"
        );
        assert!(
            !store.armed.load(Ordering::SeqCst),
            "{layout}: the hook ran"
        );
        let now = Pointer::parse(&w.read(KEY).await.unwrap().unwrap().body).unwrap();
        assert_eq!(now.value, "theirs", "{layout}: nothing written after");
        assert_eq!(now.lineage.len(), 2, "{layout}: v1, ours, then theirs");
    }
}

#[tokio::test]
async fn without_a_lineage_check_the_same_history_would_be_a_conflict() {
    // What the lineage check is for: the same overtaken write, with a
    // format that keeps no lineage, cannot be told from a lost race.
    for layout in LAYOUTS {
        let (_store, w, read) = overtaken(layout, true).await;
        let swapped = w
            .swap(
                KEY,
                Some(&read.version),
                |n| Ok(Pointer::next(Some(&read), "mine", n)),
                nonce_in,
                no_lineage,
            )
            .await
            .unwrap();
        assert!(
            matches!(swapped, Swapped::Conflict(Some(_))),
            "{layout}: {swapped:?}"
        );
    }
}

#[tokio::test]
async fn a_lineage_that_cannot_tell_makes_the_swap_ambiguous_not_a_conflict() {
    for layout in LAYOUTS {
        let (_store, w, read) = overtaken(layout, false).await;
        let err = w
            .swap(
                KEY,
                Some(&read.version),
                |n| Ok(Pointer::next(Some(&read), "mine", n)),
                nonce_in,
                |_, _| Err(LeaseError::InvalidConfig("metadata log unreadable".into())),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.store_kind(),
            Some(ErrorKind::Ambiguous),
            "{layout}: {err}"
        );
        assert!(err.to_string().contains("metadata log unreadable"), "{err}");
    }
}

#[tokio::test]
async fn a_lost_answer_then_an_unrelated_writer_is_a_conflict() {
    for layout in LAYOUTS {
        let (_store, w, read) = overtaken(layout, false).await;
        let swapped = swap_on(&w, &read, "mine").await.unwrap();
        assert!(
            matches!(&swapped, Swapped::Conflict(Some(o)) if o.body.starts_with(b"theirs\n")),
            "{layout}: {swapped:?}"
        );
    }
}

#[tokio::test]
async fn refusals_that_wrote_nothing_are_retried() {
    for layout in LAYOUTS {
        let raw = faulty(5);
        let store = in_layout(raw.clone(), layout).await;
        let w = writer(store);
        let read = seed_pointer(&w, "v1").await;
        raw.inject(Fault::Throttle);
        raw.inject(Fault::ServerErrorNotApplied);
        raw.inject(Fault::FailBeforeApply);
        let swapped = swap_on(&w, &read, "v2").await.unwrap();
        assert!(swapped.is_ours(), "{layout}: {swapped:?}");
        assert_eq!(current_value(&w).await, "v2", "{layout}");
    }
}

#[tokio::test]
async fn while_a_write_may_still_land_the_error_is_ambiguous_never_a_conflict() {
    for layout in LAYOUTS {
        let raw = faulty(6);
        let store = in_layout(raw.clone(), layout).await;
        let w = writer(store);
        let read = seed_pointer(&w, "v1").await;
        raw.set_config(FaultConfig {
            server_error: 1.0,
            ..FaultConfig::default()
        });
        let err = swap_on(&w, &read, "v2").await.unwrap_err();
        raw.set_config(FaultConfig::default());
        assert_eq!(
            err.store_kind(),
            Some(ErrorKind::Ambiguous),
            "{layout}: {err}"
        );
        assert!(err.may_have_taken_effect(), "{layout}");
        assert!(err.to_string().contains("may or may not"), "{err}");
        assert_eq!(current_value(&w).await, "v1", "{layout}");
    }
}

#[tokio::test]
async fn a_write_that_lands_after_its_caller_timed_out_is_found_by_the_next_read() {
    for layout in LAYOUTS {
        let raw = faulty(7);
        let store = in_layout(raw.clone(), layout).await;
        let w = SwapOnce::new(store).with_retry_policy(retries(
            Duration::from_millis(50),
            Duration::from_millis(100),
            16,
        ));
        let read = seed_pointer(&w, "v1").await;
        // Lands 300 ms later, long after the 50 ms timeout; the retries are
        // conditioned on the same version, so at most one lands.
        raw.inject(Fault::Delay(Duration::from_millis(300)));
        let swapped = swap_on(&w, &read, "v2").await.unwrap();
        assert!(swapped.is_ours(), "{layout}: {swapped:?}");
        tokio::time::sleep(Duration::from_millis(400)).await;
        let now = Pointer::parse(&w.read(KEY).await.unwrap().unwrap().body).unwrap();
        assert_eq!(now.value, "v2", "{layout}");
        assert_eq!(now.lineage.len(), 1, "{layout}: one write on top of v1");
    }
}

#[tokio::test]
async fn out_of_attempts_after_a_stale_answer_still_settles() {
    for layout in LAYOUTS {
        let raw = faulty(8);
        let store = in_layout(raw.clone(), layout).await;
        let w = SwapOnce::new(store.clone()).with_retry_policy(retries(
            Duration::from_secs(1),
            Duration::ZERO,
            1,
        ));
        let read = seed_pointer(&w, "v1").await;
        raw.inject(Fault::Duplicate);
        let swapped = swap_on(&w, &read, "v2").await.unwrap();
        assert!(swapped.is_ours(), "{layout}: {swapped:?}");
    }
}

#[tokio::test]
async fn a_store_that_ignores_conditions_is_refused_by_the_guard() {
    let err = SwapOnce::new(Arc::new(IgnoresConditions(MemoryStore::new())))
        .swap(
            KEY,
            None,
            |n| Ok(Pointer::next(None, "v1", n)),
            nonce_in,
            descends,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err:?}");
    // A create-only store is fine: the epoch chain needs only
    // create-if-absent.
    let create_only = Arc::new(casaas_core::testkit::CreateOnlyStore(MemoryStore::new()));
    let w = SwapOnce::new(create_only);
    assert_eq!(w.layout(), LeaseLayout::Epochs);
    let read = seed_pointer(&w, "v1").await;
    assert!(swap_on(&w, &read, "v2").await.unwrap().is_ours());
    assert_eq!(current_value(&w).await, "v2");
}

#[tokio::test]
async fn a_key_written_in_the_other_layout_is_refused_by_name() {
    let memory: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let epochs = writer(with_layout(memory.clone(), LeaseLayout::Epochs));
    seed_pointer(&epochs, "v1").await;
    let record = writer(with_layout(memory, LeaseLayout::Record));
    let err = record.read(KEY).await.unwrap_err();
    assert_eq!(err.store_kind(), Some(ErrorKind::Misconfigured), "{err}");
    assert!(err.to_string().contains("layout=epochs"), "{err}");
}

/// Writers each add their commits to one pointer, rebasing on every
/// conflict, through a store that loses, duplicates, delays and refuses
/// writes at random: every commit reported ours is in the final lineage
/// exactly once, none is lost, and no conflict was reported for a commit
/// that landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_swappers_through_faults_land_each_commit_once() {
    for layout in LAYOUTS {
        let mut unknown_answers = 0;
        for seed in 0..3u64 {
            let raw = faulty(seed);
            let store = in_layout(raw.clone(), layout).await;
            seed_pointer(&writer(store.clone()), "start").await;
            raw.set_config(FaultConfig::uniform(0.08, Duration::from_millis(20)));
            let mut tasks = Vec::new();
            for w in 0..3 {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    let writer = SwapOnce::new(store).with_retry_policy(retries(
                        Duration::from_millis(200),
                        Duration::from_millis(2),
                        64,
                    ));
                    let mut ours = Vec::new();
                    let mut conflicts = Vec::new();
                    for c in 0..6 {
                        let value = format!("w{w}-c{c}");
                        loop {
                            let read = loop {
                                match writer.read(KEY).await {
                                    Ok(Some(read)) => break read,
                                    Ok(None) => panic!("the pointer vanished"),
                                    Err(_) => continue,
                                }
                            };
                            // The nonce of the write, kept to check it.
                            let sent = std::sync::Mutex::new(Vec::new());
                            let result = writer
                                .swap(
                                    KEY,
                                    Some(&read.version),
                                    |n| {
                                        sent.lock().unwrap().push(n.to_string());
                                        Ok(Pointer::next(Some(&read), &value, n))
                                    },
                                    nonce_in,
                                    descends,
                                )
                                .await;
                            let sent = sent.into_inner().unwrap();
                            match result {
                                Ok(Swapped::Ours { .. }) => {
                                    ours.push((value.clone(), sent));
                                    break;
                                }
                                Ok(Swapped::Conflict(_)) => conflicts.extend(sent),
                                Err(err) => panic!("{value}: {err}"),
                            }
                        }
                    }
                    (ours, conflicts)
                }));
            }
            let mut ours = Vec::new();
            let mut conflicts = Vec::new();
            for task in tasks {
                let (o, c) = task.await.unwrap();
                ours.extend(o);
                conflicts.extend(c);
            }
            raw.set_config(FaultConfig::default());
            // Delayed writes may still be in flight: let them land first.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let last = writer(store.clone()).read(KEY).await.unwrap().unwrap();
            let last = Pointer::parse(&last.body).unwrap();
            let mut history = last.lineage.clone();
            history.push(last.nonce.clone());
            let landed: BTreeSet<&String> = history.iter().collect();
            assert_eq!(
                landed.len(),
                history.len(),
                "{layout}/{seed}: a nonce twice"
            );
            assert_eq!(
                history.len(),
                19,
                "{layout}/{seed}: the start and 18 commits, no more, no fewer"
            );
            for (value, sent) in &ours {
                let found = sent.iter().filter(|n| landed.contains(n)).count();
                assert_eq!(found, 1, "{layout}/{seed}: {value} landed {found} times");
            }
            for nonce in &conflicts {
                assert!(
                    !landed.contains(nonce),
                    "{layout}/{seed}: a write reported as a conflict landed"
                );
            }
            let counts = raw.counts();
            unknown_answers += counts.lost_responses + counts.duplicated;
        }
        assert!(
            unknown_answers > 0,
            "{layout}: no unknown answer was settled, the run proves nothing"
        );
    }
}

/// Accepts every write, whatever its condition.
#[derive(Debug)]
struct IgnoresConditions(MemoryStore);

#[async_trait::async_trait]
impl CasStore for IgnoresConditions {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.0.get(key).await
    }
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        match self.0.get(key).await? {
            Some(old) => self.0.replace(key, &old.version, body).await,
            None => self.0.create(key, body).await,
        }
    }
    async fn replace(
        &self,
        key: &str,
        _expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.create(key, body).await
    }
    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.0.delete(key, expected).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<casaas_core::ListEntry>, CasError> {
        self.0.list(prefix).await
    }
    fn capabilities(&self) -> casaas_core::Capabilities {
        casaas_core::Capabilities::full()
    }
    fn describe(&self) -> String {
        "ignores-conditions://".into()
    }
}

/// A caller's own error type, as a catalog would have: the protocol's
/// errors convert into it, its own pass through.
#[derive(Debug)]
enum CatalogError {
    Lease(LeaseError),
    Encode(String),
}

impl From<LeaseError> for CatalogError {
    fn from(e: LeaseError) -> Self {
        CatalogError::Lease(e)
    }
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatalogError::Lease(e) => e.fmt(f),
            CatalogError::Encode(m) => write!(f, "cannot encode the pointer: {m}"),
        }
    }
}

fn descends_as_catalog(stored: &[u8], nonce: &str) -> Result<bool, CatalogError> {
    Ok(descends(stored, nonce)?)
}

#[tokio::test]
async fn the_callers_error_type_is_the_swaps_and_its_own_errors_come_back_as_they_are() {
    for layout in LAYOUTS {
        let store = in_layout(faulty(11), layout).await;
        let w = writer(store);
        let read = seed_pointer(&w, "v1").await;
        // Nothing sent yet: the body's error is the call's, untouched.
        let err = w
            .swap(
                KEY,
                Some(&read.version),
                |_| Err(CatalogError::Encode("schema too new".into())),
                nonce_in,
                descends_as_catalog,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, CatalogError::Encode(m) if m == "schema too new"),
            "{layout}: {err}"
        );
        assert_eq!(current_value(&w).await, "v1", "{layout}: nothing written");
        // The protocol's outcomes and errors in the caller's type.
        let swapped = w
            .swap(
                KEY,
                Some(&read.version),
                |n| Ok::<_, CatalogError>(Pointer::next(Some(&read), "v2", n)),
                nonce_in,
                descends_as_catalog,
            )
            .await
            .unwrap();
        assert!(swapped.is_ours(), "{layout}: {swapped:?}");
        let err = w
            .swap(
                "../outside",
                None,
                |n| Ok::<_, CatalogError>(Pointer::next(None, "x", n)),
                nonce_in,
                descends_as_catalog,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, CatalogError::Lease(_)), "{layout}: {err}");
    }
}

#[tokio::test]
async fn a_body_failing_while_a_write_may_still_land_is_ambiguous_not_the_callers_error() {
    for layout in LAYOUTS {
        let raw = faulty(12);
        let store = in_layout(raw.clone(), layout).await;
        let w = writer(store);
        let read = seed_pointer(&w, "v1").await;
        // The first write's answer is unknown (it did not apply); the read
        // finds the pointer unchanged, so that write is still live when
        // the second body fails.
        raw.inject(Fault::ServerErrorNotApplied);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let err = w
            .swap(
                KEY,
                Some(&read.version),
                |n| {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        Ok(Pointer::next(Some(&read), "v2", n))
                    } else {
                        Err(CatalogError::Encode("out of memory".into()))
                    }
                },
                nonce_in,
                descends_as_catalog,
            )
            .await
            .unwrap_err();
        let CatalogError::Lease(lease) = &err else {
            panic!("{layout}: the caller's error while a write may land: {err}")
        };
        assert_eq!(
            lease.store_kind(),
            Some(ErrorKind::Ambiguous),
            "{layout}: {err}"
        );
        assert!(err.to_string().contains("out of memory"), "{layout}: {err}");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{layout}");
    }
}
