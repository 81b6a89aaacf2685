//! The torture run (`cargo xtask chaos` starts the server and calls this).
//!
//! ```text
//! chaos run --url STORE_URL [--gateways "URL …"] [--env-file FILE] [--seconds 60] [--seed 1] [--workers 5] [--ttl-ms 2000] [--work-dir DIR] [--sessions true] [--group-commit true]
//! chaos worker --url STORE_URL --id N --seed S --ttl-ms T --log FILE [--sessions true] [--group-commit true]
//! ```
//!
//! `run` puts a chaos proxy in front of the store's endpoint (and of each
//! other gateway `--gateways` names: URLs of the same bucket through other
//! endpoints; workers are spread over all of them), starts worker
//! processes that each loop (acquire the lease, increment a fenced counter
//! and append to a fenced log with their token, hold a while, release or
//! exit), SIGKILLs and SIGSTOP/SIGCONTs random workers (pauses up to 3×TTL)
//! while the proxy injects faults, then checks what the workers believed
//! and were told against what the server holds, and prints
//! `acquisitions=N kills=K pauses=P faults=F overlaps=O stale_writes_accepted=S lost_updates=L duplicate_updates=D`.
//! Exits 1 on any violation, or if nothing was acquired.
//!
//! `--sessions true`: each worker holds the lock under a session of its own
//! (a heartbeat per process; a killed or frozen holder's lock is taken over
//! by ending its session's term), and now and then closes its session and
//! opens the next term; the line starts with `mode=sessions`.
//!
//! `--group-commit true`: while it holds the lock, each worker writes its
//! increments and appends through `GroupResource` and `GroupLog` from
//! [`GROUP_TASKS`] tasks at once, so that batches form (several updates in
//! one conditional write). The checks are the same, over every record of
//! every log entry; the line starts with `mode=group_commit` and ends with
//! `batched_entries=N`, and a run without at least 5 log entries of several
//! records is inconclusive, not a pass.
//!
//! `--primitive semaphore` (with `--slots N`, 3 by default): each worker
//! loops taking a slot of one semaphore and appending to that slot's fenced
//! log with the slot's token. `--primitive rwlock`: each worker loops
//! taking one read-write lock shared (most times) or exclusive; writers
//! increment the fenced counter and append to the fenced log with their
//! token, readers only hold. The checks are
//! `casaas_testkit::chaos::check_primitive`'s; the line starts with
//! `mode=semaphore slots=N` or `mode=rwlock` and ends with `violations=V`.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use casaas_core::lease::{
    Entropy, FencedLog, FencedResource, GroupCommitConfig, GroupLog, GroupResource, Lease,
    LeaseConfig, LeaseError, LeaseGuard, RwLock, Semaphore, Session, WaitOptions,
};
use casaas_core::testkit::TestServer;
use std::sync::Arc;

use casaas_core::layout::{EpochStore, LeaseLayout, layout_of};
use casaas_core::{CasStore, open_store};
use casaas_testkit::chaos::{
    COUNTER_KEY, Event, LOCK_KEY, LOG_PREFIX, MinimumWork, Observed, Primitive, READER_LANE,
    SEMAPHORE_KEY, SESSION_PREFIX, Verdict, WRITER_LANE, check_primitive, monotonic_ns, ns,
    parse_logs, slot_append_kind, slot_lane, slot_log_prefix,
};
use casaas_testkit::chaos_proxy::{endpoint_of, rewrite_store_url};
use casaas_testkit::{ChaosProxy, ProxyFault, RandomFaults};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The provider's own timeout for one request, in seconds (the proxy's
/// stalls are longer).
const CLIENT_TIMEOUT_S: u64 = 1;

/// How often a worker exits holding the lease instead of releasing it. A
/// takeover after a silent holder costs a whole TTL, and kills and pauses of
/// holders produce takeovers too, so this stays low enough for the run to
/// reach hundreds of acquisitions in ten minutes.
const EXIT_HOLDING: f64 = 0.05;

/// With sessions: how often a worker closes its session after a release
/// (the next holding opens a new term).
const CLOSE_SESSION: f64 = 0.1;

/// With group commit: the tasks of a worker writing at once while it
/// holds the lock.
const GROUP_TASKS: usize = 4;

/// With a read-write lock: how often a worker takes it exclusive (else
/// shared), so that readers share often and writers still come.
const WRITE_SHARE: f64 = 0.3;

/// The slots of the semaphore when `--slots` is not given.
const DEFAULT_SLOTS: u32 = 3;

/// `--primitive` and `--slots`: what the workers hold.
fn primitive_of(map: &HashMap<String, String>) -> Result<Primitive> {
    let slots: u32 = get(map, "slots", Some(DEFAULT_SLOTS))?;
    match map.get("primitive").map_or("lease", String::as_str) {
        "lease" => Ok(Primitive::Lease),
        "semaphore" if slots >= 1 => Ok(Primitive::Semaphore { slots }),
        "semaphore" => bail!("--slots must be at least 1"),
        "rwlock" => Ok(Primitive::RwLock),
        other => bail!("--primitive {other}: expected lease, semaphore or rwlock"),
    }
}

/// `--primitive` and `--slots` as given to a worker.
fn primitive_args(primitive: Primitive) -> [String; 4] {
    let (name, slots) = match primitive {
        Primitive::Lease => ("lease", DEFAULT_SLOTS),
        Primitive::Semaphore { slots } => ("semaphore", slots),
        Primitive::RwLock => ("rwlock", DEFAULT_SLOTS),
    };
    [
        "--primitive".into(),
        name.into(),
        "--slots".into(),
        slots.to_string(),
    ]
}

/// The harness kills or pauses one worker every this many milliseconds
/// (uniform): about 280 kills and pauses in ten minutes.
const DISRUPTION_EVERY_MS: std::ops::Range<u64> = 1200..3000;

/// How long to hold, as a fraction of the TTL: mostly short holds (one round of
/// fenced writes; the next contender takes over quickly), and one in ten
/// long enough to renew once or twice while writing.
fn hold_fraction(rng: &mut ChaCha8Rng) -> f64 {
    if rng.random_bool(0.1) {
        rng.random_range(0.4..1.0)
    } else {
        rng.random_range(0.0..0.1)
    }
}

fn arg_map(args: &[String]) -> Result<HashMap<String, String>> {
    let mut map = HashMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .with_context(|| format!("unexpected argument '{flag}'"))?;
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        map.insert(name.to_string(), value.clone());
    }
    Ok(map)
}

fn get<T: std::str::FromStr>(
    map: &HashMap<String, String>,
    name: &str,
    default: Option<T>,
) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    match map.get(name) {
        Some(v) => v.parse().map_err(|e| anyhow::anyhow!("--{name} {v}: {e}")),
        None => default.with_context(|| format!("--{name} is required")),
    }
}

fn main() -> ExitCode {
    // The Azure SDK's request dumps carry the signed Authorization header:
    // capped even at RUST_LOG=trace, as in the shipped binaries.
    let filter = casaas_azure::SDK_LOG_CAPS
        .iter()
        .filter_map(|directive| directive.parse().ok())
        .fold(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            tracing_subscriber::EnvFilter::add_directive,
        );
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("worker") => worker(&args[1..]).map(|()| true),
        _ => Err(anyhow::anyhow!(
            "usage: chaos run --url STORE_URL [--env-file FILE] [--seconds N] [--seed S] [--workers K] [--ttl-ms T]"
        )),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("chaos: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn register_providers() {
    casaas_s3::register();
    casaas_gcs::register();
    casaas_azure::register();
}

// ------------------------------------------------------------------ worker

struct WorkerLog(std::fs::File);

impl WorkerLog {
    fn event(&mut self, event: Event) {
        // One write per line, unbuffered: a SIGKILL loses at most the line
        // being written, which the parser ignores.
        let _ = self.0.write_all(format!("{event}\n").as_bytes());
    }
}

fn outcome<T>(result: &Result<T, LeaseError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(LeaseError::Store(err)) if err.may_have_taken_effect() => "amb",
        Err(_) => "no",
    }
}

/// `worker`: loops acquiring the lease and writing with its token until
/// killed, logging every event.
fn worker(args: &[String]) -> Result<()> {
    let map = arg_map(args)?;
    let url: String = get(&map, "url", None)?;
    let id: u32 = get(&map, "id", None)?;
    let seed: u64 = get(&map, "seed", None)?;
    let ttl = Duration::from_millis(get(&map, "ttl-ms", Some(2000))?);
    let log_path: PathBuf = get(&map, "log", None)?;
    let sessions: bool = get(&map, "sessions", Some(false))?;
    let group_commit: bool = get(&map, "group-commit", Some(false))?;
    let primitive = primitive_of(&map)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let log = WorkerLog(file);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    register_providers();
    runtime.block_on(async move {
        let store = open_store(&url).await?;
        let worker = Worker::new(store.clone(), id, seed, ttl, log, sessions, group_commit)?;
        match primitive {
            Primitive::Lease => worker.run().await,
            primitive => worker.run_primitive(store, seed, primitive).await,
        }
    })
}

/// Where a worker's lock comes from.
enum LockSource {
    /// A lease of its own, renewed by its guard.
    Plain(Lease),
    /// A lease under the worker's session (opened on first use, and again
    /// under a new term after it ended or was closed).
    Session {
        heartbeat: Lease,
        open: Option<Box<(Session, Lease)>>,
    },
}

impl LockSource {
    /// The lease to acquire the lock with; under a session, opening the
    /// session first if there is none or it ended.
    async fn lease(&mut self) -> Result<Lease, LeaseError> {
        match self {
            LockSource::Plain(lease) => Ok(lease.clone()),
            LockSource::Session { heartbeat, open } => {
                if let Some(open) = open
                    && open.0.lost_reason().is_none()
                {
                    return Ok(open.1.clone());
                }
                let session = Session::open(heartbeat.clone(), WaitOptions::default()).await?;
                let lease = session.lease(LOCK_KEY)?;
                *open = Some(Box::new((session, lease.clone())));
                Ok(lease)
            }
        }
    }

    /// Closes the session, if any: one write ends it (the next holding
    /// opens a new term).
    async fn close_session(&mut self) {
        if let LockSource::Session { open, .. } = self
            && let Some(open) = open.take()
            && let Err(err) = open.0.close().await
        {
            eprintln!("closing the session: {err}");
        }
    }
}

/// One worker process: its lease (or its session), the fenced counter and
/// log it writes with the lock's token, and its event log.
struct Worker {
    id: u32,
    ttl: Duration,
    config: LeaseConfig,
    rng: ChaCha8Rng,
    /// Shared by the writing tasks under group commit (one thread: never
    /// borrowed across an await).
    log: RefCell<WorkerLog>,
    locks: LockSource,
    counter: FencedResource<u64>,
    entries: FencedLog<serde_json::Value>,
    /// With group commit: the counter and log through group handles.
    group: Option<(GroupResource<u64>, GroupLog<serde_json::Value>)>,
    /// The last write's number.
    op: Cell<u64>,
}

impl Worker {
    /// Worker `id` on `store`, its randomness all from `seed`; holding
    /// the lock under a session of its own if `sessions`.
    fn new(
        store: Arc<dyn CasStore>,
        id: u32,
        seed: u64,
        ttl: Duration,
        log: WorkerLog,
        sessions: bool,
        group_commit: bool,
    ) -> Result<Worker> {
        let rng = ChaCha8Rng::seed_from_u64(seed);
        let config = LeaseConfig::from_ttl(ttl);
        let key = if sessions {
            format!("{SESSION_PREFIX}/worker-{id}")
        } else {
            LOCK_KEY.to_string()
        };
        let lease = Lease::new(store.clone(), key, format!("worker-{id}"), config.clone())?
            .with_entropy(Entropy::seeded(seed));
        let locks = if sessions {
            LockSource::Session {
                heartbeat: lease,
                open: None,
            }
        } else {
            LockSource::Plain(lease)
        };
        let counter = FencedResource::<u64>::new(store.clone(), COUNTER_KEY)?
            .with_entropy(Entropy::seeded(seed ^ 1))
            .with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(config.request_timeout)
                    .with_retry_period(config.retry_period)
                    .with_max_attempts(8),
            );
        let entries = FencedLog::<serde_json::Value>::new(store.clone(), LOG_PREFIX)?
            .with_entropy(Entropy::seeded(seed ^ 2))
            .with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(config.request_timeout)
                    .with_retry_period(config.retry_period)
                    .with_max_attempts(8),
            );
        let group = group_commit.then(|| {
            (
                GroupResource::new(counter.clone(), GroupCommitConfig::default()),
                GroupLog::new(entries.clone(), GroupCommitConfig::default()),
            )
        });
        Ok(Worker {
            id,
            ttl,
            config,
            rng,
            log: RefCell::new(log),
            locks,
            counter,
            entries,
            group,
            op: Cell::new(0),
        })
    }

    /// Acquires, holds while writing, and releases (or exits holding), for
    /// ever.
    async fn run(mut self) -> Result<()> {
        let id = self.id;
        loop {
            let acquired = match self.locks.lease().await {
                Ok(lease) => lease.acquire(WaitOptions::default()).await,
                Err(err) => Err(err),
            };
            let guard = match acquired {
                Ok(guard) => guard,
                Err(err) => {
                    eprintln!("worker {id}: acquire failed: {err}");
                    tokio::time::sleep(self.config.retry_period).await;
                    continue;
                }
            };
            let token = guard.token();
            self.log.borrow_mut().event(Event::Acquired {
                worker: id,
                token,
                at: monotonic_ns(),
            });
            self.hold(&guard).await;
            if self.rng.random_bool(EXIT_HOLDING) {
                // Exit holding the lease, as a crashed process would.
                std::process::exit(0);
            }
            self.log.borrow_mut().event(Event::Released {
                worker: id,
                token,
                at: monotonic_ns(),
            });
            if let Err(err) = guard.release().await {
                eprintln!("worker {id}: release: {err}");
            }
            if self.rng.random_bool(CLOSE_SESSION) {
                self.locks.close_session().await;
            }
        }
    }

    /// Holds parts of `primitive` in turn, for ever: a slot of the
    /// semaphore (appending to the slot's fenced log with its token), or
    /// the read-write lock shared or, one time in [`WRITE_SHARE`],
    /// exclusive (writing the fenced counter and log with its token).
    async fn run_primitive(
        mut self,
        store: Arc<dyn CasStore>,
        seed: u64,
        primitive: Primitive,
    ) -> Result<()> {
        let id = self.id;
        let owner = format!("worker-{id}");
        let policy = casaas_core::lease::RetryPolicy::default()
            .with_request_timeout(self.config.request_timeout)
            .with_retry_period(self.config.retry_period)
            .with_max_attempts(8);
        let holder = match primitive {
            Primitive::Semaphore { slots } => {
                let lease = Lease::new(store.clone(), SEMAPHORE_KEY, owner, self.config.clone())?;
                let semaphore =
                    Semaphore::new(lease, slots)?.with_entropy(Entropy::seeded(seed ^ 3));
                let logs = (0..slots)
                    .map(|slot| {
                        Ok(FencedLog::<serde_json::Value>::new(
                            store.clone(),
                            slot_log_prefix(slot),
                        )?
                        .with_entropy(Entropy::seeded(seed ^ (16 + u64::from(slot))))
                        .with_retry_policy(policy))
                    })
                    .collect::<Result<Vec<_>, LeaseError>>()?;
                Holder::Semaphore(Box::new(semaphore), logs)
            }
            Primitive::RwLock => {
                let lease = Lease::new(store.clone(), LOCK_KEY, owner, self.config.clone())?
                    .with_entropy(Entropy::seeded(seed));
                Holder::RwLock(Box::new(
                    RwLock::new(lease)?.with_entropy(Entropy::seeded(seed ^ 3)),
                ))
            }
            Primitive::Lease => bail!("run_primitive holds a semaphore or a read-write lock"),
        };
        loop {
            let write = matches!(holder, Holder::RwLock(_)) && self.rng.random_bool(WRITE_SHARE);
            let acquired = match &holder {
                Holder::Semaphore(semaphore, _) => semaphore.acquire(WaitOptions::default()).await,
                Holder::RwLock(lock) if write => lock.write(WaitOptions::default()).await,
                Holder::RwLock(lock) => lock.read(WaitOptions::default()).await,
            };
            let guard = match acquired {
                Ok(guard) => guard,
                Err(err) => {
                    eprintln!("worker {id}: acquire failed: {err}");
                    tokio::time::sleep(self.config.retry_period).await;
                    continue;
                }
            };
            let (lane, slot_log) = match &holder {
                Holder::Semaphore(semaphore, logs) => match semaphore.slot_of(guard.key()) {
                    Some(slot) => (
                        slot_lane(slot),
                        logs.get(slot as usize).map(|log| (slot, log)),
                    ),
                    // Counted by the checker as a slot the semaphore lacks.
                    None => ("stray".to_string(), None),
                },
                Holder::RwLock(_) if write => (WRITER_LANE.to_string(), None),
                Holder::RwLock(_) => (READER_LANE.to_string(), None),
            };
            let token = guard.token();
            self.log.borrow_mut().event(Event::Took {
                worker: id,
                lane: lane.clone(),
                token,
                at: monotonic_ns(),
            });
            let hold_until = Instant::now() + self.ttl.mul_f64(hold_fraction(&mut self.rng));
            while Instant::now() < hold_until {
                if guard.ensure_held_for(self.ttl / 10).is_err() {
                    break;
                }
                self.log.borrow_mut().event(Event::Holds {
                    worker: id,
                    lane: lane.clone(),
                    token,
                    until: monotonic_ns() + ns(guard.remaining()),
                });
                if let Some((slot, log)) = slot_log {
                    let kind = slot_append_kind(slot);
                    let op = self.write_started(&kind);
                    let r = log
                        .append(token, serde_json::json!({"w": id, "op": op}))
                        .await;
                    self.write_finished(&kind, op, outcome(&r));
                } else if write {
                    self.write_round(token).await;
                }
                tokio::time::sleep(Duration::from_millis(self.rng.random_range(10..60))).await;
            }
            if self.rng.random_bool(EXIT_HOLDING) {
                // Exit holding, as a crashed process would.
                std::process::exit(0);
            }
            self.log.borrow_mut().event(Event::Gave {
                worker: id,
                lane,
                token,
                at: monotonic_ns(),
            });
            if let Err(err) = guard.release().await {
                eprintln!("worker {id}: release: {err}");
            }
        }
    }

    /// Holds the lease for a random part of the TTL, or until it is no
    /// longer sure to hold it, writing with its token all the while.
    async fn hold(&mut self, guard: &LeaseGuard) {
        let (id, token) = (self.id, guard.token());
        let hold_until = Instant::now() + self.ttl.mul_f64(hold_fraction(&mut self.rng));
        while Instant::now() < hold_until {
            if guard.ensure_held_for(self.ttl / 10).is_err() {
                break;
            }
            let now = monotonic_ns();
            self.log.borrow_mut().event(Event::Belief {
                worker: id,
                token,
                until: now + ns(guard.remaining()),
            });
            match &self.group {
                None => self.write_round(token).await,
                Some((counter, entries)) => {
                    // Several tasks at once: their updates queue while a
                    // write is in flight and share the next one.
                    let this = &*self;
                    futures::future::join_all(
                        (0..GROUP_TASKS).map(|_| this.group_round(counter, entries, token)),
                    )
                    .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(self.rng.random_range(10..60))).await;
        }
    }

    /// One increment and one append, each one conditional write.
    async fn write_round(&self, token: u64) {
        let op = self.write_started("inc");
        let r = self
            .counter
            .update(token, |v| v.copied().unwrap_or(0) + 1)
            .await;
        self.write_finished("inc", op, outcome(&r));
        let op = self.write_started("app");
        let r = self
            .entries
            .append(token, serde_json::json!({"w": self.id, "op": op}))
            .await;
        self.write_finished("app", op, outcome(&r));
    }

    /// One increment and one append through the group handles (one of
    /// several tasks doing the same at once).
    async fn group_round(
        &self,
        counter: &GroupResource<u64>,
        entries: &GroupLog<serde_json::Value>,
        token: u64,
    ) {
        let op = self.write_started("inc");
        let r = counter.update(token, |v| v.copied().unwrap_or(0) + 1).await;
        self.write_finished("inc", op, outcome(&r));
        let op = self.write_started("app");
        let r = entries
            .append(token, serde_json::json!({"w": self.id, "op": op}))
            .await;
        self.write_finished("app", op, outcome(&r));
    }

    /// Logs the start of the next write, of `kind`; its number.
    fn write_started(&self, kind: &str) -> u64 {
        let op = self.op.get() + 1;
        self.op.set(op);
        self.log.borrow_mut().event(Event::WriteStarted {
            worker: self.id,
            kind: kind.into(),
            op,
        });
        op
    }

    /// Logs what write `op`, of `kind`, was told.
    fn write_finished(&self, kind: &str, op: u64, result: &str) {
        self.log.borrow_mut().event(Event::WriteResult {
            worker: self.id,
            kind: kind.into(),
            op,
            result: result.into(),
        });
    }
}

/// What a worker of a primitive run holds parts of.
enum Holder {
    /// The semaphore, and each slot's fenced log.
    Semaphore(Box<Semaphore>, Vec<FencedLog<serde_json::Value>>),
    /// The read-write lock.
    RwLock(Box<RwLock>),
}

// --------------------------------------------------------------------- run

struct Workers {
    exe: PathBuf,
    /// One URL per endpoint, each through its proxy; worker `id` uses
    /// `urls[id % len]`.
    urls: Vec<String>,
    env: BTreeMap<String, String>,
    dir: PathBuf,
    ttl_ms: u64,
    seed: u64,
    /// Workers hold the lock under sessions.
    sessions: bool,
    /// Workers write through group commit.
    group_commit: bool,
    /// What the workers hold.
    primitive: Primitive,
    next_id: u32,
    live: Vec<(u32, Child)>,
}

impl Workers {
    fn spawn(&mut self) -> Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        let log = self.dir.join(format!("worker-{id}.log"));
        let url = &self.urls[id as usize % self.urls.len()];
        let stderr = std::fs::File::create(self.dir.join(format!("worker-{id}.err")))?;
        let child = Command::new(&self.exe)
            .arg("worker")
            .args(["--url", url])
            .args(["--id", &id.to_string()])
            .args([
                "--seed",
                &(self.seed.wrapping_mul(1000) + u64::from(id)).to_string(),
            ])
            .args(["--ttl-ms", &self.ttl_ms.to_string()])
            .args(["--sessions", &self.sessions.to_string()])
            .args(["--group-commit", &self.group_commit.to_string()])
            .args(primitive_args(self.primitive))
            .arg("--log")
            .arg(&log)
            .envs(&self.env)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("starting a worker")?;
        self.live.push((id, child));
        Ok(())
    }

    /// Replaces workers that exited on their own.
    fn respawn_exited(&mut self) -> Result<()> {
        let before = self.live.len();
        self.live
            .retain_mut(|(_, child)| matches!(child.try_wait(), Ok(None)));
        for _ in self.live.len()..before {
            self.spawn()?;
        }
        Ok(())
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status();
}

/// What `run` was asked for.
struct RunArgs {
    url: String,
    /// Other endpoints of the same bucket.
    gateways: Vec<String>,
    seconds: u64,
    seed: u64,
    workers: usize,
    ttl_ms: u64,
    /// The server's environment, for the workers and the checker.
    env: BTreeMap<String, String>,
    /// Where to keep the workers' logs, if given.
    work_dir: Option<PathBuf>,
    /// Workers hold the lock under sessions.
    sessions: bool,
    /// Workers write through group commit.
    group_commit: bool,
    /// What the workers hold.
    primitive: Primitive,
}

impl RunArgs {
    /// Parses `run`'s flags, and reads the env file they name.
    fn parse(args: &[String]) -> Result<RunArgs> {
        let map = arg_map(args)?;
        let url: String = get(&map, "url", None)?;
        let gateways: Vec<String> = map
            .get("gateways")
            .map(|g| g.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let seconds: u64 = get(&map, "seconds", Some(60))?;
        let seed: u64 = get(&map, "seed", Some(1))?;
        let workers: usize = get(&map, "workers", Some(5))?;
        let ttl_ms: u64 = get(&map, "ttl-ms", Some(2000))?;
        if workers < 2 {
            bail!("--workers must be at least 2");
        }
        let env = match map.get("env-file") {
            Some(path) => {
                TestServer::read(Path::new(path))
                    .with_context(|| format!("reading {path}"))?
                    .env
            }
            None => BTreeMap::new(),
        };
        let primitive = primitive_of(&map)?;
        let sessions = get(&map, "sessions", Some(false))?;
        let group_commit = get(&map, "group-commit", Some(false))?;
        if primitive != Primitive::Lease && (sessions || group_commit) {
            bail!("--primitive semaphore and rwlock run without --sessions and --group-commit");
        }
        Ok(RunArgs {
            url,
            gateways,
            seconds,
            seed,
            workers,
            ttl_ms,
            env,
            work_dir: map.get("work-dir").map(PathBuf::from),
            sessions,
            group_commit,
            primitive,
        })
    }
}

/// `run`: the torture run; whether it passed.
fn run(args: &[String]) -> Result<bool> {
    let args = RunArgs::parse(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    register_providers();
    runtime.block_on(torture(args))
}

/// Starts the proxies and the workers, disrupts them for the run's time,
/// then checks what they logged against what the store holds.
async fn torture(args: RunArgs) -> Result<bool> {
    let stall = Duration::from_secs(CLIENT_TIMEOUT_S * 2);
    let prefix = format!("chaos-{}-{}", std::process::id(), args.seed);
    let (proxies, worker_urls) = start_proxies(&args, stall, &prefix).await?;
    if worker_urls.len() > 1 {
        eprintln!("chaos: workers spread over {} endpoints", worker_urls.len());
    }
    let direct_url =
        rewrite_store_url(&args.url, None, None, &prefix).map_err(anyhow::Error::msg)?;
    let store = casaas_testkit::open_with_env(&direct_url, &args.env).await?;
    let ttl_ms = paced_ttl_ms(store.as_ref(), args.ttl_ms);
    let dir = args
        .work_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(&prefix));
    std::fs::create_dir_all(&dir)?;
    let mut pool = Workers {
        exe: std::env::current_exe()?,
        urls: worker_urls,
        env: args.env.clone(),
        dir: dir.clone(),
        ttl_ms,
        seed: args.seed,
        sessions: args.sessions,
        group_commit: args.group_commit,
        primitive: args.primitive,
        next_id: 1,
        live: Vec::new(),
    };
    for _ in 0..args.workers {
        pool.spawn()?;
    }
    let run_for = Duration::from_secs(args.seconds);
    let (kills, pauses) =
        disrupt(&mut pool, args.seed, run_for, Duration::from_millis(ttl_ms)).await?;
    // Late writes (stalled in the proxy) land within the stall.
    tokio::time::sleep(stall + Duration::from_secs(1)).await;
    let faults: usize = proxies.iter().map(|p| p.fault_count()).sum();
    drop(proxies);

    let texts = worker_logs(&dir)?;
    let events = parse_logs(texts.iter().map(String::as_str));
    let observed = observe(&store, args.primitive).await?;
    let verdict = check_primitive(&events, &observed, args.primitive);
    for detail in verdict.details.iter().take(20) {
        eprintln!("violation: {detail}");
    }
    if args.primitive != Primitive::Lease {
        print_primitive_line(args.primitive, &verdict, kills, pauses, faults);
        let minimum = MinimumWork::of(args.primitive);
        return Ok(passed(&verdict, &minimum, &dir, args.work_dir.is_some()));
    }
    let mut modes = String::new();
    if args.sessions {
        modes.push_str("mode=sessions ");
    }
    if args.group_commit {
        modes.push_str("mode=group_commit ");
    }
    let batched = if args.group_commit {
        format!(" batched_entries={}", verdict.batched_entries)
    } else {
        String::new()
    };
    println!(
        "{modes}acquisitions={} handovers={} writes_applied={} kills={kills} pauses={pauses} faults={faults} overlaps={} stale_writes_accepted={} lost_updates={} duplicate_updates={}{batched}",
        verdict.acquisitions,
        verdict.handovers,
        verdict.writes_applied,
        verdict.overlaps,
        verdict.stale_writes_accepted,
        verdict.lost_updates,
        verdict.duplicate_updates
    );
    let minimum = if args.group_commit {
        MinimumWork::group_commit()
    } else {
        MinimumWork::default()
    };
    Ok(passed(&verdict, &minimum, &dir, args.work_dir.is_some()))
}

/// The summary line of a semaphore or read-write lock run.
fn print_primitive_line(
    primitive: Primitive,
    verdict: &Verdict,
    kills: u64,
    pauses: u64,
    faults: usize,
) {
    let (mode, shape) = match primitive {
        Primitive::Semaphore { slots } => (
            format!("mode=semaphore slots={slots}"),
            format!(
                "most_at_once={} over_capacity={}",
                verdict.most_at_once, verdict.over_capacity
            ),
        ),
        _ => (
            "mode=rwlock".to_string(),
            format!(
                "writer_acquisitions={} most_readers_at_once={}",
                verdict.writer_acquisitions, verdict.most_at_once
            ),
        ),
    };
    println!(
        "{mode} acquisitions={} handovers={} writes_applied={} kills={kills} pauses={pauses} faults={faults} {shape} overlaps={} token_regressions={} unheld_writes={} stale_writes_accepted={} lost_updates={} duplicate_updates={} violations={}",
        verdict.acquisitions,
        verdict.handovers,
        verdict.writes_applied,
        verdict.overlaps,
        verdict.token_regressions,
        verdict.unheld_writes,
        verdict.stale_writes_accepted,
        verdict.lost_updates,
        verdict.duplicate_updates,
        verdict.violations()
    );
}

/// A chaos proxy in front of the store's endpoint and of each gateway,
/// injecting random faults: the proxies, and the URL a worker uses
/// through each.
async fn start_proxies(
    args: &RunArgs,
    stall: Duration,
    prefix: &str,
) -> Result<(Vec<ChaosProxy>, Vec<String>)> {
    let mut proxies = Vec::new();
    let mut worker_urls = Vec::new();
    for (n, endpoint_url) in std::iter::once(&args.url).chain(&args.gateways).enumerate() {
        let (origin, path) = endpoint_of(endpoint_url).map_err(anyhow::Error::msg)?;
        let proxy = ChaosProxy::start(&origin).await?;
        proxy.randomize(RandomFaults {
            seed: args.seed.wrapping_add(n as u64),
            probability: 0.15,
            faults: ProxyFault::all(stall),
        });
        let through = format!("{}{path}", proxy.endpoint());
        worker_urls.push(
            rewrite_store_url(endpoint_url, Some(&through), Some(CLIENT_TIMEOUT_S), prefix)
                .map_err(anyhow::Error::msg)?,
        );
        proxies.push(proxy);
    }
    Ok((proxies, worker_urls))
}

/// The TTL to run with: `ttl_ms`, raised so that renewals every ttl/3
/// respect the store's write rate per key; no more than that, since every
/// takeover waits a whole TTL.
fn paced_ttl_ms(store: &dyn CasStore, ttl_ms: u64) -> u64 {
    match store.capabilities().min_write_interval {
        Some(min) => ttl_ms.max(
            u64::try_from((min * 3 + Duration::from_millis(60)).as_millis()).unwrap_or(u64::MAX),
        ),
        None => ttl_ms,
    }
}

/// Kills or pauses a random worker every so often for `run_for`,
/// replacing the dead, then thaws and kills every worker: the kills and
/// pauses made.
async fn disrupt(
    pool: &mut Workers,
    seed: u64,
    run_for: Duration,
    ttl: Duration,
) -> Result<(u64, u64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut kills, mut pauses) = (0u64, 0u64);
    let deadline = Instant::now() + run_for;
    let mut paused: Vec<(u32, Instant)> = Vec::new();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(DISRUPTION_EVERY_MS))).await;
        // Thaw the workers whose pause is over.
        let now = Instant::now();
        paused.retain(|(pid, until)| {
            if *until <= now {
                signal(*pid, "CONT");
                false
            } else {
                true
            }
        });
        pool.respawn_exited()?;
        let candidates: Vec<usize> = (0..pool.live.len())
            .filter(|i| !paused.iter().any(|(pid, _)| *pid == pool.live[*i].1.id()))
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let index = candidates[rng.random_range(0..candidates.len())];
        let pid = pool.live[index].1.id();
        if rng.random_bool(0.5) {
            signal(pid, "KILL");
            kills += 1;
            let (_, mut child) = pool.live.remove(index);
            let _ = child.wait();
            pool.spawn()?;
        } else {
            signal(pid, "STOP");
            pauses += 1;
            paused.push((pid, now + ttl.mul_f64(rng.random_range(0.2..3.0))));
        }
    }
    for (pid, _) in &paused {
        signal(*pid, "CONT");
    }
    for (_, child) in &mut pool.live {
        signal(child.id(), "KILL");
        let _ = child.wait();
    }
    Ok((kills, pauses))
}

/// The text of every worker's log in `dir`.
fn worker_logs(dir: &Path) -> Result<Vec<String>> {
    let mut texts = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            texts.push(std::fs::read_to_string(&path)?);
        }
    }
    Ok(texts)
}

/// Whether the run passed: something was acquired, nothing was violated,
/// and enough work was done to show it. The logs in `dir` are removed after
/// a pass unless `keep_dir`.
fn passed(verdict: &Verdict, minimum: &MinimumWork, dir: &Path, keep_dir: bool) -> bool {
    if verdict.acquisitions == 0 {
        eprintln!(
            "chaos: no worker ever acquired the lease; a run where nothing happened is not a pass (worker stderr in {})",
            dir.display()
        );
        return false;
    }
    if verdict.violations() == 0
        && let Some(shortfall) = minimum.shortfall(verdict)
    {
        // A clean run that did too little proves nothing.
        eprintln!("chaos: {shortfall} (worker logs in {})", dir.display());
        return false;
    }
    if verdict.violations() == 0 && !keep_dir {
        let _ = std::fs::remove_dir_all(dir);
    } else {
        eprintln!("chaos: worker logs kept in {}", dir.display());
    }
    verdict.violations() == 0
}

/// The counter and every log entry, read raw (the counter through the
/// epoch view where the store uses the create-only layout, as its writers
/// did).
async fn observe(store: &Arc<dyn CasStore>, primitive: Primitive) -> Result<Observed> {
    let counter_view: Arc<dyn CasStore> = match layout_of(store.as_ref()) {
        LeaseLayout::Epochs => Arc::new(EpochStore::new(store.clone())),
        _ => store.clone(),
    };
    let counter = with_retries(|| counter_view.get(COUNTER_KEY))
        .await?
        .map(|o| o.body);
    let log_entries = read_log(store, LOG_PREFIX).await?;
    let mut slot_logs = BTreeMap::new();
    if let Primitive::Semaphore { slots } = primitive {
        for slot in 0..slots {
            slot_logs.insert(slot, read_log(store, &slot_log_prefix(slot)).await?);
        }
    }
    Ok(Observed {
        counter,
        log_entries,
        slot_logs,
    })
}

/// Every entry of the fenced log at `prefix`, read raw.
async fn read_log(
    store: &Arc<dyn CasStore>,
    prefix: &str,
) -> Result<BTreeMap<String, bytes::Bytes>> {
    let mut entries = BTreeMap::new();
    let prefix = format!("{prefix}/");
    for entry in with_retries(|| store.list(&prefix)).await? {
        if entry.key.ends_with("/_head") {
            continue;
        }
        if let Some(object) = with_retries(|| store.get(&entry.key)).await? {
            entries.insert(entry.key, object.body);
        }
    }
    Ok(entries)
}

/// Runs one of the checker's reads, again after a pause when the store
/// answered with an error that may pass (a timeout or a throttle on a
/// machine loaded by the run itself): reads change nothing, and a verdict
/// lost to one slow answer would leave the run without its final line.
async fn with_retries<T, F, Fut>(read: F) -> Result<T, casaas_core::CasError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, casaas_core::CasError>>,
{
    const ATTEMPTS: u32 = 6;
    let mut attempt = 1;
    loop {
        match read().await {
            Ok(value) => return Ok(value),
            Err(e) if attempt < ATTEMPTS && e.is_retryable() => {
                tracing::warn!(attempt, error = %e, "checker read failed; reading again");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
