//! `create_once`: every checker over the transactions and the stored
//! logs, a digest, and a summary with how unknown outcomes were settled.

use std::fmt::Write as _;

use crate::checker::create_once as check;
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::fnv;
use crate::history::create_once::{History, Told};
use crate::network::World;

/// Runs every checker over the history.
fn check(h: &History, ops: u64, context: &str) -> Findings {
    let mut findings = Findings::default();
    findings.add(
        "committed_where_told",
        check::committed_where_told(h, context),
    );
    findings.add("never_twice", check::never_twice(h, context));
    findings.add(
        "definite_failures_absent",
        check::definite_failures_absent(h, context),
    );
    findings.add(
        "unknown_only_where_sent",
        check::unknown_only_where_sent(h, context),
    );
    findings.add("taken_never_ours", check::taken_never_ours(h, context));
    findings.add("versions_dense", check::versions_dense(h, context));
    findings.add("work_happened", check::work_happened(h, ops, context));
    findings
}

/// Checks the history and describes the run: its findings, digest and
/// summary.
pub fn report(config: &SimConfig, seed: u64, world: &World, h: &History) -> PrimitiveReport {
    let context = format!("seed {} create_once", config.seed);
    let ops = world.ops();
    let findings = check(h, ops, &context);
    let faults = world.faults();
    let mut text = String::new();
    for t in &h.txns {
        let _ = writeln!(text, "t {} {} {:?} {:?}", t.client, t.log, t.told, t.taken);
    }
    for c in &h.commits {
        let _ = writeln!(text, "c {} {} {} {}", c.log, c.version, c.txn, c.client);
    }
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let logs = h
        .commits
        .iter()
        .map(|c| c.log)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let summary = format!(
        "world_seed={seed} clients={} txns={} committed={} found_by_reading={} abandoned={} refused={} unknown={} unknown_landed={} taken={} \
         logs={logs} commits={} applied={} ours_after_412={} ours_after_ambiguous={} taken_after_ambiguous={} ambiguous_errors={} \
         dropped={} settled_ours={} settled_other={} left_unknown={} freezes={} {} faults: {faults:?} digest={digest:016x}",
        world.rates.len(),
        h.txns.len(),
        h.committed(),
        h.count(|t| matches!(t, Told::Committed { found: true, .. })),
        h.count(|t| *t == Told::Abandoned),
        h.count(|t| *t == Told::Refused),
        h.count(|t| matches!(t, Told::Unknown { .. })),
        check::unknown_landed(h),
        h.txns.iter().map(|t| t.taken.len()).sum::<usize>(),
        h.commits.len(),
        h.applied,
        h.ours_after_412,
        h.ours_after_ambiguous,
        h.taken_after_ambiguous,
        h.ambiguous_errors,
        h.dropped,
        h.settled_ours,
        h.settled_other,
        h.left_unknown,
        h.freezes,
        world.late_summary(),
    );
    PrimitiveReport::new(Primitive::CreateOnce, ops, findings, digest, summary)
}
