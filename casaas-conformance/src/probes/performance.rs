//! Per-key write rate until throttled, and latency percentiles.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use casaas_core::{CasError, CasStore, ErrorKind, Version};
use serde_json::json;

use super::consistency::patiently;
use super::{answer_label, payload};
use crate::model::{Outcome, StepError, StepExt, error_evidence};
use crate::probe::ProbeContext;

/// The pace for a sustained rate: 5 % and 20 ms of slack for the jitter
/// of request latencies and timers.
fn pace_interval(rate: f64) -> Duration {
    Duration::from_secs_f64(1.05 / rate) + Duration::from_millis(20)
}

/// One replace of the hot key, as the throttle probe sees it.
enum Hot {
    Written,
    Throttled(CasError),
    Failed(String),
}

/// Replaces the hot key once; an unclear answer is resolved by reading.
async fn hot_write(
    store: &Arc<dyn CasStore>,
    version: &mut Version,
    other_answers: &mut BTreeMap<String, u64>,
) -> Result<Hot, StepError> {
    match store.replace("hot", version, payload("hot")).await {
        Ok(v) => {
            *version = v;
            Ok(Hot::Written)
        }
        Err(e) if e.kind() == ErrorKind::Throttled => Ok(Hot::Throttled(e)),
        Err(e) => {
            *other_answers.entry(answer_label(&e)).or_default() += 1;
            if !matches!(
                e.kind(),
                ErrorKind::ConcurrentRequest | ErrorKind::Ambiguous | ErrorKind::NotSent
            ) {
                return Ok(Hot::Failed(format!("a write under load was answered {e}")));
            }
            // Resolve where the key stands before going on.
            let mut retries = 0;
            let current = patiently(&mut retries, || store.get("hot"))
                .await
                .step("re-read after an unclear answer")?;
            match current {
                Some(o) => {
                    *version = o.version;
                    Ok(Hot::Written)
                }
                None => Ok(Hot::Failed("the hot key vanished under load".to_string())),
            }
        }
    }
}

/// How long the throttle probe may go on, and how it steps.
struct Limits {
    max_writes: u64,
    max_time: Duration,
    /// How long each rate of the ramp is held.
    step_len: Duration,
    /// Writes in a row that prove a lower rate sustained.
    sustain: u32,
}

impl Limits {
    /// The limits the settings give.
    fn of(cx: &ProbeContext) -> Limits {
        let (max_writes, max_time) = cx.settings().throttle_caps();
        let quick = cx.settings().quick;
        Limits {
            max_writes,
            max_time,
            step_len: if quick {
                Duration::from_millis(500)
            } else {
                Duration::from_millis(1500)
            },
            sustain: if quick { 4 } else { 6 },
        }
    }
}

/// The store's first throttled answer: at which rate, the answer as
/// evidence, and its Retry-After in ms.
struct Throttle {
    at: f64,
    answer: serde_json::Value,
    retry_after_ms: Option<u128>,
}

impl Throttle {
    /// The short form of the throttled answer (its `answer` evidence).
    fn label(&self) -> &str {
        self.answer["answer"].as_str().unwrap_or("throttled")
    }
}

/// How one attempt to hold a lower rate ended.
enum Hold {
    Sustained,
    Throttled,
    Failed,
}

/// The throttle probe's run on the hot key: where the key stands, and what
/// the run saw so far.
struct HotRun {
    version: Version,
    last_ok: Instant,
    started: Instant,
    writes: u64,
    best_sustained: f64,
    steps: Vec<serde_json::Value>,
    other_answers: BTreeMap<String, u64>,
    codes: BTreeMap<String, u64>,
    throttled: Option<Throttle>,
    failure: Option<String>,
}

impl HotRun {
    /// A run on the hot key, created at `version`.
    fn new(version: Version) -> HotRun {
        HotRun {
            version,
            last_ok: Instant::now(),
            started: Instant::now(),
            writes: 0,
            best_sustained: 0.0,
            steps: Vec::new(),
            other_answers: BTreeMap::new(),
            codes: BTreeMap::new(),
            throttled: None,
            failure: None,
        }
    }

    /// Doubles the rate from 2 writes/s until the store throttles, one
    /// writer can go no faster, or a cap is reached; says why it stopped.
    async fn ramp_up(
        &mut self,
        cx: &ProbeContext,
        store: &Arc<dyn CasStore>,
        limits: &Limits,
    ) -> Result<&'static str, StepError> {
        let mut rate = 2.0_f64;
        loop {
            if self.writes >= limits.max_writes {
                return Ok("write cap reached");
            }
            if self.started.elapsed() >= limits.max_time {
                return Ok("time cap reached");
            }
            let achieved = match self.ramp_step(store, rate, limits).await? {
                ControlFlow::Continue(achieved) => achieved,
                ControlFlow::Break(stopped) => return Ok(stopped),
            };
            cx.step(
                self.started.elapsed().as_millis() as u64,
                limits.max_time.as_millis() as u64,
            );
            if achieved < rate * 0.7 {
                // One writer cannot go faster: the latency of a write is the limit.
                return Ok("latency-bound");
            }
            rate *= 2.0;
        }
    }

    /// Writes at `rate` for one step of the ramp and records it: the rate
    /// achieved, or why the ramp stops (throttled, or an error).
    async fn ramp_step(
        &mut self,
        store: &Arc<dyn CasStore>,
        rate: f64,
        limits: &Limits,
    ) -> Result<ControlFlow<&'static str, f64>, StepError> {
        let interval = Duration::from_secs_f64(1.0 / rate);
        // The first write of a step keeps the step's spacing from the last
        // one, so that a step is not throttled by the previous one.
        let mut next = (self.last_ok + interval).max(Instant::now());
        tokio::time::sleep_until(next.into()).await;
        let step_start = Instant::now();
        let mut step_writes = 0u64;
        while step_start.elapsed() < limits.step_len && self.writes < limits.max_writes {
            tokio::time::sleep_until(next.into()).await;
            next += interval;
            match hot_write(store, &mut self.version, &mut self.other_answers).await? {
                Hot::Written => {
                    self.last_ok = Instant::now();
                    self.writes += 1;
                    step_writes += 1;
                }
                Hot::Throttled(e) => {
                    *self.codes.entry(e.evidence()).or_default() += 1;
                    self.throttled = Some(Throttle {
                        at: rate,
                        answer: error_evidence(&e),
                        retry_after_ms: e.retry_after().map(|d| d.as_millis()),
                    });
                    return Ok(ControlFlow::Break("throttled"));
                }
                Hot::Failed(why) => {
                    self.failure = Some(why);
                    return Ok(ControlFlow::Break("error"));
                }
            }
        }
        let achieved = step_writes as f64 / step_start.elapsed().as_secs_f64();
        self.steps.push(json!({
            "target_per_s": rate,
            "achieved_per_s": (achieved * 10.0).round() / 10.0,
            "writes": step_writes,
        }));
        self.best_sustained = self.best_sustained.max(achieved);
        Ok(ControlFlow::Continue(achieved))
    }

    /// After a throttle at `at` writes/s: lowers the rate step by step until
    /// one is sustained (down to 0.05 writes/s, within three times the time
    /// cap); the rate sustained, if any.
    async fn settle(
        &mut self,
        store: &Arc<dyn CasStore>,
        at: f64,
        retry_after: Option<Duration>,
        limits: &Limits,
    ) -> Result<Option<f64>, StepError> {
        let mut rate = at * 0.85;
        let floor = 0.05;
        while rate >= floor && self.started.elapsed() < limits.max_time * 3 {
            match self.hold(store, rate, retry_after, limits.sustain).await? {
                Hold::Sustained => return Ok(Some(rate)),
                Hold::Throttled => rate *= 0.85,
                Hold::Failed => break,
            }
        }
        Ok(None)
    }

    /// Tries to write `sustain` times in a row at `rate`, and records the
    /// attempt as a step.
    async fn hold(
        &mut self,
        store: &Arc<dyn CasStore>,
        rate: f64,
        retry_after: Option<Duration>,
        sustain: u32,
    ) -> Result<Hold, StepError> {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut next = self.last_ok + interval.max(retry_after.unwrap_or(Duration::ZERO));
        let mut ok = 0;
        while ok < sustain {
            tokio::time::sleep_until(next.into()).await;
            match hot_write(store, &mut self.version, &mut self.other_answers).await? {
                Hot::Written => {
                    self.last_ok = Instant::now();
                    self.writes += 1;
                    ok += 1;
                    next = self.last_ok.max(next) + interval;
                }
                Hot::Throttled(e) => {
                    *self.codes.entry(e.evidence()).or_default() += 1;
                    self.steps.push(
                        json!({ "target_per_s": round2(rate), "writes": ok, "throttled": true }),
                    );
                    return Ok(Hold::Throttled);
                }
                Hot::Failed(why) => {
                    self.failure = Some(why);
                    return Ok(Hold::Failed);
                }
            }
        }
        self.steps
            .push(json!({ "target_per_s": round2(rate), "writes": ok, "throttled": false }));
        Ok(Hold::Sustained)
    }

    /// The verdict, with the run's evidence; `stopped` says why the ramp
    /// ended.
    fn outcome(self, mut stopped: &'static str, sustained: Option<f64>) -> Outcome {
        let mut outcome = match (&self.failure, &self.throttled, sustained) {
            (Some(why), _, _) => Outcome::fail(why.clone()),
            (None, Some(t), Some(rate)) => Outcome::pass(format!(
                "one writer on one key was throttled at {} writes/s ({}) and sustains about {} writes/s; later probes pace writes to one key to that",
                round1(t.at),
                t.label(),
                round2(rate)
            )),
            (None, Some(t), None) => Outcome::error(format!(
                "throttled at {} writes/s ({}) and no rate down to 0.05 writes/s was sustained",
                round1(t.at),
                t.label()
            )),
            (None, None, _) => Outcome::pass(format!(
                "no throttling up to {} writes/s on one key from one writer ({stopped})",
                round1(self.best_sustained)
            )),
        };
        if self.throttled.is_some() && sustained.is_some() {
            stopped = "throttled, then a lower rate was sustained";
        }
        outcome = outcome
            .with("writes", self.writes)
            .with("duration_ms", self.started.elapsed().as_millis() as u64)
            .with("max_sustained_per_s", round1(self.best_sustained))
            .with("stopped_because", stopped)
            .with("steps", self.steps)
            .with("throttled", self.throttled.is_some())
            .with("throttle_codes", self.codes);
        if let Some(rate) = sustained {
            outcome = outcome
                .with("sustained_per_key_per_s", round2(rate))
                .with("pace_interval_ms", pace_interval(rate).as_millis() as u64);
        }
        if let Some(t) = self.throttled {
            outcome = outcome
                .with("throttled_at_per_s", round1(t.at))
                .with("throttle_answer", t.answer)
                .with("retry_after_ms", t.retry_after_ms);
        }
        if !self.other_answers.is_empty() {
            outcome = outcome.with("other_answers", self.other_answers);
        }
        outcome
    }
}

/// `x` rounded to one decimal.
fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// `x` rounded to two decimals.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Creates the hot key, retrying (and reading back) throttled or unclear
/// answers up to five times; its version, if any attempt made it.
async fn create_hot_key(store: &Arc<dyn CasStore>) -> Result<Option<Version>, StepError> {
    for _ in 0..5 {
        match store.create("hot", payload("start")).await {
            Ok(v) => return Ok(Some(v)),
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(e.retry_after().unwrap_or(Duration::from_millis(500))).await;
                if let Some(o) = store.get("hot").await.step("read the hot key")? {
                    return Ok(Some(o.version));
                }
            }
            Err(e) => return Err(e).step("create the hot key"),
        }
    }
    Ok(None)
}

/// How fast one writer can write one key: doubling rates until the store
/// throttles (or one writer can go no faster, or a cap); after a throttle,
/// lower rates until one is sustained. The sustained rate is what every
/// later probe paces its writes to one key to.
pub(super) async fn throttle(cx: &ProbeContext) -> Result<Outcome, StepError> {
    // The store as it is: no pacing, no retries.
    let store = cx.raw_store();
    let limits = Limits::of(cx);
    let Some(version) = create_hot_key(store).await? else {
        return Ok(Outcome::error(
            "the hot key could not be created: every attempt was throttled or unclear",
        ));
    };
    let mut run = HotRun::new(version);
    let stopped = run.ramp_up(cx, store, &limits).await?;

    // Throttled: find a rate the store sustains, lowering it step by step.
    let mut sustained: Option<f64> = None;
    let throttled_at = match (&run.throttled, &run.failure) {
        (Some(t), None) => Some((t.at, t.retry_after_ms)),
        _ => None,
    };
    if let Some((at, retry_after_ms)) = throttled_at {
        let retry_after = retry_after_ms.map(|ms| Duration::from_millis(ms as u64));
        sustained = run.settle(store, at, retry_after, &limits).await?;
        if let Some(rate) = sustained {
            cx.pacer().set_measured(pace_interval(rate));
        }
    }
    Ok(run.outcome(stopped, sustained))
}

/// p50 / p90 / p99 / max / mean of `samples` (milliseconds).
pub(super) fn percentiles(samples: Vec<f64>) -> serde_json::Value {
    if samples.is_empty() {
        return json!(null);
    }
    let at = |p: f64| (casaas_core::provider::percentile(&samples, p) * 100.0).round() / 100.0;
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    json!({
        "samples": samples.len(),
        "p50_ms": at(50.0),
        "p90_ms": at(90.0),
        "p99_ms": at(99.0),
        "max_ms": at(100.0),
        "mean_ms": (mean * 100.0).round() / 100.0,
    })
}

/// After a lost answer: the version of `key` if it holds `body` (the write
/// happened), else the outcome of sending it again through the probe's
/// resolving store.
async fn resolved(
    cx: &ProbeContext,
    key: &str,
    body: &bytes::Bytes,
    again: impl std::future::Future<Output = Result<Version, CasError>>,
) -> Result<Version, CasError> {
    match cx.store().get(key).await? {
        Some(o) if o.body == body => Ok(o.version),
        _ => again.await,
    }
}

/// Milliseconds since `since`.
fn ms_since(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// The latency probe's keys and the throttle retries its writes needed.
struct LatencyRun<'a> {
    cx: &'a ProbeContext,
    /// Samples per operation.
    n: usize,
    /// Keys the samples cycle through.
    keys: usize,
    retries: u64,
}

impl LatencyRun<'_> {
    /// Times `n` creates of fresh keys: the samples, and the versions of the
    /// first `keys` keys.
    async fn creates(&mut self) -> Result<(Vec<f64>, Vec<Version>), StepError> {
        let store = self.cx.raw_store();
        let mut creates = Vec::new();
        let mut versions = Vec::with_capacity(self.keys);
        for i in 0..self.n {
            let key = format!("lat/{i}");
            let body = payload("latency");
            self.cx.pace(&key).await;
            let t = Instant::now();
            let v = match patiently(&mut self.retries, || store.create(&key, body.clone())).await {
                Ok(v) => {
                    creates.push(ms_since(t));
                    v
                }
                // The answer was lost: resolve it as every probe does, and
                // leave this sample out.
                Err(e) if e.may_have_taken_effect() => resolved(
                    self.cx,
                    &key,
                    &body,
                    self.cx.store().create(&key, body.clone()),
                )
                .await
                .step("create")?,
                Err(e) => return Err(e).step("create"),
            };
            if i < self.keys {
                versions.push(v);
            }
        }
        Ok((creates, versions))
    }

    /// Times `n` reads, cycling through the keys.
    async fn reads(&self) -> Result<Vec<f64>, StepError> {
        let store = self.cx.raw_store();
        let mut reads = Vec::new();
        for i in 0..self.n {
            let key = format!("lat/{}", i % self.keys);
            let t = Instant::now();
            store.get(&key).await.step("read")?;
            reads.push(ms_since(t));
        }
        Ok(reads)
    }

    /// Times `n` replaces, cycling through the keys at `versions`.
    async fn replaces(&mut self, mut versions: Vec<Version>) -> Result<Vec<f64>, StepError> {
        let (cx, store) = (self.cx, self.cx.raw_store());
        let mut replaces = Vec::new();
        for i in 0..self.n {
            let k = i % self.keys;
            let key = format!("lat/{k}");
            cx.pace(&key).await;
            let body = payload("latency");
            let t = Instant::now();
            let v = match patiently(&mut self.retries, || {
                store.replace(&key, &versions[k], body.clone())
            })
            .await
            {
                Ok(v) => {
                    replaces.push(ms_since(t));
                    v
                }
                Err(e) if e.may_have_taken_effect() => resolved(
                    cx,
                    &key,
                    &body,
                    cx.store().replace(&key, &versions[k], body.clone()),
                )
                .await
                .step("replace")?,
                Err(e) => return Err(e).step("replace"),
            };
            versions[k] = v;
            if i % 10 == 0 {
                cx.step(i as u64, self.n as u64);
            }
        }
        Ok(replaces)
    }
}

/// Latency percentiles of read, create and replace.
pub(super) async fn latency(cx: &ProbeContext) -> Result<Outcome, StepError> {
    // Requests are timed on the store itself; the pace is kept before the
    // clock starts, so waiting for it is not counted as latency.
    let n = cx.settings().latency_samples();
    // More keys when writes to one key are paced, so the pace does not set
    // the run time.
    let keys = n.min(if cx.min_write_interval().is_some() {
        50
    } else {
        10
    });
    let mut run = LatencyRun {
        cx,
        n,
        keys,
        retries: 0,
    };
    let (creates, versions) = run.creates().await?;
    let reads = run.reads().await?;
    let replaces = run.replaces(versions).await?;
    let read = percentiles(reads);
    let create = percentiles(creates);
    let replace = percentiles(replaces);
    Ok(Outcome::pass(format!(
        "p50/p99 ms: read {}/{}, create {}/{}, replace {}/{}",
        read["p50_ms"],
        read["p99_ms"],
        create["p50_ms"],
        create["p99_ms"],
        replace["p50_ms"],
        replace["p99_ms"]
    ))
    .with("read", read)
    .with("create", create)
    .with("replace", replace)
    .with("throttle_retries", run.retries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_range() {
        let p = percentiles((1..=100).map(f64::from).collect());
        assert_eq!(p["p50_ms"], json!(50.0));
        assert_eq!(p["p99_ms"], json!(99.0));
        assert_eq!(p["max_ms"], json!(100.0));
        assert_eq!(percentiles(Vec::new()), json!(null));
    }
}
