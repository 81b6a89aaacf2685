//! What to simulate, and what a run reports.

use std::fmt::Write as _;
use std::time::Duration;

use casaas_core::lease::{ExpiryMode, LeaseConfig};
use casaas_core::testkit::FaultConfig;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A public primitive the simulation drives, with a checker of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Primitive {
    /// One `Lease` per client: never two believed holders at one true time.
    Lease,
    /// Several tasks per client share one `Lease` (clones): still never two
    /// believed holders, across tasks and clients.
    SharedLease,
    /// `ElectionRunner`s dropped, aborted or cancelled mid-run: the work of
    /// two terms never overlaps in true time.
    Election,
    /// `FencedResource<u64>` increments: every increment applied at most
    /// once, and exactly once when reported applied.
    FencedResource,
    /// `FencedLog` appends: exactly once when reported, never twice, no
    /// gaps, tokens never decrease along the log.
    FencedLog,
    /// The `lease` primitive, fenced resource included, on a store that
    /// honours create-if-absent alone: the epoch layout, with collection
    /// blocks small enough that late writes land in collected history.
    LeaseCreateOnly,
    /// The `election` primitive on a create-only store (epoch layout).
    ElectionCreateOnly,
    /// Locks held under sessions (one heartbeat each, many locks): never
    /// two believed holders of one lock, tokens per lock increasing, and
    /// locks of expired sessions taken over.
    Session,
    /// `GroupResource` and `GroupLog`: many tasks per process batched
    /// behind one conditional write; every update and record exactly once
    /// when reported, never twice, in each caller's order.
    GroupCommit,
    /// `FairLease`: waiters served in turns (a ticket each, watching the
    /// one before), some frozen while queued: the lease's checks on the
    /// lock, and turns really taken.
    Fair,
    /// `CreateOnce`: transactions committed to shared logs the Delta Lake
    /// way (create-if-absent of the next version, the next one when it is
    /// taken, unknown outcomes settled by reading): each at most once, where
    /// its client was told, none told not committed, no holes.
    CreateOnce,
    /// `SwapOnce`: transactions committed to shared tables the Iceberg way
    /// (swap the table's pointer if it is still the one read, rebase on a
    /// conflict): each landed exactly once when told ours, never when told
    /// a conflict, and no lost update.
    SwapOnce,
    /// Clients racing for locks that do not exist yet, in both layouts:
    /// losing the first write is never an error, one holder at a time.
    FirstUse,
    /// `RwLock`: readers share a slot lease each, writers hold the lock
    /// object and wait for the readers; some freeze while they wait: never
    /// a writer believing beside any other believer, writers' tokens
    /// increasing, and readers really sharing.
    RwLock,
    /// `Semaphore`: clients take one of three slots in turns, hold it amid
    /// stalls and freezes, and release, crash or drop; one client counts
    /// four slots: never more believed holders than slots, each slot's
    /// lease safe with its tokens increasing, the miscounting client
    /// refused.
    Semaphore,
}

impl Primitive {
    /// Every primitive, in the order they run and report.
    pub const ALL: [Primitive; 15] = [
        Primitive::Lease,
        Primitive::SharedLease,
        Primitive::Election,
        Primitive::FencedResource,
        Primitive::FencedLog,
        Primitive::LeaseCreateOnly,
        Primitive::ElectionCreateOnly,
        Primitive::Session,
        Primitive::GroupCommit,
        Primitive::Fair,
        Primitive::CreateOnce,
        Primitive::SwapOnce,
        Primitive::FirstUse,
        Primitive::RwLock,
        Primitive::Semaphore,
    ];

    /// The name printed in `primitive=NAME`.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Lease => "lease",
            Primitive::SharedLease => "shared_lease",
            Primitive::Election => "election",
            Primitive::FencedResource => "fenced_resource",
            Primitive::FencedLog => "fenced_log",
            Primitive::LeaseCreateOnly => "lease_create_only",
            Primitive::ElectionCreateOnly => "election_create_only",
            Primitive::Session => "session",
            Primitive::GroupCommit => "group_commit",
            Primitive::Fair => "fair",
            Primitive::CreateOnce => "create_once",
            Primitive::SwapOnce => "swap_once",
            Primitive::FirstUse => "first_use",
            Primitive::RwLock => "rwlock",
            Primitive::Semaphore => "semaphore",
        }
    }

    /// The primitive called `name`.
    pub fn from_name(name: &str) -> Option<Primitive> {
        Primitive::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Its share of the operations, in parts of the sum of every share:
    /// the lease-based primitives get more, since handovers (where mutual
    /// exclusion is at stake) are rarer per request than increments or
    /// appends.
    fn share(self) -> u64 {
        match self {
            Primitive::Lease | Primitive::SharedLease => 18,
            Primitive::Election => 16,
            Primitive::LeaseCreateOnly => 14,
            Primitive::FencedResource | Primitive::FencedLog => 12,
            Primitive::ElectionCreateOnly => 10,
            Primitive::Session => 12,
            Primitive::GroupCommit => 12,
            Primitive::Fair => 12,
            Primitive::CreateOnce => 12,
            Primitive::SwapOnce => 12,
            Primitive::FirstUse => 6,
            Primitive::RwLock => 12,
            Primitive::Semaphore => 12,
        }
    }
}

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The store requests to simulate, over all primitives (each gets its
    /// share and stops once its clients have sent that many).
    pub ops: u64,
    /// The seed of everything random: clocks, faults, delays, behaviour.
    pub seed: u64,
    /// The primitives to run (all by default). A primitive's share of
    /// `ops` and its seed do not depend on which others run, so one can be
    /// replayed alone.
    pub primitives: Vec<Primitive>,
    /// Number of clients of the `lease` primitive (`shared_lease` has half
    /// as many, each with three tasks; the fenced primitives four).
    pub clients: usize,
    /// The lease timing every client uses (declares the drift bound).
    pub lease: LeaseConfig,
    /// The actual clock-rate deviation: clients' clocks run at rates spread
    /// over `[1 - d, 1 + d]`, both ends included. Safe while `d` is at most
    /// the declared `lease.drift_margin`.
    pub rate_deviation: f64,
    /// Store faults per request (drawn by `FaultyStore` from the seed).
    pub faults: FaultConfig,
    /// Probability that a request is slow (up to twice the request timeout
    /// each way) rather than fast (up to 10 ms each way).
    pub slow_request: f64,
    /// Probability that a read's or write's answer comes back late: the
    /// request is served at once and its answer travels for up to the
    /// client's TTL (a read served long before its answer arrives is the
    /// stale view a contender must never decide on alone).
    pub late_answer: f64,
    /// Probability, before each side effect, that the holder's main task
    /// stalls (its renewal keeps running) for up to `max_pause`.
    pub stall: f64,
    /// Probability, before each side effect, that the whole client freezes
    /// (no timer fires, no request leaves, no answer arrives; a GC pause or
    /// a stopped VM) for up to `max_pause`.
    pub freeze: f64,
    /// Probability that the holder stalls between passing its lease check
    /// and writing (the gap only fencing closes), for up to `max_pause`.
    pub stall_after_check: f64,
    /// Probability that a client freezes for up to `max_pause` right as a
    /// read's answer reaches it (a process pause between a read and the
    /// write decided from it). Zero in the standard run; the
    /// `lease_create_only` run sets it.
    pub pause_after_read: f64,
    /// Longest stall or freeze.
    pub max_pause: Duration,
    /// Wall clocks are offset from true time by up to this much (exclusive).
    pub wall_skew: Duration,
    /// Draw each client's lease timing from the valid space around `lease`
    /// (see [`draw_lease`]) instead of giving every client `lease` itself.
    /// Off by default, so that a seed's digest stays what it was.
    pub explore_configs: bool,
}

impl SimConfig {
    /// The standard run: every primitive; 6 lease clients, TTL 10 s,
    /// declared drift 5% and clocks drifting by exactly that much, 2% of
    /// each fault (and 2% of requests delayed in the store by up to twice
    /// the request timeout), pauses up to 10 TTL.
    pub fn new(ops: u64, seed: u64) -> Self {
        let ttl = Duration::from_secs(10);
        let mut lease = LeaseConfig::from_ttl(ttl);
        lease.drift_margin = 0.05;
        SimConfig {
            ops,
            seed,
            primitives: Primitive::ALL.to_vec(),
            clients: 6,
            rate_deviation: 0.05,
            faults: FaultConfig {
                fail_before_apply: 0.02,
                lose_response: 0.02,
                throttle: 0.02,
                server_error: 0.02,
                duplicate: 0.02,
                delay: 0.02,
                max_delay: lease.request_timeout * 2,
            },
            lease,
            slow_request: 0.05,
            late_answer: 0.02,
            stall: 0.08,
            freeze: 0.05,
            stall_after_check: 0.03,
            pause_after_read: 0.0,
            max_pause: ttl * 10,
            wall_skew: Duration::from_secs(1),
            explore_configs: false,
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

    /// Each client draws its own valid lease timing (see [`draw_lease`]).
    pub fn explore(mut self) -> Self {
        self.explore_configs = true;
        self
    }

    /// Only `primitives` (their shares of `ops` stay as in a full run).
    pub fn only(mut self, primitives: &[Primitive]) -> Self {
        self.primitives = primitives.to_vec();
        self
    }

    /// The operations `primitive` runs: its share of `ops` (the last one
    /// takes the remainder, so the shares add up to `ops`).
    pub fn ops_for(&self, primitive: Primitive) -> u64 {
        // Out of the sum of every share, so that adding a primitive needs no
        // other share changed.
        let total: u64 = Primitive::ALL.iter().map(|p| p.share()).sum();
        let share = |p: Primitive| {
            u64::try_from(u128::from(self.ops) * u128::from(p.share()) / u128::from(total))
                .unwrap_or(self.ops)
        };
        let (last, others) = Primitive::ALL
            .split_last()
            .unwrap_or((&Primitive::Lease, &[]));
        if primitive == *last {
            let others: u64 = others.iter().map(|p| share(*p)).sum();
            self.ops - others
        } else {
            share(primitive)
        }
    }

    /// The seed of `primitive`'s world, derived from `seed`.
    pub fn seed_for(&self, primitive: Primitive) -> u64 {
        let index = Primitive::ALL
            .iter()
            .position(|p| *p == primitive)
            .unwrap_or(0) as u64;
        // Primitive 0 keeps the run's seed itself.
        self.seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

/// A valid lease timing drawn around `base` (same TTL and expiry mode),
/// with the edges weighted: renew deadline just under the holder's
/// validity, request timeout just under the renew deadline, drift margin 0
/// and high, safety margin 0. The caller runs the client's clock within the
/// drawn drift margin, which is what the margin declares.
pub fn draw_lease(base: &LeaseConfig, rng: &mut ChaCha8Rng) -> LeaseConfig {
    let ttl = base.ttl;
    let frac = |rng: &mut ChaCha8Rng, lo: f64, hi: f64| rng.random_range(lo..hi);
    for _ in 0..64 {
        let mut c = base.clone();
        c.drift_margin = match rng.random_range(0..4) {
            0 => 0.0,
            1 => frac(rng, 0.2, 0.45),
            _ => frac(rng, 0.0, 0.1),
        };
        c.safety_margin = match rng.random_range(0..4) {
            0 => Duration::ZERO,
            _ => ttl.mul_f64(frac(rng, 0.0, 0.1)),
        };
        if let ExpiryMode::WallClock { .. } = c.expiry {
            // The wall-clock mode requires this much (see validate).
            c.safety_margin = c.safety_margin.max(ttl.mul_f64(2.0 * c.drift_margin));
        }
        let validity = c.holder_validity();
        c.renew_deadline = match rng.random_range(0..3) {
            0 => validity.mul_f64(frac(rng, 0.97, 0.999)),
            _ => validity.mul_f64(frac(rng, 0.3, 0.95)),
        };
        c.renew_interval = c.renew_deadline.mul_f64(frac(rng, 0.1, 0.7));
        let room = c.renew_deadline.saturating_sub(c.renew_interval);
        c.retry_period = room.mul_f64(frac(rng, 0.02, 1.0));
        c.request_timeout = match rng.random_range(0..3) {
            0 => c.renew_deadline.mul_f64(frac(rng, 0.9, 1.0)),
            _ => c.renew_deadline.mul_f64(frac(rng, 0.02, 0.5)),
        };
        // Whole milliseconds, as a record keeps them.
        for d in [
            &mut c.renew_deadline,
            &mut c.renew_interval,
            &mut c.retry_period,
            &mut c.request_timeout,
            &mut c.safety_margin,
        ] {
            *d = Duration::from_millis(d.as_millis() as u64);
        }
        if c.validate().is_ok() {
            return c;
        }
    }
    base.clone()
}

/// Violations found, with how many each property's checker found.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    /// Every violation, described for debugging.
    pub violations: Vec<String>,
    /// (property, violations) for every property checked, in check order.
    pub by_property: Vec<(&'static str, usize)>,
}

impl Findings {
    /// Adds what the checker of `property` found.
    pub fn add(&mut self, property: &'static str, found: Vec<String>) {
        self.by_property.push((property, found.len()));
        self.violations.extend(found);
    }
}

/// What one primitive's run found.
#[derive(Debug, Clone)]
pub struct PrimitiveReport {
    /// Which primitive.
    pub primitive: Primitive,
    /// Store requests its clients sent.
    pub ops: u64,
    /// Every property violation found, described for debugging.
    pub violations: Vec<String>,
    /// (property, violations) for every property checked.
    pub by_property: Vec<(&'static str, usize)>,
    /// A digest of its whole history: equal digests mean replayed runs.
    pub digest: u64,
    /// Counts for people (one line).
    pub summary: String,
}

impl PrimitiveReport {
    /// The report of a run of `primitive` that sent `ops` requests.
    pub fn new(
        primitive: Primitive,
        ops: u64,
        findings: Findings,
        digest: u64,
        summary: String,
    ) -> Self {
        PrimitiveReport {
            primitive,
            ops,
            violations: findings.violations,
            by_property: findings.by_property,
            digest,
            summary,
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct Report {
    /// Store requests the clients sent, over all primitives.
    pub ops: u64,
    /// Every property violation found, over all primitives.
    pub violations: Vec<String>,
    /// A digest of every primitive's digest.
    pub digest: u64,
    /// Counts for people, one line per primitive.
    pub summary: String,
    /// Per primitive, in [`Primitive::ALL`] order.
    pub primitives: Vec<PrimitiveReport>,
}

impl Report {
    pub(super) fn combine(seed: u64, primitives: Vec<PrimitiveReport>) -> Report {
        let mut summary = String::new();
        let mut digests = String::new();
        for p in &primitives {
            let _ = writeln!(summary, "{}: {}", p.primitive.name(), p.summary);
            let _ = write!(digests, "{}={:016x};", p.primitive.name(), p.digest);
        }
        let digest = crate::fnv(&digests);
        let _ = write!(summary, "seed={seed} digest={digest:016x}");
        Report {
            ops: primitives.iter().map(|p| p.ops).sum(),
            violations: primitives
                .iter()
                .flat_map(|p| p.violations.iter().cloned())
                .collect(),
            digest,
            summary,
            primitives,
        }
    }
}
