//! `casaas-bench`: casaas against etcd and Redis on loopback. Run by
//! `cargo xtask bench [--quick]`, which starts the servers and passes their
//! env files; writes docs/performance.md and prints `name=value` headline
//! lines last on stdout.
//!
//! ```text
//! casaas-bench run --out FILE --work-dir DIR [--quick] [--server NAME=ENV_FILE]... [--version NAME=TEXT]... [--python PYTHON [--python-build-seconds S]]
//! casaas-bench python --work-dir DIR --python PYTHON [--server NAME=ENV_FILE]... [--iterations N]
//! casaas-bench layouts [--work-dir DIR] [--server NAME=ENV_FILE]... [--iterations N]
//! casaas-bench contention --work-dir DIR [--quick] [--server NAME=ENV_FILE]...
//! casaas-bench primitives --work-dir DIR [--server NAME=ENV_FILE]... [--seconds S]
//! casaas-bench sessions --work-dir DIR [--server NAME=ENV_FILE]... [--locks N] [--hold-s S] [--trials T]
//! casaas-bench hold --url URL [--env-file FILE] --key KEY --ttl-ms MS    (failover holder)
//! casaas-bench hold-etcd --endpoint URL --key KEY --ttl-s S              (failover holder)
//! ```

mod clients;
mod contention;
mod cost;
mod failover;
mod group_commit;
mod guard;
mod handoff;
mod layouts;
mod plot;
mod primitives;
mod python;
mod report;
mod rtt;
mod scale;
mod section;
mod session;
mod stats;
mod targets;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use casaas_core::CasStore;

use crate::section::Section;
use crate::targets::{StoreTarget, Targets};

#[derive(Parser)]
#[command(
    name = "casaas-bench",
    about = "casaas against etcd and Redis on loopback"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every measurement; writes the report and prints the headlines.
    Run {
        /// The Markdown report to write (SVGs go to `performance/` beside it).
        #[arg(long)]
        out: PathBuf,
        /// Scratch directory (the file backend lives here).
        #[arg(long)]
        work_dir: PathBuf,
        /// Fewer iterations, trials and leases (under 5 minutes).
        #[arg(long)]
        quick: bool,
        /// A running server: NAME=ENV_FILE (ceph, moto, azurite, etcd, redis).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// A version to report: NAME=TEXT.
        #[arg(long = "version")]
        versions: Vec<String>,
        /// A Python with casaas, redis and python-redis-lock installed: the
        /// Python section runs when given.
        #[arg(long)]
        python: Option<PathBuf>,
        /// How long the release build of the Python extension took, for
        /// the report.
        #[arg(long)]
        python_build_seconds: Option<f64>,
    },
    /// The lock round trip from Python against Rust and python-redis-lock
    /// (a section of `run`).
    Python {
        /// Scratch directory (the file backend lives here).
        #[arg(long)]
        work_dir: PathBuf,
        /// A running server: NAME=ENV_FILE (ceph, redis).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// A Python with casaas, redis and python-redis-lock installed.
        #[arg(long)]
        python: PathBuf,
        /// Interleaved iterations.
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        /// How long the release build of the Python extension took.
        #[arg(long)]
        build_seconds: Option<f64>,
    },
    /// The store guard's cost alone (a section of `run`): per store, and per
    /// `casaas lock` invocation when `--casaas-bin` names the binary.
    Guard {
        /// Scratch directory (the file backend lives here).
        #[arg(long)]
        work_dir: PathBuf,
        /// A running server: NAME=ENV_FILE (ceph, moto, azurite, etcd).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// The `casaas` binary, for the per-invocation figures.
        #[arg(long)]
        casaas_bin: Option<PathBuf>,
        /// Runs per store and per command.
        #[arg(long, default_value_t = 20)]
        iterations: usize,
    },
    /// The two lease layouts side by side (a section of `run`): requests,
    /// objects and price of a held lease-hour, and the lock round trip.
    Layouts {
        /// Scratch directory (the file backend lives here); a temporary
        /// one, removed afterwards, if absent.
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// A running server: NAME=ENV_FILE (ceph, moto, azurite).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// Timed round trips per layout and store.
        #[arg(long, default_value_t = 500)]
        iterations: usize,
    },
    /// Many locks under one session and its failover (a section of `run`).
    Sessions {
        /// Scratch directory (the file backend lives here).
        #[arg(long)]
        work_dir: PathBuf,
        /// A running server: NAME=ENV_FILE (ceph, moto, azurite).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// Locks held under the session.
        #[arg(long, default_value_t = 10_000)]
        locks: usize,
        /// Seconds to hold them.
        #[arg(long, default_value_t = 60)]
        hold_s: u64,
        /// Failover trials per store.
        #[arg(long, default_value_t = 10)]
        trials: usize,
    },
    /// Contention (with and without fair turns) and the handoff after a
    /// release (sections of `run`), on the file store and the first S3
    /// server given.
    Contention {
        /// Scratch directory (the file backend lives here).
        #[arg(long)]
        work_dir: PathBuf,
        /// Shorter runs, as in `run --quick`.
        #[arg(long)]
        quick: bool,
        /// A running server: NAME=ENV_FILE (ceph, moto).
        #[arg(long = "server")]
        servers: Vec<String>,
    },
    /// Group commit against one write per update (a section of `run`).
    GroupCommit {
        /// Scratch directory (the file backend lives here).
        #[arg(long)]
        work_dir: PathBuf,
        /// A running server: NAME=ENV_FILE (ceph).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
    /// The semaphore and the read-write lock under contention (a section
    /// of `run`), on the file store and the first S3 server given.
    Primitives {
        /// Scratch directory (the file backend lives here).
        #[arg(long)]
        work_dir: PathBuf,
        /// A running server: NAME=ENV_FILE (ceph).
        #[arg(long = "server")]
        servers: Vec<String>,
        /// Seconds per row.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Failover holder: acquire a casaas lease, print `ready`, renew until killed.
    Hold {
        #[arg(long)]
        url: String,
        #[arg(long)]
        env_file: Option<PathBuf>,
        #[arg(long)]
        key: String,
        #[arg(long)]
        ttl_ms: u64,
    },
    /// Failover holder: an etcd session lease and lock, `ready`, keepalives.
    HoldEtcd {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        key: String,
        #[arg(long)]
        ttl_s: u64,
    },
}

/// How much of everything to do.
struct Plan {
    rtt_iterations: usize,
    python_iterations: usize,
    guard_iterations: usize,
    layouts_iterations: usize,
    failover_trials: usize,
    scale_leases: usize,
    scale_ceph_leases: usize,
    scale_hold: Duration,
    contention_time: Duration,
    handoff_time: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                rtt_iterations: 200,
                python_iterations: 100,
                guard_iterations: 10,
                layouts_iterations: 200,
                failover_trials: 10,
                scale_leases: 1_000,
                scale_ceph_leases: 0,
                scale_hold: Duration::from_secs(60),
                contention_time: Duration::from_secs(3),
                handoff_time: Duration::from_secs(5),
            }
        } else {
            Plan {
                rtt_iterations: 1_000,
                python_iterations: 500,
                guard_iterations: 50,
                layouts_iterations: 500,
                failover_trials: 50,
                scale_leases: 10_000,
                scale_ceph_leases: 1_000,
                scale_hold: Duration::from_secs(180),
                contention_time: Duration::from_secs(10),
                handoff_time: Duration::from_secs(20),
            }
        }
    }
}

const FAILOVER_TTL: Duration = Duration::from_secs(2);
const SCALE_TTL: Duration = Duration::from_secs(30);
const CONTENTION_TTL: Duration = Duration::from_secs(2);
const CONTENTION_N: [usize; 4] = [2, 8, 32, 64];

fn pairs(items: &[String], what: &str) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--{what} takes NAME=VALUE, got {item:?}"))
        })
        .collect()
}

fn targets(work_dir: &std::path::Path, servers: &[(String, String)]) -> Result<Targets> {
    let file_dir = work_dir.join("file-store");
    let _ = std::fs::remove_dir_all(&file_dir);
    std::fs::create_dir_all(&file_dir)?;
    let file_dir = file_dir.canonicalize()?;
    let mut stores = vec![StoreTarget {
        name: "file".into(),
        url: format!("file://{}", file_dir.display()),
        env: BTreeMap::new(),
        env_file: None,
    }];
    let (mut etcd, mut redis) = (None, None);
    for (name, env_file) in servers {
        let env = clients::read_env_file(std::path::Path::new(env_file))?;
        match name.as_str() {
            "etcd" => etcd = env.get("CASAAS_ETCD_ENDPOINT").cloned(),
            "redis" => redis = env.get("CASAAS_REDIS_URL").cloned(),
            _ => {
                let url = env
                    .get("CASAAS_TEST_URL")
                    .with_context(|| format!("{env_file} has no CASAAS_TEST_URL"))?
                    .clone();
                // A prefix of its own, so runs never meet other tests' objects.
                let url = with_prefix(&url, "casaas-bench");
                stores.push(StoreTarget {
                    name: name.clone(),
                    url,
                    env,
                    env_file: Some(PathBuf::from(env_file)),
                });
            }
        }
    }
    Ok(Targets {
        stores,
        etcd,
        redis,
    })
}

/// `s3://bucket/?opts` → `s3://bucket/PREFIX?opts` (URLs that name only a
/// bucket or container).
fn with_prefix(url: &str, prefix: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let base = format!("{}/{prefix}", base.trim_end_matches('/'));
    if query.is_empty() {
        base
    } else {
        format!("{base}?{query}")
    }
}

fn register_providers() {
    casaas_s3::register();
    casaas_azure::register();
}

/// `run`: every measurement; writes the report and prints the headlines.
async fn run(
    out: PathBuf,
    work_dir: PathBuf,
    quick: bool,
    servers: Vec<(String, String)>,
    versions: Vec<(String, String)>,
    python: Option<(PathBuf, Option<f64>)>,
) -> Result<()> {
    let started = Instant::now();
    let plan = Plan::new(quick);
    let targets = targets(&work_dir, &servers)?;
    let exe = std::env::current_exe()?;
    let mut sections: Vec<Section> = Vec::new();

    eprintln!(
        "bench: lock round trip ({} iterations)",
        plan.rtt_iterations
    );
    let rtt = rtt::run(&targets, plan.rtt_iterations).await?;
    sections.push(rtt.section()?);

    if let Some((python, build_seconds)) = &python {
        eprintln!(
            "bench: lock round trip from Python ({} iterations)",
            plan.python_iterations
        );
        let result = python::run(&targets, python, plan.python_iterations, *build_seconds).await?;
        sections.push(result.section()?);
    }

    eprintln!("bench: the store guard");
    let casaas_bin = std::env::var_os("CASAAS_BIN").map(PathBuf::from);
    sections.push(guard::run(&targets, plan.guard_iterations, casaas_bin.as_deref()).await?);

    // Before the sections that fill the file store: the epoch layout lists.
    eprintln!(
        "bench: lease layouts ({} round trips per layout)",
        plan.layouts_iterations
    );
    sections.push(layouts::run(&targets, plan.layouts_iterations).await?);
    sections.push(failover_section(&exe, &targets, &plan).await?);
    sections.push(scale_section(&targets, &plan).await?);
    sections.push(session_section(&targets, &plan).await?);
    sections.push(contention_section(&targets, &plan).await?);
    sections.push(handoff_section(&targets, &plan).await?);
    sections.push(group_commit_section(&targets, group_commit_time(quick)).await?);
    sections.push(primitives_section(&targets, plan.contention_time).await?);
    sections.push(cost::section(rtt.row("casaas file").map(|r| r.requests)));

    let version_lines = version_lines(&targets, &versions).await?;
    let headlines: Vec<String> = sections
        .iter()
        .flat_map(|s| s.headlines.iter().cloned())
        .filter(|l| !l.is_empty())
        .collect();
    let header = report_header(quick, started, &version_lines, &targets, &headlines);
    report::write(&out, &header, &sections)?;
    eprintln!(
        "bench: wrote {} in {:.0} s",
        out.display(),
        started.elapsed().as_secs_f64()
    );
    for line in headlines {
        println!("{line}");
    }
    Ok(())
}

/// Failover on the file store, S3 and etcd at once: a holder SIGKILLed
/// while a contender waits.
async fn failover_section(
    exe: &std::path::Path,
    targets: &Targets,
    plan: &Plan,
) -> Result<Section> {
    eprintln!(
        "bench: failover ({} trials per system)",
        plan.failover_trials
    );
    let file = targets.store("file").context("no file store")?;
    let file_failover = failover::casaas(exe, file, plan.failover_trials, FAILOVER_TTL);
    let s3_failover = async {
        match targets.s3() {
            Some(s3) => failover::casaas(exe, s3, plan.failover_trials, FAILOVER_TTL)
                .await
                .map(Some),
            None => Ok(None),
        }
    };
    let etcd_failover = async {
        match &targets.etcd {
            Some(endpoint) => failover::etcd(exe, endpoint, plan.failover_trials, FAILOVER_TTL)
                .await
                .map(Some),
            None => Ok(None),
        }
    };
    let (file_row, s3_row, etcd_row) = tokio::join!(file_failover, s3_failover, etcd_failover);
    let mut rows = vec![file_row?];
    rows.extend(s3_row?);
    rows.extend(etcd_row?);
    let failover = failover::FailoverResult {
        ttl: FAILOVER_TTL,
        rows,
    };
    failover.section(casaas_core::lease::LeaseConfig::default().drift_margin)
}

/// The stores many holdings are measured on: memory and file, and Ceph
/// (with `ceph_count` holdings; none when 0 or absent). Each with how many.
async fn holding_stores(
    targets: &Targets,
    memory_url: &str,
    count: usize,
    ceph_count: usize,
) -> Result<Vec<(&'static str, Arc<dyn CasStore>, usize)>> {
    let file = targets.store("file").context("no file store")?;
    let mut stores = vec![
        ("memory", casaas_core::open_store(memory_url).await?, count),
        ("file", file.open().await?, count),
    ];
    if ceph_count > 0
        && let Some(ceph) = targets.store("ceph")
    {
        stores.push(("ceph", ceph.open().await?, ceph_count));
    }
    Ok(stores)
}

/// Many leases held in one process: on the memory and file stores, and on
/// Ceph in a full run.
async fn scale_section(targets: &Targets, plan: &Plan) -> Result<Section> {
    let mut rows = Vec::new();
    let stores = holding_stores(
        targets,
        "memory://bench-scale/leases",
        plan.scale_leases,
        plan.scale_ceph_leases,
    )
    .await?;
    for (name, store, leases) in stores {
        eprintln!("bench: scale {name}: {leases} leases");
        rows.push(scale::run(name, store, leases, SCALE_TTL, plan.scale_hold).await?);
    }
    Ok(scale::section(&rows, SCALE_TTL))
}

/// Many locks under one session on the memory and file stores (and Ceph in
/// a full run), and the failover of a session lock on the file store and S3.
async fn session_section(targets: &Targets, plan: &Plan) -> Result<Section> {
    let file = targets.store("file").context("no file store")?;
    let mut rows = Vec::new();
    // Locks under a session cost nothing while held: as many on Ceph.
    let ceph_locks = if plan.scale_ceph_leases > 0 {
        plan.scale_leases
    } else {
        0
    };
    let stores = holding_stores(
        targets,
        "memory://bench-session/locks",
        plan.scale_leases,
        ceph_locks,
    )
    .await?;
    for (name, store, locks) in stores {
        eprintln!("bench: session {name}: {locks} locks");
        rows.push(session::run(name, store, locks, SCALE_TTL, plan.scale_hold).await?);
    }
    let mut failovers = Vec::new();
    let mut failover_targets = vec![file.clone()];
    failover_targets.extend(targets.s3().cloned());
    for target in &failover_targets {
        eprintln!(
            "bench: session failover {} ({} trials)",
            target.name, plan.failover_trials
        );
        failovers.push(
            session::failover(
                &target.name,
                target.open().await?,
                plan.failover_trials,
                FAILOVER_TTL,
            )
            .await?,
        );
    }
    Ok(session::section(&rows, &failovers, SCALE_TTL, FAILOVER_TTL))
}

/// Contenders for one lease, at each of [`CONTENTION_N`], on the file
/// store and S3.
async fn contention_section(targets: &Targets, plan: &Plan) -> Result<Section> {
    let file = targets.store("file").context("no file store")?;
    let mut contention_rows = Vec::new();
    let mut contention_targets = vec![file.clone()];
    contention_targets.extend(targets.s3().cloned());
    for target in &contention_targets {
        let store = target.open().await?;
        for n in CONTENTION_N {
            eprintln!("bench: contention {}: N = {n}", target.name);
            contention_rows.push(
                contention::run(
                    &target.name,
                    store.clone(),
                    n,
                    plan.contention_time,
                    CONTENTION_TTL,
                )
                .await?,
            );
        }
        for n in CONTENTION_N {
            eprintln!("bench: contention {} with fair turns: N = {n}", target.name);
            contention_rows
                .push(contention::run_fair(&target.name, store.clone(), n, CONTENTION_TTL).await?);
        }
    }
    contention::section(&contention_rows, CONTENTION_TTL, plan.contention_time)
}

/// The handoff after a graceful release on the file store and S3, each way
/// of waiting one after another on the same store.
async fn handoff_section(targets: &Targets, plan: &Plan) -> Result<Section> {
    let file = targets.store("file").context("no file store")?;
    let mut stores = vec![file.clone()];
    stores.extend(targets.s3().cloned());
    let mut rows = Vec::new();
    for target in &stores {
        let store = target.open().await?;
        for waiting in handoff::Waiting::ALL {
            eprintln!("bench: handoff {}: {}", target.name, waiting.label());
            rows.push(handoff::run(&target.name, store.clone(), waiting, plan.handoff_time).await?);
        }
    }
    Ok(handoff::section(&rows, plan.handoff_time))
}

/// The semaphore and the read-write lock on the file store and S3, for
/// `time` per row.
async fn primitives_section(targets: &Targets, time: Duration) -> Result<Section> {
    let file = targets.store("file").context("no file store")?;
    let mut stores = vec![file.clone()];
    stores.extend(targets.s3().cloned());
    let mut rows = Vec::new();
    for target in &stores {
        let store = target.open().await?;
        for primitive in primitives::Primitive::ALL {
            eprintln!("bench: {primitive:?} on {}", target.name);
            rows.push(primitives::run(&target.name, store.clone(), primitive, time).await?);
        }
    }
    Ok(primitives::section(&rows, time))
}

/// Seconds per group-commit measurement: at least 30 in a full run.
fn group_commit_time(quick: bool) -> Duration {
    Duration::from_secs(if quick { 5 } else { 30 })
}

/// Group commit against one write per update: the file store behind a
/// throttle of one conditional write per second per key (the headline),
/// then the file store and Ceph as they are.
async fn group_commit_section(targets: &Targets, time: Duration) -> Result<Section> {
    const THROTTLED: &str = "file, 1 write/s/key";
    let file = targets.store("file").context("no file store")?;
    let throttled: std::sync::Arc<dyn casaas_core::CasStore> = std::sync::Arc::new(
        group_commit::Throttled::new(file.open().await?, Duration::from_secs(1)),
    );
    let mut stores = vec![
        (THROTTLED.to_string(), throttled),
        ("file".to_string(), file.open().await?),
    ];
    if let Some(ceph) = targets.store("ceph") {
        stores.push(("ceph".to_string(), ceph.open().await?));
    }
    let mut rows = Vec::new();
    for (name, store) in stores {
        for mode in group_commit::Mode::ALL {
            eprintln!(
                "bench: group commit {name}: {mode:?} for {} s",
                time.as_secs()
            );
            rows.push(group_commit::run(&name, store.clone(), mode, time).await?);
        }
    }
    Ok(group_commit::section(&rows, THROTTLED))
}

/// The versions the report names: casaas, the running etcd and Redis, and
/// those given with `--version`.
async fn version_lines(targets: &Targets, versions: &[(String, String)]) -> Result<Vec<String>> {
    let mut version_lines = vec![format!("casaas {}", env!("CARGO_PKG_VERSION"))];
    if let Some(endpoint) = &targets.etcd {
        version_lines.push(format!(
            "etcd {}",
            clients::Etcd::new(endpoint).version().await?
        ));
    }
    if let Some(url) = &targets.redis {
        version_lines.push(format!(
            "Redis {}",
            clients::RedisLock::connect(url).await?.version().await?
        ));
    }
    version_lines.extend(versions.iter().map(|(k, v)| format!("{k} {v}")));
    Ok(version_lines)
}

/// The report's title and preamble: how it was generated, on what, and the
/// headline figures.
fn report_header(
    quick: bool,
    started: Instant,
    version_lines: &[String],
    targets: &Targets,
    headlines: &[String],
) -> String {
    let command = if quick {
        "cargo xtask bench --quick"
    } else {
        "cargo xtask bench"
    };
    let mut header = format!(
        "# Performance\n\n<!-- Generated by `{command}`; do not edit by hand. -->\n\n\
         Generated by `{command}` on {} in {:.0} s{}.\n\n\
         - Machine: {}; every server on loopback on the same machine, which other jobs shared \
         while this ran. Absolute figures move with the load; every comparison is a ratio taken \
         in the same run, interleaved, so the noise falls on both sides.\n\
         - Versions: {}.\n\
         - Stores: {}.\n\n",
        report::today(),
        started.elapsed().as_secs_f64(),
        if quick {
            " — a **quick** run: fewer iterations, trials and leases than the full `cargo xtask bench`"
        } else {
            ""
        },
        report::machine(),
        version_lines.join(", "),
        targets
            .stores
            .iter()
            .map(|s| format!("{} (`{}`)", s.name, redact_url(&s.url)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    header.push_str("Headline figures:\n\n```text\n");
    for line in headlines {
        header.push_str(line);
        header.push('\n');
    }
    header.push_str("```\n\n");
    header
}

/// The store URL without machine paths (the file backend's directory).
fn redact_url(url: &str) -> String {
    match casaas_core::StoreUrl::parse(url) {
        Ok(parsed) if parsed.scheme() == "file" => "file:///…/file-store".into(),
        Ok(parsed) => parsed.to_string(),
        Err(_) => url.to_string(),
    }
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    register_providers();
    runtime.block_on(dispatch(cli.command))
}

/// Runs `command`.
async fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Run {
            out,
            work_dir,
            quick,
            servers,
            versions,
            python,
            python_build_seconds,
        } => {
            let servers = pairs(&servers, "server")?;
            let versions = pairs(&versions, "version")?;
            let python = python.map(|p| (p, python_build_seconds));
            run(out, work_dir, quick, servers, versions, python).await
        }
        Command::Python {
            work_dir,
            servers,
            python,
            iterations,
            build_seconds,
        } => {
            let targets = targets(&work_dir, &pairs(&servers, "server")?)?;
            let result = python::run(&targets, &python, iterations, build_seconds).await?;
            print_section(result.section()?);
            Ok(())
        }
        Command::Guard {
            work_dir,
            servers,
            casaas_bin,
            iterations,
        } => {
            let targets = targets(&work_dir, &pairs(&servers, "server")?)?;
            let section = guard::run(&targets, iterations, casaas_bin.as_deref()).await?;
            print_section(section);
            Ok(())
        }
        Command::Layouts {
            work_dir,
            servers,
            iterations,
        } => run_layouts(work_dir, &servers, iterations).await,
        Command::Sessions {
            work_dir,
            servers,
            locks,
            hold_s,
            trials,
        } => {
            let targets = targets(&work_dir, &pairs(&servers, "server")?)?;
            let plan = Plan {
                scale_leases: locks,
                scale_ceph_leases: locks,
                scale_hold: Duration::from_secs(hold_s),
                failover_trials: trials,
                ..Plan::new(true)
            };
            print_section(session_section(&targets, &plan).await?);
            Ok(())
        }
        Command::Contention {
            work_dir,
            quick,
            servers,
        } => {
            let targets = targets(&work_dir, &pairs(&servers, "server")?)?;
            let plan = Plan::new(quick);
            print_section(contention_section(&targets, &plan).await?);
            print_section(handoff_section(&targets, &plan).await?);
            Ok(())
        }
        Command::GroupCommit {
            work_dir,
            servers,
            seconds,
        } => {
            let targets = targets(&work_dir, &pairs(&servers, "server")?)?;
            let time = Duration::from_secs(seconds);
            print_section(group_commit_section(&targets, time).await?);
            Ok(())
        }
        Command::Primitives {
            work_dir,
            servers,
            seconds,
        } => {
            let targets = targets(&work_dir, &pairs(&servers, "server")?)?;
            let time = Duration::from_secs(seconds);
            print_section(primitives_section(&targets, time).await?);
            Ok(())
        }
        Command::Hold {
            url,
            env_file,
            key,
            ttl_ms,
        } => {
            let env = match &env_file {
                Some(path) => clients::read_env_file(path)?,
                None => BTreeMap::new(),
            };
            let target = StoreTarget {
                name: "holder".into(),
                url,
                env,
                env_file,
            };
            failover::hold(&target, &key, Duration::from_millis(ttl_ms)).await
        }
        Command::HoldEtcd {
            endpoint,
            key,
            ttl_s,
        } => {
            if ttl_s == 0 {
                bail!("--ttl-s must be at least 1");
            }
            failover::hold_etcd(&endpoint, &key, ttl_s).await
        }
    }
}

/// `layouts`: the section alone, in `work_dir` or a temporary directory
/// removed afterwards.
async fn run_layouts(
    work_dir: Option<PathBuf>,
    servers: &[String],
    iterations: usize,
) -> Result<()> {
    let servers = pairs(servers, "server")?;
    let scratch = work_dir
        .is_none()
        .then(|| std::env::temp_dir().join(format!("casaas-bench-layouts-{}", std::process::id())));
    let work_dir = work_dir.or_else(|| scratch.clone()).unwrap_or_default();
    let measured = async {
        let targets = targets(&work_dir, &servers)?;
        layouts::run(&targets, iterations).await
    }
    .await;
    if let Some(scratch) = scratch {
        let _ = std::fs::remove_dir_all(scratch);
    }
    print_section(measured?);
    Ok(())
}

/// Prints a section alone: its Markdown, then its headlines.
fn print_section(section: Section) {
    print!("{}", section.markdown);
    for line in section.headlines {
        println!("{line}");
    }
}
