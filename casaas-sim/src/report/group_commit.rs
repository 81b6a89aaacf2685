//! `group_commit`: every checker over the counter's and the logs'
//! histories, a digest, and a summary with the batch sizes.

use std::fmt::Write as _;

use crate::checker::group_commit as check;
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::fnv;
use crate::history::group_commit::{History, Outcome};
use crate::network::World;

/// Runs every checker over the history.
fn check(h: &History, ops: u64, context: &str) -> Findings {
    let mut findings = Findings::default();
    findings.add(
        "updates_exactly_once",
        check::updates_exactly_once(h, context),
    );
    findings.add(
        "final_value_counts_updates",
        check::final_value_counts_updates(h, context),
    );
    findings.add(
        "updates_told_their_place",
        check::updates_told_their_place(h, context),
    );
    findings.add(
        "applied_under_submitted_token",
        check::applied_under_submitted_token(h, context),
    );
    findings.add(
        "counter_writes_known_and_fenced",
        check::counter_writes_known_and_fenced(h, context),
    );
    findings.add(
        "logs_well_formed",
        check::logs_well_formed(&h.records, context),
    );
    findings.add(
        "records_exactly_once",
        check::records_exactly_once(h, context),
    );
    findings.add(
        "appends_in_caller_order",
        check::appends_in_caller_order(h, context),
    );
    findings.add("exercised", check::exercised(h, ops, context));
    findings
}

/// How many batches carried 1, 2–3, 4–7, 8–15 and 16 or more.
fn distribution(sizes: &[u64]) -> String {
    let mut buckets = [0u64; 5];
    for n in sizes {
        let bucket = match n {
            0..=1 => 0,
            2..=3 => 1,
            4..=7 => 2,
            8..=15 => 3,
            _ => 4,
        };
        buckets[bucket] += 1;
    }
    let [one, two, four, eight, more] = buckets;
    format!("1:{one},2-3:{two},4-7:{four},8-15:{eight},16+:{more}")
}

/// Checks the history and describes the run: its findings, digest and
/// summary.
pub fn report(config: &SimConfig, seed: u64, world: &World, h: &History) -> PrimitiveReport {
    let context = format!("seed {} group_commit", config.seed);
    let ops = world.ops();
    let findings = check(h, ops, &context);
    let faults = world.faults();
    let mut text = String::new();
    for u in &h.updates {
        let _ = writeln!(
            text,
            "u {:?} {} {:?} {} {:?}",
            u.caller,
            u.token,
            u.outcome,
            u.reported,
            u.applied_at()
        );
    }
    for a in &h.appends {
        let _ = writeln!(
            text,
            "a {:?} {} {} {:?} {:?}",
            a.caller, a.token, a.log, a.outcome, a.place
        );
    }
    for r in &h.records {
        let _ = writeln!(
            text,
            "r {} {} {} {} {}",
            r.log, r.key_seq, r.offset, r.token, r.id
        );
    }
    let _ = writeln!(text, "{:?} final {}", h.counter_tokens, h.final_value);
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let entries = h.entry_sizes();
    // Operations submitted under a superseded token: their outcomes, and how
    // many landed (within the window fencing allows: before the newer token
    // was written).
    let stale: Vec<Outcome> = (h.updates.iter().filter(|u| u.stale).map(|u| u.outcome))
        .chain(h.appends.iter().filter(|a| a.stale).map(|a| a.outcome))
        .collect();
    let stale_applied = h
        .updates
        .iter()
        .filter(|u| u.stale && !u.applied.is_empty())
        .count()
        + h.records
            .iter()
            .filter(|r| h.appends.get(r.id as usize).is_some_and(|a| a.stale))
            .count();
    let summary = format!(
        "world_seed={seed} clients={} updates={} ok={} ambiguous={} fenced_out={} failed={} final_value={} counter_writes={} \
         update_batches=[{}] appends={} ok={} ambiguous={} fenced_out={} failed={} records={} entries={} entry_records=[{}] \
         removed={} abandoned={} new_tokens={} stale={} stale_fenced_out={} stale_applied={} freezes={} {} faults: {faults:?} digest={digest:016x}",
        world.rates.len(),
        h.updates.len(),
        h.updates_told(Outcome::Ok),
        h.updates_told(Outcome::Ambiguous),
        h.updates_told(Outcome::FencedOut),
        h.updates_told(Outcome::Failed),
        h.final_value,
        h.counter_batches.len(),
        distribution(&h.counter_batches),
        h.appends.len(),
        h.appends_told(Outcome::Ok),
        h.appends_told(Outcome::Ambiguous),
        h.appends_told(Outcome::FencedOut),
        h.appends_told(Outcome::Failed),
        h.records.len(),
        entries.len(),
        distribution(&entries),
        h.removed,
        h.abandoned,
        h.new_tokens,
        stale.len(),
        stale.iter().filter(|o| **o == Outcome::FencedOut).count(),
        stale_applied,
        h.freezes,
        world.late_summary(),
    );
    PrimitiveReport::new(Primitive::GroupCommit, ops, findings, digest, summary)
}
