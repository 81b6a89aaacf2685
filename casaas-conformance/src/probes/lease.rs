//! The lease protocol end to end: acquire, exclusion, renew, release,
//! re-acquire, and takeover from a holder cut off from the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{
    AcquireOutcome, FencedResource, Lease, LeaseConfig, LeaseError, LostReason,
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
    let mut config = LeaseConfig::with_ttl(ttl);
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

pub(super) async fn lease_protocol(cx: &ProbeContext) -> Result<Outcome, StepError> {
    // Writes paced, throttled answers retried; unclear answers are left to
    // the lease protocol, which resolves them itself. Racers are released
    // unpaced.
    let store = cx.protocol_store().clone();
    // With other endpoints, the second and third contenders write through
    // the last one, and the racers through all of them.
    let other = cx
        .protocol_stores()
        .last()
        .cloned()
        .unwrap_or_else(|| store.clone());
    let racers = cx.racing_stores();
    let config = probe_config(cx);
    let ttl = config.ttl;
    let key = "lock";
    let new_lease =
        |store: Arc<dyn CasStore>, owner: &str| Lease::new(store, key, owner, config.clone());
    let a = match new_lease(store.clone(), "conformance-a") {
        Ok(l) => l,
        Err(e) => return lease_step("set up a lease", e),
    };
    let b_store = Arc::new(Partitionable {
        inner: other.clone(),
        cut: AtomicBool::new(false),
    });
    let b = match new_lease(b_store.clone(), "conformance-b") {
        Ok(l) => l,
        Err(e) => return lease_step("set up a lease", e),
    };
    let c = match new_lease(other.clone(), "conformance-c") {
        Ok(l) => l,
        Err(e) => return lease_step("set up a lease", e),
    };
    let started = Instant::now();

    // 0. Contenders race for free leases: exactly one acquires each.
    let race_rounds = if cx.settings().quick { 3 } else { 10 };
    let concurrency = cx.settings().concurrency.max(2);
    // Rounds run at once when writes to one key are paced, so that the
    // pace does not multiply the run time.
    let parallel = if cx.min_write_interval().is_some() {
        race_rounds
    } else {
        1
    };
    let results: Vec<(usize, RaceResult)> = futures::stream::iter(0..race_rounds)
        .map(|round| {
            let (store, config) = (&racers, &config);
            async move { (round, lease_race(store, config, round, concurrency).await) }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    for (round, result) in results {
        let winners = match result {
            Ok(w) => w,
            Err(early) => return early,
        };
        if winners > 1 {
            return Ok(Outcome::fail(format!(
                "{winners} of {concurrency} contenders acquired the same free lease at once (round {round})"
            ))
            .with("race_winners", winners));
        }
    }

    let mut tokens = Vec::new();

    // 1. A acquires a free lease.
    let guard_a = match a.try_acquire().await {
        Ok(AcquireOutcome::Acquired(g)) => g,
        Ok(AcquireOutcome::Held(by)) => {
            return Ok(Outcome::fail(format!(
                "a fresh lease was reported held by '{}'",
                by.owner
            )));
        }
        Ok(other) => {
            return Ok(Outcome::error(format!(
                "an acquisition outcome this probe does not know: {other:?}"
            )));
        }
        Err(e) => return lease_step("acquire a free lease", e),
    };
    tokens.push(guard_a.token());
    let first_version = guard_a.version();
    cx.step(1, 5);

    // 2. B is refused while A holds it.
    match b.try_acquire().await {
        Ok(AcquireOutcome::Held(by)) if by.owner == "conformance-a" => {}
        Ok(AcquireOutcome::Held(by)) => {
            return Ok(Outcome::fail(format!(
                "a second contender saw the lease held by '{}', not by its holder",
                by.owner
            )));
        }
        Ok(AcquireOutcome::Acquired(g)) => {
            let token = g.token();
            drop(g);
            return Ok(Outcome::fail(format!(
                "a second contender acquired a held lease (tokens {} and {token}): two holders",
                tokens[0]
            )));
        }
        Ok(other) => {
            return Ok(Outcome::error(format!(
                "an acquisition outcome this probe does not know: {other:?}"
            )));
        }
        Err(e) => return lease_step("second contender's attempt", e),
    }

    // 3. A renews in the background.
    tokio::time::sleep(config.renew_interval * 2 + config.renew_interval / 2).await;
    if !guard_a.is_held() {
        return Ok(Outcome::fail(format!(
            "the holder lost its lease while nobody contended: {}",
            guard_a
                .lost_reason()
                .map_or_else(|| "unknown reason".to_string(), |r| r.to_string())
        )));
    }
    let renewed = guard_a.version() != first_version;
    if !renewed {
        return Ok(Outcome::fail(
            "the holder did not renew (its version did not change) within two renew intervals",
        ));
    }
    cx.step(2, 5);

    // 4. A releases; B acquires at once with the next token.
    if let Err(e) = guard_a.release().await {
        return lease_step("release", e);
    }
    let guard_b = match b.try_acquire().await {
        Ok(AcquireOutcome::Acquired(g)) => g,
        Ok(AcquireOutcome::Held(by)) => {
            return Ok(Outcome::fail(format!(
                "after a release, the lease was still reported held by '{}'",
                by.owner
            )));
        }
        Ok(other) => {
            return Ok(Outcome::error(format!(
                "an acquisition outcome this probe does not know: {other:?}"
            )));
        }
        Err(e) => return lease_step("acquire after release", e),
    };
    tokens.push(guard_b.token());
    cx.step(3, 5);

    // 5. B is cut off from the store; C must take over only after B stepped down.
    let lost_b = guard_b.lost();
    let lost_at = tokio::spawn(async move {
        let reason = lost_b.await;
        (reason, Instant::now())
    });
    b_store.cut.store(true, Ordering::SeqCst);
    let cut_at = Instant::now();
    let deadline = cut_at + ttl * 4 + Duration::from_secs(2);
    let guard_c = loop {
        match c.try_acquire().await {
            Ok(AcquireOutcome::Acquired(g)) => break g,
            Ok(AcquireOutcome::Held(by)) => {
                if Instant::now() > deadline {
                    return Ok(Outcome::fail(format!(
                        "no takeover within {:?} of the holder going silent (held by '{}')",
                        deadline - cut_at,
                        by.owner
                    )));
                }
                let wait = by.takeover_in.clamp(
                    Duration::from_millis(20),
                    config.retry_period.max(Duration::from_millis(20)),
                );
                tokio::time::sleep(wait).await;
            }
            Ok(other) => {
                return Ok(Outcome::error(format!(
                    "an acquisition outcome this probe does not know: {other:?}"
                )));
            }
            Err(e) => return lease_step("take over", e),
        }
    };
    let took_over_at = Instant::now();
    tokens.push(guard_c.token());
    cx.step(4, 5);

    // 6. A fenced resource refuses the deposed holder's older token.
    let fenced =
        match FencedResource::<u64>::new(store.clone(), "fenced").map(|f| f.verify_store(false)) {
            Ok(r) => r,
            Err(e) => return lease_step("set up a fenced resource", e),
        };
    if let Err(e) = fenced.update(guard_c.token(), |_| 3).await {
        return lease_step("fenced update with the current token", e);
    }
    let zombie = fenced.update(guard_b.token(), |_| 2).await;
    let fenced_out = matches!(zombie, Err(LeaseError::FencedOut { .. }));
    if !fenced_out {
        return Ok(Outcome::fail(match zombie {
            Ok(_) => "a fenced resource accepted a write from the deposed holder's older token"
                .to_string(),
            Err(e) => {
                format!("a fenced write with an older token failed other than fenced out: {e}")
            }
        }));
    }
    let holder_lost = tokio::time::timeout(Duration::from_secs(1), lost_at).await;
    let (reason, margin_ms) = match holder_lost {
        Ok(Ok((reason, at))) => (
            Some(reason),
            Some(
                took_over_at.saturating_duration_since(at).as_millis() as i64
                    - at.saturating_duration_since(took_over_at).as_millis() as i64,
            ),
        ),
        _ => (None, None),
    };
    let stepped_down_first = margin_ms.is_some_and(|m| m >= 0);
    if let Err(e) = guard_c.release().await {
        return lease_step("release after takeover", e);
    }
    cx.step(5, 5);

    let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
    let evidence = |o: Outcome| {
        o.with("ttl_ms", ttl.as_millis() as u64)
            .with("race_rounds", race_rounds)
            .with("stale_token_fenced_out", fenced_out)
            .with("tokens", &tokens)
            .with("renewed", renewed)
            .with(
                "takeover_after_ms",
                took_over_at.duration_since(cut_at).as_millis() as u64,
            )
            .with("holder_lost", reason.as_ref().map(|r| r.to_string()))
            .with("holder_stepped_down_ms_before_takeover", margin_ms)
            .with("duration_ms", started.elapsed().as_millis() as u64)
    };
    if !increasing {
        return Ok(evidence(Outcome::fail(format!(
            "fencing tokens did not increase across acquisitions: {tokens:?}"
        ))));
    }
    if !stepped_down_first {
        return Ok(evidence(Outcome::fail(
            "a contender took over before the cut-off holder stepped down: for a moment both believed they held the lease",
        )));
    }
    if !matches!(reason, Some(LostReason::RenewDeadlineExceeded)) {
        return Ok(evidence(Outcome::fail(format!(
            "the cut-off holder ended with an unexpected reason: {}",
            reason
                .as_ref()
                .map_or_else(|| "none".to_string(), |r| r.to_string())
        ))));
    }
    Ok(evidence(Outcome::pass(format!(
        "{race_rounds} races for a free lease had one winner each; acquire, exclusion, renew, release, takeover and fencing behaved; tokens {tokens:?}; the silent holder stepped down {} ms before the takeover",
        margin_ms.unwrap_or(0)
    ))))
}
