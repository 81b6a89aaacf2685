//! Lock round trip: acquire a free lock and release it, on every system,
//! interleaved, with the raw store requests casaas makes timed in the same
//! loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use casaas_core::lease::LeaseRecord;
use casaas_core::lease::{Lease, LeaseConfig};
use casaas_core::testkit::CountingStore;
use casaas_core::{CasStore, Version};

use crate::clients::{Etcd, RedisLock};
use crate::plot;
use crate::section::{Section, ms};
use crate::stats::{Summary, percentile, summarize};
use crate::targets::Targets;

/// One system's figures.
#[derive(Debug)]
pub struct RttRow {
    /// Label in tables and plots.
    pub system: String,
    /// Round trip per iteration, ms.
    pub samples: Vec<f64>,
    /// Requests per acquire + release.
    pub requests: f64,
    /// The same requests on the raw store (casaas rows only), ms.
    pub raw: Option<Vec<f64>>,
    /// What the requests are.
    pub pattern: String,
}

/// The whole measurement.
#[derive(Debug)]
pub struct RttResult {
    /// Iterations per system.
    pub iterations: usize,
    /// One row per system.
    pub rows: Vec<RttRow>,
}

enum System {
    Casaas {
        lease: Lease,
        counting: CountingStore<Arc<dyn CasStore>>,
        raw: Arc<dyn CasStore>,
        raw_version: Version,
        body: Bytes,
    },
    Etcd {
        client: Etcd,
        lease: String,
    },
    Redis {
        client: RedisLock,
    },
}

const RAW_KEY: &str = "bench/rtt-raw";

impl System {
    async fn casaas(store: Arc<dyn CasStore>) -> Result<System> {
        let counting = CountingStore::new(store.clone());
        let lease = Lease::new(
            Arc::new(counting.clone()),
            "bench/rtt",
            "bench-rtt",
            LeaseConfig::default(),
        )?;
        // A record of the size casaas writes.
        let body = LeaseRecord::new(
            "bench-rtt",
            "0123456789abcdef0123456789abcdef",
            1,
            15_000,
            0,
        )
        .encode();
        let raw_version = match store.get(RAW_KEY).await? {
            Some(object) => object.version,
            None => store.create(RAW_KEY, body.clone()).await?,
        };
        Ok(System::Casaas {
            lease,
            counting,
            raw: store,
            raw_version,
            body,
        })
    }

    /// One acquire + release; returns (round trip, raw round trip).
    async fn cycle(&mut self, raw_first: bool) -> Result<(Duration, Option<Duration>)> {
        match self {
            System::Casaas {
                lease,
                raw,
                raw_version,
                body,
                ..
            } => {
                let mut raw_time = Duration::ZERO;
                if raw_first {
                    raw_time = raw_cycle(raw.as_ref(), raw_version, body).await?;
                }
                let started = Instant::now();
                let guard = match lease.try_acquire().await?.into_result() {
                    Ok(guard) => guard,
                    Err(held) => bail!("the benchmark lock is held by {}", held.owner),
                };
                guard.release().await?;
                let elapsed = started.elapsed();
                if !raw_first {
                    raw_time = raw_cycle(raw.as_ref(), raw_version, body).await?;
                }
                Ok((elapsed, Some(raw_time)))
            }
            System::Etcd { client, lease } => {
                let started = Instant::now();
                let key = client.lock("bench/rtt", lease).await?;
                client.unlock(&key).await?;
                Ok((started.elapsed(), None))
            }
            System::Redis { client } => {
                let started = Instant::now();
                if !client.acquire("bench/rtt", "token-1", 15_000).await? {
                    bail!("the Redis benchmark key is held");
                }
                if !client.release("bench/rtt", "token-1").await? {
                    bail!("the Redis benchmark key was not ours at release");
                }
                Ok((started.elapsed(), None))
            }
        }
    }

    fn requests(&self) -> u64 {
        match self {
            System::Casaas { counting, .. } => counting.counts().total(),
            System::Etcd { client, .. } => client.requests(),
            System::Redis { client } => client.requests(),
        }
    }
}

/// What casaas sends for an acquire + release of a lock it released last,
/// on the raw store: conditional replace from the version of its release
/// (acquire), conditional replace (release).
async fn raw_cycle(store: &dyn CasStore, version: &mut Version, body: &Bytes) -> Result<Duration> {
    let started = Instant::now();
    let acquired = store.replace(RAW_KEY, version, body.clone()).await?;
    *version = store.replace(RAW_KEY, &acquired, body.clone()).await?;
    Ok(started.elapsed())
}

/// Runs `iterations` interleaved round trips on every system `targets`
/// offers.
pub async fn run(targets: &Targets, iterations: usize) -> Result<RttResult> {
    let mut systems: Vec<(String, String, System)> = Vec::new();
    for store in &targets.stores {
        systems.push((
            format!("casaas {}", store.name),
            "conditional PUT from our release's version; conditional PUT".into(),
            System::casaas(store.open().await?).await?,
        ));
    }
    if let Some(endpoint) = &targets.etcd {
        let client = Etcd::new(endpoint);
        let lease = client.grant(60).await?;
        systems.push((
            "etcd".into(),
            "Lock; Unlock (session lease granted once, kept alive every TTL/3)".into(),
            System::Etcd { client, lease },
        ));
    }
    if let Some(url) = &targets.redis {
        systems.push((
            "redis".into(),
            "SET NX PX; EVALSHA compare-and-delete".into(),
            System::Redis {
                client: RedisLock::connect(url).await?,
            },
        ));
    }
    // Warm connections and caches.
    for (_, _, system) in systems.iter_mut() {
        for _ in 0..10 {
            system.cycle(false).await?;
        }
    }
    let before: Vec<u64> = systems.iter().map(|(_, _, s)| s.requests()).collect();
    let mut samples = vec![Vec::with_capacity(iterations); systems.len()];
    let mut raw = vec![Vec::with_capacity(iterations); systems.len()];
    let count = systems.len();
    for i in 0..iterations {
        for j in 0..count {
            // Rotate the order so that no system always follows the same one.
            let index = (i + j) % count;
            let (name, _, system) = &mut systems[index];
            let (time, raw_time) = system
                .cycle(i % 2 == 1)
                .await
                .with_context(|| format!("round trip on {name}"))?;
            samples[index].push(time.as_secs_f64() * 1e3);
            if let Some(raw_time) = raw_time {
                raw[index].push(raw_time.as_secs_f64() * 1e3);
            }
        }
        if (i + 1) % 200 == 0 {
            eprintln!("bench: lock round trip {}/{iterations}", i + 1);
        }
    }
    let mut rows = Vec::new();
    for (index, (name, pattern, system)) in systems.into_iter().enumerate() {
        let requests = (system.requests() - before[index]) as f64 / iterations as f64;
        if let System::Etcd { client, lease } = &system {
            let _ = client.revoke(lease).await;
        }
        let raw_samples = std::mem::take(&mut raw[index]);
        rows.push(RttRow {
            system: name,
            samples: std::mem::take(&mut samples[index]),
            requests,
            raw: (!raw_samples.is_empty()).then_some(raw_samples),
            pattern,
        });
    }
    Ok(RttResult { iterations, rows })
}

impl RttResult {
    /// The row of `system`.
    pub fn row(&self, system: &str) -> Option<&RttRow> {
        self.rows.iter().find(|r| r.system == system)
    }

    /// The median over iterations of casaas / raw in the same iteration on
    /// `system`: a load change on the shared machine moves both sides.
    pub fn ratio(&self, system: &str) -> Option<f64> {
        let row = self.row(system)?;
        let raw = row.raw.as_ref()?;
        let ratios: Vec<f64> = row
            .samples
            .iter()
            .zip(raw)
            .map(|(casaas, raw)| casaas / raw)
            .collect();
        Some(percentile(&ratios, 50.0))
    }

    /// The report's part.
    pub fn section(&self) -> Result<Section> {
        let mut md = String::new();
        md.push_str("## Lock round trip\n\n");
        md.push_str(&format!(
            "Acquire a free lock, then release it; {} iterations per system, interleaved \
             (each iteration runs every system once, in a rotating order). casaas uses the \
             lease API with the default configuration (TTL 15 s) and one `Lease` for the run, \
             so each acquisition replaces the version its last release wrote, without a read \
             (docs/protocol.md, *Acquiring again without a read*). The **raw** column times, in \
             the same loop, the requests casaas makes for one round trip sent directly on the \
             store (conditional PUT, conditional PUT). The ratio is the median, over \
             iterations, of casaas / raw in the same iteration: what the protocol adds on top of \
             the store's own latency, with the load of the shared machine on both sides.\n\n",
            self.iterations
        ));
        md.push_str(
            "| system | requests per acquire + release | what they are | p50 ms | p99 ms | max ms | raw p50 ms | raw p99 ms | casaas / raw (median of pairs) |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let s = summarize(&row.samples);
            let (raw50, raw99, ratio) = match &row.raw {
                Some(raw) => {
                    let r: Summary = summarize(raw);
                    (
                        ms(r.p50),
                        ms(r.p99),
                        format!("{:.3}", self.ratio(&row.system).unwrap_or(f64::NAN)),
                    )
                }
                None => ("–".into(), "–".into(), "–".into()),
            };
            md.push_str(&format!(
                "| {} | {:.2} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.system,
                row.requests,
                row.pattern,
                ms(s.p50),
                ms(s.p99),
                ms(s.max),
                raw50,
                raw99,
                ratio
            ));
        }
        md.push_str(
            "\netcd is reached through its gRPC gateway (JSON over HTTP/1.1), because the Rust \
             gRPC client needs `protoc` to build; the gateway adds a JSON translation and an \
             in-process gRPC hop to each request, so etcd's figures here are somewhat slower than \
             a native gRPC client's. Redis runs with persistence off (its default lock recipe \
             gives no durability either); etcd fsyncs its log like in production.\n\n",
        );
        let series: Vec<(String, Vec<f64>)> = self
            .rows
            .iter()
            .map(|r| (r.system.clone(), r.samples.clone()))
            .collect();
        let svg = plot::cdf(
            "Lock round trip (acquire + release)",
            "ms (log scale)",
            &series,
            None,
        )?;
        md.push_str("![Lock round trip CDF](performance/lock_rtt.svg)\n\n");
        let mut headlines = Vec::new();
        if let Some(row) = self.row("casaas file") {
            headlines.push(format!("requests_per_uncontended_lock={:.2}", row.requests));
        }
        if let Some(ratio) = self.ratio("casaas ceph") {
            headlines.push(format!("lock_rtt_ratio_vs_raw={ratio:.3}"));
        }
        let p50 = |name: &str| self.row(name).map(|r| summarize(&r.samples).p50);
        let mut line = Vec::new();
        for (key, name) in [
            ("etcd_lock_p50_ms", "etcd"),
            ("redis_lock_p50_ms", "redis"),
            ("casaas_file_lock_p50_ms", "casaas file"),
            ("casaas_ceph_lock_p50_ms", "casaas ceph"),
        ] {
            if let Some(v) = p50(name) {
                line.push(format!("{key}={v:.3}"));
            }
        }
        headlines.push(line.join(" "));
        Ok(Section {
            markdown: md,
            svgs: vec![("lock_rtt.svg".into(), svg)],
            headlines,
        })
    }
}
