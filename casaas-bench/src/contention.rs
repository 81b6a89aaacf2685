//! Contention: N contenders on one key, each taking the lock, doing short
//! work and releasing, for a fixed time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use casaas_core::CasStore;
use casaas_core::lease::AcquireOptions;
use casaas_core::lease::{Lease, LeaseConfig, LeaseError};
use casaas_core::testkit::CountingStore;

use crate::plot;
use crate::section::Section;
use crate::stats::jain;

/// The work done while holding.
pub const WORK: Duration = Duration::from_millis(10);

/// One (backend, N) run.
#[derive(Debug)]
pub struct ContentionRow {
    /// Backend.
    pub system: String,
    /// Contenders.
    pub contenders: usize,
    /// Acquisitions per second.
    pub rate: f64,
    /// Store requests per acquisition (acquire, wait, release).
    pub requests_per_acquisition: f64,
    /// Jain's index over acquisitions per contender.
    pub fairness: f64,
    /// Acquisitions in total.
    pub acquisitions: u64,
}

/// Runs `contenders` on one key of `store` for `duration`.
pub async fn run(
    system: &str,
    store: Arc<dyn CasStore>,
    contenders: usize,
    duration: Duration,
    ttl: Duration,
) -> Result<ContentionRow> {
    let counting = CountingStore::new(store);
    let key = format!("bench/contend/{contenders}-{:08x}", rand::random::<u32>());
    let config = LeaseConfig::with_ttl(ttl);
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..contenders {
        let lease = Lease::new(
            Arc::new(counting.clone()),
            key.clone(),
            format!("contender-{c}"),
            config.clone(),
        )?;
        tasks.push(tokio::spawn(async move {
            let mut count = 0u64;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match lease
                    .acquire(AcquireOptions::default().deadline(left))
                    .await
                {
                    Ok(guard) => {
                        tokio::time::sleep(WORK).await;
                        guard.release().await?;
                        count += 1;
                    }
                    Err(LeaseError::DeadlineExceeded(_)) => break,
                    Err(err) => return Err(anyhow::Error::from(err)),
                }
            }
            anyhow::Ok(count)
        }));
    }
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await?? as f64);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let acquisitions = counts.iter().sum::<f64>() as u64;
    Ok(ContentionRow {
        system: system.to_string(),
        contenders,
        rate: acquisitions as f64 / elapsed,
        requests_per_acquisition: counting.counts().total() as f64 / acquisitions.max(1) as f64,
        fairness: jain(&counts),
        acquisitions,
    })
}

/// The report's part.
pub fn section(rows: &[ContentionRow], ttl: Duration, duration: Duration) -> Result<Section> {
    let config = LeaseConfig::with_ttl(ttl);
    let mut md = String::from("## Contention\n\n");
    md.push_str(&format!(
        "N contenders in one process, each with its own `Lease` on one key (TTL {} s, so \
         `retry_period` = {} ms), loop for {} s: acquire (waiting), hold for {} ms of work, \
         release. Requests per acquisition include every poll of the waiters. Fairness is Jain's \
         index over acquisitions per contender (1 = equal shares, 1/N = one contender gets \
         everything).\n\n",
        ttl.as_secs(),
        config.retry_period.as_millis(),
        duration.as_secs(),
        WORK.as_millis()
    ));
    md.push_str("| backend | N | acquisitions | acquisitions/s | requests / acquisition | Jain's fairness |\n|---|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.3} |\n",
            r.system, r.contenders, r.acquisitions, r.rate, r.requests_per_acquisition, r.fairness
        ));
    }
    md.push_str(
        "\nFairness is low by design of the waiting, not by accident: waiters poll every \
         `retry_period` (jittered), and nothing queues them. A contender that releases and at \
         once tries again reads the released record and wins before any waiter's next poll, so \
         the same few contenders take most turns. Applications that need turns should hold \
         off after a release (or use an election, which hands over deliberately).\n",
    );
    let poll_per_s = |n: usize| n as f64 / config.retry_period.as_secs_f64();
    md.push_str(&format!(
        "\nWaiting contenders poll: N GETs per `retry_period`, {:.0} GET/s at N = 64 with this \
         TTL ({:.0} GET/s at N = 64 with the default 15 s TTL). S3 documents 5,500 GET/s per \
         prefix, so S3 tolerates thousands of waiters per lock; GCS and Azure bill each poll like \
         S3 does (see the cost table), and a store that throttles reads per object (check the \
         conformance `throttle` probe) sets the limit. The releases and acquisitions themselves \
         are writes to one object: published measurements put S3 at about 15 conditional writes per \
         second on one object, Azure at about 10 and GCS at about 1 (its documented limit), which \
         caps acquisitions/s on one key there far below the loopback figures above.\n\n",
        poll_per_s(64),
        64.0 / LeaseConfig::default().retry_period.as_secs_f64()
    ));
    let mut systems: Vec<String> = rows.iter().map(|r| r.system.clone()).collect();
    systems.dedup();
    let series: Vec<(String, Vec<(f64, f64)>)> = systems
        .iter()
        .map(|s| {
            (
                s.clone(),
                rows.iter()
                    .filter(|r| &r.system == s)
                    .map(|r| (r.contenders as f64, r.rate))
                    .collect(),
            )
        })
        .collect();
    let svg = plot::lines(
        "Acquisitions per second on one key",
        "contenders",
        "acquisitions/s",
        &series,
    )?;
    md.push_str("![Contention](performance/contention.svg)\n\n");
    Ok(Section {
        markdown: md,
        svgs: vec![("contention.svg".into(), svg)],
        headlines: Vec::new(),
    })
}
