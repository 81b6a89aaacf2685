//! Handoff latency: how long a lock released gracefully stays free before
//! a waiting contender holds it, with the default waiting, with the poll
//! tied to `retry_period` as it used to be, and with fair turns, measured
//! side by side on one store.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use casaas_core::CasStore;
use casaas_core::lease::{AcquireOptions, FairLease, Lease, LeaseConfig, LeaseError, LeaseGuard};

use crate::section::{Section, ms};
use crate::stats::{Summary, summarize};

/// The TTL of the handoff runs: the library's and `casaas lock`'s default.
pub const HANDOFF_TTL: Duration = Duration::from_secs(15);

/// Contenders taking turns.
const CONTENDERS: usize = 4;

/// The work done while holding.
const WORK: Duration = Duration::from_millis(10);

/// How long a releaser stays away before asking again, so that the next
/// holder is a waiter rather than the releaser barging back in.
const AWAY: Duration = Duration::from_millis(300);

/// How a contender waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// `Lease::acquire` with the default `poll_period`.
    Default,
    /// `Lease::acquire` with `poll_period = retry_period`, as before the
    /// poll period was a setting of its own.
    RetryPeriod,
    /// `FairLease::acquire`.
    Fair,
}

impl Waiting {
    /// Every mode, in the order of the table.
    pub const ALL: [Waiting; 3] = [Waiting::Default, Waiting::Fair, Waiting::RetryPeriod];

    /// The table's label.
    pub fn label(self) -> &'static str {
        match self {
            Waiting::Default => "default (poll_period)",
            Waiting::RetryPeriod => "poll = retry_period (before)",
            Waiting::Fair => "fair turns",
        }
    }

    fn config(self) -> LeaseConfig {
        let config = LeaseConfig::with_ttl(HANDOFF_TTL);
        match self {
            Waiting::RetryPeriod => {
                let retry = config.retry_period;
                config.poll_period(retry)
            }
            Waiting::Default | Waiting::Fair => config,
        }
    }
}

/// One (store, mode) run.
#[derive(Debug)]
pub struct HandoffRow {
    /// Backend.
    pub system: String,
    /// How contenders waited.
    pub waiting: Waiting,
    /// Handoff latency, ms.
    pub latency: Summary,
}

/// The last release: who released and when it started.
type LastRelease = Arc<Mutex<Option<(usize, Instant)>>>;

/// A contender's way to acquire, in one of the modes.
enum Taker {
    Plain(Lease),
    Fair(FairLease),
}

impl Taker {
    async fn acquire(&self, options: AcquireOptions) -> Result<LeaseGuard, LeaseError> {
        match self {
            Taker::Plain(lease) => lease.acquire(options).await,
            Taker::Fair(fair) => fair.acquire(options).await,
        }
    }
}

/// Runs `CONTENDERS` on one key of `store` for `duration`: each acquires,
/// works, releases and stays away for a while. A sample is the time from
/// the start of a release (its write included) to the moment a contender
/// that was already waiting holds the lock.
pub async fn run(
    system: &str,
    store: Arc<dyn CasStore>,
    waiting: Waiting,
    duration: Duration,
) -> Result<HandoffRow> {
    let key = format!("bench/handoff/{:08x}", rand::random::<u32>());
    let last: LastRelease = Arc::default();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for c in 0..CONTENDERS {
        let lease = Lease::new(
            store.clone(),
            key.clone(),
            format!("contender-{c}"),
            waiting.config(),
        )?;
        let taker = match waiting {
            Waiting::Fair => Taker::Fair(FairLease::new(lease)?),
            Waiting::Default | Waiting::RetryPeriod => Taker::Plain(lease),
        };
        let (last, samples) = (last.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            contend(c, taker, last, samples, end).await
        }));
    }
    for task in tasks {
        task.await??;
    }
    let samples = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(HandoffRow {
        system: system.to_string(),
        waiting,
        latency: summarize(&samples),
    })
}

async fn contend(
    me: usize,
    taker: Taker,
    last: LastRelease,
    samples: Arc<Mutex<Vec<f64>>>,
    end: Instant,
) -> Result<()> {
    loop {
        let asked = Instant::now();
        let left = end.saturating_duration_since(asked);
        if left.is_zero() {
            return Ok(());
        }
        let guard = match taker
            .acquire(AcquireOptions::default().deadline(left))
            .await
        {
            Ok(guard) => guard,
            Err(LeaseError::DeadlineExceeded(_)) => return Ok(()),
            Err(err) => return Err(err.into()),
        };
        let held = Instant::now();
        let previous = *last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((releaser, released)) = previous
            && releaser != me
            && asked < released
        {
            samples
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(held.duration_since(released).as_secs_f64() * 1e3);
        }
        tokio::time::sleep(WORK).await;
        *last.lock().unwrap_or_else(|p| p.into_inner()) = Some((me, Instant::now()));
        crate::contention::release(guard).await?;
        tokio::time::sleep(AWAY).await;
    }
}

/// The report's part.
pub fn section(rows: &[HandoffRow], duration: Duration) -> Section {
    let config = LeaseConfig::with_ttl(HANDOFF_TTL);
    let mut md = String::from("## Handoff after a graceful release\n\n");
    md.push_str(&format!(
        "{CONTENDERS} contenders on one key (TTL {} s: `retry_period` {} ms, `poll_period` {} \
         ms), each acquiring, working {} ms, releasing and staying away {} ms, for {} s per \
         mode, the modes one after another on each store. A sample is the time from the start \
         of a release (its write included) to the moment a contender that was already waiting \
         holds the lock: what a `flock` user would see as the lock sitting idle. \"poll = \
         retry_period\" is the waiting as it was before the poll period had a setting of its \
         own.\n\n",
        HANDOFF_TTL.as_secs(),
        config.retry_period.as_millis(),
        config.poll_period.as_millis(),
        WORK.as_millis(),
        AWAY.as_millis(),
        duration.as_secs(),
    ));
    md.push_str(
        "| backend | waiting | handoffs | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.system,
            r.waiting.label(),
            r.latency.n,
            ms(r.latency.p50),
            ms(r.latency.p99),
            ms(r.latency.max),
        ));
    }
    md.push_str(&format!(
        "\nA waiter reads the held lock every `poll_period` plus up to a fifth of it, so a release \
         is seen half a poll later on average and 1.2 polls later at worst, then taken with one \
         read and one write. Each poll is one GET: {:.0} GETs per waiting second per waiter at the \
         default. In fair turns only the head of the queue polls the lock; the others poll the \
         ticket before theirs, at the same period.\n\n",
        1.0 / config.poll_period.as_secs_f64()
    ));
    Section {
        markdown: md,
        svgs: Vec::new(),
        headlines: Vec::new(),
    }
}
