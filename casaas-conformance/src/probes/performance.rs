//! Per-key write rate until throttled, and latency percentiles.

use std::time::{Duration, Instant};

use casaas_core::{ErrorKind, Version};
use serde_json::json;

use super::consistency::patiently;
use super::{answer_label, payload};
use crate::model::{Outcome, StepError, StepExt, error_evidence};
use crate::probe::ProbeContext;

pub(super) async fn throttle(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let (max_writes, max_time) = cx.settings().throttle_caps();
    let step_len = if cx.settings().quick {
        Duration::from_millis(500)
    } else {
        Duration::from_millis(1500)
    };
    let mut version: Version = store
        .create("hot", payload("start"))
        .await
        .step("create the hot key")?;
    let started = Instant::now();
    let mut rate = 2.0_f64;
    let mut writes = 0u64;
    let mut best_sustained = 0.0_f64;
    let mut steps = Vec::new();
    let mut other_answers = std::collections::BTreeMap::<String, u64>::new();
    let mut throttled: Option<(f64, serde_json::Value, Option<u128>)> = None;
    let mut failure: Option<String> = None;
    let stopped: &str;
    'ramp: loop {
        if writes >= max_writes {
            stopped = "write cap reached";
            break;
        }
        if started.elapsed() >= max_time {
            stopped = "time cap reached";
            break;
        }
        let step_start = Instant::now();
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut step_writes = 0u64;
        let mut next = step_start;
        while step_start.elapsed() < step_len && writes < max_writes {
            tokio::time::sleep_until(next.into()).await;
            next += interval;
            match store.replace("hot", &version, payload("hot")).await {
                Ok(v) => {
                    version = v;
                    writes += 1;
                    step_writes += 1;
                }
                Err(e) if e.kind() == ErrorKind::Throttled => {
                    let achieved = step_writes as f64 / step_start.elapsed().as_secs_f64();
                    throttled = Some((
                        achieved.max(best_sustained),
                        error_evidence(&e),
                        e.retry_after().map(|d| d.as_millis()),
                    ));
                    stopped = "throttled";
                    break 'ramp;
                }
                Err(e) => {
                    *other_answers.entry(answer_label(&e)).or_default() += 1;
                    if !matches!(
                        e.kind(),
                        ErrorKind::ConcurrentRequest | ErrorKind::Ambiguous
                    ) {
                        failure = Some(format!("a write under load was answered {e}"));
                        stopped = "error";
                        break 'ramp;
                    }
                    // Resolve where the key stands before going on.
                    let mut retries = 0;
                    let current = patiently(&mut retries, || store.get("hot"))
                        .await
                        .step("re-read after an unclear answer")?;
                    match current {
                        Some(o) => version = o.version,
                        None => {
                            failure = Some("the hot key vanished under load".to_string());
                            stopped = "error";
                            break 'ramp;
                        }
                    }
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
    let round1 = |x: f64| (x * 10.0).round() / 10.0;
    let mut outcome = match (&failure, &throttled) {
        (Some(why), _) => Outcome::fail(why.clone()),
        (None, Some((at, answer, _))) => Outcome::pass(format!(
            "one writer on one key was throttled at about {} writes/s ({})",
            round1(*at),
            answer["answer"].as_str().unwrap_or("throttled")
        )),
        (None, None) => Outcome::pass(format!(
            "no throttling up to {} writes/s on one key from one writer ({stopped})",
            round1(best_sustained)
        )),
    };
    outcome = outcome
        .with("writes", writes)
        .with("duration_ms", started.elapsed().as_millis() as u64)
        .with("max_sustained_per_s", round1(best_sustained))
        .with("stopped_because", stopped)
        .with("steps", steps)
        .with("throttled", throttled.is_some());
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
fn percentiles(mut samples: Vec<f64>) -> serde_json::Value {
    if samples.is_empty() {
        return json!(null);
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        (samples[index.min(samples.len() - 1)] * 100.0).round() / 100.0
    };
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    json!({
        "samples": samples.len(),
        "p50_ms": at(0.5),
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "max_ms": at(1.0),
        "mean_ms": (mean * 100.0).round() / 100.0,
    })
}

pub(super) async fn latency(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let n = cx.settings().latency_samples();
    let keys = n.min(10);
    let mut retries = 0;
    let (mut reads, mut creates, mut replaces) = (Vec::new(), Vec::new(), Vec::new());
    let mut versions = Vec::with_capacity(keys);
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1000.0;
    for i in 0..n {
        let key = format!("lat/{i}");
        let body = payload("latency");
        let t = Instant::now();
        let v = patiently(&mut retries, || store.create(&key, body.clone()))
            .await
            .step("create")?;
        creates.push(ms(t));
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
        let v = patiently(&mut retries, || {
            store.replace(&key, &versions[k], body.clone())
        })
        .await
        .step("replace")?;
        replaces.push(ms(t));
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
        assert_eq!(p["p50_ms"], json!(51.0));
        assert_eq!(p["p99_ms"], json!(99.0));
        assert_eq!(p["max_ms"], json!(100.0));
        assert_eq!(percentiles(Vec::new()), json!(null));
    }
}
