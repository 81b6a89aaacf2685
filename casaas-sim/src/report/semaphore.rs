//! `semaphore`: the lease's checkers on every slot (exclusion per slot,
//! token order and the slot's token never decreasing, validity resting on
//! a write, checks within belief), the capacity across slots, and a
//! summary with the fairness of the turns.

use std::fmt::Write as _;
use std::time::Duration;

use crate::checker::lease as lease_check;
use crate::checker::semaphore as check;
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::fnv;
use crate::history::semaphore::History;
use crate::network::World;

/// Checks the history and describes the run.
pub fn report(config: &SimConfig, seed: u64, world: &World, h: &History) -> PrimitiveReport {
    let context = format!("seed {} {}", config.seed, Primitive::Semaphore.name());
    let ops = world.ops();
    let rates = &world.rates;
    let ttls: Vec<Duration> = world.leases.iter().map(|l| l.ttl).collect();
    let mut per_slot: [Vec<String>; 5] = Default::default();
    for (s, slot) in h.slots.iter().enumerate() {
        let who = |g: usize| {
            let r = &slot.guards[g];
            format!(
                "slot {s}: client {} (rate {:.3}) token {}",
                r.client, rates[r.client], r.token
            )
        };
        let slot_context = format!("{context} slot {s}");
        per_slot[0].extend(lease_check::mutual_exclusion(slot, &who, &context));
        per_slot[1].extend(lease_check::token_order(slot, &who, &context));
        per_slot[2].extend(lease_check::lock_token_monotonic(slot, &slot_context));
        per_slot[3].extend(lease_check::belief_rests_on_a_write(
            slot, &ttls, &who, &context,
        ));
        per_slot[4].extend(lease_check::held_checks_within_belief(slot, &who, &context));
    }
    let mut findings = Findings::default();
    findings.add("at_most_capacity", check::at_most_capacity(h, &context));
    let [exclusion, order, monotonic, rests, checks] = per_slot;
    findings.add("slot_mutual_exclusion", exclusion);
    findings.add("slot_token_order", order);
    findings.add("slot_token_monotonic", monotonic);
    findings.add("belief_rests_on_a_write", rests);
    findings.add("held_checks_within_belief", checks);
    findings.add("no_stray_guards", check::no_stray_guards(h, &context));
    findings.add("exercised", check::exercised(h, ops, &context));
    let faults = world.faults();
    let mut text = String::new();
    for (s, slot) in h.slots.iter().enumerate() {
        for g in &slot.guards {
            let _ = writeln!(
                text,
                "g {s} {} {} {:?} {:?}",
                g.client, g.token, g.acquired_at, g.beliefs
            );
        }
        for w in &slot.lock_writes {
            let _ = writeln!(text, "w {s} {w:?}");
        }
    }
    let _ = writeln!(text, "acquired {:?} refused {}", h.acquired, h.refused);
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let counting = &h.acquired[..h.acquired.len().saturating_sub(1)];
    let sum = |f: fn(&crate::history::lease::History) -> u64| h.slots.iter().map(f).sum::<u64>();
    let summary = format!(
        "world_seed={seed} clients={} slots={} acquisitions={} per_client={:?} jain={:.3} most_at_once={} \
         refused_miscounted={} gave_up={} releases={} crashes={} drops={} stalls={} freezes={} {} faults: {faults:?} digest={digest:016x}",
        rates.len(),
        h.capacity,
        counting.iter().sum::<u64>(),
        counting,
        check::jain(counting),
        check::most_at_once(h),
        h.refused,
        h.gave_up,
        sum(|s| s.releases),
        sum(|s| s.abandons),
        sum(|s| s.drops),
        sum(|s| s.stalls),
        sum(|s| s.freezes),
        world.late_summary(),
    );
    PrimitiveReport::new(Primitive::Semaphore, ops, findings, digest, summary)
}
