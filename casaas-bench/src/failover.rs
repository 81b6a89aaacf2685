//! Failover: a holder process is SIGKILLed while a contender waits; the
//! time from the kill until the contender holds.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use casaas_core::CasStore;
use casaas_core::lease::WaitOptions;
use casaas_core::lease::{Lease, LeaseConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::clients::Etcd;
use crate::plot;
use crate::section::{Section, ms};
use crate::stats::{percentile, summarize};
use crate::targets::StoreTarget;

/// One system's failover times.
#[derive(Debug)]
pub struct FailoverRow {
    /// Label.
    pub system: String,
    /// Kill → contender holds, ms.
    pub samples: Vec<f64>,
    /// `LeaseConfig::failover_bound` with the store's measured read and
    /// write p99, ms (casaas only).
    pub bound_ms: Option<f64>,
    /// The request terms of the bound: p99 of a GET and of a conditional
    /// write on the store, ms.
    pub requests_ms: Option<(f64, f64)>,
}

/// All systems.
#[derive(Debug)]
pub struct FailoverResult {
    /// TTL of the holders.
    pub ttl: Duration,
    /// Rows.
    pub rows: Vec<FailoverRow>,
}

const KEY: &str = "bench/failover";

/// Starts the bench binary as a holder with `args`; returns once it printed
/// `ready` (it holds the lock).
async fn spawn_holder(exe: &Path, args: &[String]) -> Result<Child> {
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the holder {}", exe.display()))?;
    let stdout = child.stdout.take().context("holder stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .context("the holder did not become ready within 60 s")??;
    if line.as_deref() != Some("ready") {
        bail!("the holder printed {line:?} instead of ready");
    }
    Ok(child)
}

/// A random pause before the kill, so kills land anywhere in the renewal
/// cycle (the contender has started polling by then).
fn pause_before_kill(ttl: Duration) -> Duration {
    Duration::from_millis(150) + ttl.mul_f64(rand::random::<f64>() / 2.0)
}

async fn kill(child: &mut Child) -> Result<Instant> {
    child.start_kill()?;
    let killed = Instant::now();
    child.wait().await?;
    Ok(killed)
}

/// p99 of a GET of the lock object and of a conditional write (of a key of
/// its own): the request terms of the bound, in ms.
async fn requests_p99(store: &dyn CasStore) -> Result<(f64, f64)> {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let scratch = format!("{KEY}-write-latency");
    let mut version = match store.get(&scratch).await? {
        Some(object) => object.version,
        None => {
            store
                .create(&scratch, bytes::Bytes::from_static(b"0"))
                .await?
        }
    };
    for i in 0..50u32 {
        let started = Instant::now();
        store.get(KEY).await?;
        reads.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        version = store
            .replace(&scratch, &version, bytes::Bytes::from(i.to_string()))
            .await?;
        writes.push(started.elapsed().as_secs_f64() * 1e3);
    }
    Ok((percentile(&reads, 99.0), percentile(&writes, 99.0)))
}

/// casaas on `target`: `trials` kills at `ttl`.
pub async fn casaas(
    exe: &Path,
    target: &StoreTarget,
    trials: usize,
    ttl: Duration,
) -> Result<FailoverRow> {
    let store: Arc<dyn CasStore> = target.open().await?;
    let config = LeaseConfig::from_ttl(ttl);
    let mut args = vec![
        "hold".to_string(),
        "--url".into(),
        target.url.clone(),
        "--key".into(),
        KEY.into(),
        "--ttl-ms".into(),
        ttl.as_millis().to_string(),
    ];
    if let Some(env_file) = &target.env_file {
        args.extend(["--env-file".into(), env_file.display().to_string()]);
    }
    let mut samples = Vec::with_capacity(trials);
    for trial in 0..trials {
        let mut holder = spawn_holder(exe, &args).await?;
        let lease = Lease::new(
            store.clone(),
            KEY,
            format!("contender-{trial}"),
            config.clone(),
        )?;
        let contender = tokio::spawn(async move {
            let guard = lease
                .acquire(WaitOptions::default().with_deadline(Duration::from_secs(60)))
                .await?;
            anyhow::Ok((guard, Instant::now()))
        });
        tokio::time::sleep(pause_before_kill(ttl)).await;
        if contender.is_finished() {
            bail!("the contender acquired while the holder was alive");
        }
        let killed = kill(&mut holder).await?;
        let (guard, held_at) = contender.await??;
        samples.push(held_at.duration_since(killed).as_secs_f64() * 1e3);
        guard.release().await?;
    }
    let (read, write) = requests_p99(store.as_ref()).await?;
    let bound = config.failover_bound(
        Duration::from_secs_f64(read / 1e3),
        Duration::from_secs_f64(write / 1e3),
    );
    Ok(FailoverRow {
        system: format!("casaas {}", target.name),
        samples,
        bound_ms: Some(bound.as_secs_f64() * 1e3),
        requests_ms: Some((read, write)),
    })
}

/// etcd: the holder's session lease (TTL `ttl`, whole seconds) expires
/// after the kill and the contender's blocked Lock call returns.
pub async fn etcd(exe: &Path, endpoint: &str, trials: usize, ttl: Duration) -> Result<FailoverRow> {
    let client = Etcd::new(endpoint);
    let args = vec![
        "hold-etcd".to_string(),
        "--endpoint".into(),
        endpoint.to_string(),
        "--key".into(),
        KEY.into(),
        "--ttl-s".into(),
        ttl.as_secs().max(1).to_string(),
    ];
    let mut samples = Vec::with_capacity(trials);
    for _ in 0..trials {
        let mut holder = spawn_holder(exe, &args).await?;
        // The contender's own lease outlives the wait without keepalives.
        let lease = client.grant(30).await?;
        let contender = {
            let client = client.clone();
            let lease = lease.clone();
            tokio::spawn(async move {
                let key = client.lock(KEY, &lease).await?;
                anyhow::Ok((key, Instant::now()))
            })
        };
        tokio::time::sleep(pause_before_kill(ttl)).await;
        if contender.is_finished() {
            bail!("the etcd contender acquired while the holder was alive");
        }
        let killed = kill(&mut holder).await?;
        let (key, held_at) = contender.await??;
        samples.push(held_at.duration_since(killed).as_secs_f64() * 1e3);
        client.unlock(&key).await?;
        client.revoke(&lease).await?;
    }
    Ok(FailoverRow {
        system: "etcd".into(),
        samples,
        bound_ms: None,
        requests_ms: None,
    })
}

impl FailoverResult {
    /// The casaas row with the largest p99 relative to its bound.
    pub fn worst(&self) -> Option<(f64, f64)> {
        self.rows
            .iter()
            .filter_map(|r| r.bound_ms.map(|b| (summarize(&r.samples).p99, b)))
            .max_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)))
    }

    /// The report's part.
    pub fn section(&self, ceph_drift: f64) -> Result<Section> {
        let config = LeaseConfig::from_ttl(self.ttl);
        let mut md = String::from("## Failover\n\n");
        md.push_str(&format!(
            "A holder process acquires the lock (TTL {} ms), prints `ready` and keeps renewing; a \
             contender in the benchmark process starts waiting (`Lease::acquire`, polling every \
             `poll_period` = {} ms), and after a random pause the holder is SIGKILLed. The figure \
             is the time from the kill until the contender holds the lock. The documented bound \
             (docs/protocol.md, *Liveness*; `LeaseConfig::failover_bound`) is \
             `ttl·(1+ρ) + poll_period + 2·poll_jitter + read + write` with ρ = `drift_margin` = \
             {ceph_drift} and `poll_jitter` = `poll_period`/5 = {} ms; read and write are the p99 \
             of a GET and of a conditional write on that store, measured after the trials. etcd is measured the same way: the holder keeps a session \
             lease of the same TTL alive (keepalive every TTL/3) and holds the lock under it; the \
             contender's Lock call blocks until the lease expires and etcd deletes the holder's key.\n\n\
             Times below the TTL are expected: the contender counts the TTL from the moment it \
             first saw the holder's last renewal, which is often before the kill (the holder's own \
             validity is counted from when it sent that renewal, earlier still, so exclusion \
             holds). The worst case is a kill right after a renewal the contender has not seen yet: \
             one poll (and its jitter) to see it, then the full `ttl·(1+ρ)`, then at most one \
             poll's jitter past that moment, a read and the takeover write.\n\n",
            self.ttl.as_millis(),
            config.poll_period.as_millis(),
            config.poll_jitter().as_millis()
        ));
        md.push_str("| system | trials | p50 ms | p99 ms | max ms | read / write p99 ms | bound ms | p99 within bound |\n|---|---|---|---|---|---|---|---|\n");
        for row in &self.rows {
            let s = summarize(&row.samples);
            let (bound, within) = match row.bound_ms {
                Some(b) => (ms(b), if s.p99 <= b { "yes" } else { "**no**" }.to_string()),
                None => ("–".into(), "–".into()),
            };
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.system,
                s.n,
                ms(s.p50),
                ms(s.p99),
                ms(s.max),
                row.requests_ms.map_or("–".into(), |(read, write)| format!(
                    "{} / {}",
                    ms(read),
                    ms(write)
                )),
                bound,
                within
            ));
        }
        md.push('\n');
        let series: Vec<(String, Vec<f64>)> = self
            .rows
            .iter()
            .map(|r| (r.system.clone(), r.samples.clone()))
            .collect();
        let markers: Vec<(String, f64)> = self
            .rows
            .iter()
            .filter_map(|r| r.bound_ms.map(|b| (format!("bound ({})", r.system), b)))
            .collect();
        let svg = plot::cdf(
            &format!("Failover after SIGKILL (TTL {} ms)", self.ttl.as_millis()),
            "kill → contender holds, ms (log scale)",
            &series,
            Some(&markers),
        )?;
        md.push_str("![Failover CDF](performance/failover.svg)\n\n");
        let mut headlines = Vec::new();
        if let Some((p99, bound)) = self.worst() {
            headlines.push(format!(
                "failover_p99_ms={p99:.0} failover_bound_ms={bound:.0}"
            ));
        }
        Ok(Section {
            markdown: md,
            svgs: vec![("failover.svg".into(), svg)],
            headlines,
        })
    }
}

/// The holder child: acquires, says `ready`, renews until killed.
pub async fn hold(target: &StoreTarget, key: &str, ttl: Duration) -> Result<()> {
    let store = target.open().await?;
    let lease = Lease::new(
        store,
        key,
        format!("holder-{}", std::process::id()),
        LeaseConfig::from_ttl(ttl),
    )?;
    let guard = lease
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(60)))
        .await?;
    println!("ready");
    let reason = guard.lost().await;
    bail!("the holder lost its lease: {reason}")
}

/// The etcd holder child: session lease, lock, `ready`, keepalives.
pub async fn hold_etcd(endpoint: &str, key: &str, ttl_s: u64) -> Result<()> {
    let client = Etcd::new(endpoint);
    let lease = client.grant(ttl_s).await?;
    client.lock(key, &lease).await?;
    println!("ready");
    loop {
        tokio::time::sleep(Duration::from_millis(ttl_s * 1000 / 3)).await;
        client.keepalive(&lease).await?;
    }
}
