//! The deterministic lease simulation: clients, drifting clocks, a faulty
//! network and store, a history recorder and the checker.
//!
//! Everything runs on one current-thread tokio runtime with paused time, so
//! time advances only when every task waits, and a run is a function of its
//! seed. See docs/simulation.md.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{
    AcquireOptions, Clock, Entropy, ExpiryMode, FencedResource, Lease, LeaseConfig, LeaseError,
    LeaseRecord, LeaseStatus, SleepFuture,
};
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, FaultConfig, FaultCounts, FaultyStore, ListEntry,
    MemoryStore, StoredObject, Version,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The lock object every client contends for.
pub const LOCK_KEY: &str = "sim/lock";
/// The fenced resource the holders write to.
pub const FENCED_KEY: &str = "sim/resource";

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Stop once the clients have sent this many store requests.
    pub ops: u64,
    /// The seed of everything random: clocks, faults, delays, behaviour.
    pub seed: u64,
    /// Number of clients.
    pub clients: usize,
    /// The lease timing every client uses (declares the drift bound).
    pub lease: LeaseConfig,
    /// The actual clock-rate deviation: clients' clocks run at rates spread
    /// over `[1 - d, 1 + d]`, both ends included. Safe while `d` is at most
    /// the declared `lease.drift_margin`.
    pub rate_deviation: f64,
    /// Store faults per request (drawn by [`FaultyStore`] from the seed).
    pub faults: FaultConfig,
    /// Probability that a request is slow (up to twice the request timeout
    /// each way) rather than fast (up to 10 ms each way).
    pub slow_request: f64,
    /// Probability, before each side effect, that the holder's main task
    /// stalls (its renewal keeps running) for up to `max_pause`.
    pub stall: f64,
    /// Probability, before each side effect, that the whole client freezes
    /// (no timer fires, no request leaves, no answer arrives; a GC pause or
    /// a stopped VM) for up to `max_pause`.
    pub freeze: f64,
    /// Probability that the holder stalls between passing its checkpoint
    /// and writing (the gap only fencing closes), for up to `max_pause`.
    pub stall_after_check: f64,
    /// Longest stall or freeze.
    pub max_pause: Duration,
    /// Wall clocks are offset from true time by up to this much (exclusive).
    pub wall_skew: Duration,
}

impl SimConfig {
    /// The standard run: 6 clients, TTL 10 s, declared drift 5% and clocks
    /// drifting by exactly that much, 2% of each fault, pauses up to 10 TTL.
    pub fn new(ops: u64, seed: u64) -> Self {
        let ttl = Duration::from_secs(10);
        let mut lease = LeaseConfig::with_ttl(ttl);
        lease.drift_margin = 0.05;
        SimConfig {
            ops,
            seed,
            clients: 6,
            lease,
            rate_deviation: 0.05,
            faults: FaultConfig {
                fail_before_apply: 0.02,
                lose_response: 0.02,
                throttle: 0.02,
                server_error: 0.02,
                duplicate: 0.02,
                delay: 0.0,
                max_delay: Duration::ZERO,
            },
            slow_request: 0.05,
            stall: 0.08,
            freeze: 0.05,
            stall_after_check: 0.03,
            max_pause: ttl * 10,
            wall_skew: Duration::from_secs(1),
        }
    }

    /// The opt-in wall-clock expiry: declared maximum skew 1 s (wall clocks
    /// are offset by up to 999 ms), safety margin 2 * drift * TTL as the
    /// configuration requires.
    pub fn wall_clock(mut self) -> Self {
        self.lease.expiry = ExpiryMode::WallClock {
            max_skew: Duration::from_secs(1),
        };
        self.lease.safety_margin = self.lease.ttl.mul_f64(2.0 * self.lease.drift_margin);
        self
    }

    /// A deliberately broken run: the wall-clock expiry declares 1 s of skew
    /// while wall clocks are up to 8 s apart.
    pub fn wall_clock_undeclared_skew(ops: u64, seed: u64) -> Self {
        SimConfig {
            wall_skew: Duration::from_secs(8),
            ..Self::new(ops, seed).wall_clock()
        }
    }

    /// A deliberately broken run: clocks drift by 30% while the lease
    /// declares 5%. The checker must report violations.
    pub fn drift_beyond_bound(ops: u64, seed: u64) -> Self {
        SimConfig {
            rate_deviation: 0.3,
            ..Self::new(ops, seed)
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct Report {
    /// Store requests the clients sent.
    pub ops: u64,
    /// Every property violation found, described for debugging.
    pub violations: Vec<String>,
    /// A digest of the whole history: equal digests mean replayed runs.
    pub digest: u64,
    /// Counts for people.
    pub summary: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// True (simulated) time since the start of the run.
#[derive(Debug, Clone, Copy)]
struct TrueTime {
    epoch: Instant,
}

impl TrueTime {
    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.epoch)
    }

    fn at(&self, t: Duration) -> Instant {
        self.epoch + t
    }
}

/// A client's process-wide freeze: until this true time, nothing of the
/// client runs.
#[derive(Debug, Default)]
struct Freeze {
    until: Mutex<Duration>,
}

impl Freeze {
    /// Waits until the client is not frozen, then `extra` more if it was
    /// (answers that arrived during a freeze are handled before timers that
    /// expired during it, as a real process would find them waiting).
    async fn gate(&self, time: TrueTime, extra: Duration) {
        loop {
            let until = *lock(&self.until);
            if time.now() >= until {
                return;
            }
            tokio::time::sleep_until(time.at(until + extra)).await;
        }
    }
}

/// A client's clock: monotonic time runs at `rate` times true time; the wall
/// clock is a fixed fictional epoch plus true time plus an offset (never the
/// host's clock, so runs replay); sleeps do not end while the client is
/// frozen.
#[derive(Debug, Clone)]
struct SimClock {
    time: TrueTime,
    rate: f64,
    wall_offset: Duration,
    freeze: Arc<Freeze>,
}

impl SimClock {
    /// Converts a reading of this clock to true time.
    fn to_true(&self, local: Duration) -> Duration {
        local.div_f64(self.rate)
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        self.time.now().mul_f64(self.rate)
    }

    fn wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + self.time.now()
            - self.wall_offset
    }

    fn sleep(&self, d: Duration) -> SleepFuture {
        let base = d.div_f64(self.rate) + Duration::from_nanos(1);
        let freeze = self.freeze.clone();
        let time = self.time;
        Box::pin(async move {
            tokio::time::sleep(base).await;
            freeze.gate(time, Duration::from_millis(1)).await;
        })
    }
}

/// A value written to the fenced resource: who wrote it, with which token,
/// and when (true time) the writer passed its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct SimValue {
    client: u32,
    token: u64,
    checkpoint_ns: u64,
}

/// One acquisition and what its holder believed.
#[derive(Debug, Clone)]
struct GuardRec {
    client: usize,
    token: u64,
    acquired_at: Duration,
    /// Closed intervals of belief `[start, end)` in true time.
    beliefs: Vec<(Duration, Duration)>,
}

#[derive(Debug, Default)]
struct History {
    guards: Vec<GuardRec>,
    /// (guard, true time) of every checkpoint that passed.
    checkpoints: Vec<(usize, Duration)>,
    /// Lock-object writes the store applied: (true time, owner, token, released).
    lock_writes: Vec<(Duration, String, u64, bool)>,
    /// Fenced-resource writes the store applied: (true time, token, value).
    fenced_writes: Vec<(Duration, u64, SimValue)>,
    /// Fenced updates the clients saw succeed / fenced out / fail otherwise.
    fenced_ok: u64,
    fenced_out: u64,
    fenced_failed: u64,
    releases: u64,
    abandons: u64,
    drops: u64,
    stalls: u64,
    freezes: u64,
}

/// The store under test, seen from inside: records every write that the
/// store applied, decoded, at the true time it applied.
#[derive(Debug, Clone)]
struct Recorder {
    inner: MemoryStore,
    time: TrueTime,
    history: Arc<Mutex<History>>,
}

impl Recorder {
    fn applied(&self, key: &str, body: &Bytes) {
        let at = self.time.now();
        let mut h = lock(&self.history);
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
}

#[async_trait]
impl CasStore for Recorder {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.inner.get(key).await
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let v = self.inner.create(key, body.clone()).await?;
        self.applied(key, &body);
        Ok(v)
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let v = self.inner.replace(key, expected, body.clone()).await?;
        self.applied(key, &body);
        Ok(v)
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.inner.delete(key, expected).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.inner.list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn describe(&self) -> String {
        format!("recorded({})", self.inner.describe())
    }
}

/// What all clients share.
#[derive(Debug)]
struct World {
    time: TrueTime,
    store: FaultyStore<Recorder>,
    /// Network delays, drawn in request order.
    net_rng: Mutex<ChaCha8Rng>,
    history: Arc<Mutex<History>>,
    ops: AtomicU64,
    limit: u64,
    stopped: AtomicBool,
    stop: CancellationToken,
    slow_request: f64,
    /// The request timeout, in true milliseconds, as each client's clock
    /// measures it; network delays avoid landing on the same millisecond
    /// tick as a timeout, where the outcome would depend on tokio's random
    /// choice between ready `select!` branches.
    timeout_ms: Vec<u64>,
}

impl World {
    fn count_op(&self) {
        let n = self.ops.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.limit && !self.stopped.swap(true, Ordering::Relaxed) {
            self.stop.cancel();
        }
    }

    /// Request and response delays in whole milliseconds.
    fn delays(&self, client: usize) -> (u64, u64) {
        let mut rng = lock(&self.net_rng);
        let avoid = self.timeout_ms[client];
        loop {
            let slow = rng.random_bool(self.slow_request);
            let max = if slow { avoid * 2 } else { 10 };
            let (a, b) = (rng.random_range(0..=max), rng.random_range(0..=max));
            if (a + b).abs_diff(avoid) > 2 {
                return (a, b);
            }
        }
    }
}

/// One client's network path to the store: counts requests, delays them
/// each way, lets a request that its sender gave up on still land, and
/// holds traffic while the client is frozen.
#[derive(Debug, Clone)]
struct Net {
    world: Arc<World>,
    client: usize,
    freeze: Arc<Freeze>,
}

impl Net {
    async fn call<T, F, Fut>(&self, request: F) -> Result<T, CasError>
    where
        T: Send + 'static,
        F: FnOnce(FaultyStore<Recorder>) -> Fut,
        Fut: Future<Output = Result<T, CasError>> + Send + 'static,
    {
        let time = self.world.time;
        self.freeze.gate(time, Duration::ZERO).await;
        self.world.count_op();
        let (there, back) = self.world.delays(self.client);
        let fut = request(self.world.store.clone());
        let result = if there == 0 && back == 0 {
            fut.await
        } else {
            let (tx, rx) = tokio::sync::oneshot::channel();
            // Spawned: once sent, a request is out of the sender's hands.
            tokio::spawn(async move {
                if there > 0 {
                    tokio::time::sleep(Duration::from_millis(there)).await;
                }
                let result = fut.await;
                if back > 0 {
                    tokio::time::sleep(Duration::from_millis(back)).await;
                }
                let _ = tx.send(result);
            });
            rx.await.unwrap_or_else(|_| {
                Err(CasError::new(
                    ErrorKind::Ambiguous,
                    "simulated connection dropped",
                ))
            })
        };
        self.freeze.gate(time, Duration::ZERO).await;
        result
    }
}

#[async_trait]
impl CasStore for Net {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let key = key.to_string();
        self.call(|s| async move { s.get(&key).await }).await
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let key = key.to_string();
        self.call(|s| async move { s.create(&key, body).await })
            .await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let key = key.to_string();
        let expected = expected.clone();
        self.call(|s| async move { s.replace(&key, &expected, body).await })
            .await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let key = key.to_string();
        let expected = expected.clone();
        self.call(|s| async move { s.delete(&key, &expected).await })
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        let prefix = prefix.to_string();
        self.call(|s| async move { s.list(&prefix).await }).await
    }

    fn capabilities(&self) -> Capabilities {
        self.world.store.capabilities()
    }

    fn describe(&self) -> String {
        format!(
            "net(client {}) -> {}",
            self.client,
            self.world.store.describe()
        )
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
            LeaseStatus::Lost(_) => {
                close(&mut open, now.min(end));
                return;
            }
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
        }
    }
}

struct Client {
    id: usize,
    world: Arc<World>,
    clock: SimClock,
    lease: Lease,
    resource: FencedResource<SimValue>,
    rng: ChaCha8Rng,
    config: SimConfig,
}

impl Client {
    async fn pause_on_own_clock(&self, d: Duration) {
        self.clock.sleep(d.mul_f64(self.clock.rate)).await;
    }

    fn random_duration(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.rng.random_range(0..=nanos))
    }

    async fn run(mut self) {
        let ttl = self.config.lease.ttl;
        let history = self.world.history.clone();
        let stop = self.world.stop.clone();
        while !stop.is_cancelled() {
            let idle = self.random_duration(ttl / 2);
            self.pause_on_own_clock(idle).await;
            let options = AcquireOptions::default()
                .deadline(ttl * 3)
                .cancel(stop.clone());
            let Ok(guard) = self.lease.acquire(options).await else {
                continue;
            };
            let token = guard.token();
            let guard_id = {
                let mut h = lock(&history);
                h.guards.push(GuardRec {
                    client: self.id,
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
                let work = self.random_duration(ttl / 4);
                self.pause_on_own_clock(work).await;
                if self.rng.random_bool(self.config.stall) {
                    lock(&history).stalls += 1;
                    let d = self.random_duration(self.config.max_pause);
                    tokio::time::sleep(d).await;
                }
                if self.rng.random_bool(self.config.freeze) {
                    lock(&history).freezes += 1;
                    let d = self.random_duration(self.config.max_pause);
                    *lock(&self.clock.freeze.until) = self.world.time.now() + d;
                    self.clock
                        .freeze
                        .gate(self.world.time, Duration::ZERO)
                        .await;
                }
                // The guard: a side effect only with a safety margin left.
                if guard.checkpoint(ttl / 10).is_err() {
                    break;
                }
                let at = self.world.time.now();
                lock(&history).checkpoints.push((guard_id, at));
                if self.rng.random_bool(self.config.stall_after_check) {
                    lock(&history).stalls += 1;
                    let d = self.random_duration(self.config.max_pause);
                    tokio::time::sleep(d).await;
                }
                let value = SimValue {
                    client: self.id as u32,
                    token,
                    checkpoint_ns: u64::try_from(at.as_nanos()).unwrap_or(u64::MAX),
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

/// Runs one simulation to completion.
pub fn run(config: &SimConfig) -> Result<Report, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| format!("cannot build the runtime: {e}"))?;
    runtime.block_on(simulate(config.clone()))
}

async fn simulate(config: SimConfig) -> Result<Report, String> {
    let time = TrueTime {
        epoch: Instant::now(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let history = Arc::new(Mutex::new(History::default()));
    let recorder = Recorder {
        inner: MemoryStore::new(),
        time,
        history: history.clone(),
    };
    let store = FaultyStore::new(recorder, rng.random(), config.faults.clone());
    let n = config.clients.max(2);
    // Rates spread evenly over the deviation, both extremes included,
    // assigned to clients in a seeded order.
    let mut rates: Vec<f64> = (0..n)
        .map(|i| {
            1.0 - config.rate_deviation + 2.0 * config.rate_deviation * i as f64 / (n - 1) as f64
        })
        .collect();
    for i in (1..n).rev() {
        rates.swap(i, rng.random_range(0..=i));
    }
    let timeout = config.lease.request_timeout;
    let world = Arc::new(World {
        time,
        store,
        net_rng: Mutex::new(ChaCha8Rng::seed_from_u64(rng.random())),
        history: history.clone(),
        ops: AtomicU64::new(0),
        limit: config.ops,
        stopped: AtomicBool::new(false),
        stop: CancellationToken::new(),
        slow_request: config.slow_request,
        timeout_ms: rates
            .iter()
            .map(|r| timeout.div_f64(*r).as_millis() as u64 + 1)
            .collect(),
    });
    let mut tasks = Vec::new();
    for (id, rate) in rates.iter().copied().enumerate() {
        let freeze = Arc::new(Freeze::default());
        let clock = SimClock {
            time,
            rate,
            wall_offset: Duration::from_millis(
                rng.random_range(0..config.wall_skew.as_millis().max(1) as u64),
            ),
            freeze: freeze.clone(),
        };
        let net: Arc<dyn CasStore> = Arc::new(Net {
            world: world.clone(),
            client: id,
            freeze,
        });
        let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
        let lease = Lease::new(
            net.clone(),
            LOCK_KEY,
            format!("client-{id}"),
            config.lease.clone(),
        )
        .map_err(|e| format!("invalid lease configuration: {e}"))?
        .with_clock(shared_clock.clone())
        .with_entropy(Entropy::seeded(rng.random()));
        let resource = FencedResource::<SimValue>::new(net, FENCED_KEY)
            .map_err(|e| e.to_string())?
            .with_clock(shared_clock)
            .with_entropy(Entropy::seeded(rng.random()))
            .with_retries(timeout, config.lease.retry_period, 8);
        let client = Client {
            id,
            world: world.clone(),
            clock,
            lease,
            resource,
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            config: config.clone(),
        };
        tasks.push(tokio::spawn(client.run()));
    }
    for task in tasks {
        task.await
            .map_err(|e| format!("a client task failed: {e}"))?;
    }
    // Let abandoned leases expire and every belief watcher finish.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let ops = world.ops.load(Ordering::Relaxed);
    let faults = world.store.counts();
    let h = lock(&history);
    Ok(check(&config, &h, &rates, ops, &faults))
}

/// FNV-1a, 64 bits: a stable digest of the history text.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn ms(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// The checker: every property over the history, in true time.
fn check(config: &SimConfig, h: &History, rates: &[f64], ops: u64, faults: &FaultCounts) -> Report {
    let mut violations = Vec::new();
    let seed = config.seed;
    let who = |g: usize| {
        let r = &h.guards[g];
        format!(
            "client {} (rate {:.3}) token {}",
            r.client, rates[r.client], r.token
        )
    };

    // 1. Mutual exclusion: belief intervals of different guards never
    // overlap. Sweep by start, keeping the latest-ending interval of the
    // two guards that end latest.
    let mut intervals: Vec<(Duration, Duration, usize)> = h
        .guards
        .iter()
        .enumerate()
        .flat_map(|(g, r)| r.beliefs.iter().map(move |&(s, e)| (s, e, g)))
        .collect();
    intervals.sort();
    let mut top: [Option<(Duration, usize)>; 2] = [None, None];
    for &(start, end, g) in &intervals {
        for (other_end, other) in top.iter().flatten() {
            if *other != g && start < *other_end {
                violations.push(format!(
                    "seed {seed}: mutual exclusion: {} believed it held from {} while {} believed it held until {}",
                    who(g),
                    ms(start),
                    who(*other),
                    ms(*other_end)
                ));
            }
        }
        // Keep the two latest ends of distinct guards.
        let mut candidates: Vec<(Duration, usize)> = top.iter().flatten().copied().collect();
        candidates.retain(|(_, o)| *o != g);
        let own = top
            .iter()
            .flatten()
            .filter(|(_, o)| *o == g)
            .map(|(e, _)| *e)
            .fold(end, Duration::max);
        candidates.push((own, g));
        candidates.sort_by(|a, b| b.cmp(a));
        top = [candidates.first().copied(), candidates.get(1).copied()];
    }

    // 2. Tokens strictly increase across acquisitions, in the order the
    // holders got them; and the lock object's token never goes down.
    let mut order: Vec<usize> = (0..h.guards.len()).collect();
    order.sort_by_key(|&g| (h.guards[g].acquired_at, g));
    for pair in order.windows(2) {
        let (a, b) = (&h.guards[pair[0]], &h.guards[pair[1]]);
        if b.token <= a.token {
            violations.push(format!(
                "seed {seed}: token order: {} acquired at {} after {} acquired at {}",
                who(pair[1]),
                ms(b.acquired_at),
                who(pair[0]),
                ms(a.acquired_at)
            ));
        }
    }
    for pair in h.lock_writes.windows(2) {
        if pair[1].2 < pair[0].2 {
            violations.push(format!(
                "seed {seed}: the lock object's token went from {} to {} at {}",
                pair[0].2,
                pair[1].2,
                ms(pair[1].0)
            ));
        }
    }

    // 3. Every checkpoint that passed lies within its guard's belief (the
    // guard's checkpoint agrees with its remaining validity). The end is
    // included: a guard released or lost at the instant of a checkpoint
    // (same simulated time, later in execution) still held at the check.
    for &(g, at) in &h.checkpoints {
        let believed = h.guards[g].beliefs.iter().any(|&(s, e)| s <= at && at <= e);
        if !believed {
            violations.push(format!(
                "seed {seed}: checkpoint passed outside belief: {} at {}; acquired at {}, believed {}",
                who(g),
                ms(at),
                ms(h.guards[g].acquired_at),
                h.guards[g]
                    .beliefs
                    .iter()
                    .map(|(s, e)| format!("[{}, {})", ms(*s), ms(*e)))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
    }

    // 4. Fencing: every write the resource accepted carries a token no lower
    // than any accepted before it, and came from the holder of the highest
    // token granted so far when it passed its checkpoint.
    let mut acquisitions: Vec<(Duration, u64)> =
        h.guards.iter().map(|g| (g.acquired_at, g.token)).collect();
    acquisitions.sort();
    let mut highest_accepted = 0;
    let mut late = 0u64;
    for &(at, token, value) in &h.fenced_writes {
        if token < highest_accepted {
            violations.push(format!(
                "seed {seed}: fence: resource accepted token {token} from client {} at {} after token {highest_accepted}",
                value.client,
                ms(at)
            ));
        }
        highest_accepted = highest_accepted.max(token);
        let checkpoint = Duration::from_nanos(value.checkpoint_ns);
        let granted = acquisitions
            .iter()
            .take_while(|(t, _)| *t < checkpoint)
            .map(|(_, tok)| *tok)
            .max()
            .unwrap_or(0);
        if token < granted {
            violations.push(format!(
                "seed {seed}: fence: client {} wrote with token {token} (checkpoint at {}) though token {granted} was granted by then",
                value.client,
                ms(checkpoint)
            ));
        }
        let granted_at_apply = acquisitions
            .iter()
            .take_while(|(t, _)| *t < at)
            .map(|(_, tok)| *tok)
            .max()
            .unwrap_or(0);
        if token < granted_at_apply {
            late += 1;
        }
    }

    let believed: Duration = intervals.iter().map(|(s, e, _)| *e - *s).sum();
    // Takeovers of a lease that was not released, and the smallest gap
    // between one holder's last belief and the next holder's first.
    let takeovers = h
        .lock_writes
        .windows(2)
        .filter(|w| w[1].2 > w[0].2 && !w[0].3)
        .count();
    let mut min_gap: Option<Duration> = None;
    let mut last: Option<(Duration, usize)> = None;
    for &(start, end, g) in &intervals {
        if let Some((prev_end, prev)) = last
            && prev != g
            && start >= prev_end
        {
            let gap = start - prev_end;
            min_gap = Some(min_gap.map_or(gap, |m| m.min(gap)));
        }
        last = Some(last.map_or((end, g), |(e, p)| if end >= e { (end, g) } else { (e, p) }));
    }
    let mut text = String::new();
    for (g, r) in h.guards.iter().enumerate() {
        let _ = writeln!(
            text,
            "guard {g} client {} token {} at {:?} beliefs {:?}",
            r.client, r.token, r.acquired_at, r.beliefs
        );
    }
    let _ = writeln!(text, "checkpoints {:?}", h.checkpoints);
    let _ = writeln!(text, "lock {:?}", h.lock_writes);
    let _ = writeln!(text, "fenced {:?}", h.fenced_writes);
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);

    let summary = format!(
        "seed={seed} clients={} rates=[{}] acquisitions={} takeovers={takeovers} min_handover_gap={} believed={} lock_writes={} checkpoints={} \
         fenced_ok={} fenced_out={} fenced_failed={} late_fenced_writes={late} releases={} crashes={} drops={} \
         stalls={} freezes={} faults: failed_before_apply={} lost_responses={} throttled={} server_errors={} duplicated={} \
         digest={digest:016x}",
        rates.len(),
        rates
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(","),
        h.guards.len(),
        min_gap.map_or_else(|| "-".to_string(), ms),
        ms(believed),
        h.lock_writes.len(),
        h.checkpoints.len(),
        h.fenced_ok,
        h.fenced_out,
        h.fenced_failed,
        h.releases,
        h.abandons,
        h.drops,
        h.stalls,
        h.freezes,
        faults.failed_before_apply,
        faults.lost_responses,
        faults.throttled,
        faults.server_errors,
        faults.duplicated,
    );
    Report {
        ops,
        violations,
        digest,
        summary,
    }
}
