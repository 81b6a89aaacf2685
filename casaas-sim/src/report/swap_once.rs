//! `swap_once`: every checker over the transactions, the pointer writes
//! the store applied and the pointers it holds, a digest, and a summary
//! with how unknown answers were settled.

use std::fmt::Write as _;

use crate::checker::swap_once as check;
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::fnv;
use crate::history::swap_once::{Answer, History, Told};
use crate::network::World;

/// Runs every checker over the history.
fn check(h: &History, ops: u64, context: &str) -> Findings {
    let mut findings = Findings::default();
    findings.add("ours_landed_once", check::ours_landed_once(h, context));
    findings.add("never_twice", check::never_twice(h, context));
    findings.add(
        "conflict_never_landed",
        check::conflict_never_landed(h, context),
    );
    findings.add("no_lost_update", check::no_lost_update(h, context));
    findings.add("work_happened", check::work_happened(h, ops, context));
    findings
}

/// Checks the history and describes the run: its findings, digest and
/// summary.
pub fn report(config: &SimConfig, seed: u64, world: &World, h: &History) -> PrimitiveReport {
    let context = format!("seed {} swap_once", config.seed);
    let ops = world.ops();
    let findings = check(h, ops, &context);
    let faults = world.faults();
    let mut text = String::new();
    for t in &h.txns {
        let answers: Vec<Answer> = t.calls.iter().map(|c| c.answer).collect();
        let _ = writeln!(text, "t {} {} {:?} {answers:?}", t.client, t.table, t.told);
    }
    for l in &h.landed {
        let _ = writeln!(text, "l {} {} {} {:?}", l.table, l.txn, l.nonce, l.parent);
    }
    let _ = writeln!(text, "heads {:?}", h.heads);
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let summary = format!(
        "world_seed={seed} clients={} txns={} committed={} ours_replaced={} abandoned={} refused={} unknown={} unknown_landed={} \
         calls={} conflicts={} ambiguous={} dropped={} landed={} ours_after_412={} ours_after_ambiguous={} conflict_after_ambiguous={} \
         {} faults: {faults:?} digest={digest:016x}",
        world.rates.len(),
        h.txns.len(),
        h.count(|t| matches!(t, Told::Committed { .. })),
        h.ours_replaced,
        h.count(|t| *t == Told::Abandoned),
        h.count(|t| *t == Told::Refused),
        h.count(|t| *t == Told::Unknown),
        check::unknown_landed(h),
        h.txns.iter().map(|t| t.calls.len()).sum::<usize>(),
        h.answered(Answer::Conflict),
        h.answered(Answer::Ambiguous),
        h.answered(Answer::Dropped),
        h.landed.len(),
        h.ours_after_412,
        h.ours_after_ambiguous,
        h.conflict_after_ambiguous,
        world.late_summary(),
    );
    PrimitiveReport::new(Primitive::SwapOnce, ops, findings, digest, summary)
}
