//! The lease protocol end to end: acquire, exclusion, renew, release,
//! re-acquire, and takeover from a holder cut off from the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{
    AcquireOutcome, FencedResource, Lease, LeaseConfig, LeaseError, LeaseGuard, LostReason,
};
use casaas_core::{
    CasError, CasStore, ErrorKind, ForwardingStore, ListEntry, StoredObject, Version,
};
use futures::StreamExt;

use crate::model::{Outcome, StepError};
use crate::probe::ProbeContext;

/// A store whose requests can be cut off, as if its process lost the network.
#[derive(Debug)]
struct Partitionable {
    inner: Arc<dyn CasStore>,
    cut: AtomicBool,
}

impl Partitionable {
    fn check(&self) -> Result<(), CasError> {
        if self.cut.load(Ordering::SeqCst) {
            Err(CasError::new(
                ErrorKind::NotSent,
                "simulated network partition (conformance probe)",
            ))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl ForwardingStore for Partitionable {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.check()?;
        self.inner.get(key).await
    }
    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.check()?;
        self.inner.create(key, body).await
    }
    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.check()?;
        self.inner.replace(key, expected, body).await
    }
    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.check()?;
        self.inner.delete(key, expected).await
    }
    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.check()?;
        self.inner.list(prefix).await
    }
    async fn wrap_delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        self.check()?;
        self.inner.delete_unconditionally(key).await
    }
}

/// A lease error as a probe step error (store errors) or an error outcome.
fn lease_step(step: &str, err: LeaseError) -> Result<Outcome, StepError> {
    match err {
        LeaseError::Store(source) => Err(StepError {
            step: step.to_string(),
            source: Box::new(source),
        }),
        other => Ok(Outcome::error(format!("{step}: {other}"))),
    }
}

/// The TTL the probe uses: short, but long enough for the store's pace.
fn probe_config(cx: &ProbeContext) -> LeaseConfig {
    let mut ttl = if cx.settings().quick {
        Duration::from_millis(1500)
    } else {
        Duration::from_secs(3)
    };
    // Long enough that a write waiting for its pace (and a backoff) stays
    // well within the lease's request timeout (a fifth of the TTL).
    if let Some(min) = cx.min_write_interval() {
        ttl = ttl.max(min * 12);
    }
    let mut config = LeaseConfig::from_ttl(ttl);
    // The probe judges the store by what the protocol sees happen; the
    // store guard would stop it at the first lie, before the evidence.
    config.verify_store = false;
    config
}

/// How many contenders acquired a free lease, or the probe's early end.
type RaceResult = Result<usize, Result<Outcome, StepError>>;

/// One race of `concurrency` contenders for the free lease `race/{round}`:
/// how many acquired it.
async fn lease_race(
    stores: &[Arc<dyn CasStore>],
    config: &LeaseConfig,
    round: usize,
    concurrency: usize,
) -> RaceResult {
    let race_key = format!("race/{round}");
    let mut handles = Vec::with_capacity(concurrency);
    let barrier = Arc::new(tokio::sync::Barrier::new(concurrency));
    for task in 0..concurrency {
        // Contenders spread over every endpoint (`--gateway`).
        let lease = match Lease::new(
            stores[task % stores.len()].clone(),
            race_key.clone(),
            format!("conformance-racer-{task}"),
            config.clone(),
        ) {
            Ok(l) => l,
            Err(e) => return Err(lease_step("set up a racing lease", e)),
        };
        let barrier = barrier.clone();
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            lease.try_acquire().await
        }));
    }
    let mut guards = Vec::new();
    for handle in handles {
        match handle.await {
            Ok(Ok(AcquireOutcome::Acquired(g))) => guards.push(g),
            Ok(Ok(AcquireOutcome::Held(_))) => {}
            // An outcome added later is not a win.
            Ok(Ok(_)) => {}
            Ok(Err(e))
                if e.store_kind()
                    .is_some_and(|k| k == ErrorKind::ConcurrentRequest) => {}
            Ok(Err(e)) => return Err(lease_step("race for a free lease", e)),
            Err(e) => return Err(Ok(Outcome::error(format!("a racing task failed: {e}")))),
        }
    }
    let winners = guards.len();
    for g in guards {
        // Best effort: the racers' leases only need to stop renewing.
        let _ = g.release().await;
    }
    Ok(winners)
}

/// A step's result, or the probe's early end (its outcome or a step error).
type Step<T> = Result<T, Result<Outcome, StepError>>;

/// The early end for an acquisition outcome this probe does not know.
fn unknown_outcome<T>(other: AcquireOutcome) -> Step<T> {
    Err(Ok(Outcome::error(format!(
        "an acquisition outcome this probe does not know: {other:?}"
    ))))
}

/// The probe's three contenders for one lock: A through the main
/// endpoint, B (which can be cut off from the store) and C.
struct Contenders {
    a: Lease,
    b: Lease,
    b_store: Arc<Partitionable>,
    c: Lease,
}

impl Contenders {
    /// Sets up the contenders. With other endpoints, B and C write through
    /// the last one.
    fn new(cx: &ProbeContext, config: &LeaseConfig) -> Step<Contenders> {
        let store = cx.protocol_store().clone();
        let other = cx
            .protocol_stores()
            .last()
            .cloned()
            .unwrap_or_else(|| store.clone());
        let new_lease = |store: Arc<dyn CasStore>, owner: &str| {
            Lease::new(store, "lock", owner, config.clone())
                .map_err(|e| lease_step("set up a lease", e))
        };
        let a = new_lease(store, "conformance-a")?;
        let b_store = Arc::new(Partitionable {
            inner: other.clone(),
            cut: AtomicBool::new(false),
        });
        let b = new_lease(b_store.clone(), "conformance-b")?;
        let c = new_lease(other, "conformance-c")?;
        Ok(Contenders { a, b, b_store, c })
    }
}

/// Step 0: `rounds` races of contenders for free leases, through every
/// endpoint; exactly one must acquire each.
async fn free_lease_races(cx: &ProbeContext, config: &LeaseConfig, rounds: usize) -> Step<()> {
    let racers = cx.racing_stores();
    let concurrency = cx.settings().concurrency.max(2);
    // Rounds run at once when writes to one key are paced, so that the
    // pace does not multiply the run time.
    let parallel = if cx.min_write_interval().is_some() {
        rounds
    } else {
        1
    };
    let results: Vec<(usize, RaceResult)> = futures::stream::iter(0..rounds)
        .map(|round| {
            let (store, config) = (&racers, config);
            async move { (round, lease_race(store, config, round, concurrency).await) }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    for (round, result) in results {
        let winners = result?;
        if winners > 1 {
            return Err(Ok(Outcome::fail(format!(
                "{winners} of {concurrency} contenders acquired the same free lease at once (round {round})"
            ))
            .with("race_winners", winners)));
        }
    }
    Ok(())
}

/// Step 1: A acquires a free lease.
async fn acquire_free(a: &Lease) -> Step<LeaseGuard> {
    match a.try_acquire().await {
        Ok(AcquireOutcome::Acquired(g)) => Ok(g),
        Ok(AcquireOutcome::Held(by)) => Err(Ok(Outcome::fail(format!(
            "a fresh lease was reported held by '{}'",
            by.owner
        )))),
        Ok(other) => unknown_outcome(other),
        Err(e) => Err(lease_step("acquire a free lease", e)),
    }
}

/// Step 2: B is refused while A holds the lease with `held_token`.
async fn refused_while_held(b: &Lease, held_token: u64) -> Step<()> {
    match b.try_acquire().await {
        Ok(AcquireOutcome::Held(by)) if by.owner == "conformance-a" => Ok(()),
        Ok(AcquireOutcome::Held(by)) => Err(Ok(Outcome::fail(format!(
            "a second contender saw the lease held by '{}', not by its holder",
            by.owner
        )))),
        Ok(AcquireOutcome::Acquired(g)) => {
            let token = g.token();
            drop(g);
            Err(Ok(Outcome::fail(format!(
                "a second contender acquired a held lease (tokens {held_token} and {token}): two holders"
            ))))
        }
        Ok(other) => unknown_outcome(other),
        Err(e) => Err(lease_step("second contender's attempt", e)),
    }
}

/// Step 3: A renews in the background: still held, and its version moved
/// on from `first_version`, after two and a half renew intervals. A
/// renewal still under way then gets until the renew deadline (one TTL
/// more).
///
/// A holder that stepped down because no renewal finished in time says
/// the store (or this machine) was too slow for the probe's TTL, not that
/// the store broke a rule: no conclusion. A holder whose renewal was
/// refused, or whose record vanished, with nobody contending, is a failure.
async fn renews_in_background(
    guard: &LeaseGuard,
    first_version: &Version,
    config: &LeaseConfig,
) -> Step<()> {
    tokio::time::sleep(config.renew_interval * 2 + config.renew_interval / 2).await;
    let settle_by = Instant::now() + config.ttl;
    while guard.is_held() && guard.version() == *first_version && Instant::now() < settle_by {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match guard.lost_reason() {
        None if guard.is_held() && guard.version() != *first_version => Ok(()),
        None if guard.is_held() => Err(Ok(Outcome::fail(
            "the holder did not renew (its version did not change) and did not step down within its TTL",
        ))),
        // Out of validity, and its renewer not yet woken to say so.
        None | Some(LostReason::RenewDeadlineExceeded) => Err(Ok(Outcome::error(format!(
            "no renewal of the holder finished before its renew deadline with nobody contending: \
             the store (or this machine) answered too slowly for a TTL of {} ms, so nothing was \
             concluded; run again on a quieter machine, or without --quick for a longer TTL",
            config.ttl.as_millis()
        )))),
        Some(other) => Err(Ok(Outcome::fail(format!(
            "the holder lost its lease while nobody contended: {other}"
        )))),
    }
}

/// Step 4: A releases; B acquires at once.
async fn handed_over(guard_a: LeaseGuard, b: &Lease) -> Step<LeaseGuard> {
    if let Err(e) = guard_a.release().await {
        return Err(lease_step("release", e));
    }
    match b.try_acquire().await {
        Ok(AcquireOutcome::Acquired(g)) => Ok(g),
        Ok(AcquireOutcome::Held(by)) => Err(Ok(Outcome::fail(format!(
            "after a release, the lease was still reported held by '{}'",
            by.owner
        )))),
        Ok(other) => unknown_outcome(other),
        Err(e) => Err(lease_step("acquire after release", e)),
    }
}

/// A takeover from a holder cut off from the store.
struct Takeover {
    /// The new holder's guard.
    guard: LeaseGuard,
    /// When the old holder was cut off.
    cut_at: Instant,
    /// When the new holder acquired.
    took_over_at: Instant,
    /// Why and when the old holder stepped down.
    lost_at: tokio::task::JoinHandle<(LostReason, Instant)>,
}

/// Step 5: B, holding `guard_b`, is cut off from the store; C takes over
/// once the lease expires, within four TTLs.
async fn take_over(
    contenders: &Contenders,
    guard_b: &LeaseGuard,
    config: &LeaseConfig,
) -> Step<Takeover> {
    let lost_b = guard_b.lost();
    let lost_at = tokio::spawn(async move {
        let reason = lost_b.await;
        (reason, Instant::now())
    });
    contenders.b_store.cut.store(true, Ordering::SeqCst);
    let cut_at = Instant::now();
    let deadline = cut_at + config.ttl * 4 + Duration::from_secs(2);
    let guard = loop {
        match contenders.c.try_acquire().await {
            Ok(AcquireOutcome::Acquired(g)) => break g,
            Ok(AcquireOutcome::Held(by)) => {
                if Instant::now() > deadline {
                    return Err(Ok(Outcome::fail(format!(
                        "no takeover within {:?} of the holder going silent (held by '{}')",
                        deadline - cut_at,
                        by.owner
                    ))));
                }
                let wait = by.takeover_in.clamp(
                    Duration::from_millis(20),
                    config.retry_period.max(Duration::from_millis(20)),
                );
                tokio::time::sleep(wait).await;
            }
            Ok(other) => return unknown_outcome(other),
            Err(e) => return Err(lease_step("take over", e)),
        }
    };
    Ok(Takeover {
        guard,
        cut_at,
        took_over_at: Instant::now(),
        lost_at,
    })
}

/// Step 6: a fenced resource accepts the `current` token, then refuses the
/// deposed holder's older one.
async fn fences_out(store: Arc<dyn CasStore>, current: u64, deposed: u64) -> Step<()> {
    let fenced = FencedResource::<u64>::new(store, "fenced")
        .map(|f| f.with_verify_store(false))
        .map_err(|e| lease_step("set up a fenced resource", e))?;
    if let Err(e) = fenced.update(current, |_| 3).await {
        return Err(lease_step("fenced update with the current token", e));
    }
    match fenced.update(deposed, |_| 2).await {
        Err(LeaseError::FencedOut { .. }) => Ok(()),
        Ok(_) => Err(Ok(Outcome::fail(
            "a fenced resource accepted a write from the deposed holder's older token",
        ))),
        Err(e) => Err(Ok(Outcome::fail(format!(
            "a fenced write with an older token failed other than fenced out: {e}"
        )))),
    }
}

/// How the cut-off holder ended, if it did within a second: its reason,
/// and how many ms before the takeover it stepped down (negative: after).
async fn stepped_down(
    lost_at: tokio::task::JoinHandle<(LostReason, Instant)>,
    took_over_at: Instant,
) -> (Option<LostReason>, Option<i64>) {
    match tokio::time::timeout(Duration::from_secs(1), lost_at).await {
        Ok(Ok((reason, at))) => (
            Some(reason),
            Some(
                took_over_at.saturating_duration_since(at).as_millis() as i64
                    - at.saturating_duration_since(took_over_at).as_millis() as i64,
            ),
        ),
        _ => (None, None),
    }
}

/// What the probe saw once every step passed.
struct Findings {
    ttl: Duration,
    race_rounds: usize,
    /// Fencing tokens of A, B and C, in order.
    tokens: Vec<u64>,
    takeover_after: Duration,
    reason: Option<LostReason>,
    margin_ms: Option<i64>,
    started: Instant,
}

impl Findings {
    /// `o` with the evidence.
    fn evidence(&self, o: Outcome) -> Outcome {
        // Steps 3 and 6 end the probe when the holder did not renew or the
        // stale token was accepted.
        o.with("ttl_ms", self.ttl.as_millis() as u64)
            .with("race_rounds", self.race_rounds)
            .with("stale_token_fenced_out", true)
            .with("tokens", &self.tokens)
            .with("renewed", true)
            .with("takeover_after_ms", self.takeover_after.as_millis() as u64)
            .with("holder_lost", self.reason.as_ref().map(|r| r.to_string()))
            .with("holder_stepped_down_ms_before_takeover", self.margin_ms)
            .with("duration_ms", self.started.elapsed().as_millis() as u64)
    }

    /// The verdict: tokens increased, and the cut-off holder stepped down
    /// for a missed renew deadline before the takeover.
    fn verdict(&self) -> Outcome {
        let tokens = &self.tokens;
        let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
        let stepped_down_first = self.margin_ms.is_some_and(|m| m >= 0);
        if !increasing {
            return self.evidence(Outcome::fail(format!(
                "fencing tokens did not increase across acquisitions: {tokens:?}"
            )));
        }
        if !stepped_down_first {
            return self.evidence(Outcome::fail(
                "a contender took over before the cut-off holder stepped down: for a moment both believed they held the lease",
            ));
        }
        if !matches!(self.reason, Some(LostReason::RenewDeadlineExceeded)) {
            return self.evidence(Outcome::fail(format!(
                "the cut-off holder ended with an unexpected reason: {}",
                self.reason
                    .as_ref()
                    .map_or_else(|| "none".to_string(), |r| r.to_string())
            )));
        }
        self.evidence(Outcome::pass(format!(
            "{} races for a free lease had one winner each; acquire, exclusion, renew, release, takeover and fencing behaved; tokens {tokens:?}; the silent holder stepped down {} ms before the takeover",
            self.race_rounds,
            self.margin_ms.unwrap_or(0)
        )))
    }
}

/// The lease probe: its steps in order, the first that fails deciding.
pub(super) async fn lease_protocol(cx: &ProbeContext) -> Result<Outcome, StepError> {
    match protocol_steps(cx).await {
        Ok(outcome) => Ok(outcome),
        Err(early) => early,
    }
}

/// The probe's steps in order, ending at the first that fails.
async fn protocol_steps(cx: &ProbeContext) -> Step<Outcome> {
    // Writes paced, throttled answers retried; unclear answers are left to
    // the lease protocol, which resolves them itself. Racers are released
    // unpaced.
    let config = probe_config(cx);
    let contenders = Contenders::new(cx, &config)?;
    let started = Instant::now();
    let race_rounds = if cx.settings().quick { 3 } else { 10 };
    free_lease_races(cx, &config, race_rounds).await?;

    let guard_a = acquire_free(&contenders.a).await?;
    let mut tokens = vec![guard_a.token()];
    let first_version = guard_a.version();
    cx.step(1, 5);
    refused_while_held(&contenders.b, tokens[0]).await?;
    renews_in_background(&guard_a, &first_version, &config).await?;
    cx.step(2, 5);
    let guard_b = handed_over(guard_a, &contenders.b).await?;
    tokens.push(guard_b.token());
    cx.step(3, 5);
    let takeover = take_over(&contenders, &guard_b, &config).await?;
    tokens.push(takeover.guard.token());
    cx.step(4, 5);
    let store = cx.protocol_store().clone();
    fences_out(store, takeover.guard.token(), guard_b.token()).await?;
    let (reason, margin_ms) = stepped_down(takeover.lost_at, takeover.took_over_at).await;
    if let Err(e) = takeover.guard.release().await {
        return Err(lease_step("release after takeover", e));
    }
    cx.step(5, 5);
    Ok(Findings {
        ttl: config.ttl,
        race_rounds,
        tokens,
        takeover_after: takeover.took_over_at.duration_since(takeover.cut_at),
        reason,
        margin_ms,
        started,
    }
    .verdict())
}
