//! Handoff latency: how long a lock released gracefully stays free before
//! a waiting contender holds it, with the default waiting, with the poll
//! tied to `retry_period` as it used to be, and with fair turns, measured
//! side by side on one store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use casaas_core::CasStore;
use casaas_core::lease::{FairLease, Lease, LeaseConfig, LeaseError, LeaseGuard, WaitOptions};

use crate::section::{Section, ms};
use crate::stats::{Summary, summarize};

/// The TTL of the handoff runs: the library's and `casaas lock`'s default.
pub const HANDOFF_TTL: Duration = Duration::from_secs(15);

/// Contenders waiting while the lock is held, in each round.
const WAITERS: usize = 2;

/// How long the holder keeps the lock before releasing it: at least long
/// enough for the waiters to be polling, and spread over more than one
/// poll of the slowest mode, so that a release meets every phase of it.
const HOLD_MIN: Duration = Duration::from_millis(200);
const HOLD_SPREAD_MS: u64 = 1_600;

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
        let config = LeaseConfig::from_ttl(HANDOFF_TTL);
        match self {
            Waiting::RetryPeriod => {
                let retry = config.retry_period;
                config.with_poll_period(retry)
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

/// A contender's way to acquire, in one of the modes.
enum Taker {
    Plain(Lease),
    Fair(FairLease),
}

impl Taker {
    fn new(store: &Arc<dyn CasStore>, key: &str, owner: String, waiting: Waiting) -> Result<Self> {
        let lease = Lease::new(store.clone(), key, owner, waiting.config())?;
        Ok(match waiting {
            Waiting::Fair => Taker::Fair(FairLease::new(lease)?),
            Waiting::Default | Waiting::RetryPeriod => Taker::Plain(lease),
        })
    }

    async fn acquire(&self) -> Result<LeaseGuard, LeaseError> {
        let options = WaitOptions::default().with_deadline(HANDOFF_TTL * 4);
        match self {
            Taker::Plain(lease) => lease.acquire(options).await,
            Taker::Fair(fair) => fair.acquire(options).await,
        }
    }
}

/// Runs rounds for `duration` on one key of `store`: a holder takes the lock,
/// [`WAITERS`] contenders start waiting for it, and after a random hold
/// the holder releases. A sample is the time from the start of the release
/// (its write included) to the moment the first waiter holds the lock.
pub async fn run(
    system: &str,
    store: Arc<dyn CasStore>,
    waiting: Waiting,
    duration: Duration,
) -> Result<HandoffRow> {
    let key = format!("bench/handoff/{:08x}", rand::random::<u32>());
    let mut samples = Vec::new();
    let started = Instant::now();
    for round in 0.. {
        if started.elapsed() >= duration {
            break;
        }
        let holder = Taker::new(&store, &key, format!("holder-{round}"), waiting)?;
        let held = holder.acquire().await?;
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        for w in 0..WAITERS {
            let waiter = Taker::new(&store, &key, format!("waiter-{round}-{w}"), waiting)?;
            let sender = sender.clone();
            tokio::spawn(async move {
                let acquired = waiter.acquire().await;
                let _ = sender.send((Instant::now(), acquired));
            });
        }
        drop(sender);
        let hold = HOLD_MIN + Duration::from_millis(rand::random::<u64>() % HOLD_SPREAD_MS);
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        crate::contention::release(held).await?;
        // Each waiter in turn: the first gives the sample, the others
        // follow once it has released.
        let mut first = true;
        while let Some((at, acquired)) = receiver.recv().await {
            let guard = acquired?;
            if first {
                samples.push(at.duration_since(released).as_secs_f64() * 1e3);
                first = false;
            }
            crate::contention::release(guard).await?;
        }
    }
    Ok(HandoffRow {
        system: system.to_string(),
        waiting,
        latency: summarize(&samples),
    })
}

/// The report's part.
pub fn section(rows: &[HandoffRow], duration: Duration) -> Section {
    let config = LeaseConfig::from_ttl(HANDOFF_TTL);
    let mut md = String::from("## Handoff after a graceful release\n\n");
    md.push_str(&format!(
        "Rounds for {} s per mode, the modes one after another on each store (TTL {} s: \
         `retry_period` {} ms, `poll_period` {} ms): a holder takes the lock, {WAITERS} \
         contenders start waiting for it, and after {}–{} ms (spread over more than one poll \
         of the slowest mode) the holder releases. A sample is the time from the start of the \
         release (its write included) to the moment the first waiter holds the lock: what a \
         `flock` user would see as the lock sitting idle. \"poll = retry_period\" is the \
         waiting as it was before the poll period had a setting of its own.\n\n",
        duration.as_secs(),
        HANDOFF_TTL.as_secs(),
        config.retry_period.as_millis(),
        config.poll_period.as_millis(),
        HOLD_MIN.as_millis(),
        HOLD_MIN.as_millis() + u128::from(HOLD_SPREAD_MS),
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
