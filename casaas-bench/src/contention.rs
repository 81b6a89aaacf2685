//! Contention: N contenders on one key, each taking the lock, doing short
//! work and releasing: with `Lease::acquire` for a fixed time, and with fair
//! turns (`FairLease::acquire`) for a fixed number of turns each.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use casaas_core::CasStore;
use casaas_core::lease::WaitOptions;
use casaas_core::lease::{FairLease, Lease, LeaseConfig, LeaseError};
use casaas_core::testkit::CountingStore;

use crate::plot;
use crate::section::Section;
use crate::stats::jain;

/// The work done while holding.
pub const WORK: Duration = Duration::from_millis(10);

/// A fair row ends when the first contender has had this many turns: in
/// first-come-first-served order every other contender then has had as
/// many or one fewer, where a barging lock would have given some none.
/// (A row of fixed time would end in a different round for each N.)
pub const FAIR_TURNS: u64 = 4;

/// The longest a fair row may take.
pub const FAIR_TIME_CAP: Duration = Duration::from_secs(180);

/// One (backend, mode, N) run.
#[derive(Debug)]
pub struct ContentionRow {
    /// Backend.
    pub system: String,
    /// Fair turns (`FairLease`) rather than `Lease::acquire`.
    pub fair: bool,
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
    let config = LeaseConfig::from_ttl(ttl);
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
            while let Some(guard) = take(&lease, None, deadline).await? {
                tokio::time::sleep(WORK).await;
                release(guard).await?;
                count += 1;
            }
            anyhow::Ok(count)
        }));
    }
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await?? as f64);
    }
    Ok(row(system, false, &counting, &counts, started))
}

/// Runs `contenders` with fair turns on one key of `store` until the first
/// has had [`FAIR_TURNS`] turns (or [`FAIR_TIME_CAP`] passed): a contender
/// that released asks again at once, and goes to the back of the queue.
/// The turns are counted at that moment, and the others stopped.
pub async fn run_fair(
    system: &str,
    store: Arc<dyn CasStore>,
    contenders: usize,
    ttl: Duration,
) -> Result<ContentionRow> {
    let counting = CountingStore::new(store);
    let key = format!(
        "bench/contend-fair/{contenders}-{:08x}",
        rand::random::<u32>()
    );
    let config = LeaseConfig::from_ttl(ttl);
    let deadline = Instant::now() + FAIR_TIME_CAP;
    let started = Instant::now();
    let turns: Arc<Vec<AtomicU64>> = Arc::new((0..contenders).map(|_| AtomicU64::new(0)).collect());
    let first_done = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for c in 0..contenders {
        let lease = Lease::new(
            Arc::new(counting.clone()),
            key.clone(),
            format!("contender-{c}"),
            config.clone(),
        )?;
        let fair = FairLease::new(lease)?;
        let (turns, first_done) = (turns.clone(), first_done.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(guard) = take(fair.lease(), Some(&fair), deadline).await? {
                tokio::time::sleep(WORK).await;
                release(guard).await?;
                if turns[c].fetch_add(1, Ordering::SeqCst) + 1 == FAIR_TURNS {
                    first_done.notify_one();
                }
            }
            anyhow::Ok(())
        }));
    }
    tokio::select! {
        () = first_done.notified() => {}
        () = tokio::time::sleep(FAIR_TIME_CAP) => {}
    }
    let counts: Vec<f64> = turns
        .iter()
        .map(|t| t.load(Ordering::SeqCst) as f64)
        .collect();
    let row = row(system, true, &counting, &counts, started);
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        match task.await {
            Ok(finished) => finished?,
            Err(err) if err.is_cancelled() => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(row)
}

/// Releases `guard`. A holder found superseded when it releases had its
/// lease taken over (it was stalled past its TTL: the file store's lock
/// waits under load, a loaded machine): the protocol did its job, so the
/// run goes on and the loss is logged, not fatal.
pub async fn release(guard: casaas_core::lease::LeaseGuard) -> Result<()> {
    let token = guard.token();
    match guard.release().await {
        Ok(()) => Ok(()),
        Err(LeaseError::Lost(reason)) => {
            eprintln!("bench: a holder (token {token}) lost its lease before releasing: {reason}");
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}

/// One acquisition before `deadline` (fair when `fair` is given); `None`
/// once the deadline passed.
async fn take(
    lease: &Lease,
    fair: Option<&FairLease>,
    deadline: Instant,
) -> Result<Option<casaas_core::lease::LeaseGuard>> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Ok(None);
    }
    let options = WaitOptions::default().with_deadline(left);
    let acquired = match fair {
        Some(fair) => fair.acquire(options).await,
        None => lease.acquire(options).await,
    };
    match acquired {
        Ok(guard) => Ok(Some(guard)),
        Err(LeaseError::DeadlineExceeded(_)) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// The row of a run from its acquisitions per contender.
fn row(
    system: &str,
    fair: bool,
    counting: &CountingStore<Arc<dyn CasStore>>,
    counts: &[f64],
    started: Instant,
) -> ContentionRow {
    let elapsed = started.elapsed().as_secs_f64();
    let acquisitions = counts.iter().sum::<f64>() as u64;
    ContentionRow {
        system: system.to_string(),
        fair,
        contenders: counts.len(),
        rate: acquisitions as f64 / elapsed,
        requests_per_acquisition: counting.counts().total() as f64 / acquisitions.max(1) as f64,
        fairness: jain(counts),
        acquisitions,
    }
}

/// The report's part.
pub fn section(rows: &[ContentionRow], ttl: Duration, duration: Duration) -> Result<Section> {
    let config = LeaseConfig::from_ttl(ttl);
    let mut md = String::from("## Contention\n\n");
    md.push_str(&format!(
        "N contenders in one process, each with its own `Lease` on one key (TTL {} s, so \
         `retry_period` = {} ms and `poll_period` = {} ms), loop for {} s: acquire (waiting), \
         hold for {} ms of work, release. Requests per acquisition include every poll of the waiters. Fairness is Jain's \
         index over acquisitions per contender (1 = equal shares, 1/N = one contender gets \
         everything).\n\n",
        ttl.as_secs(),
        config.retry_period.as_millis(),
        config.poll_period.as_millis(),
        duration.as_secs(),
        WORK.as_millis()
    ));
    md.push_str(&format!(
        "Fair rows (`FairLease::acquire`, same TTL and work): every contender asks again at \
         once after each release, taking a ticket at the back of the queue, and the row ends \
         when the first contender has had {FAIR_TURNS} turns (Jain's index is taken then: in \
         arrival order every other contender has had {FAIR_TURNS} or {} by that moment). Their \
         requests include the tickets (list, read, create, renewals, delete) and the waiters' \
         reads of the ticket before theirs.\n\n",
        FAIR_TURNS - 1
    ));
    md.push_str("| backend | waiting | N | acquisitions | acquisitions/s | requests / acquisition | Jain's fairness |\n|---|---|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.3} |\n",
            r.system,
            if r.fair { "fair" } else { "acquire" },
            r.contenders,
            r.acquisitions,
            r.rate,
            r.requests_per_acquisition,
            r.fairness
        ));
    }
    md.push_str(
        "\nWithout fair turns, fairness is low by design of the waiting, not by accident: waiters \
         poll every `poll_period` (jittered), and nothing queues them. A contender that releases \
         and at once tries again replaces its own released record with one write and wins \
         before any waiter's next poll, so the same few contenders take most turns. \
         Applications that need turns use `FairLease` (the fair rows), hold off after a \
         release, or use an election, which hands over deliberately.\n",
    );
    let poll_per_s = |n: usize| n as f64 / config.poll_period.as_secs_f64();
    md.push_str(&format!(
        "\nWaiting contenders poll: N GETs per `poll_period`, {:.0} GET/s at N = 64 with this \
         TTL ({:.0} GET/s at N = 64 with the default 15 s TTL; with fair turns the same reads \
         go to N different tickets, one of them the lock). S3 documents 5,500 GET/s per \
         prefix, so S3 tolerates thousands of waiters per lock; GCS and Azure bill each poll like \
         S3 does (see the cost table), and a store that throttles reads per object (check the \
         conformance `throttle` probe) sets the limit. The releases and acquisitions themselves \
         are writes to one object: published measurements put S3 at about 15 conditional writes per \
         second on one object, Azure at about 10 and GCS at about 1 (its documented limit), which \
         caps acquisitions/s on one key there far below the loopback figures above.\n\n",
        poll_per_s(64),
        64.0 / LeaseConfig::default().poll_period.as_secs_f64()
    ));
    let mut systems: Vec<(String, bool)> =
        rows.iter().map(|r| (r.system.clone(), r.fair)).collect();
    systems.dedup();
    let series: Vec<(String, Vec<(f64, f64)>)> = systems
        .iter()
        .map(|(s, fair)| {
            (
                if *fair {
                    format!("{s} fair")
                } else {
                    s.clone()
                },
                rows.iter()
                    .filter(|r| &r.system == s && r.fair == *fair)
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
        headlines: fair_jain_min(rows).into_iter().collect(),
    })
}

/// `fair_jain_min=J`: the lowest Jain index over the fair rows.
fn fair_jain_min(rows: &[ContentionRow]) -> Option<String> {
    rows.iter()
        .filter(|r| r.fair)
        .map(|r| r.fairness)
        .reduce(f64::min)
        .map(|j| format!("fair_jain_min={j:.3}"))
}
