//! What the store guard costs: its requests and time next to one lock round
//! trip on the same store, and per `casaas lock` invocation (process start
//! included) with the guard run every time, with its verdict taken from the
//! command's cache, and off, next to `etcdctl lock`, interleaved in one loop
//! so that the ratios hold on a noisy machine.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use casaas_core::guard::StoreGuard;
use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig};

use crate::section::{Section, ms};
use crate::stats::percentile;
use crate::targets::{StoreTarget, Targets};

/// The guard on one store.
#[derive(Debug, Clone)]
pub struct StoreRow {
    /// The store's short name.
    pub name: String,
    /// Requests one guard run sends.
    pub requests: u32,
    /// Median guard run, ms.
    pub guard_p50_ms: f64,
    /// Median acquire + release, ms.
    pub lock_p50_ms: f64,
}

/// One way to take a lock from a shell, per invocation.
#[derive(Debug, Clone)]
pub struct CommandRow {
    /// What ran.
    pub system: String,
    /// Median wall time of one invocation, ms.
    pub p50_ms: f64,
}

/// Measures the guard on every store, and the command line where the
/// `casaas` binary (and `etcdctl`) are at hand.
pub async fn run(
    targets: &Targets,
    iterations: usize,
    casaas_bin: Option<&Path>,
) -> Result<Section> {
    let mut rows = Vec::new();
    for target in &targets.stores {
        rows.push(store_row(target, iterations).await?);
    }
    let commands = match (casaas_bin, targets.s3()) {
        (Some(bin), Some(s3)) => command_rows(bin, s3, targets.etcd.as_deref(), iterations)?,
        _ => Vec::new(),
    };
    Ok(section(&rows, &commands))
}

async fn store_row(target: &StoreTarget, iterations: usize) -> Result<StoreRow> {
    let store = target.open().await?;
    let (mut guard, mut lock) = (Vec::new(), Vec::new());
    let mut requests = 0;
    let mut config = LeaseConfig::from_ttl(Duration::from_secs(10));
    // The lock round trip alone: the guard is what is measured beside it.
    config.verify_store = false;
    let lease = Lease::new(store.clone(), "bench/guard-rtt", "bench", config)?;
    for _ in 0..iterations {
        let start = Instant::now();
        let report = StoreGuard::new().check(store.as_ref()).await?;
        guard.push(start.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(report.passed(), "{}: {:?}", target.name, report.failure());
        requests = report.requests();
        let start = Instant::now();
        let AcquireOutcome::Acquired(held) = lease.try_acquire().await? else {
            anyhow::bail!("{}: the bench lock is held", target.name);
        };
        held.release().await?;
        lock.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(StoreRow {
        name: target.name.clone(),
        requests,
        guard_p50_ms: percentile(&guard, 50.0),
        lock_p50_ms: percentile(&lock, 50.0),
    })
}

fn command_rows(
    bin: &Path,
    s3: &StoreTarget,
    etcd: Option<&str>,
    iterations: usize,
) -> Result<Vec<CommandRow>> {
    let mut lock_url = url::Url::parse(&s3.url)?;
    lock_url.set_path(&format!("/bench/cli-{}", std::process::id()));
    let guarded = lock_url.to_string();
    lock_url.query_pairs_mut().append_pair("verify", "false");
    let unguarded = lock_url.to_string();
    // The command's verdict cache lives under XDG_CACHE_HOME: a directory of
    // the bench's own, filled by one run before the loop, never the user's.
    let cache_home = CacheHome::new()?;
    let etcdctl = etcd.filter(|_| {
        Command::new("etcdctl")
            .arg("version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    let mut systems: Vec<(String, Command)> = Vec::new();
    for (label, url, cache) in [
        (
            format!(
                "casaas lock ({}), guard run every time (--no-cache)",
                s3.name
            ),
            &guarded,
            false,
        ),
        (
            format!("casaas lock ({}), guard verdict from the cache", s3.name),
            &guarded,
            true,
        ),
        (
            format!("casaas lock ({}), verify=false", s3.name),
            &unguarded,
            true,
        ),
    ] {
        let mut command = Command::new(bin);
        command.arg("lock");
        if !cache {
            command.arg("--no-cache");
        }
        command
            .args(["-n", url, "--", "true"])
            .envs(&s3.env)
            .env("XDG_CACHE_HOME", &cache_home.0);
        systems.push((label, command));
    }
    // The first run fills the cache (and pays the guard).
    let first = systems[1]
        .1
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("filling the command's verdict cache")?;
    anyhow::ensure!(
        first.status.success(),
        "filling the command's verdict cache: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    if let Some(endpoint) = etcdctl {
        let mut command = Command::new("etcdctl");
        command.args([
            &format!("--endpoints={endpoint}"),
            "lock",
            "casaas-bench-cli",
            "true",
        ]);
        systems.push(("etcdctl lock".into(), command));
    }
    let mut samples = vec![Vec::new(); systems.len()];
    for _ in 0..iterations {
        for (i, (label, command)) in systems.iter_mut().enumerate() {
            let start = Instant::now();
            let out = command
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .with_context(|| format!("running {label}"))?;
            anyhow::ensure!(
                out.status.success(),
                "{label}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            samples[i].push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(systems
        .iter()
        .zip(samples)
        .map(|((label, _), s)| CommandRow {
            system: label.clone(),
            p50_ms: percentile(&s, 50.0),
        })
        .collect())
}

/// A cache directory of the bench's own for the command, removed when done.
struct CacheHome(std::path::PathBuf);

impl CacheHome {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("casaas-bench-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(CacheHome(dir))
    }
}

impl Drop for CacheHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn section(rows: &[StoreRow], commands: &[CommandRow]) -> Section {
    let mut md = String::from(
        "## The store guard\n\nBefore the first lease write on a store, once per process, \
         casaas checks that the store honours conditional writes (docs/protocol.md, *The store \
         guard*). Its cost next to one lock round trip (acquire + release) on the same store, \
         medians of runs interleaved in one loop:\n\n\
         | store | guard requests | guard p50 ms | acquire + release p50 ms | guard / round trip |\n\
         |---|---|---|---|---|\n",
    );
    let mut headlines = Vec::new();
    for r in rows {
        let ratio = r.guard_p50_ms / r.lock_p50_ms;
        md.push_str(&format!(
            "| {} | {} | {} | {} | {ratio:.2} |\n",
            r.name,
            r.requests,
            ms(r.guard_p50_ms),
            ms(r.lock_p50_ms)
        ));
        headlines.push(format!(
            "guard_{}_ms={:.3} guard_vs_lock_rtt={ratio:.2}",
            r.name, r.guard_p50_ms
        ));
    }
    if !commands.is_empty() {
        md.push_str(
            "\nPer invocation of a command that takes a lock, runs `true` and releases it \
             (process start included), p50:\n\n| command | p50 ms |\n|---|---|\n",
        );
        for c in commands {
            md.push_str(&format!("| {} | {} |\n", c.system, ms(c.p50_ms)));
        }
        if let [every, cached, off, rest @ ..] = commands {
            let guard_share = every.p50_ms / off.p50_ms;
            md.push_str(&format!(
                "\nRun every time, the guard makes one `casaas lock` invocation \
                 {guard_share:.2}× as long as with `verify=false`. The command keeps the \
                 store's verdict in its cache (an hour; docs/protocol.md, *The store guard*), \
                 so a crontab of `casaas lock` pays the guard once an hour: cached, one \
                 invocation is {:.2}× the one without the guard.\n",
                cached.p50_ms / off.p50_ms
            ));
            headlines.push(format!("casaas_lock_guard_on_vs_off={guard_share:.2}"));
            if let Some(etcd) = rest.first() {
                md.push_str(&format!(
                    "`casaas lock` / `etcdctl lock` (p50): {:.2} with the verdict cached, \
                     {:.2} with the guard run every time, {:.2} without the guard.\n",
                    cached.p50_ms / etcd.p50_ms,
                    every.p50_ms / etcd.p50_ms,
                    off.p50_ms / etcd.p50_ms
                ));
                headlines.push(format!(
                    "casaas_lock_vs_etcdctl_lock={:.2} (guard every run {:.2}, guard off {:.2})",
                    cached.p50_ms / etcd.p50_ms,
                    every.p50_ms / etcd.p50_ms,
                    off.p50_ms / etcd.p50_ms
                ));
            }
        }
    }
    Section {
        markdown: md,
        svgs: Vec::new(),
        headlines,
    }
}
