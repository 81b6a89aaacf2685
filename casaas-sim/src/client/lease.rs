//! The `lease` and `shared_lease` primitives: clients (or several tasks of
//! one client sharing one `Lease`) acquire, act through a fenced resource,
//! and release, crash or drop; every guard's belief is recorded in true time.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::layout::EpochStore;
use casaas_core::lease::{
    AcquireOptions, Entropy, FencedResource, Lease, LeaseError, LeaseRecord, LeaseStatus,
};
use casaas_core::testkit::CreateOnlyStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::checker::lease as check;
use crate::clock::{SimClock, random_duration};
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::network::World;
use crate::{fnv, lock, secs};

/// The lock object every client contends for.
pub const LOCK_KEY: &str = "sim/lock";
/// The fenced resource the holders write to.
pub const FENCED_KEY: &str = "sim/resource";

/// A value written to the fenced resource: who wrote it, with which token,
/// and when (true time) the writer passed its lease check
/// (`ensure_held_for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimValue {
    pub client: u32,
    pub token: u64,
    pub checked_at_ns: u64,
}

/// One acquisition and what its holder believed.
#[derive(Debug, Clone)]
pub struct GuardRec {
    pub client: usize,
    /// The task of the client that acquired (always 0 for `lease`).
    pub task: usize,
    pub token: u64,
    pub acquired_at: Duration,
    /// Intervals of belief `[start, end)` in true time.
    pub beliefs: Vec<(Duration, Duration)>,
}

/// Everything the lease checkers look at.
#[derive(Debug, Default)]
pub struct History {
    pub guards: Vec<GuardRec>,
    /// (guard, true time) of every lease check that passed.
    pub held_checks: Vec<(usize, Duration)>,
    /// Lock-object writes the store applied: (true time, owner, token, released).
    pub lock_writes: Vec<(Duration, String, u64, bool)>,
    /// Fenced-resource writes the store applied: (true time, token, value).
    pub fenced_writes: Vec<(Duration, u64, SimValue)>,
    /// Fenced updates the clients saw succeed / fenced out / fail otherwise.
    pub fenced_ok: u64,
    pub fenced_out: u64,
    pub fenced_failed: u64,
    pub releases: u64,
    pub abandons: u64,
    pub drops: u64,
    pub stalls: u64,
    pub freezes: u64,
    /// Epochs written so far (epoch layout), per object.
    pub epochs_seen: std::collections::HashSet<(&'static str, u64)>,
    /// Creates that landed in collected history (epoch layout).
    pub late_epoch_writes: u64,
}

impl History {
    fn applied(&mut self, at: Duration, key: &str, body: &Bytes) {
        // In the epoch layout an object's writes are its epochs. A second
        // write of one epoch is a late create into collected history, which
        // no reader ever takes for the object (the layout's rule): not a
        // write of the object.
        let key = match [LOCK_KEY, FENCED_KEY]
            .into_iter()
            .find_map(|k| EpochStore::epoch_of(k, key).map(|e| (k, e)))
        {
            Some((object, epoch)) => {
                if !self.epochs_seen.insert((object, epoch)) {
                    self.late_epoch_writes += 1;
                    return;
                }
                object
            }
            None => key,
        };
        if key == LOCK_KEY {
            if let Ok(r) = LeaseRecord::decode(key, body) {
                self.lock_writes.push((at, r.owner, r.token, r.released));
            }
        } else if key == FENCED_KEY
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
        {
            let token = v.get("token").and_then(serde_json::Value::as_u64);
            let value = v
                .get("value")
                .and_then(|v| serde_json::from_value::<SimValue>(v.clone()).ok());
            if let (Some(token), Some(value)) = (token, value) {
                self.fenced_writes.push((at, token, value));
            }
        }
    }
}

/// Records the belief intervals of one guard, from its status watch: the
/// holder believes while its status is `Held` and its own clock is before
/// `valid_until` (exactly when `remaining()` is positive).
async fn watch_beliefs(
    history: Arc<Mutex<History>>,
    guard_id: usize,
    clock: SimClock,
    mut status: tokio::sync::watch::Receiver<LeaseStatus>,
) {
    let time = clock.time;
    let mut open: Option<Duration> = None;
    let mut end = Duration::ZERO;
    let close = |open: &mut Option<Duration>, at: Duration| {
        if let Some(start) = open.take()
            && at > start
        {
            lock(&history).guards[guard_id].beliefs.push((start, at));
        }
    };
    loop {
        let current = status.borrow_and_update().clone();
        let now = time.now();
        match current {
            LeaseStatus::Held { valid_until, .. } => {
                end = clock.to_true(valid_until);
                if now < end {
                    if open.is_none() {
                        open = Some(now);
                    }
                    tokio::select! {
                        biased;
                        changed = status.changed() => {
                            if changed.is_err() {
                                close(&mut open, time.now().min(end));
                                return;
                            }
                        }
                        () = tokio::time::sleep_until(time.at(end)) => {}
                    }
                } else {
                    close(&mut open, end);
                    if status.changed().await.is_err() {
                        return;
                    }
                }
            }
            // Lost (and any state added later): no longer held.
            _ => {
                close(&mut open, now.min(end));
                return;
            }
        }
    }
}

/// One task of a client: with `shared_lease`, several of these hold clones
/// of the same `Lease`, clock and resource.
struct Task {
    client: usize,
    task: usize,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    clock: SimClock,
    lease: Lease,
    resource: FencedResource<SimValue>,
    rng: ChaCha8Rng,
    config: SimConfig,
    /// Freeze the client at random while it contends (`lease_create_only`).
    freeze_while_contending: bool,
}

impl Task {
    async fn run(mut self) {
        let ttl = self.config.lease.ttl;
        let history = self.history.clone();
        let stop = self.world.stop.clone();
        while !stop.is_cancelled() {
            let idle = random_duration(&mut self.rng, ttl / 2);
            self.clock.pause(idle).await;
            let options = AcquireOptions::default()
                .deadline(ttl * 3)
                .cancel(stop.clone());
            if self.freeze_while_contending && self.rng.random_bool(self.config.freeze * 4.0) {
                // The whole client stops at a random moment of its attempts
                // (between a read and the write it decides on, say), for
                // long enough that the lock moves on meanwhile.
                lock(&history).freezes += 1;
                let (clock, rng) = (self.clock.clone(), &mut self.rng);
                let at = random_duration(rng, ttl);
                let d = random_duration(rng, self.config.max_pause);
                tokio::spawn(async move {
                    tokio::time::sleep(at).await;
                    clock.freeze_for(d).await;
                });
            }
            let Ok(guard) = self.lease.acquire(options).await else {
                continue;
            };
            let token = guard.token();
            let guard_id = {
                let mut h = lock(&history);
                h.guards.push(GuardRec {
                    client: self.client,
                    task: self.task,
                    token,
                    acquired_at: self.world.time.now(),
                    beliefs: Vec::new(),
                });
                h.guards.len() - 1
            };
            tokio::spawn(watch_beliefs(
                history.clone(),
                guard_id,
                self.clock.clone(),
                guard.subscribe(),
            ));
            let effects = self.rng.random_range(1..=6);
            for _ in 0..effects {
                let work = random_duration(&mut self.rng, ttl / 4);
                self.clock.pause(work).await;
                if self.rng.random_bool(self.config.stall) {
                    lock(&history).stalls += 1;
                    let d = random_duration(&mut self.rng, self.config.max_pause);
                    tokio::time::sleep(d).await;
                }
                if self.rng.random_bool(self.config.freeze) {
                    lock(&history).freezes += 1;
                    let d = random_duration(&mut self.rng, self.config.max_pause);
                    self.clock.freeze_for(d).await;
                }
                // The guard: a side effect only with a safety margin left.
                if guard.ensure_held_for(ttl / 10).is_err() {
                    break;
                }
                let at = self.world.time.now();
                lock(&history).held_checks.push((guard_id, at));
                if self.rng.random_bool(self.config.stall_after_check) {
                    lock(&history).stalls += 1;
                    let d = random_duration(&mut self.rng, self.config.max_pause);
                    tokio::time::sleep(d).await;
                }
                let value = SimValue {
                    client: self.client as u32,
                    token,
                    checked_at_ns: u64::try_from(at.as_nanos()).unwrap_or(u64::MAX),
                };
                let result = self.resource.update(token, |_| value).await;
                let mut h = lock(&history);
                match result {
                    Ok(_) => h.fenced_ok += 1,
                    Err(LeaseError::FencedOut { .. }) => h.fenced_out += 1,
                    Err(_) => h.fenced_failed += 1,
                }
                drop(h);
                if stop.is_cancelled() {
                    break;
                }
            }
            match self.rng.random_range(0..100) {
                0..70 => {
                    lock(&history).releases += 1;
                    let _ = guard.release().await;
                }
                70..85 => {
                    // A crash: renewal stops, nothing is released.
                    lock(&history).abandons += 1;
                    guard.abandon();
                }
                _ => {
                    lock(&history).drops += 1;
                    drop(guard);
                }
            }
        }
    }
}

/// Epochs per collection block and epochs kept in the `lease_create_only`
/// run: small, so that collection runs every few renewals and delayed
/// creates land in collected history.
const SIM_COLLECT_BLOCK: u64 = 1;
const SIM_KEEP: u64 = 1;
/// From this many requests on, a `lease_create_only` run without a single
/// write landing in collected history is reported as inconclusive.
const MIN_OPS_FOR_LATE_EPOCHS: u64 = 1_000_000;

/// Runs `clients` clients of `tasks` tasks each (tasks of one client share
/// its `Lease`, clock and resource) until they have sent `ops` requests, and
/// checks the history. `tasks == 1` is the `lease` primitive, more is
/// `shared_lease`, and `0` is `lease_create_only` (one task per client, on
/// a create-only store).
pub async fn simulate(
    config: &SimConfig,
    ops: u64,
    seed: u64,
    clients: usize,
    tasks: usize,
) -> Result<PrimitiveReport, String> {
    let (primitive, tasks) = match tasks {
        0 => (Primitive::LeaseCreateOnly, 1),
        1 => (Primitive::Lease, 1),
        _ => (Primitive::SharedLease, tasks),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History::default()));
    let recorded = history.clone();
    // On the epoch layout, delayed writes are held for up to several terms,
    // so that they land after their epoch was collected: the case the
    // layout's collection markers exist for.
    let mut world_config = config.clone();
    if primitive == Primitive::LeaseCreateOnly {
        world_config.faults.max_delay = world_config.faults.max_delay.max(config.lease.ttl * 6);
        world_config.faults.delay = (world_config.faults.delay * 3.0).min(0.2);
        world_config.pause_after_read = world_config.freeze / 5.0;
    }
    let world = World::new(
        &world_config,
        &mut rng,
        clients,
        ops,
        Arc::new(move |at, key: &str, body: &Bytes| lock(&recorded).applied(at, key, body)),
        None,
    );
    let mut handles = Vec::new();
    for client in 0..world.rates.len() {
        let (clock, net) = world.client(client, config, &mut rng);
        // One epoch view per client, as one per process in real use.
        let net: Arc<dyn CasStore> = if primitive == Primitive::LeaseCreateOnly {
            Arc::new(EpochStore::with_collection(
                Arc::new(CreateOnlyStore(net)),
                SIM_COLLECT_BLOCK,
                SIM_KEEP,
            ))
        } else {
            net
        };
        let lease = Lease::new(
            net.clone(),
            LOCK_KEY,
            format!("client-{client}"),
            world.leases[client].clone(),
        )
        .map_err(|e| format!("invalid lease configuration: {e}"))?
        .with_clock(Arc::new(clock.clone()))
        .with_entropy(Entropy::seeded(rng.random()));
        let resource = FencedResource::<SimValue>::new(net, FENCED_KEY)
            .map_err(|e| e.to_string())?
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(Entropy::seeded(rng.random()))
            .with_retries(
                world.leases[client].request_timeout,
                world.leases[client].retry_period,
                8,
            );
        for task in 0..tasks {
            let task = Task {
                client,
                task,
                world: world.clone(),
                history: history.clone(),
                clock: clock.clone(),
                lease: lease.clone(),
                resource: resource.clone(),
                rng: ChaCha8Rng::seed_from_u64(rng.random()),
                config: config.clone(),
                freeze_while_contending: primitive == Primitive::LeaseCreateOnly,
            };
            handles.push(tokio::spawn(task.run()));
        }
    }
    for handle in handles {
        handle
            .await
            .map_err(|e| format!("a client task failed: {e}"))?;
    }
    // Let abandoned leases expire, late writes land and every belief
    // watcher finish.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let h = lock(&history);
    Ok(report(config, primitive, seed, tasks, &world, &h))
}

fn report(
    config: &SimConfig,
    primitive: Primitive,
    seed: u64,
    tasks: usize,
    world: &World,
    h: &History,
) -> PrimitiveReport {
    let rates = &world.rates;
    let who = |g: usize| {
        let r = &h.guards[g];
        format!(
            "client {} task {} (rate {:.3}) token {}",
            r.client, r.task, rates[r.client], r.token
        )
    };
    let context = format!("seed {} {}", config.seed, primitive.name());
    let mut findings = Findings::default();
    findings.add(
        "mutual_exclusion",
        check::mutual_exclusion(h, &who, &context),
    );
    findings.add("token_order", check::token_order(h, &who, &context));
    let ttls: Vec<Duration> = world.leases.iter().map(|l| l.ttl).collect();
    findings.add(
        "belief_rests_on_a_write",
        check::belief_rests_on_a_write(h, &ttls, &who, &context),
    );
    findings.add(
        "lock_token_monotonic",
        check::lock_token_monotonic(h, &context),
    );
    findings.add(
        "held_checks_within_belief",
        check::held_checks_within_belief(h, &who, &context),
    );
    let (fence_violations, late) = check::fencing(h, &context);
    findings.add("fencing", fence_violations);
    // A run long enough to see writes land in collected history must have
    // seen some: otherwise the layout's collection rule went untested, and
    // the run proves less than it says.
    if primitive == Primitive::LeaseCreateOnly
        && world.ops() >= MIN_OPS_FOR_LATE_EPOCHS
        && h.late_epoch_writes == 0
    {
        findings.add(
            "exercised",
            vec![format!(
                "{context}: inconclusive: {} requests and no write landed in collected history",
                world.ops()
            )],
        );
    }

    let ops = world.ops();
    let faults = world.faults();
    let stats = check::handovers(h);
    let mut text = String::new();
    for (g, r) in h.guards.iter().enumerate() {
        let _ = writeln!(
            text,
            "guard {g} client {} task {} token {} at {:?} beliefs {:?}",
            r.client, r.task, r.token, r.acquired_at, r.beliefs
        );
    }
    let _ = writeln!(text, "held_checks {:?}", h.held_checks);
    let _ = writeln!(text, "lock {:?}", h.lock_writes);
    let _ = writeln!(text, "fenced {:?}", h.fenced_writes);
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let summary = format!(
        "world_seed={seed} clients={} tasks_per_client={} rates=[{}] acquisitions={} takeovers={} min_handover_gap={} believed={} \
         lock_writes={} held_checks={} fenced_ok={} fenced_out={} fenced_failed={} late_fenced_writes={late} releases={} \
         crashes={} drops={} stalls={} freezes={} late_epoch_writes={} {} faults: {faults:?} digest={digest:016x}",
        rates.len(),
        tasks,
        rates
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(","),
        h.guards.len(),
        stats.takeovers,
        stats.min_gap.map_or_else(|| "-".to_string(), secs),
        secs(stats.believed),
        h.lock_writes.len(),
        h.held_checks.len(),
        h.fenced_ok,
        h.fenced_out,
        h.fenced_failed,
        h.releases,
        h.abandons,
        h.drops,
        h.stalls,
        h.freezes,
        h.late_epoch_writes,
        world.late_summary(),
    );
    PrimitiveReport {
        primitive,
        ops,
        violations: findings.violations,
        by_property: findings.by_property,
        digest,
        summary,
    }
}
