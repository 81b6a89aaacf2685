//! The probe interface: what a probe is, and what it gets to work with.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use casaas_core::CasStore;

use crate::model::{Outcome, ProbeResult, Severity, StepError};
use crate::paced::{IntervalSource, KeyClock, Mode, PacedStore, Pacer};

/// How hard a run probes: rounds, sample counts and time caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Quick mode: few rounds, for a first look (under a minute on a
    /// loopback server, under two on a store that allows one write per
    /// second per key). The default is thorough.
    pub quick: bool,
    /// Concurrent writers in each race round.
    pub concurrency: usize,
    /// Race rounds, exactly; `None` lets each race run the mode's
    /// [`RacePlan`]: a minimum of rounds, then more until its time budget
    /// is spent.
    pub rounds: Option<usize>,
    /// The longest one probe may take before it is reported as an error.
    pub probe_timeout: Duration,
    /// Pace writes to one key to at most one per this interval, instead of
    /// the rate the `throttle` probe measures (`--min-write-interval`).
    pub min_write_interval: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::thorough()
    }
}

impl Settings {
    /// The thorough defaults.
    pub fn thorough() -> Self {
        Settings {
            quick: false,
            concurrency: 8,
            rounds: None,
            probe_timeout: Duration::from_secs(600),
            min_write_interval: None,
        }
    }

    /// The quick defaults.
    pub fn quick() -> Self {
        Settings {
            quick: true,
            probe_timeout: Duration::from_secs(120),
            ..Settings::thorough()
        }
    }

    /// How many rounds each race runs: exactly `rounds` when given,
    /// otherwise the mode's plan.
    pub fn race_plan(&self) -> RacePlan {
        match self.rounds {
            Some(n) => RacePlan {
                min_rounds: n,
                max_rounds: n,
                budget: Duration::ZERO,
            },
            None if self.quick => RacePlan {
                min_rounds: 10,
                max_rounds: 300,
                budget: Duration::from_secs(10),
            },
            None => RacePlan {
                min_rounds: 100,
                max_rounds: 2000,
                budget: Duration::from_secs(30),
            },
        }
    }

    /// The fewest rounds each race runs (what the report states).
    pub fn race_rounds(&self) -> usize {
        self.race_plan().min_rounds
    }

    /// Write-then-read rounds of the read-after-write probe.
    pub fn consistency_rounds(&self) -> usize {
        if self.quick { 100 } else { 1000 }
    }

    /// Samples per operation of the latency probe.
    pub fn latency_samples(&self) -> usize {
        if self.quick { 30 } else { 200 }
    }

    /// The throttle probe's caps: total writes and total time.
    pub fn throttle_caps(&self) -> (u64, Duration) {
        if self.quick {
            (600, Duration::from_secs(5))
        } else {
            (5000, Duration::from_secs(20))
        }
    }
}

/// How long a race probe goes on.
///
/// A store whose conditional writes are not atomic lets two racers win only
/// now and then (about one round in a hundred on moto 5.2), and a probe
/// that runs too few rounds calls it safe. So a race runs `min_rounds`,
/// then keeps going while its time `budget` lasts, up to `max_rounds`: a
/// fast store gets many rounds (a thousand rounds catch a race of one round
/// in a hundred with near certainty), a slow or throttling store still
/// finishes in time. A round that broke exclusion, or one that never had a
/// winner, ends the extension: the verdict is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RacePlan {
    /// Rounds always run.
    pub min_rounds: usize,
    /// Rounds never exceeded.
    pub max_rounds: usize,
    /// Rounds past `min_rounds` start only while the race has run for less
    /// than this.
    pub budget: Duration,
}

impl RacePlan {
    /// Whether round number `started` (0-based) should start, `elapsed`
    /// into the race, with `broken` rounds found so far.
    pub fn should_start(&self, started: usize, elapsed: Duration, broken: bool) -> bool {
        started < self.min_rounds || (started < self.max_rounds && elapsed < self.budget && !broken)
    }
}

/// The smallest per-round rate of a race that `rounds` clean rounds would
/// have shown with 99% probability: `1 - 0.01^(1/rounds)`.
pub fn detectable_race_rate(rounds: usize) -> f64 {
    if rounds == 0 {
        return 1.0;
    }
    1.0 - 0.01f64.powf(1.0 / rounds as f64)
}

/// A backend hook: the server's own clock, as stated in the HTTP `Date`
/// header of its responses. Backends that see those headers implement it;
/// the clock-skew probe is unsupported without one.
pub trait ServerClock: Send + Sync + fmt::Debug {
    /// The `Date` of the most recent response the backend received, if any.
    fn last_server_date(&self) -> Option<SystemTime>;
}

/// Receives progress while a suite runs (the binary draws a progress bar).
/// Every method has an empty default.
pub trait Progress: Send + Sync {
    /// Probe `index` (0-based) of `total` starts.
    fn probe_started(&self, index: usize, total: usize, id: &str, title: &str) {
        let _ = (index, total, id, title);
    }

    /// A probe advanced: `done` of `total` steps (rounds, samples).
    fn probe_step(&self, id: &str, done: u64, total: u64) {
        let _ = (id, done, total);
    }

    /// A probe finished.
    fn probe_finished(&self, result: &ProbeResult) {
        let _ = result;
    }
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// What a probe works with.
pub struct ProbeContext {
    pub(crate) id: &'static str,
    /// The probe's store without pacing or retries.
    pub(crate) raw: Arc<dyn CasStore>,
    pub(crate) store: Arc<dyn CasStore>,
    pub(crate) racing: Arc<dyn CasStore>,
    pub(crate) protocol: Arc<dyn CasStore>,
    /// Every endpoint's racing and protocol stores, the probe's own first
    /// (see [`ProbeContext::with_endpoints`]).
    pub(crate) endpoints: Vec<EndpointStores>,
    pub(crate) keys: Arc<KeyClock>,
    pub(crate) paced: PacedStore,
    pub(crate) pacer: Arc<Pacer>,
    pub(crate) settings: Settings,
    pub(crate) clock: Option<Arc<dyn ServerClock>>,
    pub(crate) progress: Arc<dyn Progress>,
    pub(crate) key_prefix: String,
}

impl fmt::Debug for ProbeContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeContext")
            .field("id", &self.id)
            .field("store", &self.raw.describe())
            .field("settings", &self.settings)
            .field("clock", &self.clock.is_some())
            .finish()
    }
}

impl ProbeContext {
    /// A context for probe `id` on `store` (already private to the probe),
    /// paced as `settings` and the store's capabilities say.
    pub fn new(
        id: &'static str,
        store: Arc<dyn CasStore>,
        settings: Settings,
        clock: Option<Arc<dyn ServerClock>>,
        progress: Arc<dyn Progress>,
    ) -> Self {
        let pacer = Arc::new(match settings.min_write_interval {
            Some(interval) => Pacer::new(Some(interval), IntervalSource::Option),
            None => Pacer::new(
                store.capabilities().min_write_interval,
                IntervalSource::Declared,
            ),
        });
        Self::with_pacer(id, store, settings, clock, progress, pacer)
    }

    /// A context sharing a run-wide [`Pacer`].
    pub fn with_pacer(
        id: &'static str,
        store: Arc<dyn CasStore>,
        settings: Settings,
        clock: Option<Arc<dyn ServerClock>>,
        progress: Arc<dyn Progress>,
        pacer: Arc<Pacer>,
    ) -> Self {
        let keys = Arc::new(KeyClock::default());
        let paced = PacedStore::new(store.clone(), pacer.clone(), keys.clone(), Mode::Resolving);
        let own = EndpointStores::new(&store, &pacer, &keys, "main".to_string());
        ProbeContext {
            id,
            raw: store,
            store: Arc::new(paced.clone()),
            racing: own.racing.clone(),
            protocol: own.protocol.clone(),
            endpoints: vec![own],
            keys,
            paced,
            pacer,
            settings,
            clock,
            progress,
            key_prefix: String::new(),
        }
    }

    /// Adds the other endpoints (`--gateway`): the same bucket and prefix
    /// through other gateways, each `(store, label)` already on the probe's
    /// key prefix. Race probes and the lease probe spread their writers
    /// over every endpoint; writes to one key share one pace whatever the
    /// endpoint.
    pub fn with_endpoints(mut self, others: Vec<(Arc<dyn CasStore>, String)>) -> Self {
        for (store, label) in others {
            self.endpoints
                .push(EndpointStores::new(&store, &self.pacer, &self.keys, label));
        }
        self
    }

    /// Records where the probe's store lives inside the store the user
    /// named (ending with `/`), for probes that bypass [`CasStore`] and
    /// talk to the backend directly.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// `key` of the probe's store as a key of the store the user named:
    /// what a probe using the backend's own client must write to, so that
    /// it stays under the run's prefix and is cleaned up with the rest.
    pub fn base_key(&self, key: &str) -> String {
        format!("{}{key}", self.key_prefix)
    }

    /// The store, on an empty key prefix private to this probe. Every key a
    /// probe writes is under it, and the suite removes them afterwards.
    ///
    /// Writes are paced per key, throttled answers are retried with
    /// backoff, and writes whose outcome is unknown are resolved by reading
    /// the key back (every probe body carries a nonce): a probe sees only
    /// answers about the store's semantics, or an error once the retry
    /// budget is spent.
    pub fn store(&self) -> &Arc<dyn CasStore> {
        &self.store
    }

    /// The store for races and the lease protocol: first attempts are sent
    /// at once (unpaced), throttled answers are retried paced, and unknown
    /// outcomes are returned for the caller to resolve.
    pub fn racing_store(&self) -> &Arc<dyn CasStore> {
        &self.racing
    }

    /// One racing store per endpoint ([`ProbeContext::racing_store`] first,
    /// then the other gateways): racer `i` writes through endpoint
    /// `i % len`.
    pub fn racing_stores(&self) -> Vec<Arc<dyn CasStore>> {
        self.endpoints.iter().map(|e| e.racing.clone()).collect()
    }

    /// One protocol store per endpoint ([`ProbeContext::protocol_store`]
    /// first).
    pub fn protocol_stores(&self) -> Vec<Arc<dyn CasStore>> {
        self.endpoints.iter().map(|e| e.protocol.clone()).collect()
    }

    /// The endpoints' labels, in the order of [`ProbeContext::racing_stores`]
    /// (`main`, then each gateway's URL without credentials).
    pub fn endpoint_labels(&self) -> Vec<String> {
        self.endpoints.iter().map(|e| e.label.clone()).collect()
    }

    /// The store for protocols that resolve unknown outcomes themselves
    /// (the lease protocol): every write paced, throttled answers retried,
    /// unknown outcomes returned.
    pub fn protocol_store(&self) -> &Arc<dyn CasStore> {
        &self.protocol
    }

    /// The store without pacing or retries, for probes that measure the
    /// store's own limits.
    pub fn raw_store(&self) -> &Arc<dyn CasStore> {
        &self.raw
    }

    /// The run's pacing state, shared by every probe.
    pub fn pacer(&self) -> &Arc<Pacer> {
        &self.pacer
    }

    /// The interval between writes to one key that writes are paced to.
    pub fn min_write_interval(&self) -> Option<Duration> {
        self.pacer.interval()
    }

    /// How hard to probe.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The server clock hook, when the backend provides one.
    pub fn clock(&self) -> Option<&Arc<dyn ServerClock>> {
        self.clock.as_ref()
    }

    /// Reports progress within the probe.
    pub fn step(&self, done: u64, total: u64) {
        self.progress.probe_step(self.id, done, total);
    }

    /// Waits until a write to `key` keeps the run's per-key pace (what the
    /// `throttle` probe measured, `--min-write-interval`, or what the
    /// backend declares). Writes through [`ProbeContext::store`] are paced
    /// already; this is for a race, whose racers are released unpaced.
    pub async fn pace(&self, key: &str) {
        self.paced.pace(key).await;
    }
}

/// One endpoint's stores for races and protocols.
pub(crate) struct EndpointStores {
    racing: Arc<dyn CasStore>,
    protocol: Arc<dyn CasStore>,
    label: String,
}

impl EndpointStores {
    fn new(
        store: &Arc<dyn CasStore>,
        pacer: &Arc<Pacer>,
        keys: &Arc<KeyClock>,
        label: String,
    ) -> Self {
        EndpointStores {
            racing: Arc::new(PacedStore::new(
                store.clone(),
                pacer.clone(),
                keys.clone(),
                Mode::Racing,
            )),
            protocol: Arc::new(PacedStore::new(
                store.clone(),
                pacer.clone(),
                keys.clone(),
                Mode::Protocol,
            )),
            label,
        }
    }
}

/// A named check of one property of a store.
///
/// Probes are written once against [`CasStore`]. A binary may contribute
/// probes of its own (for example S3-only checks that need raw S3 access)
/// with [`Suite::with_probe`](crate::Suite::with_probe), which replaces a
/// built-in probe of the same id.
#[async_trait]
pub trait Probe: Send + Sync {
    /// Stable identifier (snake_case), used by `--only` and in JSON.
    fn id(&self) -> &'static str;

    /// A short title for people.
    fn title(&self) -> &'static str;

    /// How much a failure matters.
    fn severity(&self) -> Severity;

    /// How much a failure matters when the run has `endpoints` endpoints
    /// (the URL and its `--gateway`s): the same as [`Probe::severity`]
    /// unless the probe only means something across endpoints.
    fn severity_for(&self, endpoints: usize) -> Severity {
        let _ = endpoints;
        self.severity()
    }

    /// One plain sentence: what a failure means for a lock on this store.
    fn explanation(&self) -> &'static str;

    /// Runs the probe. A `StepError` (an unexpected store error) becomes an
    /// error verdict, or unsupported if the store said so.
    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError>;
}
