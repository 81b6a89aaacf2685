//! The store as the clients reach it: a recorder of applied writes inside a
//! faulty store, and one delaying network path per client.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::testkit::{FaultCounts, FaultyStore};
use casaas_core::{
    CasError, CasStore, ErrorKind, ForwardingStore, ListEntry, MemoryStore, StoredObject, Version,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio_util::sync::CancellationToken;

use crate::clock::{Freeze, SimClock, TrueTime, spread_rates};
use crate::config::{SimConfig, draw_lease};
use crate::lock;
use casaas_core::lease::LeaseConfig;

/// Called with (true time, key, body) for every write the store applied.
pub type ApplyHook = Arc<dyn Fn(Duration, &str, &Bytes) + Send + Sync>;
/// Called with (client, key, body) for every write a client sends.
pub type SendHook = Arc<dyn Fn(usize, &str, &Bytes) + Send + Sync>;

/// The store under test, seen from inside: reports every write the store
/// applied, at the true time it applied.
#[derive(Clone)]
pub struct Recorder {
    inner: MemoryStore,
    time: TrueTime,
    on_apply: ApplyHook,
    races: Arc<Mutex<Races>>,
}

/// Creates lost in a race, answered as S3 answers them while the race is
/// unsettled: within `window` of the winning create, a 409
/// `ConditionalRequestConflict` (nothing written, retry); after it, the
/// 412 every losing create answers. Off (a zero window) unless a
/// primitive asks for it.
#[derive(Default)]
struct Races {
    window: Duration,
    /// When each key was last created, while the window is on.
    created: std::collections::HashMap<String, Duration>,
    /// Losing creates answered 409.
    conflicts: u64,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    /// The store itself, without faults or recording: the truth a checker
    /// reads at the end.
    pub fn truth(&self) -> &MemoryStore {
        &self.inner
    }

    /// What a create that found an object at `key` answers: what the S3
    /// provider makes of S3's answers (the contract's one kind for a
    /// losing create, with the provider's status, code and words), or,
    /// while racing creates are answered as conflicts and the winner landed
    /// within the window, S3's 409 for a conditional write racing another.
    fn losing_create(&self, key: &str, now: Duration) -> CasError {
        let mut races = lock(&self.races);
        let racing = !races.window.is_zero()
            && races
                .created
                .get(key)
                .is_some_and(|at| now.saturating_sub(*at) < races.window);
        if racing {
            races.conflicts += 1;
            return CasError::new(
                ErrorKind::ConcurrentRequest,
                "PutObject (create-if-absent): another conditional write to this key is in flight; nothing was written",
            )
            .with_key(key)
            .with_status(409)
            .with_code("ConditionalRequestConflict");
        }
        CasError::new(
            ErrorKind::PreconditionFailed,
            "PutObject (create-if-absent): another write is there",
        )
        .with_key(key)
        .with_status(412)
        .with_code("PreconditionFailed")
    }
}

#[async_trait]
impl ForwardingStore for Recorder {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let now = self.time.now();
        let v = match self.inner.create(key, body.clone()).await {
            Ok(v) => v,
            Err(err) if err.kind() == ErrorKind::PreconditionFailed => {
                return Err(self.losing_create(key, now));
            }
            Err(err) => return Err(err),
        };
        {
            let mut races = lock(&self.races);
            if !races.window.is_zero() {
                races.created.insert(key.to_string(), now);
            }
        }
        (self.on_apply)(now, key, &body);
        Ok(v)
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let v = self.inner.replace(key, expected, body.clone()).await?;
        (self.on_apply)(self.time.now(), key, &body);
        Ok(v)
    }

    fn wrap_describe(&self) -> String {
        format!("recorded({})", self.inner.describe())
    }

    fn wrap_identity(&self) -> String {
        // Each run's world is a store of its own: the once-per-store work
        // (the store guard) happens in every run, so a run is a function
        // of its seed whatever ran before it in the process.
        format!("recorded({})", self.inner.identity())
    }
}

/// What all clients of one primitive's run share.
pub struct World {
    pub time: TrueTime,
    pub store: FaultyStore<Recorder>,
    /// Network delays, drawn in request order.
    net_rng: Mutex<ChaCha8Rng>,
    ops: AtomicU64,
    limit: u64,
    stopped: AtomicBool,
    /// Cancelled once the clients have sent `limit` requests.
    pub stop: CancellationToken,
    slow_request: f64,
    /// See [`SimConfig::late_answer`].
    late_answer: f64,
    /// Each client's TTL in true milliseconds: the longest late answer.
    ttl_ms: Vec<u64>,
    /// See [`SimConfig::pause_after_read`].
    pause_after_read: f64,
    max_pause: Duration,
    /// The request timeout, in true milliseconds, as each client's clock
    /// measures it; network delays avoid landing on the same millisecond
    /// tick as a timeout, where the outcome would depend on which of two
    /// timers tokio fires first.
    timeout_ms: Vec<u64>,
    /// Each client's clock rate.
    pub rates: Vec<f64>,
    /// Each client's lease timing: the run's, or drawn for it when the run
    /// explores configurations.
    pub leases: Vec<LeaseConfig>,
    on_send: Option<SendHook>,
    /// Writes applied after their sender had stopped waiting for them.
    pub landed_after_give_up: AtomicU64,
    /// Answers that arrived after their sender had stopped waiting.
    pub answers_after_give_up: AtomicU64,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World").finish_non_exhaustive()
    }
}

impl World {
    /// A world for `clients` clients whose clocks drift as `config` says,
    /// stopping after `limit` requests. `rng` is the primitive's seeded
    /// generator.
    pub fn new(
        config: &SimConfig,
        rng: &mut ChaCha8Rng,
        clients: usize,
        limit: u64,
        on_apply: ApplyHook,
        on_send: Option<SendHook>,
    ) -> Arc<World> {
        let time = TrueTime::start();
        let recorder = Recorder {
            inner: MemoryStore::new(),
            time,
            on_apply,
            races: Arc::default(),
        };
        let store = FaultyStore::new(recorder, rng.random(), config.faults.clone());
        let mut rates = spread_rates(clients, config.rate_deviation, rng);
        let leases: Vec<LeaseConfig> = if config.explore_configs {
            let mut draw = ChaCha8Rng::seed_from_u64(rng.random());
            rates
                .iter_mut()
                .map(|rate| {
                    let lease = draw_lease(&config.lease, &mut draw);
                    // Each clock drifts within what its client declares, in
                    // the same proportion as the run's clocks to its
                    // declared bound (so a deliberately broken run stays
                    // broken).
                    if config.lease.drift_margin > 0.0 {
                        let scaled =
                            1.0 + (*rate - 1.0) * lease.drift_margin / config.lease.drift_margin;
                        *rate = scaled.clamp(0.1, 3.0);
                    }
                    lease
                })
                .collect()
        } else {
            vec![config.lease.clone(); rates.len()]
        };
        Arc::new(World {
            time,
            store,
            net_rng: Mutex::new(ChaCha8Rng::seed_from_u64(rng.random())),
            ops: AtomicU64::new(0),
            limit,
            stopped: AtomicBool::new(false),
            stop: CancellationToken::new(),
            slow_request: config.slow_request,
            late_answer: config.late_answer,
            ttl_ms: rates
                .iter()
                .zip(&leases)
                .map(|(r, l)| l.ttl.div_f64(*r).as_millis() as u64)
                .collect(),
            pause_after_read: config.pause_after_read,
            max_pause: config.max_pause,
            timeout_ms: rates
                .iter()
                .zip(&leases)
                .map(|(r, l)| l.request_timeout.div_f64(*r).as_millis() as u64 + 1)
                .collect(),
            rates,
            leases,
            on_send,
            landed_after_give_up: AtomicU64::new(0),
            answers_after_give_up: AtomicU64::new(0),
        })
    }

    /// Client `id`'s clock (wall offset drawn from `rng`) and network path.
    pub fn client(
        self: &Arc<Self>,
        id: usize,
        config: &SimConfig,
        rng: &mut ChaCha8Rng,
    ) -> (SimClock, Arc<dyn CasStore>) {
        let freeze = Arc::new(Freeze::default());
        let clock = SimClock {
            time: self.time,
            rate: self.rates[id],
            wall_offset: Duration::from_millis(
                rng.random_range(0..config.wall_skew.as_millis().max(1) as u64),
            ),
            freeze: freeze.clone(),
        };
        let net = Arc::new(Net {
            world: self.clone(),
            client: id,
            freeze,
        });
        (clock, net)
    }

    /// Store requests sent so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// The faults injected so far.
    pub fn faults(&self) -> FaultCounts {
        self.store.counts()
    }

    /// From now on, a create that loses to one applied less than `window`
    /// before it answers 409 `ConditionalRequestConflict`, as S3 does
    /// while the race is unsettled, instead of 412.
    pub fn answer_racing_creates_with_conflicts(&self, window: Duration) {
        lock(&self.store.inner().races).window = window;
    }

    /// Losing creates answered with a conflict so far.
    pub fn create_conflicts(&self) -> u64 {
        lock(&self.store.inner().races).conflicts
    }

    /// The store without faults: what is really stored.
    pub fn truth(&self) -> &MemoryStore {
        self.store.inner().truth()
    }

    /// Late writes and answers, for summaries.
    pub fn late_summary(&self) -> String {
        format!(
            "landed_after_give_up={} answers_after_give_up={}",
            self.landed_after_give_up.load(Ordering::Relaxed),
            self.answers_after_give_up.load(Ordering::Relaxed)
        )
    }

    fn count_op(&self) {
        let n = self.ops.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.limit && !self.stopped.swap(true, Ordering::Relaxed) {
            self.stop.cancel();
        }
    }

    /// A pause to begin as a read's answer arrives, if one is drawn.
    fn pause_after_read(&self) -> Option<Duration> {
        if self.pause_after_read <= 0.0 {
            return None;
        }
        let mut rng = lock(&self.net_rng);
        rng.random_bool(self.pause_after_read)
            .then(|| Duration::from_millis(rng.random_range(0..=self.max_pause.as_millis() as u64)))
    }

    /// Request and response delays in whole milliseconds.
    fn delays(&self, client: usize) -> (u64, u64) {
        let mut rng = lock(&self.net_rng);
        let avoid = self.timeout_ms[client];
        loop {
            let slow = rng.random_bool(self.slow_request);
            let max = if slow { avoid * 2 } else { 10 };
            let (a, mut b) = (rng.random_range(0..=max), rng.random_range(0..=max));
            // Served at once, answered up to a TTL later (the request's
            // timeout decides whether its sender still waits for it).
            // Drawn only when enabled, so a zero share keeps old digests.
            if self.late_answer > 0.0 && rng.random_bool(self.late_answer) {
                b = rng.random_range(0..=self.ttl_ms[client]);
            }
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
    async fn call<T, F, Fut>(&self, write: bool, request: F) -> Result<T, CasError>
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
            let world = self.world.clone();
            // Spawned: once sent, a request is out of the sender's hands.
            tokio::spawn(async move {
                if there > 0 {
                    tokio::time::sleep(Duration::from_millis(there)).await;
                }
                let result = fut.await;
                // Applied as the request completed (a store-side delay
                // included), after its sender stopped waiting.
                if tx.is_closed() && write && result.is_ok() {
                    world.landed_after_give_up.fetch_add(1, Ordering::Relaxed);
                }
                if back > 0 {
                    tokio::time::sleep(Duration::from_millis(back)).await;
                }
                if tx.send(result).is_err() {
                    world.answers_after_give_up.fetch_add(1, Ordering::Relaxed);
                }
            });
            rx.await.unwrap_or_else(|_| {
                Err(CasError::new(
                    ErrorKind::Ambiguous,
                    "simulated connection dropped",
                ))
            })
        };
        if !write && let Some(pause) = self.world.pause_after_read() {
            self.freeze.until(time.now() + pause);
        }
        self.freeze.gate(time, Duration::ZERO).await;
        result
    }

    fn sending(&self, key: &str, body: &Bytes) {
        if let Some(hook) = &self.world.on_send {
            hook(self.client, key, body);
        }
    }
}

#[async_trait]
impl ForwardingStore for Net {
    type Inner = FaultyStore<Recorder>;

    fn inner(&self) -> &FaultyStore<Recorder> {
        &self.world.store
    }

    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let key = key.to_string();
        self.call(false, |s| async move { s.get(&key).await }).await
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.sending(key, &body);
        let key = key.to_string();
        self.call(true, |s| async move { s.create(&key, body).await })
            .await
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.sending(key, &body);
        let key = key.to_string();
        let expected = expected.clone();
        self.call(
            true,
            |s| async move { s.replace(&key, &expected, body).await },
        )
        .await
    }

    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let key = key.to_string();
        let expected = expected.clone();
        self.call(true, |s| async move { s.delete(&key, &expected).await })
            .await
    }

    async fn wrap_delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        let key = key.to_string();
        self.call(
            true,
            |s| async move { s.delete_unconditionally(&key).await },
        )
        .await
    }

    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        let prefix = prefix.to_string();
        self.call(false, |s| async move { s.list(&prefix).await })
            .await
    }

    fn wrap_describe(&self) -> String {
        format!(
            "net(client {}) -> {}",
            self.client,
            self.world.store.describe()
        )
    }

    fn wrap_identity(&self) -> String {
        // Every client reaches the one store of its world.
        self.world.store.identity()
    }
}
