//! Many leases held by one process: missed renewals, renewal jitter, CPU
//! time per renewal, resident memory per lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::WaitOptions;
use casaas_core::lease::{Lease, LeaseConfig, LeaseGuard};
use casaas_core::{CasError, CasStore, ForwardingStore, Version};
use futures::StreamExt;

use crate::section::{Section, ms};
use crate::stats::percentile;

/// Leases acquired (and released) at once.
const CONCURRENCY: usize = 64;

/// Records when each renewal (a successful replace) of each key was sent.
#[derive(Debug)]
struct RenewRecorder {
    inner: Arc<dyn CasStore>,
    last: HashMap<String, Mutex<Option<Instant>>>,
    intervals: Mutex<Vec<f64>>,
    renewals: AtomicU64,
    failures: AtomicU64,
    /// Failed renewal requests by error kind, for the "why" column.
    failure_kinds: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl RenewRecorder {
    fn stamp(&self, key: &str, sent: Instant, renewal: bool) {
        let Some(slot) = self.last.get(key) else {
            return;
        };
        let mut last = slot.lock().unwrap_or_else(|p| p.into_inner());
        if renewal && let Some(previous) = *last {
            self.intervals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(sent.duration_since(previous).as_secs_f64() * 1e3);
        }
        *last = Some(sent);
    }
}

#[async_trait]
impl ForwardingStore for RenewRecorder {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let sent = Instant::now();
        let version = self.inner.create(key, body).await?;
        self.stamp(key, sent, false);
        Ok(version)
    }
    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let sent = Instant::now();
        match self.inner.replace(key, expected, body).await {
            Ok(version) => {
                self.renewals.fetch_add(1, Ordering::Relaxed);
                self.stamp(key, sent, true);
                Ok(version)
            }
            // Only the leases' own replaces are renewals: the store guard's
            // probes (a replace with a stale version, a replace of a missing
            // key) fail on purpose, once per store, under keys of their own.
            Err(err) if !self.last.contains_key(key) => Err(err),
            Err(err) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                *self
                    .failure_kinds
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(format!("{:?}", err.kind()))
                    .or_default() += 1;
                Err(err)
            }
        }
    }
}

/// One backend's figures.
#[derive(Debug)]
pub struct ScaleRow {
    /// Backend name.
    pub system: String,
    /// Leases held.
    pub leases: usize,
    /// How long they were held after the last was acquired.
    pub hold: Duration,
    /// Time to acquire all of them.
    pub acquire_time: Duration,
    /// Renewals observed (whole run).
    pub renewals: u64,
    /// Leases whose last renewal was overdue by more than `retry_period`
    /// when the hold ended.
    pub overdue: u64,
    /// Renewals late by more than `retry_period`, failed renewal requests,
    /// and leases lost.
    pub missed: u64,
    /// Of which leases lost.
    pub lost: u64,
    /// Of which renewals late by more than `retry_period`.
    pub late: u64,
    /// Of which failed renewal requests, by error kind.
    pub failures: std::collections::BTreeMap<String, u64>,
    /// p99 of |renew-to-renew interval − renew_interval|, ms.
    pub jitter_p99_ms: f64,
    /// Largest renew-to-renew interval, ms.
    pub interval_max_ms: f64,
    /// CPU time (user + system) per renewal while holding, µs.
    pub cpu_per_renewal_us: f64,
    /// Resident memory per held lease, bytes.
    pub rss_per_lease: f64,
}

/// User + system CPU time of this process.
#[allow(unsafe_code)]
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is
    // always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Resident set size in bytes (/proc/self/statm, 4 KiB pages).
fn resident_bytes() -> Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .context("statm has no resident field")?
        .parse()?;
    Ok(pages * 4096)
}

/// Holds `leases` leases of `ttl` on `store` for `hold`.
pub async fn run(
    system: &str,
    store: Arc<dyn CasStore>,
    leases: usize,
    ttl: Duration,
    hold: Duration,
) -> Result<ScaleRow> {
    let config = LeaseConfig::from_ttl(ttl);
    let keys: Vec<String> = (0..leases).map(|i| format!("bench/scale/{i:06}")).collect();
    let recorder = Arc::new(RenewRecorder {
        inner: store,
        last: keys.iter().map(|k| (k.clone(), Mutex::new(None))).collect(),
        intervals: Mutex::new(Vec::with_capacity(
            leases
                * (hold.as_secs() as usize / config.renew_interval.as_secs().max(1) as usize + 4),
        )),
        renewals: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        failure_kinds: Mutex::new(Default::default()),
    });
    let handles: Vec<Lease> = keys
        .iter()
        .map(|k| Lease::new(recorder.clone(), k.clone(), "bench-scale", config.clone()))
        .collect::<Result<_, _>>()?;
    let rss_before = resident_bytes()?;
    let started = Instant::now();
    let guards: Vec<LeaseGuard> = futures::stream::iter(handles.iter())
        .map(|lease| lease.acquire(WaitOptions::default().with_deadline(Duration::from_secs(120))))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let acquire_time = started.elapsed();
    let rss_after = resident_bytes()?;
    eprintln!(
        "bench: scale {system}: {leases} leases acquired in {:.1} s; holding {} s",
        acquire_time.as_secs_f64(),
        hold.as_secs()
    );
    let cpu_before = cpu_time();
    let renewals_before = recorder.renewals.load(Ordering::Relaxed);
    tokio::time::sleep(hold).await;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let renewals_held = recorder.renewals.load(Ordering::Relaxed) - renewals_before;
    let now = Instant::now();
    let overdue_after = config.renew_interval + config.retry_period;
    let overdue = recorder
        .last
        .values()
        .filter(|slot| {
            slot.lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none_or(|last| now.duration_since(last) > overdue_after)
        })
        .count() as u64;
    let lost = guards.iter().filter(|g| !g.is_held()).count() as u64;
    let renewals = recorder.renewals.load(Ordering::Relaxed);
    let failures = recorder.failures.load(Ordering::Relaxed);
    let intervals =
        std::mem::take(&mut *recorder.intervals.lock().unwrap_or_else(|p| p.into_inner()));
    let renew_ms = config.renew_interval.as_secs_f64() * 1e3;
    let late_ms = renew_ms + config.retry_period.as_secs_f64() * 1e3;
    let late = intervals.iter().filter(|i| **i > late_ms).count() as u64;
    let deviations: Vec<f64> = intervals.iter().map(|i| (i - renew_ms).abs()).collect();
    futures::stream::iter(guards)
        .map(|g| g.release())
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    Ok(ScaleRow {
        system: system.to_string(),
        leases,
        hold,
        acquire_time,
        renewals,
        overdue,
        missed: late + failures + lost + overdue,
        lost,
        late,
        failures: std::mem::take(
            &mut *recorder
                .failure_kinds
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        ),
        jitter_p99_ms: percentile(&deviations, 99.0),
        interval_max_ms: intervals.iter().copied().fold(0.0, f64::max),
        cpu_per_renewal_us: if renewals_held == 0 {
            f64::NAN
        } else {
            cpu.as_secs_f64() * 1e6 / renewals_held as f64
        },
        rss_per_lease: rss_after.saturating_sub(rss_before) as f64 / leases as f64,
    })
}

/// The causes of a row's missed renewals, e.g. "2 late (longest 6.1 s)",
/// "3 failed: Timeout ×3"; "–" when none missed.
fn why_missed(r: &ScaleRow) -> String {
    let mut why = Vec::new();
    if r.late > 0 {
        why.push(format!(
            "{} late (longest interval {:.1} s)",
            r.late,
            r.interval_max_ms / 1e3
        ));
    }
    if !r.failures.is_empty() {
        let kinds: Vec<String> = r
            .failures
            .iter()
            .map(|(kind, n)| format!("{kind} ×{n}"))
            .collect();
        let total: u64 = r.failures.values().sum();
        why.push(format!("{total} failed: {}", kinds.join(", ")));
    }
    if r.lost > 0 {
        why.push(format!("{} lost", r.lost));
    }
    if r.overdue > 0 {
        why.push(format!("{} overdue at the end", r.overdue));
    }
    if why.is_empty() {
        "–".to_string()
    } else {
        why.join("; ")
    }
}

/// The report's part for all backends.
pub fn section(rows: &[ScaleRow], ttl: Duration) -> Section {
    let config = LeaseConfig::from_ttl(ttl);
    let mut md = String::from("## Many leases in one process\n\n");
    md.push_str(&format!(
        "One process acquires N leases (TTL {} s, so a renewal every {} s per lease; {CONCURRENCY} \
         acquisitions in flight) and holds them. Each lease renews from its own task (one tokio \
         task and one timer per `LeaseGuard`). A renewal counts as missed when it came more than \
         `retry_period` ({} ms) after its due time, when a renewal request failed, when a lease \
         was lost, or when a lease's last renewal was overdue at the end. Jitter is |renew-to-renew interval − {} s| (send times). CPU time is the \
         process's user + system time while holding, per renewal; memory is the growth of the \
         resident set from before the first acquisition to after the last, per lease (it includes \
         this benchmark's own per-key bookkeeping, about 100 bytes).\n\n",
        ttl.as_secs(),
        config.renew_interval.as_secs(),
        config.retry_period.as_millis(),
        config.renew_interval.as_secs()
    ));
    md.push_str("| backend | leases | held for s | acquire all, s | renewals | missed | why missed | jitter p99 ms | longest interval ms | CPU µs / renewal | resident bytes / lease |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {:.0} | {:.0} |\n",
            r.system,
            r.leases,
            r.hold.as_secs(),
            r.acquire_time.as_secs_f64(),
            r.renewals,
            r.missed,
            why_missed(r),
            ms(r.jitter_p99_ms),
            ms(r.interval_max_ms),
            r.cpu_per_renewal_us,
            r.rss_per_lease
        ));
    }
    md.push('\n');
    let mut headlines = Vec::new();
    if let Some(r) = rows
        .iter()
        .filter(|r| r.system != "ceph")
        .max_by_key(|r| (r.leases, r.missed))
    {
        headlines.push(format!("leases={} missed_renewals={}", r.leases, r.missed));
    }
    Section {
        markdown: md,
        svgs: Vec::new(),
        headlines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store guard runs through the recorder (its probes fail on
    /// purpose): none of that is a missed renewal.
    #[tokio::test(start_paused = true)]
    async fn the_store_guards_probes_are_not_missed_renewals() {
        let store: Arc<dyn CasStore> = Arc::new(casaas_core::MemoryStore::new());
        let row = run(
            "memory",
            store,
            8,
            Duration::from_secs(3),
            Duration::from_secs(4),
        )
        .await
        .unwrap();
        assert!(row.renewals >= 8, "{row:?}");
        assert!(row.failures.is_empty(), "{row:?}");
        assert_eq!(row.missed, 0, "{row:?}");
    }
}
