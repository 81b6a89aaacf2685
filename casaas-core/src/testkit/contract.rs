//! The contract test suite, written once and run against every backend.
//!
//! Each [`Check`] takes a store opened on a fresh, empty prefix and panics
//! with a precise message when the backend breaks the contract. Core runs it
//! on the embedded backends; provider crates run it against real servers with
//! [`contract_suite!`](crate::contract_suite):
//!
//! ```ignore
//! async fn fresh_store() -> std::sync::Arc<dyn casaas_core::CasStore> { /* ... */ }
//! casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 20);
//! ```
//!
//! A panic is the point of this module, so `unwrap` is allowed here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::{CasError, CasStore, ErrorKind, Version};

/// One property of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Reading an absent key answers `None`.
    GetAbsent,
    /// A created object reads back with the returned version; bodies of any
    /// bytes (empty, binary) survive.
    CreateThenGet,
    /// A second create fails with precondition failed and leaves the first
    /// object unchanged.
    CreateConflictLeavesObject,
    /// A losing create-if-absent answers [`ErrorKind::PreconditionFailed`]
    /// and nothing else, on every backend: lost to an object written before
    /// it, and lost in a race once the race has settled (a store may first
    /// answer a racer with a retryable kind, such as S3's 409
    /// `ConditionalRequestConflict`; retried, it must say precondition
    /// failed). The answer names the key, is not retryable and says nothing
    /// was written, so the protocols read "someone else got there first"
    /// alike on every store, whichever layout they use.
    LosingCreate,
    /// Replace from the current version succeeds with a new version.
    ReplaceCurrent,
    /// Replace from a stale version fails and leaves the object unchanged.
    ReplaceStaleRejected,
    /// Replace of an absent key fails (not found or precondition failed) and
    /// creates nothing.
    ReplaceMissing,
    /// Conditional delete: current succeeds, stale fails, missing fails —
    /// or `Unsupported` where capabilities say so.
    ConditionalDelete,
    /// Rewriting identical bytes still yields a new version.
    IdenticalRewriteNewVersion,
    /// List returns exactly the keys under a prefix, sorted, with versions.
    ListPrefix,
    /// Invalid keys are rejected with invalid input before any request.
    InvalidKeyRejected,
    /// N concurrent creates of one key: exactly one winner, every round.
    RaceCreate,
    /// N concurrent replaces from one version: exactly one winner, every round.
    RaceReplace,
}

impl Check {
    /// Every check, in a sensible order.
    pub const ALL: [Check; 13] = [
        Check::GetAbsent,
        Check::CreateThenGet,
        Check::CreateConflictLeavesObject,
        Check::LosingCreate,
        Check::ReplaceCurrent,
        Check::ReplaceStaleRejected,
        Check::ReplaceMissing,
        Check::ConditionalDelete,
        Check::IdenticalRewriteNewVersion,
        Check::ListPrefix,
        Check::InvalidKeyRejected,
        Check::RaceCreate,
        Check::RaceReplace,
    ];

    /// Runs this check on `store` (empty, private to this check). Races use
    /// `tasks` concurrent writers for `rounds` rounds.
    pub async fn run(self, store: Arc<dyn CasStore>, tasks: usize, rounds: usize) {
        match self {
            Check::GetAbsent => get_absent(store).await,
            Check::CreateThenGet => create_then_get(store).await,
            Check::CreateConflictLeavesObject => create_conflict_leaves_object(store).await,
            Check::LosingCreate => losing_create(store, tasks, rounds).await,
            Check::ReplaceCurrent => replace_current(store).await,
            Check::ReplaceStaleRejected => replace_stale_rejected(store).await,
            Check::ReplaceMissing => replace_missing(store).await,
            Check::ConditionalDelete => conditional_delete(store).await,
            Check::IdenticalRewriteNewVersion => identical_rewrite_new_version(store).await,
            Check::ListPrefix => list_prefix(store).await,
            Check::InvalidKeyRejected => invalid_key_rejected(store).await,
            Check::RaceCreate => race_create(store, tasks, rounds).await,
            Check::RaceReplace => race_replace(store, tasks, rounds).await,
        }
    }
}

/// Runs `check` on a multi-threaded runtime with a store from `make`: the
/// body of each test that [`contract_suite!`](crate::contract_suite) generates.
pub fn run_check<F, Fut>(check: Check, make: F, tasks: usize, rounds: usize)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Arc<dyn CasStore>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        let store = make().await;
        check.run(store, tasks, rounds).await;
    });
}

/// Generates one `#[test]` per [`Check`] for a backend.
///
/// `$make` is an `async fn() -> Arc<dyn CasStore>` returning a store on a
/// fresh, empty prefix each call.
#[macro_export]
macro_rules! contract_suite {
    ($make:ident) => {
        $crate::contract_suite!($make, tasks = 8, rounds = 100);
    };
    ($make:ident, tasks = $tasks:expr, rounds = $rounds:expr) => {
        $crate::contract_suite!(@tests $make, $tasks, $rounds,
            get_absent => GetAbsent,
            create_then_get => CreateThenGet,
            create_conflict_leaves_object => CreateConflictLeavesObject,
            losing_create => LosingCreate,
            replace_current => ReplaceCurrent,
            replace_stale_rejected => ReplaceStaleRejected,
            replace_missing => ReplaceMissing,
            conditional_delete => ConditionalDelete,
            identical_rewrite_new_version => IdenticalRewriteNewVersion,
            list_prefix => ListPrefix,
            invalid_key_rejected => InvalidKeyRejected,
            race_create => RaceCreate,
            race_replace => RaceReplace,
        );
    };
    // For a server whose conditional writes are known not to be atomic
    // (moto: two concurrent writes conditioned on one state can both
    // succeed), where a race round with two winners is the server's fault and
    // proves nothing about the backend: every check but the races.
    ($make:ident, tasks = $tasks:expr, rounds = $rounds:expr, races = false) => {
        $crate::contract_suite!(@tests $make, $tasks, $rounds,
            get_absent => GetAbsent,
            create_then_get => CreateThenGet,
            create_conflict_leaves_object => CreateConflictLeavesObject,
            losing_create => LosingCreate,
            replace_current => ReplaceCurrent,
            replace_stale_rejected => ReplaceStaleRejected,
            replace_missing => ReplaceMissing,
            conditional_delete => ConditionalDelete,
            identical_rewrite_new_version => IdenticalRewriteNewVersion,
            list_prefix => ListPrefix,
            invalid_key_rejected => InvalidKeyRejected,
        );
    };
    // For the epoch layout's virtual objects (`casaas_core::layout`), which
    // are never deleted and list as their underlying objects: every check
    // but those two.
    ($make:ident, tasks = $tasks:expr, rounds = $rounds:expr, layout = epochs) => {
        $crate::contract_suite!(@tests $make, $tasks, $rounds,
            get_absent => GetAbsent,
            create_then_get => CreateThenGet,
            create_conflict_leaves_object => CreateConflictLeavesObject,
            losing_create => LosingCreate,
            replace_current => ReplaceCurrent,
            replace_stale_rejected => ReplaceStaleRejected,
            replace_missing => ReplaceMissing,
            identical_rewrite_new_version => IdenticalRewriteNewVersion,
            invalid_key_rejected => InvalidKeyRejected,
            race_create => RaceCreate,
            race_replace => RaceReplace,
        );
    };
    (@tests $make:ident, $tasks:expr, $rounds:expr, $($name:ident => $check:ident,)*) => {
        mod contract {
            $(
                #[test]
                fn $name() {
                    $crate::testkit::contract::run_check(
                        $crate::testkit::contract::Check::$check,
                        super::$make,
                        $tasks,
                        $rounds,
                    );
                }
            )*
        }
    };
}

fn body(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn expect_kind<T: std::fmt::Debug>(
    result: Result<T, CasError>,
    allowed: &[ErrorKind],
    what: &str,
) -> CasError {
    match result {
        Ok(v) => panic!("{what}: expected one of {allowed:?}, but it succeeded with {v:?}"),
        Err(e) if allowed.contains(&e.kind()) => e,
        Err(e) => panic!("{what}: expected one of {allowed:?}, got {e}"),
    }
}

async fn current(store: &Arc<dyn CasStore>, key: &str) -> Option<(Bytes, Version)> {
    store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"))
        .map(|o| (o.body, o.version))
}

async fn get_absent(store: Arc<dyn CasStore>) {
    assert_eq!(current(&store, "absent").await, None);
    assert_eq!(current(&store, "dir/absent").await, None);
}

async fn create_then_get(store: Arc<dyn CasStore>) {
    for (key, bytes) in [
        ("text", Bytes::from_static(b"hello")),
        ("empty", Bytes::new()),
        ("binary", Bytes::from((0..=255u8).collect::<Vec<_>>())),
        ("nested/deeper/key.json", body("{\"a\":1}")),
    ] {
        let v = store.create(key, bytes.clone()).await.unwrap();
        assert_eq!(current(&store, key).await, Some((bytes, v)), "{key}");
    }
}

async fn create_conflict_leaves_object(store: Arc<dyn CasStore>) {
    let v = store.create("k", body("first")).await.unwrap();
    let err = expect_kind(
        store.create("k", body("second")).await,
        &[ErrorKind::PreconditionFailed],
        "second create",
    );
    assert_eq!(err.key(), Some("k"), "error names the key: {err}");
    assert_eq!(
        current(&store, "k").await,
        Some((body("first"), v)),
        "a losing create must leave the object unchanged"
    );
}

/// The one answer of a losing create-if-absent (see [`Check::LosingCreate`]).
fn assert_lost_create(err: &CasError, key: &str, what: &str) {
    assert_eq!(
        err.kind(),
        ErrorKind::PreconditionFailed,
        "{what}: a losing create-if-absent must answer precondition failed, got {err}"
    );
    assert_eq!(
        err.key(),
        Some(key),
        "{what}: the answer names the key: {err}"
    );
    assert!(
        !err.is_retryable() && !err.may_have_taken_effect(),
        "{what}: a lost create is final and wrote nothing: {err}"
    );
}

/// Creates `key` until the store gives a settled answer: retryable answers
/// (a conditional request in flight, throttling, an ambiguous reply) are
/// retried a few times, as the protocols do.
async fn settled_create(
    store: &Arc<dyn CasStore>,
    key: &str,
    payload: Bytes,
) -> Result<Version, CasError> {
    let mut tries = 0;
    loop {
        match store.create(key, payload.clone()).await {
            Err(e) if e.is_retryable() && tries < 20 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(10 * tries)).await;
            }
            settled => return settled,
        }
    }
}

async fn losing_create(store: Arc<dyn CasStore>, tasks: usize, rounds: usize) {
    // Lost to an earlier write.
    store.create("first", body("winner")).await.unwrap();
    let err = store.create("first", body("loser")).await.unwrap_err();
    assert_lost_create(&err, "first", "a create of an existing key");
    // Lost in a race, however the store first answered each racer.
    for round in 0..rounds.clamp(1, 5) {
        let key = format!("raced/{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
        let mut handles = Vec::new();
        for task in 0..tasks {
            let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
            handles.push(tokio::spawn(async move {
                barrier.wait().await;
                let payload = body(&format!("racer {task}"));
                settled_create(&store, &key, payload).await
            }));
        }
        // How many won is for the race checks (a store whose creates are
        // not atomic runs without them); here only the losers' answer counts.
        for (task, handle) in handles.into_iter().enumerate() {
            if let Err(err) = handle.await.unwrap() {
                assert_lost_create(&err, &key, &format!("{key}: racer {task}"));
            }
        }
        // Settled: every further create loses, with the same answer.
        for task in 0..tasks {
            let err = store
                .create(&key, body(&format!("late racer {task}")))
                .await
                .unwrap_err();
            assert_lost_create(&err, &key, &format!("{key}: a create after the race"));
        }
    }
}

async fn replace_current(store: Arc<dyn CasStore>) {
    let v1 = store.create("k", body("1")).await.unwrap();
    let v2 = store.replace("k", &v1, body("2")).await.unwrap();
    assert_ne!(v1, v2);
    let v3 = store.replace("k", &v2, body("3")).await.unwrap();
    assert_eq!(current(&store, "k").await, Some((body("3"), v3)));
}

async fn replace_stale_rejected(store: Arc<dyn CasStore>) {
    let v1 = store.create("k", body("1")).await.unwrap();
    let v2 = store.replace("k", &v1, body("2")).await.unwrap();
    expect_kind(
        store.replace("k", &v1, body("stale")).await,
        &[ErrorKind::PreconditionFailed],
        "replace from a stale version",
    );
    assert_eq!(current(&store, "k").await, Some((body("2"), v2)));
}

async fn replace_missing(store: Arc<dyn CasStore>) {
    let v = store.create("other", body("x")).await.unwrap();
    expect_kind(
        store.replace("missing", &v, body("y")).await,
        &[ErrorKind::NotFound, ErrorKind::PreconditionFailed],
        "replace of an absent key",
    );
    assert_eq!(current(&store, "missing").await, None);
}

async fn conditional_delete(store: Arc<dyn CasStore>) {
    let v1 = store.create("k", body("1")).await.unwrap();
    let v2 = store.replace("k", &v1, body("2")).await.unwrap();
    if !store.capabilities().conditional_delete {
        expect_kind(
            store.delete("k", &v2).await,
            &[ErrorKind::Unsupported],
            "delete on a store without conditional delete",
        );
        assert!(current(&store, "k").await.is_some());
        return;
    }
    expect_kind(
        store.delete("k", &v1).await,
        &[ErrorKind::PreconditionFailed],
        "delete from a stale version",
    );
    assert_eq!(current(&store, "k").await, Some((body("2"), v2.clone())));
    store.delete("k", &v2).await.unwrap();
    assert_eq!(current(&store, "k").await, None);
    expect_kind(
        store.delete("k", &v2).await,
        &[ErrorKind::NotFound, ErrorKind::PreconditionFailed],
        "delete of an absent key",
    );
    // A re-created object with other bytes gets a version the old one can't
    // match. (With identical bytes, content-hash ETags repeat: that ABA case
    // is what the protocols' nonces are for.)
    let v3 = store.create("k", body("3")).await.unwrap();
    assert_ne!(
        v3, v2,
        "a re-created object must not reuse the deleted version"
    );
}

async fn identical_rewrite_new_version(store: Arc<dyn CasStore>) {
    let v1 = store.create("k", body("same")).await.unwrap();
    let v2 = store.replace("k", &v1, body("same")).await.unwrap();
    // Content-hash versions (S3 single-part ETags) repeat here; that is the
    // ABA hazard the protocols defuse with nonces, and it is allowed by the
    // contract. What must hold: the old version still works as a condition
    // exactly when it equals the new one.
    let stale = store.replace("k", &v1, body("other")).await;
    if v1 == v2 {
        stale.unwrap();
    } else {
        expect_kind(
            stale,
            &[ErrorKind::PreconditionFailed],
            "replace from the version before an identical rewrite",
        );
    }
}

async fn list_prefix(store: Arc<dyn CasStore>) {
    let mut expected = Vec::new();
    for key in ["logs/b", "logs/a", "logs/sub/c", "logsx", "other"] {
        let v = store.create(key, body(key)).await.unwrap();
        if key.starts_with("logs/") {
            expected.push((key.to_string(), v));
        }
    }
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let listed: Vec<_> = store
        .list("logs/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.version))
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(store.list("").await.unwrap().len(), 5);
    assert!(store.list("nothing/").await.unwrap().is_empty());
}

async fn invalid_key_rejected(store: Arc<dyn CasStore>) {
    for key in ["", "/abs", "a//b", "../up"] {
        expect_kind(
            store.create(key, body("x")).await,
            &[ErrorKind::InvalidInput],
            "create with an invalid key",
        );
        expect_kind(
            store.get(key).await,
            &[ErrorKind::InvalidInput],
            "get with an invalid key",
        );
    }
}

/// One round of `tasks` concurrent conditional writes to `key` (a replace
/// from `from`, or a create when `from` is `None`). Returns the winner's task
/// and version. An ambiguous answer is resolved the way the protocols do: the
/// write won if the stored body is its own (Ceph RGW answers 500 to some race
/// losers). Panics unless exactly one write won.
async fn race_round(
    store: &Arc<dyn CasStore>,
    key: &str,
    from: Option<&Version>,
    tasks: usize,
    label: &str,
) -> (usize, Version) {
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (store, key, barrier, from) = (
            store.clone(),
            key.to_string(),
            barrier.clone(),
            from.cloned(),
        );
        let payload = body(&format!("{label} task {task}"));
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let result = match &from {
                Some(from) => store.replace(&key, from, payload).await,
                None => store.create(&key, payload).await,
            };
            (task, result)
        }));
    }
    let mut winners = Vec::new();
    let mut ambiguous = Vec::new();
    for handle in handles {
        let (task, result) = handle.await.unwrap();
        match result {
            Ok(v) => winners.push((task, v)),
            Err(e) if e.kind() == ErrorKind::PreconditionFailed => {}
            Err(e) if e.kind() == ErrorKind::ConcurrentRequest => {}
            Err(e) if e.may_have_taken_effect() => ambiguous.push(task),
            Err(e) => panic!("{label}: task {task} got {e}"),
        }
    }
    let (stored, version) = current(store, key)
        .await
        .unwrap_or_else(|| panic!("{label}: no object after the race"));
    for task in ambiguous {
        if stored == body(&format!("{label} task {task}")) {
            winners.push((task, version.clone()));
        }
    }
    assert_eq!(winners.len(), 1, "{label}: winners {winners:?}");
    let (task, won) = winners.remove(0);
    assert_eq!(
        (stored, &version),
        (body(&format!("{label} task {task}")), &won),
        "{label}: the stored object is the winner's"
    );
    (task, won)
}

async fn race_create(store: Arc<dyn CasStore>, tasks: usize, rounds: usize) {
    for round in 0..rounds {
        let key = format!("race-create/{round}");
        race_round(&store, &key, None, tasks, &format!("round {round}")).await;
    }
}

async fn race_replace(store: Arc<dyn CasStore>, tasks: usize, rounds: usize) {
    let key = "race-replace";
    let mut version = store.create(key, body("start")).await.unwrap();
    for round in 0..rounds {
        let label = format!("round {round}");
        version = race_round(&store, key, Some(&version), tasks, &label)
            .await
            .1;
    }
}
