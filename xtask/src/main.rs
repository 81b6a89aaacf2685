//! `cargo xtask`: the project's development tasks, in plain Rust.
//!
//! - `cargo xtask ci` — everything CI checks: format, clippy, the docs and
//!   the API listing, the packages and the workspace hack, the library
//!   without the command, real servers up, all tests, the deterministic
//!   simulation, servers down.
//! - `cargo xtask servers up|down|status [NAME…]` — real servers on loopback.
//! - `cargo xtask api [--accept]` — the docs built with warnings denied, and
//!   each published crate's public API compared with (or, with `--accept`,
//!   recorded in) `api/CRATE.txt`.
//! - `cargo xtask sim --ops N --seed S [--primitive NAME]…` — the
//!   deterministic simulation of every public primitive (`casaas-sim
//!   --help` lists the 13 names).
//! - `cargo xtask vendor-matrix [--quick] [NAME…]` — the conformance binary
//!   against every store that runs here; writes `docs/vendors.md`
//!   (`--render`: again from the last run's stored reports, starting
//!   nothing).
//! - `cargo xtask bench [--quick]` — casaas against etcd and Redis on
//!   loopback (lock round trip, failover, many leases, contention, cost);
//!   writes `docs/performance.md` and prints headline `name=value` lines last.
//! - `cargo xtask chaos --server NAME [--minutes M] [--seed S] [--sessions] [--group-commit]
//!   [--primitive semaphore|rwlock [--slots N]]` — worker
//!   processes under kills, pauses and proxy faults against a real server,
//!   judged by an independent checker.
//! - `cargo xtask chaos-ci [--at-once N]` — CI's chaos minutes alone, several
//!   at a time, as `ci` runs them.
//! - `cargo xtask package [--verify]` — every published crate packaged
//!   together, as `cargo publish` would upload them.
//! - `cargo xtask wheel [--dev]` — the Python package as an abi3 wheel in
//!   `dist/` (`cargo xtask python` builds it, installs it into a fresh
//!   virtualenv and tests that install).
//! - `cargo xtask iceberg [--keep-servers]` — casaas-iceberg (outside the
//!   workspace and CI: a second arrow/parquet stack) built and tested on
//!   its own, on SeaweedFS and Ceph RGW and against the Python catalog.
//! - `cargo xtask hakari [--write]` — the workspace hack as cargo-hakari
//!   writes it (installed under `.casaas/tools/` when missing).

mod api;
mod bench;
mod createonly_proxy;
mod man;
mod mutants;
mod package;
mod python;
mod servers;
#[cfg(test)]
mod tidy;
mod vendor_matrix;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use casaas_core::testkit::server_env;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "casaas development tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Format check, clippy, real servers, every test, the simulation.
    Ci {
        /// Operations for the deterministic simulation (each of its two
        /// runs takes about 10 s at the default).
        #[arg(long, default_value_t = 2_000_000)]
        sim_ops: u64,
        /// Leave the servers running afterwards (for local debugging).
        #[arg(long)]
        keep_servers: bool,
    },
    /// Build the docs (warnings denied) and compare each published crate's
    /// public API with the listing committed under `api/`.
    Api {
        /// Record the current API as the listing (an intended change).
        #[arg(long)]
        accept: bool,
    },
    /// Package every published crate together (`cargo package`), as
    /// `cargo publish` would upload them.
    Package {
        /// Also build each package from its tarball alone (slow: the
        /// provider SDKs are compiled again with the packages' own
        /// features).
        #[arg(long)]
        verify: bool,
    },
    /// Check that the workspace hack and the lines depending on it are as
    /// cargo-hakari writes them (installing it when missing).
    Hakari {
        /// Let cargo-hakari write them instead.
        #[arg(long)]
        write: bool,
    },
    /// Write casaas-cli/man/casaas.1, the `casaas` command's manual page,
    /// from its clap definitions.
    Man,
    /// Real servers on loopback for the tests.
    Servers {
        #[command(subcommand)]
        action: ServersAction,
    },
    /// Run the conformance binary against every store that runs here and
    /// write docs/vendors.md.
    VendorMatrix {
        /// Only these targets (memory, file, or server names).
        names: Vec<String>,
        /// Quick probes instead of the thorough default.
        #[arg(long)]
        quick: bool,
        /// Leave servers it started running afterwards.
        #[arg(long)]
        keep_servers: bool,
        /// Write docs/vendors.md again from the last run's stored reports
        /// (`.casaas/vendor-matrix/runs.json`), starting nothing.
        #[arg(long, conflicts_with_all = ["names", "quick", "keep_servers"])]
        render: bool,
    },
    /// The Python package: build it into a virtualenv under `.casaas/`,
    /// then pytest, mypy --strict and its examples.
    Python {
        /// Fail (not skip) the tests of servers that are not running.
        #[arg(long)]
        require_servers: bool,
    },
    /// The Python package as an abi3 wheel in `dist/` (maturin; release
    /// unless `--dev`), installable with `pip install dist/casaas-*.whl`.
    Wheel {
        /// The dev profile: a quicker build, for tests.
        #[arg(long)]
        dev: bool,
    },
    /// casaas-iceberg, outside the workspace (iceberg-rust's own
    /// arrow/parquet stack), built and tested on its own: its tests on
    /// SeaweedFS and Ceph RGW, and both ways with the Python catalog of the
    /// casaas wheel; none may be skipped.
    Iceberg {
        /// Leave the servers running afterwards.
        #[arg(long)]
        keep_servers: bool,
    },
    /// Chaos against a real server: lease workers killed and frozen while a
    /// proxy injects transport faults, then an independent checker.
    Chaos {
        /// The server (ceph, azurite, fake-gcs, moto, ...).
        #[arg(long)]
        server: String,
        /// How long to run.
        #[arg(long, default_value_t = 1.0)]
        minutes: f64,
        /// Seed of the faults, kills and pauses.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Leave the server running afterwards.
        #[arg(long)]
        keep_servers: bool,
        /// An option added to the server's URL, such as `layout=epochs`
        /// (by default the one CI uses for that server, if any).
        #[arg(long)]
        option: Option<String>,
        /// Workers hold the lock under sessions (a heartbeat each).
        #[arg(long)]
        sessions: bool,
        /// Workers write their fenced updates through group commit, from
        /// several tasks at once (batches of several updates per write).
        #[arg(long)]
        group_commit: bool,
        /// What the workers hold: `lease` (the default), `semaphore` (of
        /// `--slots` slots) or `rwlock`.
        #[arg(long)]
        primitive: Option<String>,
        /// The semaphore's slots, with `--primitive semaphore`.
        #[arg(long)]
        slots: Option<u32>,
    },
    /// CI's chaos minutes alone, as `ci` runs them (several at a time).
    ChaosCi {
        /// How many run at the same time.
        #[arg(long, default_value_t = CI_CHAOS_AT_ONCE)]
        at_once: usize,
    },
    /// Benchmarks against etcd and Redis on loopback; writes
    /// docs/performance.md and prints `name=value` headlines last.
    Bench {
        /// A reduced run (under 5 minutes) instead of the full one.
        #[arg(long)]
        quick: bool,
        /// Leave the servers running afterwards.
        #[arg(long)]
        keep_servers: bool,
    },
    /// Run the deterministic simulation of every public primitive; prints
    /// `primitive=NAME ops=N violations=V` per primitive, then the totals.
    Sim {
        /// Number of store operations to simulate, split across primitives.
        #[arg(long, default_value_t = 100_000)]
        ops: u64,
        /// Seed of the run; the same seed replays the same run.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Only these primitives (lease, shared_lease, election,
        /// fenced_resource, fenced_log, lease_create_only,
        /// election_create_only, session, group_commit, fair, create_once,
        /// swap_once, first_use), each with its share of a full run.
        #[arg(long)]
        primitive: Vec<String>,
        /// Each simulated client draws its own valid lease timing (edges
        /// weighted) instead of the standard one; off, a seed replays the
        /// digest it always had.
        #[arg(long)]
        explore_configs: bool,
    },
    /// Break the lease protocol on purpose, one rule at a time, and count
    /// how many of those mutants the simulation kills (fixed and explored
    /// timing); prints a table and `killed=K mutants=M kill_rate=P%`.
    Mutants {
        /// Simulated operations per run.
        #[arg(long, default_value_t = 300_000)]
        ops: u64,
        /// Seed of every run.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Only the mutants whose name contains this text.
        #[arg(long)]
        only: Option<String>,
    },
    /// The proxy of the `createonly` test server (started by `servers up`).
    #[command(hide = true)]
    CreateonlyProxy {
        /// Loopback port to listen on.
        #[arg(long)]
        listen: u16,
        /// The S3 server behind it, `http://127.0.0.1:PORT`.
        #[arg(long)]
        upstream: String,
    },
}

#[derive(Subcommand)]
enum ServersAction {
    /// Install (if missing) and start servers; print `NAME URL ENVFILE` each.
    Up { names: Vec<String> },
    /// Stop servers by their recorded PIDs.
    Down { names: Vec<String> },
    /// Show which servers run.
    Status { names: Vec<String> },
}

fn workspace_root() -> Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(PathBuf::from)
        .context("xtask lives one level below the workspace root")
}

/// `cargo ARGS` in the workspace, in the environment every task runs it in.
fn cargo_command(root: &PathBuf, args: &[&str]) -> Command {
    let mut command = task_command(
        root,
        std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()),
    );
    command.args(args);
    command
}

/// `program` run in the workspace, in the environment every task runs
/// cargo in.
fn task_command(root: &PathBuf, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .current_dir(root)
        // No test may ever reach a cloud metadata endpoint.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env(
            server_env::SERVERS_DIR_VAR,
            root.join(".casaas").join("servers"),
        );
    command
}

fn cargo(root: &PathBuf, args: &[&str]) -> Result<()> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = cargo_command(root, args)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

fn sim(
    root: &PathBuf,
    ops: u64,
    seed: u64,
    primitives: &[String],
    explore_configs: bool,
) -> Result<()> {
    let args = sim_args(ops, seed, primitives, explore_configs);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cargo(root, &args)
}

/// The cargo arguments that run the simulation (here and in the mutants
/// run).
fn sim_args(ops: u64, seed: u64, primitives: &[String], explore_configs: bool) -> Vec<String> {
    let mut args: Vec<String> = ["run", "--quiet", "--release", "-p", "casaas-sim", "--"]
        .map(String::from)
        .to_vec();
    args.extend([
        "--ops".into(),
        ops.to_string(),
        "--seed".into(),
        seed.to_string(),
    ]);
    for primitive in primitives {
        args.extend(["--primitive".into(), primitive.clone()]);
    }
    if explore_configs {
        args.push("--explore-configs".into());
    }
    args
}

/// Servers the chaos run covers in CI, one minute each. S3 is Ceph RGW and
/// SeaweedFS, not moto: moto's conditional writes are not atomic (two
/// concurrent replaces of one version can both succeed), so an overlap
/// found on moto says nothing about casaas (docs/reliability.md).
/// SeaweedFS's were measured atomic, within and across its two gateways
/// (casaas-s3/tests/seaweedfs.rs, `race_across_endpoints`).
/// `createonly` (SeaweedFS answering 501 to every If-Match) runs in the
/// create-only layout, which its URL must name: nothing else tells a
/// client that this S3 endpoint lacks conditional replace.
const CHAOS_SERVERS: [(&str, &str); 5] = [
    ("ceph", ""),
    ("seaweedfs", ""),
    ("azurite", ""),
    ("fake-gcs", ""),
    ("createonly", "layout=epochs"),
];

fn chaos(
    ctx: &servers::Ctx,
    root: &PathBuf,
    server: &str,
    minutes: f64,
    seed: u64,
    option: &str,
    extra: &[&str],
) -> Result<()> {
    let args = chaos_args(ctx, server, minutes, seed, option, extra)?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cargo(root, &args)
}

/// The cargo arguments of one chaos run against `server` (started if it is
/// not running).
fn chaos_args(
    ctx: &servers::Ctx,
    server: &str,
    minutes: f64,
    seed: u64,
    option: &str,
    extra: &[&str],
) -> Result<Vec<String>> {
    if !(minutes > 0.0 && minutes <= 24.0 * 60.0) {
        bail!("--minutes must be between 0 and 1440");
    }
    servers::up(ctx, &[server.to_string()])?;
    let env_file = ctx.env_file(server);
    let test_server = ctx.test_server(server)?;
    let mut url = test_server.url.clone();
    // A server with several gateways (SeaweedFS) is run through all of them.
    let gateways = test_server
        .env
        .get("CASAAS_TEST_GATEWAY_URLS")
        .cloned()
        .unwrap_or_default();
    if url.is_empty() {
        bail!("{} has no store URL", env_file.display());
    }
    if !option.is_empty() {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(option);
    }
    let seconds = (minutes * 60.0).round().max(1.0) as u64;
    eprintln!("xtask: chaos against {server} for {seconds}s (seed {seed})");
    let env_file = env_file.to_string_lossy();
    let (seconds, seed) = (seconds.to_string(), seed.to_string());
    let mut args = vec![
        "run",
        "--quiet",
        "-p",
        "casaas-testkit",
        "--bin",
        "chaos",
        "--",
        "run",
        "--url",
        &url,
        "--env-file",
        &env_file,
        "--seconds",
        &seconds,
        "--seed",
        &seed,
    ];
    let gateways: Vec<String> = gateways
        .split_whitespace()
        .map(|gateway| match option {
            "" => gateway.to_string(),
            option => format!(
                "{gateway}{}{option}",
                if gateway.contains('?') { '&' } else { '?' }
            ),
        })
        .collect();
    let gateways = gateways.join(" ");
    if !gateways.is_empty() {
        args.extend(["--gateways", &gateways]);
    }
    args.extend(extra);
    Ok(args.into_iter().map(String::from).collect())
}

/// CI's chaos runs (the cargo arguments of each): a minute per server in
/// [`CHAOS_SERVERS`], then a minute of locks under sessions on Ceph and one
/// of writes through group commit on fake-gcs.
fn ci_chaos_runs(ctx: &servers::Ctx) -> Result<Vec<Vec<String>>> {
    let mut runs = Vec::new();
    for (server, option) in CHAOS_SERVERS {
        runs.push(chaos_args(ctx, server, 1.0, 1, option, &[])?);
    }
    // Locks under sessions: one more minute, on Ceph.
    runs.push(chaos_args(
        ctx,
        "ceph",
        1.0,
        1,
        "",
        &["--sessions", "true"],
    )?);
    // Writes through group commit (batches of several updates per
    // write): one more minute, on fake-gcs.
    runs.push(chaos_args(
        ctx,
        "fake-gcs",
        1.0,
        1,
        "",
        &["--group-commit", "true"],
    )?);
    Ok(runs)
}

/// How many of CI's chaos minutes run at the same time. A chaos run spends
/// its minute mostly waiting (lease TTLs, pauses, the proxy's stalls), so
/// runs against different servers overlap well; run one after another they
/// were about eight minutes of every CI run.
const CI_CHAOS_AT_ONCE: usize = 4;

/// Runs the chaos runs `runs` (each the cargo arguments from
/// [`chaos_args`]), `at_once` at a time, each one's output kept in a file
/// of its own and printed whole when it ends; fails naming every run that
/// failed.
fn chaos_runs_at_once(
    ctx: &servers::Ctx,
    root: &PathBuf,
    runs: &[Vec<String>],
    at_once: usize,
) -> Result<()> {
    // Built once, before the runs start, so that no run's minute is spent
    // waiting for another's build.
    cargo(
        root,
        &["build", "--quiet", "-p", "casaas-testkit", "--bin", "chaos"],
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let binary = target.join("debug").join("chaos");
    let logs = ctx.state.join("ci");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let mut failed = Vec::new();
    for (wave, chunk) in runs.chunks(at_once.max(1)).enumerate() {
        let mut children = Vec::new();
        for (n, args) in chunk.iter().enumerate() {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let label = chaos_label(&args);
            // The binary itself, not `cargo run`: runs that start together
            // would otherwise queue on cargo's lock of the target directory.
            let binary_args = args
                .iter()
                .position(|a| *a == "--")
                .map_or(&args[..], |i| &args[i + 1..]);
            let log = logs.join(format!("chaos-{wave}-{n}.log"));
            let file = std::fs::File::create(&log)
                .with_context(|| format!("creating {}", log.display()))?;
            let err = file.try_clone()?;
            eprintln!("xtask: chaos {label} started (output in {})", log.display());
            let child = task_command(root, &binary)
                .args(binary_args)
                .stdout(file)
                .stderr(err)
                .spawn()
                .with_context(|| format!("running {}", binary.display()))?;
            children.push((label, log, child));
        }
        for (label, log, mut child) in children {
            let status = child.wait()?;
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            for line in output.lines() {
                eprintln!("[chaos {label}] {line}");
            }
            if status.success() {
                eprintln!("xtask: chaos {label} passed");
            } else {
                eprintln!("xtask: chaos {label} FAILED ({status})");
                failed.push(label);
            }
        }
    }
    if !failed.is_empty() {
        bail!("chaos failed: {}", failed.join(", "));
    }
    Ok(())
}

/// `SERVER[ options]` for a chaos run's cargo arguments: the store URL's
/// server and the options that set the run apart.
fn chaos_label(args: &[&str]) -> String {
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| *a == flag)
            .and_then(|i| args.get(i + 1))
            .copied()
    };
    let server = value_of("--env-file")
        // `.casaas/servers/NAME/env`
        .and_then(|file| std::path::Path::new(file).parent()?.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "?".into());
    let mut label = server;
    for flag in ["--sessions", "--group-commit"] {
        if value_of(flag).is_some() {
            label.push(' ');
            label.push_str(flag.trim_start_matches('-'));
        }
    }
    if value_of("--url").is_some_and(|url| url.contains("layout=epochs")) {
        label.push_str(" layout=epochs");
    }
    label
}

/// The time each of CI's steps took, printed as a table when CI ends
/// (passed or failed), so that the cold cost of every step is on record.
#[derive(Default)]
struct StepTimes(Vec<(String, std::time::Duration)>);

impl StepTimes {
    /// Runs `step`, recording how long it took under `name`.
    fn time<T>(&mut self, name: &str, step: impl FnOnce() -> Result<T>) -> Result<T> {
        let started = std::time::Instant::now();
        let result = step();
        self.0.push((name.to_string(), started.elapsed()));
        result
    }

    fn print(&self) {
        eprintln!("xtask: ci step times");
        for (name, took) in &self.0 {
            eprintln!("xtask:   {:>7.1} s  {name}", took.as_secs_f64());
        }
    }
}

fn ci(root: &PathBuf, sim_ops: u64, keep_servers: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let mut times = StepTimes::default();
    let result = ci_steps(root, sim_ops, keep_servers, &mut times);
    times.print();
    result?;
    eprintln!("xtask: ci passed in {:.0?}", started.elapsed());
    Ok(())
}

fn ci_steps(root: &PathBuf, sim_ops: u64, keep_servers: bool, times: &mut StepTimes) -> Result<()> {
    times.time("fmt", || cargo(root, &["fmt", "--all", "--check"]))?;
    times.time("clippy", || {
        cargo(
            root,
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        )
    })?;
    // The docs without warnings, and no unrecorded change of a published
    // crate's public API.
    times.time("api", || api::api(root, false))?;
    // Every published crate packages together (the workspace hack resolves
    // to crates.io's empty stub), and the hack is as cargo-hakari writes it.
    times.time("package", || package::package(root, false))?;
    times.time("hakari", || package::hakari(root, false))?;
    // The library alone, as a user depends on it (default features, then
    // one provider), and the command with every feature.
    times.time("library and command builds", || {
        cargo(root, &["check", "-p", "casaas"])?;
        cargo(root, &["check", "-p", "casaas", "--features", "s3"])?;
        cargo(
            root,
            &["build", "-p", "casaas-cli", "--bins", "--all-features"],
        )
    })?;
    let ctx = servers::Ctx::new(root.clone());
    let result = times
        .time("servers up", || servers::up(&ctx, &[]))
        .and_then(|()| {
            times.time("cargo test", || {
                cargo(root, &["test", "--workspace", "--no-fail-fast"])
            })?;
            times.time("python", || python::python(root, true))?;
            times.time("simulation", || sim(root, sim_ops, 1, &[], false))?;
            // The same operations again, each client with a timing of its own.
            times.time("simulation, explored timing", || {
                sim(root, sim_ops, 1, &[], true)
            })?;
            times.time("chaos", || {
                chaos_runs_at_once(&ctx, root, &ci_chaos_runs(&ctx)?, CI_CHAOS_AT_ONCE)
            })?;
            Ok(())
        });
    if !keep_servers {
        times.time("servers down", || servers::down(&ctx, &[]))?;
    }
    result
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = workspace_root()?;
    let ctx = servers::Ctx::new(root.clone());
    match cli.task {
        Task::Ci {
            sim_ops,
            keep_servers,
        } => ci(&root, sim_ops, keep_servers),
        Task::Api { accept } => api::api(&root, accept),
        Task::Package { verify } => package::package(&root, verify),
        Task::Hakari { write } => package::hakari(&root, write),
        Task::Man => man::man(&root),
        Task::Python { require_servers } => python::python(&root, require_servers),
        Task::Wheel { dev } => python::wheel(&root, dev).map(drop),
        Task::Iceberg { keep_servers } => python::iceberg(&root, keep_servers),
        Task::Servers { action } => match action {
            ServersAction::Up { names } => servers::up(&ctx, &names),
            ServersAction::Down { names } => servers::down(&ctx, &names),
            ServersAction::Status { names } => servers::status(&ctx, &names),
        },
        Task::Sim {
            ops,
            seed,
            primitive,
            explore_configs,
        } => sim(&root, ops, seed, &primitive, explore_configs),
        Task::Mutants { ops, seed, only } => mutants::mutants(&root, ops, seed, only.as_deref()),
        Task::CreateonlyProxy { listen, upstream } => createonly_proxy::run(listen, &upstream),
        Task::Chaos {
            server,
            minutes,
            seed,
            keep_servers,
            option,
            sessions,
            group_commit,
            primitive,
            slots,
        } => {
            let option = option.unwrap_or_else(|| {
                CHAOS_SERVERS
                    .iter()
                    .find(|(name, _)| *name == server)
                    .map_or(String::new(), |(_, option)| option.to_string())
            });
            let mut extra: Vec<&str> = Vec::new();
            if sessions {
                extra.extend(["--sessions", "true"]);
            }
            if group_commit {
                extra.extend(["--group-commit", "true"]);
            }
            if let Some(primitive) = &primitive {
                extra.extend(["--primitive", primitive]);
            }
            let slots = slots.map(|n| n.to_string());
            if let Some(slots) = &slots {
                extra.extend(["--slots", slots]);
            }
            let result = chaos(&ctx, &root, &server, minutes, seed, &option, &extra);
            if !keep_servers {
                servers::down(&ctx, &[server])?;
            }
            result
        }
        Task::ChaosCi { at_once } => {
            chaos_runs_at_once(&ctx, &root, &ci_chaos_runs(&ctx)?, at_once)
        }
        Task::Bench {
            quick,
            keep_servers,
        } => bench::bench(&ctx, quick, keep_servers),
        Task::VendorMatrix { render: true, .. } => vendor_matrix::render_stored(&ctx),
        Task::VendorMatrix {
            names,
            quick,
            keep_servers,
            render: false,
        } => vendor_matrix::vendor_matrix(
            &ctx,
            &names,
            quick,
            keep_servers,
            &vendor_matrix::command_line(),
        ),
    }
}
