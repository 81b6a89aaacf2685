//! Per-key write rate until throttled, and latency percentiles.

use std::collections::BTreeMap;
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

/// How fast one writer can write one key: doubling rates until the store
/// throttles (or one writer can go no faster, or a cap); after a throttle,
/// lower rates until one is sustained. The sustained rate is what every
/// later probe paces its writes to one key to.
pub(super) async fn throttle(cx: &ProbeContext) -> Result<Outcome, StepError> {
    // The store as it is: no pacing, no retries.
    let store = cx.raw_store();
    let (max_writes, max_time) = cx.settings().throttle_caps();
    let step_len = if cx.settings().quick {
        Duration::from_millis(500)
    } else {
        Duration::from_millis(1500)
    };
    let sustain = if cx.settings().quick { 4 } else { 6 };
    let mut created = None;
    for _ in 0..5 {
        match store.create("hot", payload("start")).await {
            Ok(v) => {
                created = Some(v);
                break;
            }
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(e.retry_after().unwrap_or(Duration::from_millis(500))).await;
                if let Some(o) = store.get("hot").await.step("read the hot key")? {
                    created = Some(o.version);
                    break;
                }
            }
            Err(e) => return Err(e).step("create the hot key"),
        }
    }
    let Some(mut version) = created else {
        return Ok(Outcome::error(
            "the hot key could not be created: every attempt was throttled or unclear",
        ));
    };
    let mut last_ok = Instant::now();
    let started = Instant::now();
    let mut rate = 2.0_f64;
    let mut writes = 0u64;
    let mut best_sustained = 0.0_f64;
    let mut steps = Vec::new();
    let mut other_answers = BTreeMap::<String, u64>::new();
    let mut codes = BTreeMap::<String, u64>::new();
    let mut throttled: Option<(f64, serde_json::Value, Option<u128>)> = None;
    let mut failure: Option<String> = None;
    let mut stopped: &str;
    'ramp: loop {
        if writes >= max_writes {
            stopped = "write cap reached";
            break;
        }
        if started.elapsed() >= max_time {
            stopped = "time cap reached";
            break;
        }
        let interval = Duration::from_secs_f64(1.0 / rate);
        // The first write of a step keeps the step's spacing from the last
        // one, so that a step is not throttled by the previous one.
        let mut next = (last_ok + interval).max(Instant::now());
        tokio::time::sleep_until(next.into()).await;
        let step_start = Instant::now();
        let mut step_writes = 0u64;
        while step_start.elapsed() < step_len && writes < max_writes {
            tokio::time::sleep_until(next.into()).await;
            next += interval;
            match hot_write(store, &mut version, &mut other_answers).await? {
                Hot::Written => {
                    last_ok = Instant::now();
                    writes += 1;
                    step_writes += 1;
                }
                Hot::Throttled(e) => {
                    *codes.entry(e.evidence()).or_default() += 1;
                    throttled = Some((
                        rate,
                        error_evidence(&e),
                        e.retry_after().map(|d| d.as_millis()),
                    ));
                    stopped = "throttled";
                    break 'ramp;
                }
                Hot::Failed(why) => {
                    failure = Some(why);
                    stopped = "error";
                    break 'ramp;
                }
            }
        }
        let achieved = step_writes as f64 / step_start.elapsed().as_secs_f64();
        steps.push(json!({
            "target_per_s": rate,
            "achieved_per_s": (achieved * 10.0).round() / 10.0,
            "writes": step_writes,
        }));
        best_sustained = best_sustained.max(achieved);
        cx.step(
            started.elapsed().as_millis() as u64,
            max_time.as_millis() as u64,
        );
        if achieved < rate * 0.7 {
            // One writer cannot go faster: the latency of a write is the limit.
            stopped = "latency-bound";
            break;
        }
        rate *= 2.0;
    }

    // Throttled: find a rate the store sustains, lowering it step by step.
    let mut sustained: Option<f64> = None;
    if let (Some((at, _, retry_after)), None) = (&throttled, &failure) {
        let mut rate = at * 0.85;
        let floor = 0.05;
        let retry_after = retry_after.map(|ms| Duration::from_millis(ms as u64));
        'down: while rate >= floor && started.elapsed() < max_time * 3 {
            let interval = Duration::from_secs_f64(1.0 / rate);
            let mut next = last_ok + interval.max(retry_after.unwrap_or(Duration::ZERO));
            let mut ok = 0;
            while ok < sustain {
                tokio::time::sleep_until(next.into()).await;
                match hot_write(store, &mut version, &mut other_answers).await? {
                    Hot::Written => {
                        last_ok = Instant::now();
                        writes += 1;
                        ok += 1;
                        next = last_ok.max(next) + interval;
                    }
                    Hot::Throttled(e) => {
                        *codes.entry(e.evidence()).or_default() += 1;
                        steps.push(json!({ "target_per_s": (rate * 100.0).round() / 100.0, "writes": ok, "throttled": true }));
                        rate *= 0.85;
                        continue 'down;
                    }
                    Hot::Failed(why) => {
                        failure = Some(why);
                        break 'down;
                    }
                }
            }
            steps.push(json!({ "target_per_s": (rate * 100.0).round() / 100.0, "writes": ok, "throttled": false }));
            sustained = Some(rate);
            break;
        }
        if let Some(rate) = sustained {
            cx.pacer().set_measured(pace_interval(rate));
        }
    }

    let round1 = |x: f64| (x * 10.0).round() / 10.0;
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    let mut outcome = match (&failure, &throttled, sustained) {
        (Some(why), _, _) => Outcome::fail(why.clone()),
        (None, Some((at, answer, _)), Some(rate)) => Outcome::pass(format!(
            "one writer on one key was throttled at {} writes/s ({}) and sustains about {} writes/s; later probes pace writes to one key to that",
            round1(*at),
            answer["answer"].as_str().unwrap_or("throttled"),
            round2(rate)
        )),
        (None, Some((at, answer, _)), None) => Outcome::error(format!(
            "throttled at {} writes/s ({}) and no rate down to 0.05 writes/s was sustained",
            round1(*at),
            answer["answer"].as_str().unwrap_or("throttled")
        )),
        (None, None, _) => Outcome::pass(format!(
            "no throttling up to {} writes/s on one key from one writer ({stopped})",
            round1(best_sustained)
        )),
    };
    if throttled.is_some() && sustained.is_some() {
        stopped = "throttled, then a lower rate was sustained";
    }
    outcome = outcome
        .with("writes", writes)
        .with("duration_ms", started.elapsed().as_millis() as u64)
        .with("max_sustained_per_s", round1(best_sustained))
        .with("stopped_because", stopped)
        .with("steps", steps)
        .with("throttled", throttled.is_some())
        .with("throttle_codes", codes);
    if let Some(rate) = sustained {
        outcome = outcome
            .with("sustained_per_key_per_s", round2(rate))
            .with("pace_interval_ms", pace_interval(rate).as_millis() as u64);
    }
    if let Some((at, answer, retry_after)) = throttled {
        outcome = outcome
            .with("throttled_at_per_s", round1(at))
            .with("throttle_answer", answer)
            .with("retry_after_ms", retry_after);
    }
    if !other_answers.is_empty() {
        outcome = outcome.with("other_answers", other_answers);
    }
    Ok(outcome)
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

pub(super) async fn latency(cx: &ProbeContext) -> Result<Outcome, StepError> {
    // Requests are timed on the store itself; the pace is kept before the
    // clock starts, so waiting for it is not counted as latency.
    let store = cx.raw_store();
    let n = cx.settings().latency_samples();
    // More keys when writes to one key are paced, so the pace does not set
    // the run time.
    let keys = n.min(if cx.min_write_interval().is_some() {
        50
    } else {
        10
    });
    let mut retries = 0;
    let (mut reads, mut creates, mut replaces) = (Vec::new(), Vec::new(), Vec::new());
    let mut versions = Vec::with_capacity(keys);
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1000.0;
    for i in 0..n {
        let key = format!("lat/{i}");
        let body = payload("latency");
        cx.pace(&key).await;
        let t = Instant::now();
        let v = match patiently(&mut retries, || store.create(&key, body.clone())).await {
            Ok(v) => {
                creates.push(ms(t));
                v
            }
            // The answer was lost: resolve it as every probe does, and
            // leave this sample out.
            Err(e) if e.may_have_taken_effect() => {
                resolved(cx, &key, &body, cx.store().create(&key, body.clone()))
                    .await
                    .step("create")?
            }
            Err(e) => return Err(e).step("create"),
        };
        if i < keys {
            versions.push(v);
        }
    }
    for i in 0..n {
        let key = format!("lat/{}", i % keys);
        let t = Instant::now();
        store.get(&key).await.step("read")?;
        reads.push(ms(t));
    }
    for i in 0..n {
        let k = i % keys;
        let key = format!("lat/{k}");
        cx.pace(&key).await;
        let body = payload("latency");
        let t = Instant::now();
        let v = match patiently(&mut retries, || {
            store.replace(&key, &versions[k], body.clone())
        })
        .await
        {
            Ok(v) => {
                replaces.push(ms(t));
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
            cx.step(i as u64, n as u64);
        }
    }
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
    .with("throttle_retries", retries))
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
