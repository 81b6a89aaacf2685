//! The `lease` and `shared_lease` primitives: clients (or several tasks of
//! one client sharing one `Lease`) acquire, act through a fenced resource,
//! and release, crash or drop; every guard's belief is recorded in true time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::layout::EpochStore;
use casaas_core::lease::{
    Entropy, FencedResource, Lease, LeaseError, LeaseGuard, LeaseRecord, LeaseStatus, WaitOptions,
};
use casaas_core::testkit::CreateOnlyStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::clock::{SimClock, random_duration};
use crate::config::{Primitive, SimConfig};
use crate::history::lease::{GuardRec, History, SimValue};
use crate::lock;
use crate::network::World;

/// The lock object every client contends for.
pub const LOCK_KEY: &str = "sim/lock";
/// The fenced resource the holders write to.
pub const FENCED_KEY: &str = "sim/resource";

/// Records a write the store applied at `at`: to the lock object or to
/// the fenced resource (anything else is not recorded).
pub(super) fn record_applied(h: &mut History, at: Duration, key: &str, body: &Bytes) {
    // In the epoch layout an object's writes are its epochs. A second
    // write of one epoch is a late create into collected history, which
    // no reader ever takes for the object (the layout's rule): not a
    // write of the object.
    let key = match [LOCK_KEY, FENCED_KEY]
        .into_iter()
        .find_map(|k| EpochStore::epoch_of(k, key).map(|e| (k, e)))
    {
        Some((object, epoch)) => {
            if !h.epochs_seen.insert((object, epoch)) {
                h.late_epoch_writes += 1;
                return;
            }
            object
        }
        None => key,
    };
    if key == LOCK_KEY {
        if let Ok(r) = LeaseRecord::decode(key, body) {
            h.lock_writes.push((at, r.owner, r.token, r.released));
        }
    } else if key == FENCED_KEY
        && let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
    {
        let token = v.get("token").and_then(serde_json::Value::as_u64);
        let value = v
            .get("value")
            .and_then(|v| serde_json::from_value::<SimValue>(v.clone()).ok());
        if let (Some(token), Some(value)) = (token, value) {
            h.fenced_writes.push((at, token, value));
        }
    }
}

/// Records the belief intervals of one guard, from its status watch: the
/// holder believes while its status is `Held` and its own clock is before
/// `valid_until` (exactly when `remaining()` is positive).
pub(crate) async fn watch_beliefs(
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
        let stop = self.world.stop.clone();
        while !stop.is_cancelled() {
            let idle = random_duration(&mut self.rng, ttl / 2);
            self.clock.pause(idle).await;
            let Some(guard) = self.contend().await else {
                continue;
            };
            let guard_id = self.record_guard(&guard);
            self.act(&guard, guard_id).await;
            self.let_go(guard).await;
        }
    }

    /// One acquisition attempt, within a deadline of three TTLs; in
    /// `lease_create_only`, the client may be frozen in the middle of it.
    async fn contend(&mut self) -> Option<LeaseGuard> {
        let ttl = self.config.lease.ttl;
        let options = WaitOptions::default()
            .with_deadline(ttl * 3)
            .with_cancel(self.world.stop.clone());
        if self.freeze_while_contending && self.rng.random_bool(self.config.freeze * 4.0) {
            // The whole client stops at a random moment of its attempts
            // (between a read and the write it decides on, say), for
            // long enough that the lock moves on meanwhile.
            lock(&self.history).freezes += 1;
            let (clock, rng) = (self.clock.clone(), &mut self.rng);
            let at = random_duration(rng, ttl);
            let d = random_duration(rng, self.config.max_pause);
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                clock.freeze_for(d).await;
            });
        }
        self.lease.acquire(options).await.ok()
    }

    /// Records the acquisition and starts recording the guard's beliefs;
    /// returns the guard's index in the history.
    fn record_guard(&self, guard: &LeaseGuard) -> usize {
        record_guard(
            &self.history,
            &self.world,
            &self.clock,
            (self.client, self.task),
            guard,
        )
    }

    /// A few side effects through the fenced resource, each after a lease
    /// check with a safety margin, amid work, stalls and freezes; stops at
    /// the first failed check or when the run stops.
    async fn act(&mut self, guard: &LeaseGuard, guard_id: usize) {
        let ttl = self.config.lease.ttl;
        let effects = self.rng.random_range(1..=6);
        for _ in 0..effects {
            let work = random_duration(&mut self.rng, ttl / 4);
            self.clock.pause(work).await;
            if self.rng.random_bool(self.config.stall) {
                self.stall().await;
            }
            if self.rng.random_bool(self.config.freeze) {
                lock(&self.history).freezes += 1;
                let d = random_duration(&mut self.rng, self.config.max_pause);
                self.clock.freeze_for(d).await;
            }
            // The guard: a side effect only with a safety margin left.
            if guard.ensure_held_for(ttl / 10).is_err() {
                break;
            }
            let at = self.world.time.now();
            lock(&self.history).held_checks.push((guard_id, at));
            if self.rng.random_bool(self.config.stall_after_check) {
                self.stall().await;
            }
            fenced_write(
                &self.history,
                &self.resource,
                self.client,
                guard.token(),
                at,
            )
            .await;
            if self.world.stop.is_cancelled() {
                break;
            }
        }
    }

    /// The task stops (its clock keeps running) for up to `max_pause`.
    async fn stall(&mut self) {
        lock(&self.history).stalls += 1;
        let d = random_duration(&mut self.rng, self.config.max_pause);
        tokio::time::sleep(d).await;
    }

    /// Ends the holding: mostly a release; else a crash (renewal stops,
    /// nothing is released) or a drop.
    async fn let_go(&mut self, guard: LeaseGuard) {
        LetGo {
            released: 70,
            abandoned: 15,
        }
        .end(&self.history, &mut self.rng, guard)
        .await;
    }
}

/// Records a guard `(client, task)` just acquired and starts recording its
/// beliefs; returns the guard's index in the history.
pub(super) fn record_guard(
    history: &Arc<Mutex<History>>,
    world: &World,
    clock: &SimClock,
    (client, task): (usize, usize),
    guard: &LeaseGuard,
) -> usize {
    let guard_id = {
        let mut h = lock(history);
        h.guards.push(GuardRec {
            client,
            task,
            token: guard.token(),
            acquired_at: world.time.now(),
            beliefs: Vec::new(),
        });
        h.guards.len() - 1
    };
    tokio::spawn(watch_beliefs(
        history.clone(),
        guard_id,
        clock.clone(),
        guard.subscribe(),
    ));
    guard_id
}

/// Writes to the fenced resource with `token`, after a lease check passed
/// at `checked_at` (true time), and counts what it was told.
pub(super) async fn fenced_write(
    history: &Mutex<History>,
    resource: &FencedResource<SimValue>,
    client: usize,
    token: u64,
    checked_at: Duration,
) {
    let value = SimValue {
        client: client as u32,
        token,
        checked_at_ns: u64::try_from(checked_at.as_nanos()).unwrap_or(u64::MAX),
    };
    let result = resource.update(token, |_| value).await;
    let mut h = lock(history);
    match result {
        Ok(_) => h.fenced_ok += 1,
        Err(LeaseError::FencedOut { .. }) => h.fenced_out += 1,
        Err(_) => h.fenced_failed += 1,
    }
}

/// How holders end a holding, in percent: released, abandoned (a crash:
/// renewal stops, nothing is released), and dropped (the rest).
pub(super) struct LetGo {
    pub released: u32,
    pub abandoned: u32,
}

impl LetGo {
    /// Ends `guard` one of the three ways, drawn from `rng`, and counts it.
    pub(super) async fn end(
        self,
        history: &Mutex<History>,
        rng: &mut ChaCha8Rng,
        guard: LeaseGuard,
    ) {
        let roll = rng.random_range(0..100);
        if roll < self.released {
            lock(history).releases += 1;
            let _ = guard.release().await;
        } else if roll < self.released + self.abandoned {
            lock(history).abandons += 1;
            guard.abandon();
        } else {
            lock(history).drops += 1;
            drop(guard);
        }
    }
}

/// What a run recorded, for its report.
pub struct Recorded {
    /// `lease`, `shared_lease` or `lease_create_only`.
    pub primitive: Primitive,
    /// Tasks per client.
    pub tasks: usize,
    pub world: Arc<World>,
    pub history: History,
}

/// Epochs per collection block and epochs kept in the `lease_create_only`
/// run: small, so that collection runs every few renewals and delayed
/// creates land in collected history.
const SIM_COLLECT_BLOCK: u64 = 1;
const SIM_KEEP: u64 = 1;

/// Runs `clients` clients of `tasks` tasks each (tasks of one client share
/// its `Lease`, clock and resource) until they have sent `ops` requests, and
/// returns what they recorded. `tasks == 1` is the `lease` primitive, more is
/// `shared_lease`, and `0` is `lease_create_only` (one task per client, on
/// a create-only store).
pub async fn simulate(
    config: &SimConfig,
    ops: u64,
    seed: u64,
    clients: usize,
    tasks: usize,
) -> Result<Recorded, String> {
    let (primitive, tasks) = match tasks {
        0 => (Primitive::LeaseCreateOnly, 1),
        1 => (Primitive::Lease, 1),
        _ => (Primitive::SharedLease, tasks),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History::default()));
    let recorded = history.clone();
    let world = World::new(
        &world_config(config, primitive),
        &mut rng,
        clients,
        ops,
        Arc::new(move |at, key: &str, body: &Bytes| {
            record_applied(&mut lock(&recorded), at, key, body)
        }),
        None,
    );
    let mut handles = Vec::new();
    for client in 0..world.rates.len() {
        let (clock, net) = world.client(client, config, &mut rng);
        let net = client_store(primitive, net);
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
            .with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(world.leases[client].request_timeout)
                    .with_retry_period(world.leases[client].retry_period)
                    .with_max_attempts(8),
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
    let history = std::mem::take(&mut *lock(&history));
    Ok(Recorded {
        primitive,
        tasks,
        world,
        history,
    })
}

/// The world's configuration: on the epoch layout, delayed writes are
/// held for up to several terms, so that they land after their epoch was
/// collected (the case the layout's collection markers exist for).
fn world_config(config: &SimConfig, primitive: Primitive) -> SimConfig {
    let mut world_config = config.clone();
    if primitive == Primitive::LeaseCreateOnly {
        world_config.faults.max_delay = world_config.faults.max_delay.max(config.lease.ttl * 6);
        world_config.faults.delay = (world_config.faults.delay * 3.0).min(0.2);
        world_config.pause_after_read = world_config.freeze / 5.0;
    }
    world_config
}

/// The store a client sees: on `lease_create_only`, its own epoch view (as
/// one per process in real use) of a create-only store.
fn client_store(primitive: Primitive, net: Arc<dyn CasStore>) -> Arc<dyn CasStore> {
    if primitive == Primitive::LeaseCreateOnly {
        Arc::new(EpochStore::with_collection(
            Arc::new(CreateOnlyStore(net)),
            SIM_COLLECT_BLOCK,
            SIM_KEEP,
        ))
    } else {
        net
    }
}
