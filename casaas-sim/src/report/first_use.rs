//! `first_use`: the lease checkers on every round's lock, the first-use
//! checkers over the calls, a digest and a summary per layout.

use std::fmt::Write as _;

use crate::checker::first_use as check;
use crate::checker::lease as lease_check;
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::fnv;
use crate::history::first_use::{History, Layout, Told};
use crate::network::World;

/// Checks the history and describes the run.
pub fn report(config: &SimConfig, seed: u64, world: &World, h: &History) -> PrimitiveReport {
    let context = format!("seed {} {}", config.seed, Primitive::FirstUse.name());
    let ops = world.ops();
    let rates = &world.rates;
    let (mut exclusion, mut order, mut monotonic) = (Vec::new(), Vec::new(), Vec::new());
    for (i, round) in h.rounds.iter().enumerate() {
        let lock = &round.lock;
        let who = |g: usize| {
            let r = &lock.guards[g];
            format!(
                "round {i} ({:?}): client {} (rate {:.3}) token {}",
                round.layout, r.client, rates[r.client], r.token
            )
        };
        exclusion.extend(lease_check::mutual_exclusion(lock, &who, &context));
        order.extend(lease_check::token_order(lock, &who, &context));
        let round_context = format!("{context} round {i}");
        monotonic.extend(lease_check::lock_token_monotonic(lock, &round_context));
    }
    let mut findings = Findings::default();
    findings.add("mutual_exclusion", exclusion);
    findings.add("token_order", order);
    findings.add("lock_token_monotonic", monotonic);
    findings.add(
        "lost_race_never_an_error",
        check::lost_race_never_an_error(h, &context),
    );
    findings.add("exercised", check::exercised(h, ops, &context));
    let faults = world.faults();
    let mut text = String::new();
    for c in &h.calls {
        let _ = writeln!(
            text,
            "c {} {} {:?} {} {:?}",
            c.client, c.round, c.layout, c.blocking, c.told
        );
    }
    for (i, round) in h.rounds.iter().enumerate() {
        for g in &round.lock.guards {
            let _ = writeln!(
                text,
                "g {i} {} {} {:?} {:?}",
                g.client, g.token, g.acquired_at, g.beliefs
            );
        }
        for w in &round.lock.lock_writes {
            let _ = writeln!(text, "w {i} {w:?}");
        }
    }
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let per_layout = |layout: Layout| {
        format!(
            "acquired={} held={} timed_out={} contended={} lost_race={} failed={}",
            h.told(layout, Told::Acquired),
            h.told(layout, Told::Held),
            h.told(layout, Told::TimedOut),
            h.told(layout, Told::Contended),
            h.told(layout, Told::LostRace),
            h.told(layout, Told::Failed),
        )
    };
    let second = |layout: Layout| {
        h.rounds
            .iter()
            .filter(|r| r.layout == Some(layout) && r.lock.guards.len() > 1)
            .count()
    };
    let summary = format!(
        "world_seed={seed} clients={} rounds={} record: {} taken_again={} epochs: {} taken_again={} \
         create_conflicts={} releases={} drops={} crashes={} {} faults: {faults:?} digest={digest:016x}",
        world.rates.len(),
        h.rounds.len(),
        per_layout(Layout::Record),
        second(Layout::Record),
        per_layout(Layout::Epochs),
        second(Layout::Epochs),
        world.create_conflicts(),
        h.releases,
        h.drops,
        h.abandons,
        world.late_summary(),
    );
    PrimitiveReport::new(Primitive::FirstUse, ops, findings, digest, summary)
}
