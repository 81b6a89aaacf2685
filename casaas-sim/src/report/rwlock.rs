//! `rwlock`: the lease's checkers over the writers (the lock object is a
//! lease: token order, validity, fencing), exclusion of every other guard
//! by a writer, and a check that readers shared.

use std::fmt::Write as _;
use std::time::Duration;

use crate::checker::lease as lease_check;
use crate::checker::rwlock as check;
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::fnv;
use crate::history::rwlock::History;
use crate::network::World;

/// From this many requests on, a run must show readers sharing and a
/// writer holding.
const MIN_OPS_FOR_WORK: u64 = 20_000;

/// Checks the history and describes the run.
pub fn report(config: &SimConfig, seed: u64, world: &World, h: &History) -> PrimitiveReport {
    let context = format!("seed {} rwlock", config.seed);
    let rates = &world.rates;
    let who = |g: usize| {
        let r = &h.lease.guards[g];
        format!(
            "client {} (rate {:.3}) token {}",
            r.client, rates[r.client], r.token
        )
    };
    let writers = check::writers_only(h);
    let writer_who = |g: usize| {
        let r = &writers.guards[g];
        format!(
            "writer client {} (rate {:.3}) token {}",
            r.client, rates[r.client], r.token
        )
    };
    let mut findings = Findings::default();
    findings.add(
        "writer_excludes_everyone",
        check::writer_excludes_everyone(h, &who, &context),
    );
    findings.add(
        "writer_token_order",
        lease_check::token_order(&writers, &writer_who, &context),
    );
    let ttls: Vec<Duration> = world.leases.iter().map(|l| l.ttl).collect();
    findings.add(
        "writer_belief_rests_on_a_write",
        lease_check::belief_rests_on_a_write(&writers, &ttls, &writer_who, &context),
    );
    findings.add(
        "lock_token_monotonic",
        lease_check::lock_token_monotonic(&writers, &context),
    );
    findings.add(
        "held_checks_within_belief",
        lease_check::held_checks_within_belief(&h.lease, &who, &context),
    );
    let (fence, late) = lease_check::fencing(&writers, &context);
    findings.add("fencing", fence);
    let work = if world.ops() >= MIN_OPS_FOR_WORK {
        check::shared_and_exclusive_happened(h, &context)
    } else {
        Vec::new()
    };
    findings.add("shared_and_exclusive_happened", work);

    let ops = world.ops();
    let faults = world.faults();
    let mut text = String::new();
    for (g, r) in h.lease.guards.iter().enumerate() {
        let _ = writeln!(
            text,
            "guard {g} client {} writer {} token {} at {:?} beliefs {:?}",
            r.client,
            h.writer.get(g).copied().unwrap_or(false),
            r.token,
            r.acquired_at,
            r.beliefs
        );
    }
    let _ = writeln!(text, "held_checks {:?}", h.lease.held_checks);
    let _ = writeln!(text, "lock {:?}", h.lease.lock_writes);
    let _ = writeln!(text, "fenced {:?}", h.lease.fenced_writes);
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let write_guards = h.writer.iter().filter(|w| **w).count();
    let l = &h.lease;
    let summary = format!(
        "world_seed={seed} clients={} reads={} writes={} reads_given_up={} writes_given_up={} held_checks={} \
         fenced_ok={} fenced_out={} fenced_failed={} late_fenced_writes={late} releases={} crashes={} drops={} \
         stalls={} freezes={} {} faults: {faults:?} digest={digest:016x}",
        rates.len(),
        l.guards.len() - write_guards,
        write_guards,
        h.reads_given_up,
        h.writes_given_up,
        l.held_checks.len(),
        l.fenced_ok,
        l.fenced_out,
        l.fenced_failed,
        l.releases,
        l.abandons,
        l.drops,
        l.stalls,
        l.freezes,
        world.late_summary(),
    );
    PrimitiveReport::new(Primitive::RwLock, ops, findings, digest, summary)
}
