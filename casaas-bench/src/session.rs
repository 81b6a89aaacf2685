//! Many locks under one session: what holding them costs (only the
//! heartbeat writes), and how long a waiting contender takes to hold a lock
//! after the process holding its session stops.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use casaas_core::CasStore;
use casaas_core::lease::{Lease, LeaseConfig, LeaseGuard, Session, WaitOptions};
use casaas_core::testkit::{CountingStore, RequestCounts};
use futures::StreamExt;

use crate::section::{Section, ms};
use crate::stats::percentile;

/// Locks acquired at once.
const CONCURRENCY: usize = 64;

/// One backend's figures for locks held under one session.
#[derive(Debug)]
pub struct SessionRow {
    /// Backend name.
    pub system: String,
    /// Locks held under the session.
    pub locks: usize,
    /// How long they were held after the last was acquired.
    pub hold: Duration,
    /// Time to acquire all of them.
    pub acquire_time: Duration,
    /// Requests sent while holding.
    pub held_requests: RequestCounts,
    /// Locks no longer held at the end of the hold.
    pub lost: usize,
    /// Writes per lock per held hour.
    pub writes_per_lock_hour: f64,
    /// Requests to close the session (ending every lock).
    pub close_requests: u64,
}

/// Holds `locks` locks under one session of `ttl` on `store` for `hold`.
pub async fn run(
    system: &str,
    store: Arc<dyn CasStore>,
    locks: usize,
    ttl: Duration,
    hold: Duration,
) -> Result<SessionRow> {
    let counting = CountingStore::new(store);
    let store: Arc<dyn CasStore> = Arc::new(counting.clone());
    let config = LeaseConfig::from_ttl(ttl);
    let heartbeat = Lease::new(
        store,
        "bench/sessions/holder",
        "bench-session",
        config.clone(),
    )?;
    let session = Session::open(
        heartbeat,
        WaitOptions::default().with_deadline(Duration::from_secs(120)),
    )
    .await?;
    let leases: Vec<Lease> = (0..locks)
        .map(|i| session.lease(format!("bench/session-locks/{i:06}")))
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let guards: Vec<LeaseGuard> = futures::stream::iter(leases.iter())
        .map(|lease| lease.acquire(WaitOptions::default().with_deadline(Duration::from_secs(120))))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let acquire_time = started.elapsed();
    eprintln!(
        "bench: session {system}: {locks} locks acquired in {:.1} s; holding {} s",
        acquire_time.as_secs_f64(),
        hold.as_secs()
    );
    let before = counting.counts();
    tokio::time::sleep(hold).await;
    let held_requests = since(&before, &counting.counts());
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    if session.held_locks() + lost != locks {
        bail!(
            "the session counts {} locks held, but {} of {locks} guards are",
            session.held_locks(),
            locks - lost
        );
    }
    let before = counting.counts();
    session.close().await?;
    let close_requests = since(&before, &counting.counts()).total();
    let hours = hold.as_secs_f64() / 3600.0;
    Ok(SessionRow {
        system: system.to_string(),
        locks,
        hold,
        acquire_time,
        writes_per_lock_hour: held_requests.writes() as f64 / locks as f64 / hours,
        held_requests,
        lost,
        close_requests,
    })
}

fn since(before: &RequestCounts, after: &RequestCounts) -> RequestCounts {
    RequestCounts {
        get: after.get - before.get,
        create: after.create - before.create,
        replace: after.replace - before.replace,
        delete: after.delete - before.delete,
        list: after.list - before.list,
    }
}

/// Failover of a lock held under a session whose process stopped.
#[derive(Debug)]
pub struct SessionFailover {
    /// Backend name.
    pub system: String,
    /// Stop of the session's heartbeat → the waiting contender holds, ms.
    pub samples: Vec<f64>,
    /// The bound: `failover_bound` with the p99 of a GET and of a
    /// conditional write, plus the extra read and write a session lock's
    /// takeover makes (the heartbeat, then the term-ending write), ms.
    pub bound_ms: f64,
}

/// `trials` failovers at once (each its own session and lock): a session
/// holding one lock stops heartbeating (as a crashed process does) while
/// another session's lease waits for the lock in `acquire`.
pub async fn failover(
    system: &str,
    store: Arc<dyn CasStore>,
    trials: usize,
    ttl: Duration,
) -> Result<SessionFailover> {
    let config = LeaseConfig::from_ttl(ttl);
    let (read, write) = request_p99(&store).await?;
    let extra = read + write;
    let bound = config.failover_bound(read, write) + extra;
    let runs = (0..trials).map(|trial| {
        let store = store.clone();
        let config = config.clone();
        async move { failover_trial(store, config, trial).await }
    });
    let samples: Vec<f64> = futures::stream::iter(runs)
        .buffer_unordered(trials.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    Ok(SessionFailover {
        system: system.to_string(),
        samples,
        bound_ms: bound.as_secs_f64() * 1e3,
    })
}

async fn failover_trial(
    store: Arc<dyn CasStore>,
    config: LeaseConfig,
    trial: usize,
) -> Result<f64> {
    let open = |owner: String| {
        let lease = Lease::new(
            store.clone(),
            format!("bench/session-failover/{trial}/{owner}"),
            owner,
            config.clone(),
        );
        async move {
            Session::open(
                lease?,
                WaitOptions::default().with_deadline(Duration::from_secs(60)),
            )
            .await
        }
    };
    let key = format!("bench/session-failover/{trial}/lock");
    let holder = open("holder".into()).await?;
    let held = holder
        .lease(key.as_str())?
        .try_acquire()
        .await?
        .into_result()
        .map_err(|by| anyhow::anyhow!("lock {key} already held by {}", by.owner))?;
    let contender = open("contender".into()).await?;
    let lease = contender.lease(key.as_str())?;
    let waiting = tokio::spawn(async move {
        let guard = lease
            .acquire(WaitOptions::default().with_deadline(Duration::from_secs(120)))
            .await;
        (guard, Instant::now())
    });
    // Let the contender start watching, at a phase of the heartbeat that
    // differs between trials.
    tokio::time::sleep(
        config
            .renew_interval
            .mul_f64(1.0 + trial as f64 / 7.0 % 1.0),
    )
    .await;
    let stopped = Instant::now();
    holder.abandon();
    drop(held);
    let (guard, at) = waiting.await.context("the waiting contender panicked")?;
    let guard = guard?;
    let taken_ms = at.duration_since(stopped).as_secs_f64() * 1e3;
    guard.release().await?;
    contender.close().await?;
    Ok(taken_ms)
}

/// p99 of a GET and of a conditional write on `store`, from 20 of each.
async fn request_p99(store: &Arc<dyn CasStore>) -> Result<(Duration, Duration)> {
    let key = "bench/session-failover/latency";
    let mut version = match store.get(key).await? {
        Some(object) => object.version,
        None => store.create(key, bytes::Bytes::from_static(b"0")).await?,
    };
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let t = Instant::now();
        store.get(key).await?;
        reads.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        version = store
            .replace(key, &version, bytes::Bytes::from(i.to_string()))
            .await?;
        writes.push(t.elapsed().as_secs_f64());
    }
    Ok((
        Duration::from_secs_f64(percentile(&reads, 99.0)),
        Duration::from_secs_f64(percentile(&writes, 99.0)),
    ))
}

/// The report's part: locks held under a session, and its failover.
pub fn section(
    rows: &[SessionRow],
    failovers: &[SessionFailover],
    ttl: Duration,
    failover_ttl: Duration,
) -> Section {
    let config = LeaseConfig::from_ttl(ttl);
    let mut md = String::from("## Many locks under one session\n\n");
    md.push_str(&format!(
        "One process opens a `Session` (TTL {} s: its heartbeat renews every {:.0} s) and \
         acquires N locks under it ({CONCURRENCY} acquisitions in flight), then holds them. A lock \
         under a session is never rewritten while held, so the heartbeat is the only request while \
         holding, whatever N (docs/protocol.md, *Sessions*). Lost counts the locks whose guard was \
         no longer held at the end; closing the session ends every lock with one write.\n\n",
        ttl.as_secs(),
        config.renew_interval.as_secs_f64()
    ));
    md.push_str("| backend | locks | held for s | acquire all, s | requests while held | writes per lock-hour | lost | requests to close |\n|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} writes, {} reads | {:.4} | {} | {} |\n",
            r.system,
            r.locks,
            r.hold.as_secs(),
            r.acquire_time.as_secs_f64(),
            r.held_requests.writes(),
            r.held_requests.get,
            r.writes_per_lock_hour,
            r.lost,
            r.close_requests
        ));
    }
    md.push('\n');
    if !failovers.is_empty() {
        md.push_str(&format!(
            "Failover of a lock under a session (TTL {} s): the process holding the session stops \
             heartbeating while another session's lease waits for the lock in `acquire`; the time \
             from the stop until the contender holds. The bound is `failover_bound` with the \
             store's p99 GET and conditional write, plus the heartbeat read and the term-ending \
             write a session lock's takeover adds.\n\n\
             | backend | trials | p50 ms | p99 ms | max ms | bound ms | within bound |\n|---|---|---|---|---|---|---|\n",
            failover_ttl.as_secs()
        ));
        for f in failovers {
            let max = f.samples.iter().copied().fold(0.0, f64::max);
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                f.system,
                f.samples.len(),
                ms(percentile(&f.samples, 50.0)),
                ms(percentile(&f.samples, 99.0)),
                ms(max),
                ms(f.bound_ms),
                if max <= f.bound_ms { "yes" } else { "**no**" }
            ));
        }
        md.push('\n');
    }
    let mut headlines = Vec::new();
    if let Some(r) = rows
        .iter()
        .filter(|r| r.system != "ceph")
        .max_by_key(|r| r.locks)
    {
        headlines.push(format!(
            "session_locks={} session_writes_per_lock_hour={:.4} session_locks_lost={}",
            r.locks, r.writes_per_lock_hour, r.lost
        ));
    }
    if let Some(worst) = failovers
        .iter()
        .map(|f| {
            let max = f.samples.iter().copied().fold(0.0, f64::max);
            max / f.bound_ms
        })
        .reduce(f64::max)
    {
        headlines.push(format!("session_failover_max_over_bound={worst:.2}"));
    }
    Section {
        markdown: md,
        svgs: Vec::new(),
        headlines,
    }
}
