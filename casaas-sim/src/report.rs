//! From a recorded run to its report: every checker of the primitive run
//! over the history (and what the store holds at the end), a digest of the
//! whole history, and a summary line. One module per primitive; each reads
//! the histories (`crate::history`) and the world they were recorded in,
//! not the clients that wrote them.

/// `lease`, `shared_lease` and `lease_create_only`.
pub mod lease {
    use std::fmt::Write as _;
    use std::time::Duration;

    use crate::checker::lease as check;
    use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
    use crate::history::lease::History;
    use crate::network::World;
    use crate::{fnv, secs};

    /// From this many requests on, a `lease_create_only` run without a single
    /// write landing in collected history is reported as inconclusive.
    const MIN_OPS_FOR_LATE_EPOCHS: u64 = 1_000_000;

    /// Checks the history and describes the run: its findings, digest and
    /// summary.
    pub fn report(
        config: &SimConfig,
        primitive: Primitive,
        seed: u64,
        tasks: usize,
        world: &World,
        h: &History,
    ) -> PrimitiveReport {
        let context = format!("seed {} {}", config.seed, primitive.name());
        let (findings, late) = check(primitive, world, h, &context);
        let ops = world.ops();
        let faults = world.faults();
        let stats = check::handovers(h);
        let rates = &world.rates;
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
        PrimitiveReport::new(primitive, ops, findings, digest, summary)
    }

    /// Runs every checker over the history; also returns how many fenced
    /// writes were accepted late (allowed: the window fencing leaves open).
    fn check(primitive: Primitive, world: &World, h: &History, context: &str) -> (Findings, u64) {
        let rates = &world.rates;
        let who = |g: usize| {
            let r = &h.guards[g];
            format!(
                "client {} task {} (rate {:.3}) token {}",
                r.client, r.task, rates[r.client], r.token
            )
        };
        let mut findings = Findings::default();
        findings.add(
            "mutual_exclusion",
            check::mutual_exclusion(h, &who, context),
        );
        findings.add("token_order", check::token_order(h, &who, context));
        let ttls: Vec<Duration> = world.leases.iter().map(|l| l.ttl).collect();
        findings.add(
            "belief_rests_on_a_write",
            check::belief_rests_on_a_write(h, &ttls, &who, context),
        );
        findings.add(
            "lock_token_monotonic",
            check::lock_token_monotonic(h, context),
        );
        findings.add(
            "held_checks_within_belief",
            check::held_checks_within_belief(h, &who, context),
        );
        let (fence_violations, late) = check::fencing(h, context);
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
        (findings, late)
    }
}

/// `election` and `election_create_only`.
pub mod election {
    use std::fmt::Write as _;
    use std::time::Duration;

    use crate::checker::election as check;
    use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
    use crate::fnv;
    use crate::history::election::History;
    use crate::network::World;

    /// Runs every checker over the history.
    fn check(h: &History, end_of_run: Duration, context: &str) -> Findings {
        let mut findings = Findings::default();
        findings.add(
            "work_never_overlaps",
            check::work_never_overlaps(h, end_of_run, context),
        );
        findings.add(
            "term_tokens_increase",
            check::term_tokens_increase(h, context),
        );
        findings.add(
            "no_leader_notice_after_stop",
            check::no_leader_notice_after_stop(h, context),
        );
        findings
    }

    /// Checks the history and describes the run: its findings, digest and
    /// summary.
    pub fn report(
        config: &SimConfig,
        primitive: Primitive,
        seed: u64,
        world: &World,
        h: &History,
        end_of_run: Duration,
    ) -> PrimitiveReport {
        let context = format!("seed {} election", config.seed);
        let findings = check(h, end_of_run, &context);
        let ops = world.ops();
        let faults = world.faults();
        let mut text = String::new();
        for w in &h.works {
            let _ = writeln!(text, "{w:?}");
        }
        let _ = writeln!(text, "{:?}", h.notices_after_stop);
        let _ = writeln!(text, "{:?}", h.lock_writes);
        let _ = writeln!(text, "ops {ops} faults {faults:?}");
        let digest = fnv(&text);
        let summary = format!(
            "world_seed={seed} clients={} runs={} terms={} dropped={} aborted={} cancelled={} returned={} stopped_leading={} \
             lock_writes={} leader_notices_after_stop={} {} faults: {faults:?} digest={digest:016x}",
            world.rates.len(),
            h.runs,
            h.works.len(),
            h.dropped,
            h.aborted,
            h.cancelled,
            h.returned,
            h.stopped_leading,
            h.lock_writes.len(),
            h.notices_after_stop.len(),
            world.late_summary(),
        );
        PrimitiveReport::new(primitive, ops, findings, digest, summary)
    }
}

/// `fenced_resource`.
pub mod fenced_resource {
    use std::fmt::Write as _;

    use crate::checker::fenced_resource as check;
    use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
    use crate::fnv;
    use crate::history::fenced_resource::{History, Outcome};
    use crate::network::World;

    /// Runs every checker over the history and the final counter.
    fn check(h: &History, final_value: u64, context: &str) -> Findings {
        let mut findings = Findings::default();
        findings.add(
            "ok_applied_exactly_once",
            check::ok_applied_exactly_once(h, context),
        );
        findings.add(
            "never_applied_twice",
            check::never_applied_twice(h, context),
        );
        findings.add(
            "failed_never_applied",
            check::failed_never_applied(h, context),
        );
        findings.add(
            "final_value_counts_updates",
            check::final_value_counts_updates(h, final_value, context),
        );
        findings.add(
            "writes_known_and_fenced",
            check::writes_known_and_fenced(h, context),
        );
        findings
    }

    /// Checks the history and describes the run: its findings, digest and
    /// summary.
    pub fn report(
        config: &SimConfig,
        seed: u64,
        world: &World,
        h: &History,
        final_value: u64,
    ) -> PrimitiveReport {
        let context = format!("seed {} fenced_resource", config.seed);
        let findings = check(h, final_value, &context);
        let ops = world.ops();
        let faults = world.faults();
        let mut text = String::new();
        for u in &h.updates {
            let _ = writeln!(
                text,
                "{} {} {} {:?} {}",
                u.client, u.op, u.token, u.outcome, u.applied
            );
        }
        let _ = writeln!(text, "{:?} final {final_value}", h.applied_tokens);
        let _ = writeln!(text, "ops {ops} faults {faults:?}");
        let digest = fnv(&text);
        let summary = format!(
            "world_seed={seed} clients={} updates={} ok={} ambiguous={} fenced_out={} failed={} applied={} final_value={final_value} \
             new_tokens={} freezes={} {} faults: {faults:?} digest={digest:016x}",
            world.rates.len(),
            h.updates.len(),
            h.count(Outcome::Ok),
            h.count(Outcome::Ambiguous),
            h.count(Outcome::FencedOut),
            h.count(Outcome::Failed),
            h.applied_writes,
            h.new_tokens,
            h.freezes,
            world.late_summary(),
        );
        PrimitiveReport::new(Primitive::FencedResource, ops, findings, digest, summary)
    }
}

/// `group_commit`, `fair`, `create_once`, `swap_once` and `first_use` (in files of
/// their own).
pub mod create_once;
pub mod fair;
pub mod first_use;
pub mod group_commit;
pub mod rwlock;
pub mod semaphore;
pub mod swap_once;

/// `fenced_log`.
pub mod fenced_log {
    use std::collections::BTreeMap;
    use std::fmt::Write as _;

    use crate::checker::fenced_log as check;
    use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
    use crate::fnv;
    use crate::history::fenced_log::{History, Outcome, StoredEntry};
    use crate::network::World;

    /// Runs every checker over the history and the stored logs.
    fn check(h: &History, logs: &BTreeMap<u64, Vec<StoredEntry>>, context: &str) -> Findings {
        let mut findings = Findings::default();
        findings.add("no_gaps", check::no_gaps(logs, context));
        findings.add(
            "tokens_never_decrease",
            check::tokens_never_decrease(logs, context),
        );
        findings.add(
            "ok_appended_exactly_once",
            check::ok_appended_exactly_once(h, logs, context),
        );
        findings.add(
            "never_appended_twice",
            check::never_appended_twice(h, logs, context),
        );
        findings.add(
            "failed_never_appended",
            check::failed_never_appended(h, logs, context),
        );
        findings.add(
            "entries_from_appends",
            check::entries_from_appends(h, logs, context),
        );
        findings
    }

    /// Checks the history and describes the run: its findings, digest and
    /// summary (`entries`: writes the store applied).
    pub fn report(
        config: &SimConfig,
        seed: u64,
        world: &World,
        h: &History,
        logs: &BTreeMap<u64, Vec<StoredEntry>>,
        entries: u64,
        freezes: u64,
    ) -> PrimitiveReport {
        let context = format!("seed {} fenced_log", config.seed);
        let findings = check(h, logs, &context);
        let ops = world.ops();
        let faults = world.faults();
        let mut text = String::new();
        for a in &h.appends {
            let _ = writeln!(
                text,
                "{} {} {} {} {:?} {}",
                a.client, a.op, a.token, a.log, a.outcome, a.seq
            );
        }
        for (log, entries) in logs {
            let _ = writeln!(
                text,
                "log {log}: {:?}",
                entries
                    .iter()
                    .map(|e| (e.key_seq, e.token, e.client, e.op))
                    .collect::<Vec<_>>()
            );
        }
        let _ = writeln!(text, "ops {ops} faults {faults:?}");
        let digest = fnv(&text);
        let summary = format!(
            "world_seed={seed} clients={} appends={} ok={} ambiguous={} fenced_out={} failed={} logs={} entries={entries} \
             new_tokens={} freezes={freezes} {} faults: {faults:?} digest={digest:016x}",
            world.rates.len(),
            h.appends.len(),
            h.count(Outcome::Ok),
            h.count(Outcome::Ambiguous),
            h.count(Outcome::FencedOut),
            h.count(Outcome::Failed),
            logs.len(),
            h.new_tokens,
            world.late_summary(),
        );
        PrimitiveReport::new(Primitive::FencedLog, ops, findings, digest, summary)
    }
}

/// `session`: every lease checker per lock, validity resting on the
/// heartbeat, and proof that sessions expired and their locks were taken.
pub mod session {
    use std::fmt::Write as _;
    use std::time::Duration;

    use crate::checker::lease as lease_check;
    use crate::checker::session as check;
    use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
    use crate::history::lease::History as LockHistory;
    use crate::history::session::History;
    use crate::network::World;
    use crate::{fnv, secs};

    /// From this many requests on, a run in which no lock was taken over
    /// from a session that expired (rather than closed) is reported as
    /// inconclusive: the term-ending rule went untested.
    const MIN_OPS_FOR_EXPIRY_TAKEOVERS: u64 = 100_000;

    /// Checks the histories and describes the run.
    pub fn report(
        config: &SimConfig,
        seed: u64,
        world: &World,
        locks: &[LockHistory],
        h: &History,
    ) -> PrimitiveReport {
        let context = format!("seed {} {}", config.seed, Primitive::Session.name());
        let mut findings = check_all(world, locks, h, &context);
        let (mut after_close, mut after_expiry) = (0, 0);
        let mut believed = Duration::ZERO;
        for (i, lock) in locks.iter().enumerate() {
            let (c, e) = check::takeovers(i, lock, h);
            after_close += c;
            after_expiry += e;
            believed += lease_check::handovers(lock).believed;
        }
        findings.add("exercised", exercised(world, h, after_expiry, &context));
        let ops = world.ops();
        let faults = world.faults();
        let digest = fnv(&history_text(locks, h, ops, &faults));
        let summary = format!(
            "world_seed={seed} clients={} locks={} rates=[{}] sessions={} acquisitions={} takeovers_after_close={after_close} \
             takeovers_after_expiry={after_expiry} terms_ended_by_contenders={} believed={} heartbeat_writes={} lock_writes={} lock_releases={} lock_drops={} \
             closes={} crashes={} drops={} sessions_lost={} freezes={} {} faults: {faults:?} digest={digest:016x}",
            world.rates.len(),
            locks.len(),
            world
                .rates
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(","),
            h.opened,
            h.acquisitions,
            check::terms_ended_by_contenders(h),
            secs(believed),
            h.heartbeat_writes.len(),
            locks.iter().map(|l| l.lock_writes.len()).sum::<usize>(),
            h.lock_releases,
            h.lock_drops,
            h.closes,
            h.abandons,
            h.drops,
            h.lost,
            h.freezes,
            world.late_summary(),
        );
        PrimitiveReport::new(Primitive::Session, ops, findings, digest, summary)
    }

    /// The lease checkers on every lock (mutual exclusion of its guards'
    /// beliefs, tokens in order, the lock object's token never
    /// decreasing), and validity resting on the heartbeat.
    fn check_all(world: &World, locks: &[LockHistory], h: &History, context: &str) -> Findings {
        let rates = &world.rates;
        let ttls: Vec<Duration> = world.leases.iter().map(|l| l.ttl).collect();
        let mut exclusion = Vec::new();
        let mut order = Vec::new();
        let mut monotonic = Vec::new();
        let mut validity = Vec::new();
        for (i, lock) in locks.iter().enumerate() {
            let who = |g: usize| {
                let r = &lock.guards[g];
                let term = h.guard_terms[i].get(g).copied().unwrap_or_default();
                format!(
                    "lock {i}: client {} (rate {:.3}) term {term} token {}",
                    r.client, rates[r.client], r.token
                )
            };
            exclusion.extend(lease_check::mutual_exclusion(lock, &who, context));
            order.extend(lease_check::token_order(lock, &who, context));
            let lock_context = format!("{context} lock {i}");
            monotonic.extend(lease_check::lock_token_monotonic(lock, &lock_context));
            validity.extend(check::belief_rests_on_heartbeat(i, lock, h, &ttls, context));
        }
        let mut findings = Findings::default();
        findings.add("mutual_exclusion", exclusion);
        findings.add("token_order", order);
        findings.add("lock_token_monotonic", monotonic);
        findings.add("belief_rests_on_heartbeat", validity);
        findings
    }

    /// A run that took no lock, or (long enough) none from an expired
    /// session, proves less than it says.
    fn exercised(world: &World, h: &History, after_expiry: usize, context: &str) -> Vec<String> {
        let mut found = Vec::new();
        if h.acquisitions == 0 {
            found.push(format!(
                "{context}: inconclusive: {} requests and no lock acquired",
                world.ops()
            ));
        }
        if world.ops() >= MIN_OPS_FOR_EXPIRY_TAKEOVERS && after_expiry == 0 {
            found.push(format!(
                "{context}: inconclusive: {} requests and no lock taken over from an expired session",
                world.ops()
            ));
        }
        found
    }

    fn history_text(
        locks: &[LockHistory],
        h: &History,
        ops: u64,
        faults: &impl std::fmt::Debug,
    ) -> String {
        let mut text = String::new();
        for (i, lock) in locks.iter().enumerate() {
            for (g, r) in lock.guards.iter().enumerate() {
                let _ = writeln!(
                    text,
                    "lock {i} guard {g} client {} token {} term {:?} at {:?} beliefs {:?}",
                    r.client,
                    r.token,
                    h.guard_terms[i].get(g),
                    r.acquired_at,
                    r.beliefs
                );
            }
            let _ = writeln!(text, "lock {i} writes {:?}", lock.lock_writes);
        }
        let _ = writeln!(text, "heartbeats {:?}", h.heartbeat_writes);
        let _ = writeln!(text, "ops {ops} faults {faults:?}");
        text
    }
}
