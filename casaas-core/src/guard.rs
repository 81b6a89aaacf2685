//! The store guard: before the first lease, election, fenced-resource or
//! fenced-log write on a store, prove with a few requests that the store
//! honours the conditions those protocols rely on.
//!
//! A store that ignores `If-None-Match` or `If-Match` answers every
//! conditional write with success, so every contender "acquires" the same
//! lease with the same token and nothing says so. The guard turns that into
//! an error at first use. It runs once per store per process (every handle
//! on one store shares the verdict, see [`CasStore::identity`]) and costs no
//! request on any later acquire or renew.
//!
//! What it checks, on a fresh key of its own under [`GUARD_PREFIX`]:
//!
//! 1. a second create-if-absent on an existing key is refused;
//! 2. a replace from the current version succeeds;
//! 3. a replace from a stale version is refused;
//! 4. neither refused write changed the object;
//! 5. a conditional replace of a missing key is refused and creates nothing.
//!
//! Then it deletes its key (conditionally) where the store can. An answer
//! whose outcome is unknown is never read as a pass: the guard starts over
//! on a new key, within its deadline. What it cannot see: races between
//! concurrent writers and rare faults; `casaas conformance` probes those.
//!
//! A process that opts in with [`cache::GuardCache`] keeps a passing
//! verdict on disk for the next process (an hour by default); a failing
//! verdict withdraws what was kept for the store.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), casaas_core::CasError> {
//! use casaas_core::MemoryStore;
//! use casaas_core::guard::StoreGuard;
//!
//! let store = MemoryStore::new();
//! let report = StoreGuard::new().check(&store).await?;
//! assert!(report.passed());
//! assert_eq!(report.requests(), 8);
//! # Ok(())
//! # }
//! ```

pub mod cache;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::ControlFlow::{self, Continue};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::lease::{Clock, Entropy, SystemClock};
use crate::{CasError, CasStore, ErrorKind, Version};

/// The sub-prefix (under the store's prefix) that holds the guard's probe
/// objects. Where the credentials may not delete, a lifecycle rule that
/// expires this prefix after a day removes what the guard leaves.
pub const GUARD_PREFIX: &str = ".casaas-guard/";

/// How long the guard keeps trying when the store's answers are ambiguous
/// or throttled, by default.
pub const DEFAULT_GUARD_DEADLINE: Duration = Duration::from_secs(30);

/// The longest wait for one guard request, by default.
pub const DEFAULT_GUARD_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One check the guard made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardCheck {
    /// A stable name: `create_if_absent`, `replace_current`,
    /// `replace_stale`, `refused_writes_change_nothing`, `missing_key`.
    pub name: &'static str,
    /// Did the store behave as leases need?
    pub passed: bool,
    /// What the store did, in one line.
    pub detail: String,
}

/// What one run of the guard found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardReport {
    /// The checks of the attempt that settled the verdict, in order. A
    /// failed check ends the attempt.
    pub checks: Vec<GuardCheck>,
    requests: u32,
    attempts: u32,
    elapsed: Duration,
    left_behind: Vec<String>,
}

impl GuardReport {
    /// Did every check pass?
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.passed)
    }

    /// The first failed check, if any.
    pub fn failure(&self) -> Option<&GuardCheck> {
        self.checks.iter().find(|c| !c.passed)
    }

    /// Requests sent, over every attempt (cleanup included).
    pub fn requests(&self) -> u32 {
        self.requests
    }

    /// Attempts made (more than one when an answer was ambiguous).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time taken, on the guard's clock.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Keys (relative to the store's prefix) the guard wrote and could not
    /// remove: for a lifecycle rule on [`GUARD_PREFIX`] to expire.
    pub fn left_behind(&self) -> &[String] {
        &self.left_behind
    }
}

/// Runs the store guard; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct StoreGuard {
    clock: Arc<dyn Clock>,
    entropy: Entropy,
    request_timeout: Duration,
    deadline: Duration,
}

impl Default for StoreGuard {
    fn default() -> Self {
        Self::new()
    }
}

/// How one attempt ended short of a verdict.
enum Interrupted {
    /// Try again on a fresh key: the answer was ambiguous or throttled.
    Retry(CasError),
    /// Give up: the store failed in a way retrying cannot fix.
    Fail(CasError),
}

impl StoreGuard {
    /// A guard on the system clock, with the default deadline and request
    /// timeout.
    pub fn new() -> Self {
        StoreGuard {
            clock: Arc::new(SystemClock::new()),
            entropy: Entropy::from_os(),
            request_timeout: DEFAULT_GUARD_REQUEST_TIMEOUT,
            deadline: DEFAULT_GUARD_DEADLINE,
        }
    }

    /// Uses `clock` for request timeouts, pauses and the deadline.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Uses `entropy` for the probe key and nonces (seeded in simulations).
    #[must_use]
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = entropy;
        self
    }

    /// The longest wait for one request; one that does not answer in time
    /// counts as ambiguous.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long to keep trying on ambiguous or throttled answers.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Runs the checks now, whatever is cached, and reports what the store
    /// did. `Err` means no verdict: the store failed (unreachable,
    /// unauthorized, missing bucket) or stayed ambiguous until the
    /// deadline. A store that misbehaves is `Ok` with a failed check.
    pub async fn check(&self, store: &dyn CasStore) -> Result<GuardReport, CasError> {
        let start = self.clock.now();
        let mut report = GuardReport {
            checks: Vec::new(),
            requests: 0,
            attempts: 0,
            elapsed: Duration::ZERO,
            left_behind: Vec::new(),
        };
        loop {
            report.attempts += 1;
            report.checks.clear();
            let key = format!("{GUARD_PREFIX}{}", self.entropy.nonce());
            let outcome = self.attempt(store, &key, &mut report).await;
            report.elapsed = self.clock.now().saturating_sub(start);
            match outcome {
                Ok(()) => return Ok(report),
                Err(Interrupted::Fail(err)) => return Err(err),
                Err(Interrupted::Retry(err)) => {
                    report.left_behind.push(key);
                    let pause = err
                        .retry_after()
                        .unwrap_or(Duration::from_millis(200))
                        .max(Duration::from_millis(50));
                    let pause = pause + self.entropy.jitter(pause / 5);
                    if report.elapsed + pause >= self.deadline {
                        return Err(CasError::new(
                            ErrorKind::Ambiguous,
                            format!(
                                "{}: the store guard found no verdict within {:?} ({} attempts); \
                                 last answer: {err}",
                                store.describe(),
                                self.deadline,
                                report.attempts
                            ),
                        ));
                    }
                    self.clock.sleep(pause).await;
                }
            }
        }
    }

    /// Runs the checks once per store per process (see
    /// [`CasStore::identity`]); every caller on the same store shares the
    /// result. A store that failed a check gets an error of kind
    /// [`ErrorKind::UnsafeStore`], remembered for the process; an error
    /// without a verdict is not remembered, so the next caller tries again.
    /// Stores passed to [`trust_store`] are not checked.
    pub async fn ensure(&self, store: &dyn CasStore) -> Result<(), CasError> {
        let identity = store.identity();
        if is_trusted_identity(&identity) {
            return Ok(());
        }
        let cell = verdict_cell(&identity);
        let verdict = cell
            .get_or_try_init(|| async {
                let report = self.check(store).await?;
                Ok::<_, CasError>(match report.failure() {
                    None => {
                        if !report.left_behind.is_empty() {
                            tracing::info!(
                                store = %store.describe(),
                                objects = report.left_behind.len(),
                                "the store guard could not remove its probe objects; a lifecycle \
                                 rule on the {GUARD_PREFIX} prefix expires them"
                            );
                        }
                        tracing::debug!(
                            store = %store.describe(),
                            requests = report.requests,
                            elapsed = ?report.elapsed,
                            "store guard passed"
                        );
                        cache::passed(store);
                        Verdict::Passed
                    }
                    Some(failed) => {
                        cache::failed(store);
                        Verdict::Unsafe(unsafe_store_message(store, failed))
                    }
                })
            })
            .await?;
        match verdict {
            Verdict::Passed => Ok(()),
            Verdict::Unsafe(message) => Err(CasError::new(ErrorKind::UnsafeStore, message.clone())),
        }
    }

    /// One run of the checks on `key`, each recorded in `report`; the first
    /// failed check ends it (its objects are left for the lifecycle rule).
    async fn attempt(
        &self,
        store: &dyn CasStore,
        key: &str,
        report: &mut GuardReport,
    ) -> Result<(), Interrupted> {
        let bodies = Bodies {
            nonce: self.entropy.nonce(),
        };
        let Continue(v1) = self.check_create(store, key, &bodies, report).await? else {
            return Ok(());
        };
        let Continue(v2) = self
            .check_replace_current(store, key, &v1, &bodies, report)
            .await?
        else {
            return Ok(());
        };
        if self
            .check_replace_stale(store, key, &v1, &bodies, report)
            .await?
            .is_break()
            || self
                .check_refused_writes_change_nothing(store, key, &v2, &bodies, report)
                .await?
                .is_break()
            || self
                .check_missing_key(store, key, &v2, &bodies, report)
                .await?
                .is_break()
        {
            return Ok(());
        }
        self.cleanup(report, store, key, &v2).await;
        Ok(())
    }

    /// Check 1: a create, then a second create that must lose.
    async fn check_create(
        &self,
        store: &dyn CasStore,
        key: &str,
        bodies: &Bodies,
        report: &mut GuardReport,
    ) -> Checked<Version> {
        let v1 = match self
            .send(report, key, store.create(key, bodies.of("a")))
            .await
        {
            Ok(v) => v,
            // A fresh random key cannot be taken: a duplicated request of
            // ours answered. Start over rather than guess.
            Err(e) if e.kind() == ErrorKind::PreconditionFailed => {
                return Err(Interrupted::Retry(e));
            }
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                return Ok(failed(
                    report,
                    "create_if_absent",
                    format!("the store refused create-if-absent (If-None-Match): {e}"),
                ));
            }
            Err(e) => return Err(classify(e)),
        };
        match self
            .send(report, key, store.create(key, bodies.of("b")))
            .await
        {
            Ok(_) => Ok(failed(
                report,
                "create_if_absent",
                "a create on an existing key succeeded: this store ignores If-None-Match".into(),
            )),
            Err(e) if e.kind() == ErrorKind::PreconditionFailed => {
                passed(report, "create_if_absent", "a second create was refused");
                Ok(Continue(v1))
            }
            Err(e) => Err(classify(e)),
        }
    }

    /// Check 2: a replace from the current version must succeed, with a new
    /// version.
    async fn check_replace_current(
        &self,
        store: &dyn CasStore,
        key: &str,
        v1: &Version,
        bodies: &Bodies,
        report: &mut GuardReport,
    ) -> Checked<Version> {
        let v2 = match self
            .send(report, key, store.replace(key, v1, bodies.of("c")))
            .await
        {
            Ok(v) => v,
            Err(e) if is_refusal(&e) => {
                // A duplicate of our own replace can answer 412: look.
                match self.read(report, store, key).await? {
                    Some((b, v)) if b == bodies.of("c") => v,
                    _ => {
                        return Ok(failed(
                            report,
                            "replace_current",
                            format!(
                                "a replace from the current version was refused ({}): this store \
                                 does not accept its own versions as If-Match conditions; \
                                 `casaas conformance` finds the options it needs",
                                e.kind()
                            ),
                        ));
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                return Ok(failed(
                    report,
                    "replace_current",
                    format!(
                        "the store refused a conditional replace (If-Match): {e}; a store that \
                         honours create-if-absent alone can hold leases in the create-only \
                         layout: open it with {}=epochs",
                        crate::layout::LAYOUT_OPTION
                    ),
                ));
            }
            Err(e) => return Err(classify(e)),
        };
        if v2 == *v1 {
            return Ok(failed(
                report,
                "replace_current",
                "two writes of different bodies got the same version: versions do not name \
                 writes on this store"
                    .into(),
            ));
        }
        passed(
            report,
            "replace_current",
            "a replace from the current version succeeded",
        );
        Ok(Continue(v2))
    }

    /// Check 3: a replace from the stale version must lose.
    async fn check_replace_stale(
        &self,
        store: &dyn CasStore,
        key: &str,
        v1: &Version,
        bodies: &Bodies,
        report: &mut GuardReport,
    ) -> Checked<()> {
        match self
            .send(report, key, store.replace(key, v1, bodies.of("d")))
            .await
        {
            Ok(_) => Ok(failed(
                report,
                "replace_stale",
                "a replace from a stale version succeeded: this store ignores If-Match".into(),
            )),
            Err(e) if is_refusal(&e) => {
                passed(
                    report,
                    "replace_stale",
                    "a replace from a stale version was refused",
                );
                Ok(Continue(()))
            }
            Err(e) => Err(classify(e)),
        }
    }

    /// Check 4: the refused writes left the object as the replace wrote it.
    async fn check_refused_writes_change_nothing(
        &self,
        store: &dyn CasStore,
        key: &str,
        v2: &Version,
        bodies: &Bodies,
        report: &mut GuardReport,
    ) -> Checked<()> {
        const CHECK: &str = "refused_writes_change_nothing";
        match self.read(report, store, key).await? {
            Some((b, v)) if b == bodies.of("c") && v == *v2 => {
                passed(
                    report,
                    CHECK,
                    "the refused writes left the object unchanged",
                );
                Ok(Continue(()))
            }
            Some((b, _)) => {
                let which = [
                    ("a", "first create"),
                    ("b", "refused create"),
                    ("d", "refused replace"),
                ]
                .into_iter()
                .find(|(step, _)| b == bodies.of(step))
                .map_or("an unknown write", |(_, name)| name);
                Ok(failed(
                    report,
                    CHECK,
                    format!(
                        "after a refused write the object holds the body of the {which}: this \
                         store applies writes it answers as refused"
                    ),
                ))
            }
            None => Ok(failed(
                report,
                CHECK,
                "the object the guard wrote is gone after refused writes".into(),
            )),
        }
    }

    /// Check 5: a conditional replace of a missing key creates nothing.
    async fn check_missing_key(
        &self,
        store: &dyn CasStore,
        key: &str,
        v2: &Version,
        bodies: &Bodies,
        report: &mut GuardReport,
    ) -> Checked<()> {
        let missing = format!("{key}-absent");
        let refused = match self
            .send(
                report,
                &missing,
                store.replace(&missing, v2, bodies.of("e")),
            )
            .await
        {
            Ok(_) => false,
            Err(e) if is_refusal(&e) => true,
            Err(e) => return Err(classify(e)),
        };
        let created = self.read(report, store, &missing).await?;
        if let Some((_, v)) = &created {
            self.cleanup(report, store, &missing, v).await;
        }
        Ok(match (refused, created.is_some()) {
            (true, false) => {
                passed(
                    report,
                    "missing_key",
                    "a conditional replace of a missing key was refused and created nothing",
                );
                Continue(())
            }
            (false, _) => failed(
                report,
                "missing_key",
                "a conditional replace of a missing key succeeded and created it: this store \
                 ignores If-Match"
                    .into(),
            ),
            (true, true) => failed(
                report,
                "missing_key",
                "a conditional replace of a missing key was refused but created the object".into(),
            ),
        })
    }

    /// Deletes a probe object of ours: conditionally where the store can;
    /// where it cannot, or refuses, without a condition (the key is the
    /// guard's own, fresh and random, so no one else's write is there);
    /// records it as left behind when neither works.
    async fn cleanup(
        &self,
        report: &mut GuardReport,
        store: &dyn CasStore,
        key: &str,
        v: &Version,
    ) {
        if store.capabilities().conditional_delete {
            match self.send(report, key, store.delete(key, v)).await {
                Ok(()) => return,
                Err(e) => tracing::debug!(
                    store = %store.describe(),
                    error = %e,
                    "the store guard's conditional delete failed; deleting without a condition"
                ),
            }
        }
        let unconditional = crate::lease::timed(
            self.clock.as_ref(),
            self.request_timeout,
            key,
            store.delete_unconditionally(key),
        )
        .await;
        match unconditional {
            Ok(()) => report.requests += 1,
            // The provided default answers without sending anything.
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                report.left_behind.push(key.to_string());
            }
            Err(e) => {
                report.requests += 1;
                tracing::debug!(
                    store = %store.describe(),
                    error = %e,
                    "the store guard could not delete its probe object"
                );
                report.left_behind.push(key.to_string());
            }
        }
    }

    async fn read(
        &self,
        report: &mut GuardReport,
        store: &dyn CasStore,
        key: &str,
    ) -> Result<Option<(Bytes, Version)>, Interrupted> {
        match self.send(report, key, store.get(key)).await {
            Ok(found) => Ok(found.map(|o| (o.body, o.version))),
            Err(e) => Err(classify(e)),
        }
    }

    async fn send<T>(
        &self,
        report: &mut GuardReport,
        key: &str,
        request: impl std::future::Future<Output = Result<T, CasError>>,
    ) -> Result<T, CasError> {
        report.requests += 1;
        crate::lease::timed(self.clock.as_ref(), self.request_timeout, key, request).await
    }
}

/// Errors that call for a fresh attempt, and those that end the guard.
/// What a check found: go on with `T`, or stop (the failure is recorded).
type Checked<T> = Result<ControlFlow<(), T>, Interrupted>;

/// The bodies of one attempt's writes: each names the attempt's nonce and
/// its step, so a read tells which write the object holds.
struct Bodies {
    nonce: String,
}

impl Bodies {
    fn of(&self, step: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"casaas_guard":"{}","step":"{step}"}}"#,
            self.nonce
        ))
    }
}

/// A conditional write refused as the guard expects of a safe store.
fn is_refusal(err: &CasError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::PreconditionFailed | ErrorKind::NotFound
    )
}

fn passed(report: &mut GuardReport, name: &'static str, detail: &str) {
    report.checks.push(GuardCheck {
        name,
        passed: true,
        detail: detail.to_string(),
    });
}

fn failed<T>(report: &mut GuardReport, name: &'static str, detail: String) -> ControlFlow<(), T> {
    report.checks.push(GuardCheck {
        name,
        passed: false,
        detail,
    });
    ControlFlow::Break(())
}

fn classify(err: CasError) -> Interrupted {
    // The probe key is random: name its sub-prefix, which a reader can act
    // on (a permission, a lifecycle rule) and which reads the same each run.
    let err = err.with_key(GUARD_PREFIX);
    match err.kind() {
        ErrorKind::Ambiguous | ErrorKind::Throttled | ErrorKind::ConcurrentRequest => {
            Interrupted::Retry(err)
        }
        _ => Interrupted::Fail(err),
    }
}

/// The one-line message of a store that failed `failed`: what the store did
/// and the command to run, on the store's URL as it was opened (redacted:
/// no user info, no secret-looking option) or, for a store not opened from
/// a URL, its description.
pub(crate) fn unsafe_store_message(store: &dyn CasStore, failed: &GuardCheck) -> String {
    let target = url_of(store).unwrap_or_else(|| store.describe());
    format!(
        "{} is not safe for leases: {}. Run `casaas conformance {target}` on it for the full \
         report; `verify=false` turns this check off at your own risk",
        store.describe(),
        failed.detail
    )
}

fn urls() -> &'static Mutex<HashMap<String, String>> {
    static URLS: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    URLS.get_or_init(Default::default)
}

/// Remembers the redacted URL `store` was opened from, for the command the
/// guard's message names (called by [`open_store_with`](crate::open_store_with)).
pub(crate) fn remember_url(store: &dyn CasStore, shown: String) {
    urls()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(store.identity(), shown);
}

/// The redacted URL `store` (or the store under its epoch view) was opened
/// from, if it was opened from one.
fn url_of(store: &dyn CasStore) -> Option<String> {
    let identity = store.identity();
    let urls = urls().lock().unwrap_or_else(|p| p.into_inner());
    urls.get(&identity)
        .or_else(|| crate::layout::inner_identity(&identity).and_then(|inner| urls.get(inner)))
        .cloned()
}

#[derive(Debug, Clone)]
enum Verdict {
    Passed,
    /// The one-line message of the error every caller gets.
    Unsafe(String),
}

fn verdicts() -> &'static Mutex<HashMap<String, Arc<OnceCell<Verdict>>>> {
    static VERDICTS: OnceLock<Mutex<HashMap<String, Arc<OnceCell<Verdict>>>>> = OnceLock::new();
    VERDICTS.get_or_init(Default::default)
}

fn verdict_cell(identity: &str) -> Arc<OnceCell<Verdict>> {
    verdicts()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(identity.to_string())
        .or_default()
        .clone()
}

/// Turns the store guard off for `store` in this process (the `verify=false`
/// URL option and `LeaseConfig::verify_store = false` come here). Logged at
/// warn every time: a store that ignores conditions then gives locks that do
/// not lock.
pub fn trust_store(store: &dyn CasStore, why: &str) {
    tracing::warn!(
        store = %store.describe(),
        "the store guard is off ({why}): casaas will not check that this store honours \
         conditional writes; a store that ignores them gives locks that exclude no one"
    );
    trusted()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(store.identity());
}

fn trusted() -> &'static Mutex<HashSet<String>> {
    static TRUSTED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    TRUSTED.get_or_init(Default::default)
}

/// Was the guard turned off for `store` in this process (by
/// [`trust_store`] or `verify=false`)?
pub fn is_trusted(store: &dyn CasStore) -> bool {
    is_trusted_identity(&store.identity())
}

fn is_trusted_identity(identity: &str) -> bool {
    let trusted = trusted().lock().unwrap_or_else(|p| p.into_inner());
    // The epoch view of a trusted store is trusted: it is the same store.
    trusted.contains(identity)
        || crate::layout::inner_identity(identity).is_some_and(|inner| trusted.contains(inner))
}

impl fmt::Display for GuardCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = if self.passed { "pass" } else { "FAIL" };
        write!(f, "{mark}  {:<30} {}", self.name, self.detail)
    }
}
