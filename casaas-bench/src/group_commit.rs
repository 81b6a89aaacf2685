//! Group commit against one update per conditional write: 64 updaters of
//! one fenced counter, on a store that admits one conditional write per
//! second per key (as GCS documents) and on stores without that limit.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{FencedResource, GroupCommitConfig, GroupResource};
use casaas_core::{CasError, CasStore, ErrorKind, ForwardingStore, Version};

use crate::section::{Section, ms};
use crate::stats::{Summary, summarize};

/// Concurrent updaters.
pub const UPDATERS: usize = 64;

/// Updates each group-commit updater keeps in flight (queued with
/// `GroupResource::submit`, answered in order). An unbatched updater can
/// only have one: a second conditional write of the same key in flight
/// would race its own first.
pub const DEPTH: usize = 4;

/// The keys this benchmark writes, the ones [`Throttled`] limits.
const KEY_PREFIX: &str = "bench/group-commit/";

/// A store that admits one conditional write per key per `interval` and
/// answers the others as S3 does when a key is written too fast (503
/// SlowDown: nothing written). Only the benchmark's keys are limited: the
/// store guard's probe (a create and a replace of a fresh key each try)
/// would otherwise never pass.
#[derive(Debug)]
pub struct Throttled {
    inner: Arc<dyn CasStore>,
    interval: Duration,
    /// When each key last admitted a write.
    admitted: Mutex<HashMap<String, Instant>>,
}

impl Throttled {
    /// `inner`, admitting one conditional write per key per `interval`.
    pub fn new(inner: Arc<dyn CasStore>, interval: Duration) -> Self {
        Throttled {
            inner,
            interval,
            admitted: Mutex::new(HashMap::new()),
        }
    }

    /// Admits a write to `key` now, or refuses it as a 503 SlowDown.
    fn admit(&self, key: &str) -> Result<(), CasError> {
        if !key.starts_with(KEY_PREFIX) {
            return Ok(());
        }
        let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if let Some(last) = admitted.get(key)
            && now.duration_since(*last) < self.interval
        {
            return Err(CasError::new(
                ErrorKind::Throttled,
                "Please reduce your request rate (one conditional write per second per key)",
            )
            .with_key(key)
            .with_status(503)
            .with_code("SlowDown"));
        }
        admitted.insert(key.to_string(), now);
        Ok(())
    }
}

#[async_trait]
impl ForwardingStore for Throttled {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.admit(key)?;
        self.inner.create(key, body).await
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.admit(key)?;
        self.inner.replace(key, expected, body).await
    }
}

/// How the updaters write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `FencedResource::update`: one conditional write per update.
    Unbatched,
    /// `GroupResource::submit`, [`DEPTH`] updates in flight per updater:
    /// the updates queued while a write is in flight share the next one.
    GroupCommit,
}

impl Mode {
    /// Both, in the order they run.
    pub const ALL: [Mode; 2] = [Mode::Unbatched, Mode::GroupCommit];

    fn label(self) -> &'static str {
        match self {
            Mode::Unbatched => "unbatched",
            Mode::GroupCommit => "group commit",
        }
    }
}

/// One measurement.
#[derive(Debug)]
pub struct Row {
    pub system: String,
    pub mode: Mode,
    pub elapsed: Duration,
    /// Updates answered `Ok`.
    pub ok: u64,
    /// Updates answered with an error (contended, throttled to the end).
    pub errors: u64,
    /// Latency of the `Ok` updates, ms.
    pub latency: Summary,
    /// Updates per write: how many writes carried each batch size.
    pub batches: BTreeMap<usize, u64>,
}

impl Row {
    fn per_second(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }
}

/// What one updater saw.
#[derive(Debug, Default)]
struct Seen {
    latencies: Vec<f64>,
    errors: u64,
    /// The batch size of each batch this updater's update opened (offset 0).
    batches: Vec<usize>,
}

/// Runs [`UPDATERS`] updaters of a fresh counter on `store` for `time`.
pub async fn run(
    system: &str,
    store: Arc<dyn CasStore>,
    mode: Mode,
    time: Duration,
) -> Result<Row> {
    let key = format!("{KEY_PREFIX}{system}/{}", mode.label().replace(' ', "-"));
    let resource = FencedResource::<u64>::new(store, key)?.with_retry_policy(
        casaas_core::lease::RetryPolicy::default()
            .with_request_timeout(Duration::from_secs(10))
            .with_retry_period(Duration::from_millis(100))
            .with_max_attempts(64),
    );
    let group = GroupResource::new(resource.clone(), GroupCommitConfig::default());
    // A server keeps the counter of an earlier run: count from its value.
    let before = resource.read().await?.map_or(0, |f| f.value);
    let started = Instant::now();
    let deadline = started + time;
    let mut tasks = Vec::new();
    for _ in 0..UPDATERS {
        let (resource, group) = (resource.clone(), group.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = Seen::default();
            match mode {
                Mode::Unbatched => {
                    while Instant::now() < deadline {
                        let sent = Instant::now();
                        match resource.update(1, |v| v.copied().unwrap_or(0) + 1).await {
                            Ok(_) => seen.latencies.push(sent.elapsed().as_secs_f64() * 1e3),
                            Err(_) => seen.errors += 1,
                        }
                    }
                }
                Mode::GroupCommit => {
                    // Up to DEPTH tickets, oldest first; those sent before
                    // the deadline are all waited for.
                    let mut in_flight = VecDeque::with_capacity(DEPTH);
                    loop {
                        while in_flight.len() < DEPTH && Instant::now() < deadline {
                            let sent = Instant::now();
                            match group.submit(1, |v| v.copied().unwrap_or(0) + 1).await {
                                Ok(ticket) => in_flight.push_back((sent, ticket)),
                                Err(_) => seen.errors += 1,
                            }
                        }
                        let Some((sent, ticket)) = in_flight.pop_front() else {
                            break;
                        };
                        match ticket.wait().await {
                            Ok(a) => {
                                seen.latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                                seen.batches.extend((a.offset == 0).then_some(a.batch_len));
                            }
                            Err(_) => seen.errors += 1,
                        }
                    }
                }
            }
            seen
        }));
    }
    let mut all = Seen::default();
    for task in tasks {
        let seen = task.await?;
        all.latencies.extend(seen.latencies);
        all.errors += seen.errors;
        all.batches.extend(seen.batches);
    }
    let elapsed = started.elapsed();
    // Nothing may be lost or applied twice: the counter is the updates
    // answered Ok (no update here can end ambiguous: the store refuses
    // writes, it never loses an answer).
    let stored = resource.read().await?.map_or(0, |f| f.value);
    let ok = all.latencies.len() as u64;
    if stored.checked_sub(before) != Some(ok) {
        bail!(
            "{system} {}: {ok} updates answered Ok but the counter went from {before} to {stored}",
            mode.label()
        );
    }
    let mut batches = BTreeMap::new();
    for n in all.batches {
        *batches.entry(n).or_insert(0) += 1;
    }
    Ok(Row {
        system: system.to_string(),
        mode,
        elapsed,
        ok,
        errors: all.errors,
        latency: summarize(&all.latencies),
        batches,
    })
}

/// Batch sizes in ranges: `1:n 2-7:n 8-31:n 32+:n`.
fn distribution(batches: &BTreeMap<usize, u64>) -> String {
    if batches.is_empty() {
        return "–".to_string();
    }
    let mut ranges = [0u64; 4];
    for (size, count) in batches {
        let range = match size {
            0..=1 => 0,
            2..=7 => 1,
            8..=31 => 2,
            _ => 3,
        };
        ranges[range] += count;
    }
    let [one, few, some, many] = ranges;
    format!("1:{one} 2–7:{few} 8–31:{some} 32+:{many}")
}

/// The report's section; `throttled` names the system whose figures make
/// the headline.
pub fn section(rows: &[Row], throttled: &str) -> Section {
    let mut md = String::new();
    let _ = writeln!(md, "## Group commit\n");
    let _ = writeln!(
        md,
        "{UPDATERS} updaters increment one `FencedResource<u64>`. *unbatched*: `FencedResource::update`, one conditional \
         write per update; each updater waits for its update before sending the next (one conditional write in flight \
         per updater is all it can have: a second write of the same key would race its own first). *group commit*: \
         `GroupResource::submit`, each updater keeps {DEPTH} updates in flight (tickets answered in order, a new one \
         queued as the oldest is answered), and the updates queued while a write is in flight share the next one. \
         `{throttled}` admits one conditional write \
         per second per key and refuses the others with 503 SlowDown (GCS's documented limit). Each run checks that the \
         stored counter grew by exactly the updates answered `Ok`.\n"
    );
    let _ = writeln!(
        md,
        "| store | mode | s | updates/s | ok | errors | p50 ms | p99 ms | writes by updates carried |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.1} | {} | {} | {} | {} | {} |",
            r.system,
            r.mode.label(),
            r.elapsed.as_secs_f64(),
            r.per_second(),
            r.ok,
            r.errors,
            ms(r.latency.p50),
            ms(r.latency.p99),
            distribution(&r.batches),
        );
    }
    let rate = |mode: Mode| {
        rows.iter()
            .find(|r| r.system == throttled && r.mode == mode)
            .map(Row::per_second)
    };
    let mut headlines = Vec::new();
    if let (Some(grouped), Some(unbatched)) = (rate(Mode::GroupCommit), rate(Mode::Unbatched)) {
        headlines.push(format!(
            "group_commit_updates_per_s={grouped:.1} unbatched_updates_per_s={unbatched:.2} updaters={UPDATERS} depth={DEPTH} seconds={:.0}",
            rows.iter()
                .find(|r| r.system == throttled && r.mode == Mode::GroupCommit)
                .map_or(0.0, |r| r.elapsed.as_secs_f64())
        ));
    }
    for r in rows {
        headlines.push(format!(
            "group_commit_row system={} mode={} updates_per_s={:.1} p50_ms={:.1} p99_ms={:.1} errors={} batches={}",
            r.system,
            r.mode.label().replace(' ', "_"),
            r.per_second(),
            r.latency.p50,
            r.latency.p99,
            r.errors,
            distribution(&r.batches).replace(' ', ","),
        ));
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

    #[tokio::test]
    async fn the_throttle_refuses_a_second_write_within_the_interval_and_writes_nothing() {
        let store = Throttled::new(
            Arc::new(casaas_core::MemoryStore::new()),
            Duration::from_secs(60),
        );
        let k = format!("{KEY_PREFIX}k");
        let v = store.create(&k, Bytes::from_static(b"1")).await.unwrap();
        let err = store
            .replace(&k, &v, Bytes::from_static(b"2"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Throttled);
        assert_eq!((err.status(), err.code()), (Some(503), Some("SlowDown")));
        let stored = store.get(&k).await.unwrap().unwrap().body;
        assert_eq!(stored, Bytes::from_static(b"1"));
        // Keys outside the benchmark's (the store guard's probes) pass.
        let other = store
            .create("other", Bytes::from_static(b"1"))
            .await
            .unwrap();
        store
            .replace("other", &other, Bytes::from_static(b"2"))
            .await
            .unwrap();
    }
}
