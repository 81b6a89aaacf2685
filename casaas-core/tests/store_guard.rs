#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The store guard: every way a store can ignore the conditions leases rely
//! on is caught before the first write, with a message that names it; an
//! ambiguous answer is never read as a pass; every primitive refuses such
//! a store; `verify_store = false` turns it off.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::guard::{GUARD_PREFIX, StoreGuard};
use casaas_core::lease::{
    AcquireOutcome, Election, FencedLog, FencedResource, Lease, LeaseConfig, LeaseError,
    WaitOptions,
};
use casaas_core::testkit::CountingStore;
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, MemoryStore, StoredObject, Version,
};

/// How a test store departs from the contract.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lie {
    /// A create on an existing key overwrites it (If-None-Match ignored).
    CreateOverwrites,
    /// A replace succeeds whatever the version (If-Match ignored).
    ReplaceIgnoresVersion,
    /// A replace is refused even from the current version (a store that
    /// cannot match its own ETags, such as Ceph without `etag_unquoted`).
    ReplaceAlwaysRefused,
    /// A stale replace is answered 412 but applied anyway.
    RefusedReplaceApplies,
    /// A replace of a missing key creates it, then answers 412.
    MissingKeyReplaceCreates,
    /// Conditional replace answers 501.
    NoIfMatch,
    /// The first `n` writes answer "outcome unknown" without applying.
    AmbiguousFirst(u32),
    /// Every write answers "outcome unknown".
    AlwaysAmbiguous,
    /// The first `n` requests are throttled.
    ThrottledFirst(u32),
    /// Honest, but conditional delete is unsupported.
    NoConditionalDelete,
}

#[derive(Debug)]
struct Lying {
    inner: MemoryStore,
    lie: Lie,
    seen: AtomicU32,
}

impl Lying {
    fn new(lie: Lie) -> Arc<Self> {
        Arc::new(Lying {
            inner: MemoryStore::new(),
            lie,
            seen: AtomicU32::new(0),
        })
    }

    /// Counts a request; true while the first `n` are still being answered.
    fn first(&self, n: u32) -> bool {
        self.seen.fetch_add(1, Ordering::SeqCst) < n
    }

    fn early_answer(&self) -> Option<CasError> {
        match self.lie {
            Lie::AmbiguousFirst(n) if self.first(n) => {
                Some(CasError::new(ErrorKind::Ambiguous, "lying: no answer"))
            }
            Lie::AlwaysAmbiguous => Some(CasError::new(ErrorKind::Ambiguous, "lying: no answer")),
            Lie::ThrottledFirst(n) if self.first(n) => Some(
                CasError::new(ErrorKind::Throttled, "lying: slow down")
                    .with_retry_after(Duration::from_millis(10)),
            ),
            _ => None,
        }
    }
}

fn precondition() -> CasError {
    CasError::new(ErrorKind::PreconditionFailed, "lying: 412")
}

#[async_trait]
impl CasStore for Lying {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        if let Lie::ThrottledFirst(_) = self.lie
            && let Some(e) = self.early_answer()
        {
            return Err(e);
        }
        self.inner.get(key).await
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        if let Some(e) = self.early_answer() {
            return Err(e);
        }
        match (self.lie, self.inner.get(key).await?) {
            (Lie::CreateOverwrites, Some(current)) => {
                self.inner.replace(key, &current.version, body).await
            }
            _ => self.inner.create(key, body).await,
        }
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        if let Some(e) = self.early_answer() {
            return Err(e);
        }
        let current = self.inner.get(key).await?;
        match (self.lie, current) {
            (Lie::NoIfMatch, _) => Err(CasError::unsupported("lying: 501 If-Match")),
            (Lie::ReplaceIgnoresVersion, Some(c)) => {
                self.inner.replace(key, &c.version, body).await
            }
            (Lie::ReplaceIgnoresVersion, None) => self.inner.create(key, body).await,
            (Lie::ReplaceAlwaysRefused, _) => Err(precondition()),
            (Lie::RefusedReplaceApplies, Some(c)) if &c.version != expected => {
                self.inner.replace(key, &c.version, body).await?;
                Err(precondition())
            }
            (Lie::MissingKeyReplaceCreates, None) => {
                self.inner.create(key, body).await?;
                Err(precondition())
            }
            _ => self.inner.replace(key, expected, body).await,
        }
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.inner.delete(key, expected).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.inner.list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        match self.lie {
            Lie::NoConditionalDelete => Capabilities::full().without_conditional_delete(),
            _ => Capabilities::full(),
        }
    }

    fn describe(&self) -> String {
        format!("lying store ({:?})", self.lie)
    }

    fn identity(&self) -> String {
        format!("lying({})", self.inner.identity())
    }
}

fn guard() -> StoreGuard {
    StoreGuard::new().with_deadline(Duration::from_secs(5))
}

#[tokio::test]
async fn an_honest_store_passes_and_cleans_up() {
    let store = MemoryStore::new();
    let report = guard().check(&store).await.unwrap();
    assert!(report.passed(), "{report:?}");
    let names: Vec<_> = report.checks.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "create_if_absent",
            "replace_current",
            "replace_stale",
            "refused_writes_change_nothing",
            "missing_key"
        ]
    );
    assert_eq!((report.requests(), report.attempts()), (8, 1));
    assert!(report.left_behind().is_empty());
    assert!(store.list("").await.unwrap().is_empty(), "nothing left");
}

#[tokio::test]
async fn each_lie_is_caught_and_named() {
    let cases = [
        (
            Lie::CreateOverwrites,
            "create_if_absent",
            "a create on an existing key succeeded: this store ignores If-None-Match",
        ),
        (
            Lie::ReplaceIgnoresVersion,
            "replace_stale",
            "a replace from a stale version succeeded: this store ignores If-Match",
        ),
        (
            Lie::ReplaceAlwaysRefused,
            "replace_current",
            "a replace from the current version was refused",
        ),
        (
            Lie::RefusedReplaceApplies,
            "refused_writes_change_nothing",
            "holds the body of the refused replace",
        ),
        (
            Lie::MissingKeyReplaceCreates,
            "missing_key",
            "a conditional replace of a missing key was refused but created the object",
        ),
        (
            Lie::NoIfMatch,
            "replace_current",
            "the store refused a conditional replace (If-Match)",
        ),
    ];
    for (lie, check, says) in cases {
        let store = Lying::new(lie);
        let report = guard().check(store.as_ref()).await.unwrap();
        let failed = report.failure().unwrap_or_else(|| panic!("{lie:?} passed"));
        assert_eq!(failed.name, check, "{lie:?}");
        assert!(failed.detail.contains(says), "{lie:?}: {}", failed.detail);
        // The error every primitive gets: one line, what the store did,
        // what to run.
        let err = guard().ensure(store.as_ref()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeStore);
        let message = err.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.contains(says), "{message}");
        assert!(message.contains("casaas conformance"), "{message}");
    }
}

#[tokio::test]
async fn ambiguous_answers_start_over_and_are_never_a_pass() {
    // A few lost answers: the guard starts over on a fresh key and passes.
    let store = Lying::new(Lie::AmbiguousFirst(3));
    let report = guard().check(store.as_ref()).await.unwrap();
    assert!(report.passed(), "{report:?}");
    assert_eq!(report.attempts(), 4);
    assert_eq!(report.left_behind().len(), 3);

    // Nothing but lost answers: no verdict, an error that is not cached.
    let store = Lying::new(Lie::AlwaysAmbiguous);
    let err = StoreGuard::new()
        .with_deadline(Duration::from_millis(500))
        .ensure(store.as_ref())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    assert!(err.to_string().contains("no verdict"), "{err}");

    // Throttled answers are waited out.
    let store = Lying::new(Lie::ThrottledFirst(2));
    assert!(guard().check(store.as_ref()).await.unwrap().passed());
}

#[tokio::test]
async fn without_conditional_delete_the_probe_objects_are_left_under_the_guard_prefix() {
    let store = Lying::new(Lie::NoConditionalDelete);
    let report = guard().check(store.as_ref()).await.unwrap();
    assert!(report.passed());
    assert_eq!(report.left_behind().len(), 1);
    let left = store.list("").await.unwrap();
    assert_eq!(left.len(), 1);
    assert!(left[0].key.starts_with(GUARD_PREFIX), "{left:?}");
}

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

#[tokio::test]
async fn every_primitive_refuses_a_store_that_ignores_conditions() {
    for lie in [Lie::CreateOverwrites, Lie::ReplaceIgnoresVersion] {
        let store: Arc<dyn CasStore> = Lying::new(lie);
        let lease = Lease::new(store.clone(), "locks/a", "a", config()).unwrap();
        let err = lease.try_acquire().await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err}");
        assert_eq!(err.store_kind(), Some(ErrorKind::UnsafeStore));
        let err = lease.acquire(WaitOptions::default()).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err}");

        let election = Election::new(Lease::new(store.clone(), "locks/e", "a", config()).unwrap());
        let err = election.campaign(Default::default()).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err}");

        let resource = FencedResource::<u64>::new(store.clone(), "fenced/r").unwrap();
        let err = resource.update(1, |_| 1).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err}");

        let log = FencedLog::<u64>::new(store.clone(), "fenced/log").unwrap();
        let err = log.append(1, 1).await.unwrap_err();
        assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err}");

        // Nothing of the protocols was written: only the guard's objects.
        let written = store.list("").await.unwrap();
        assert!(
            written.iter().all(|e| e.key.starts_with(GUARD_PREFIX)),
            "{written:?}"
        );
    }
}

#[tokio::test]
async fn the_verdict_is_kept_for_the_process() {
    let lying = CountingStore::new(Lying::new(Lie::CreateOverwrites));
    let store: Arc<dyn CasStore> = Arc::new(lying.clone());
    let a = Lease::new(store.clone(), "locks/a", "a", config()).unwrap();
    assert!(matches!(
        a.try_acquire().await.unwrap_err(),
        LeaseError::UnsafeStore(_)
    ));
    let spent = lying.counts().total();
    assert!(spent > 0);
    // Another handle on the same store: refused without a request.
    let b = Lease::new(store, "locks/b", "b", config()).unwrap();
    assert!(matches!(
        b.try_acquire().await.unwrap_err(),
        LeaseError::UnsafeStore(_)
    ));
    assert_eq!(lying.counts().total(), spent);
}

#[tokio::test]
async fn turned_off_the_primitives_behave_as_without_it() {
    let store: Arc<dyn CasStore> = Lying::new(Lie::CreateOverwrites);
    let mut unchecked = config();
    unchecked.verify_store = false;
    // Acquired as if the store were sound (two contenders racing on it
    // would both win: what the guard is there to prevent).
    let a = Lease::new(store.clone(), "locks/a", "a", unchecked).unwrap();
    assert!(matches!(
        a.try_acquire().await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let resource = FencedResource::<u64>::new(store.clone(), "fenced/r")
        .unwrap()
        .with_verify_store(false);
    assert_eq!(resource.update(1, |_| 7).await.unwrap().value, 7);
    let log = FencedLog::<u64>::new(store.clone(), "fenced/log")
        .unwrap()
        .with_verify_store(false);
    assert_eq!(log.append(1, 1).await.unwrap().seq, 1);
}

#[tokio::test]
async fn verify_false_in_a_url_trusts_that_store() {
    let store = casaas_core::open_store("memory://guard-verify-off/p?verify=false")
        .await
        .unwrap();
    assert!(casaas_core::guard::is_trusted(store.as_ref()));
    let checked = casaas_core::open_store("memory://guard-verify-on/p")
        .await
        .unwrap();
    assert!(!casaas_core::guard::is_trusted(checked.as_ref()));
    // A trusted lying store is written to as if it were sound.
    let lying: Arc<dyn CasStore> = Lying::new(Lie::CreateOverwrites);
    casaas_core::guard::trust_store(lying.as_ref(), "a test");
    let lease = Lease::new(lying.clone(), "locks/a", "a", config()).unwrap();
    assert!(matches!(
        lease.try_acquire().await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
}

#[tokio::test]
async fn a_not_safe_profile_refuses_the_store_before_any_request() {
    use casaas_core::profile::{CapabilityProfile, ProfileVerdict};
    let dir = tempfile::tempdir().unwrap();
    let url = casaas_core::StoreUrl::parse("memory://profiled-not-safe/p").unwrap();
    let path = CapabilityProfile::new(
        &url,
        ProfileVerdict::NotSafe,
        "NOT SAFE",
        vec![],
        vec!["race_create".into()],
    )
    .save(Some(&dir.path().join("p.json")))
    .unwrap();
    let err = casaas_core::open_store_with(
        "memory://profiled-not-safe/p",
        [("capability_profile", path.to_str().unwrap())],
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeStore, "{err}");
    assert!(err.to_string().contains("race_create"), "{err}");
    // capability_profile=none looks none up.
    casaas_core::open_store("memory://profiled-not-safe/p?capability_profile=none")
        .await
        .unwrap();
}

/// A store that refuses conditional delete, as Ceph RGW with xtask's
/// options and fake-gcs do: declared (`refused`) or not (`declared`).
#[derive(Debug)]
struct NoConditionalDelete {
    inner: MemoryStore,
    declared: bool,
}

#[async_trait]
impl casaas_core::ForwardingStore for NoConditionalDelete {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn wrap_delete(&self, key: &str, _expected: &Version) -> Result<(), CasError> {
        Err(CasError::unsupported("refused: 501 on DeleteObject with If-Match").with_key(key))
    }
    fn wrap_capabilities(&self) -> Capabilities {
        if self.declared {
            Capabilities::full().without_conditional_delete()
        } else {
            Capabilities::full()
        }
    }
}

#[tokio::test]
async fn where_conditional_delete_is_refused_the_guard_deletes_its_own_key_unconditionally() {
    // (declared without conditional delete, requests): 8 when the refused
    // conditional delete was sent first, 7 + 1 when it was not.
    for (declared, requests) in [(false, 9), (true, 8)] {
        let store = NoConditionalDelete {
            inner: MemoryStore::new(),
            declared,
        };
        let report = guard().check(&store).await.unwrap();
        assert!(report.passed(), "{report:?}");
        assert!(
            report.left_behind().is_empty(),
            "declared={declared}: {:?}",
            report.left_behind()
        );
        assert!(
            store.list("").await.unwrap().is_empty(),
            "declared={declared}: the guard left its objects"
        );
        assert_eq!(report.requests(), requests, "declared={declared}");
    }
}

/// A lying store opened from a URL, to see the URL in the guard's message.
fn open_lying(_url: casaas_core::StoreUrl) -> casaas_core::provider::StoreFuture {
    Box::pin(async move {
        let store: Arc<dyn CasStore> = Lying::new(Lie::CreateOverwrites);
        Ok(store)
    })
}

#[tokio::test]
async fn the_unsafe_store_message_names_the_command_on_the_redacted_url() {
    casaas_core::provider::register_scheme("lying-guard", open_lying);
    let store = casaas_core::open_store(
        "lying-guard://someone:hunter2hunter2@bucket/locks?endpoint=http://127.0.0.1:1&sig=abcdef123456",
    )
    .await
    .unwrap();
    let err = guard().ensure(store.as_ref()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeStore);
    let message = err.to_string();
    assert!(
        message.contains(
            "Run `casaas conformance lying-guard://[redacted]@bucket/locks?endpoint=http://127.0.0.1:1&sig=[redacted]` on it"
        ),
        "{message}"
    );
    for secret in ["someone", "hunter2", "abcdef123456"] {
        assert!(!message.contains(secret), "{message}");
    }
    // A store not opened from a URL is named by its description.
    let unopened = Lying::new(Lie::CreateOverwrites);
    let message = guard()
        .ensure(unopened.as_ref())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("Run `casaas conformance lying store (CreateOverwrites)` on it"),
        "{message}"
    );
}

/// One bucket opened two ways, as S3 with and without `etag_unquoted`: the
/// capabilities name the option; the wrong opening cannot match its own
/// versions (Ceph RGW 16.2 with quoted ETags).
#[derive(Debug)]
struct Quirky {
    inner: Arc<MemoryStore>,
    place: &'static str,
    unquoted: bool,
}

#[async_trait]
impl CasStore for Quirky {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.inner.get(key).await
    }
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.inner.create(key, body).await
    }
    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        if !self.unquoted {
            return Err(precondition());
        }
        self.inner.replace(key, expected, body).await
    }
    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.inner.delete(key, expected).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities::full();
        if self.unquoted {
            caps.with_note("If-Match ETags are sent without quotes (etag_unquoted=true)")
        } else {
            caps
        }
    }
    fn describe(&self) -> String {
        // The same place, whatever the option: as S3's description.
        format!("quirky://{}/p", self.place)
    }
    // `identity` is the provided one, as S3's.
}

#[tokio::test]
async fn a_wrong_opening_does_not_decide_the_verdict_of_a_right_one() {
    let bucket = Arc::new(MemoryStore::new());
    let open = |unquoted| Quirky {
        inner: bucket.clone(),
        place: "verdicts",
        unquoted,
    };
    let err = guard().ensure(&open(false)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeStore, "{err}");
    assert!(
        err.to_string()
            .contains("a replace from the current version was refused"),
        "{err}"
    );
    // The same bucket opened with the option that makes it work.
    guard().ensure(&open(true)).await.unwrap();
    // And each verdict stays with its opening.
    assert_eq!(
        guard().ensure(&open(false)).await.unwrap_err().kind(),
        ErrorKind::UnsafeStore
    );
}

#[tokio::test]
async fn trusting_one_opening_does_not_trust_another_with_other_options() {
    let bucket = Arc::new(MemoryStore::new());
    let right = Quirky {
        inner: bucket.clone(),
        place: "trust",
        unquoted: true,
    };
    let wrong = Quirky {
        inner: bucket,
        place: "trust",
        unquoted: false,
    };
    casaas_core::guard::trust_store(&right, "a test");
    assert!(casaas_core::guard::is_trusted(&right));
    assert!(!casaas_core::guard::is_trusted(&wrong));
    let err = guard().ensure(&wrong).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeStore, "{err}");
}

use casaas_core::testkit::logged;

#[tokio::test(flavor = "current_thread")]
async fn turned_off_every_primitive_behaves_as_before_and_warns() {
    let store: Arc<dyn CasStore> = Lying::new(Lie::CreateOverwrites);
    let mut unchecked = config();
    unchecked.verify_store = false;
    let ((), logs) = logged(async {
        // Lease::acquire (the blocking one) takes the lease as on a sound
        // store.
        let lease = Lease::new(store.clone(), "locks/acq", "a", unchecked.clone()).unwrap();
        let held = lease.acquire(WaitOptions::default()).await.unwrap();
        assert_eq!(held.token(), 1);
        held.release().await.unwrap();
        // An election's campaign wins.
        let election = Election::new(
            Lease::new(store.clone(), "locks/elect", "a", unchecked.clone()).unwrap(),
        );
        let leader = election.campaign(Default::default()).await.unwrap();
        assert_eq!(leader.token(), 1);
        leader.resign().await.unwrap();
        // A fenced log appends.
        let log = FencedLog::<u64>::new(store.clone(), "fenced/log-off")
            .unwrap()
            .with_verify_store(false);
        assert_eq!(log.append(1, 9).await.unwrap().seq, 1);
    })
    .await;
    // One warning per handle built with the guard off: the lease, the
    // election's lease, the log.
    let warnings: Vec<_> = logs.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 3, "{logs}");
    for (line, what) in warnings.iter().zip(["a lease", "a lease", "a FencedLog"]) {
        assert!(
            line.contains(&format!("{what} was built with the store guard off")),
            "{what}: {logs}"
        );
    }
    // Nothing of the guard ran: no probe object.
    assert!(
        store.list(GUARD_PREFIX).await.unwrap().is_empty(),
        "the guard ran"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn acquire_on_an_unsafe_store_is_the_typed_error_and_verify_false_in_a_url_warns() {
    casaas_core::provider::register_scheme("lying-acquire", open_lying);
    let store = casaas_core::open_store("lying-acquire://b/p")
        .await
        .unwrap();
    let lease = Lease::new(store, "locks/a", "a", config()).unwrap();
    let err = lease.acquire(WaitOptions::default()).await.unwrap_err();
    assert!(matches!(err, LeaseError::UnsafeStore(_)), "{err}");
    assert!(
        err.to_string()
            .contains("casaas conformance lying-acquire://b/p"),
        "{err}"
    );

    let (store, logs) = logged(casaas_core::open_store("lying-acquire://b/p?verify=false")).await;
    let store = store.unwrap();
    assert!(
        logs.contains("WARN") && logs.contains("the store guard is off (verify=false)"),
        "{logs}"
    );
    let lease = Lease::new(store, "locks/a", "a", config()).unwrap();
    let held = lease.acquire(WaitOptions::default()).await.unwrap();
    assert_eq!(held.token(), 1);
}
