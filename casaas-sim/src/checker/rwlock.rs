//! `rwlock`: a writer's belief never overlaps another guard's belief,
//! reader or writer; readers did share.

use std::time::Duration;

use super::lease::{Who, intervals};
use crate::history::lease::History as LeaseHistory;
use crate::history::rwlock::History;
use crate::secs;

/// Never a writer with any valid reader or another valid writer: each
/// belief interval of a writer's guard overlaps no belief interval of any
/// other guard.
pub fn writer_excludes_everyone(h: &History, who: Who<'_>, context: &str) -> Vec<String> {
    let all = intervals(&h.lease);
    let mut violations = Vec::new();
    for &(start, end, g) in all.iter().filter(|(_, _, g)| is_writer(h, *g)) {
        // Sorted by start: only intervals starting before our end can overlap.
        let before_end = all.partition_point(|(s, _, _)| *s < end);
        for &(s, e, other) in &all[..before_end] {
            if other != g && e > start && s < end {
                violations.push(format!(
                    "{context}: exclusion: writer {} believed it held [{}, {}) while {} {} believed it held [{}, {})",
                    who(g),
                    secs(start),
                    secs(end),
                    if is_writer(h, other) { "writer" } else { "reader" },
                    who(other),
                    secs(s),
                    secs(e)
                ));
            }
        }
    }
    violations
}

fn is_writer(h: &History, g: usize) -> bool {
    h.writer.get(g).copied().unwrap_or(false)
}

/// The writers' part of the history, as a lease history (guards renumbered,
/// their lease checks with them): the lease's checkers over it check the
/// writers' tokens, validity and fencing.
pub fn writers_only(h: &History) -> LeaseHistory {
    let mut renumber = vec![None; h.lease.guards.len()];
    let mut out = LeaseHistory::default();
    for (g, guard) in h.lease.guards.iter().enumerate() {
        if is_writer(h, g) {
            renumber[g] = Some(out.guards.len());
            out.guards.push(guard.clone());
        }
    }
    out.held_checks = h
        .lease
        .held_checks
        .iter()
        .filter_map(|&(g, at)| renumber.get(g).copied().flatten().map(|n| (n, at)))
        .collect();
    out.lock_writes.clone_from(&h.lease.lock_writes);
    out.fenced_writes.clone_from(&h.lease.fenced_writes);
    out
}

/// A run long enough must show two readers believing at one time (the
/// lock really shared) and a writer believing: else it proves little.
pub fn shared_and_exclusive_happened(h: &History, context: &str) -> Vec<String> {
    let all = intervals(&h.lease);
    let mut shared = false;
    let mut latest_reader: Option<(Duration, usize)> = None;
    for &(s, e, g) in &all {
        if is_writer(h, g) {
            continue;
        }
        if let Some((end, other)) = latest_reader
            && other != g
            && s < end
        {
            shared = true;
            break;
        }
        if latest_reader.is_none_or(|(end, _)| e > end) {
            latest_reader = Some((e, g));
        }
    }
    let wrote = all.iter().any(|(_, _, g)| is_writer(h, *g));
    let mut found = Vec::new();
    if !shared {
        found.push(format!(
            "{context}: inconclusive: no two readers held the lock at once"
        ));
    }
    if !wrote {
        found.push(format!("{context}: inconclusive: no writer held the lock"));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::lease::GuardRec;

    fn guard(client: usize, token: u64, beliefs: &[(u64, u64)]) -> GuardRec {
        GuardRec {
            client,
            task: 0,
            token,
            acquired_at: Duration::from_secs(beliefs.first().map_or(0, |b| b.0)),
            beliefs: beliefs
                .iter()
                .map(|&(s, e)| (Duration::from_secs(s), Duration::from_secs(e)))
                .collect(),
        }
    }

    fn history(guards: Vec<(GuardRec, bool)>) -> History {
        let (guards, writer) = guards.into_iter().unzip();
        History {
            lease: LeaseHistory {
                guards,
                ..LeaseHistory::default()
            },
            writer,
            ..History::default()
        }
    }

    #[test]
    fn a_writer_overlapping_a_reader_or_a_writer_is_a_violation_and_readers_may_share() {
        let who = |g: usize| format!("guard {g}");
        let fine = history(vec![
            (guard(0, 1, &[(0, 10)]), false),
            (guard(1, 1, &[(5, 12)]), false),
            (guard(2, 1, &[(12, 20)]), true),
            (guard(3, 1, &[(21, 30)]), false),
        ]);
        assert!(writer_excludes_everyone(&fine, &who, "t").is_empty());
        assert!(shared_and_exclusive_happened(&fine, "t").is_empty());

        let reader_inside = history(vec![
            (guard(0, 1, &[(0, 10)]), true),
            (guard(1, 1, &[(9, 12)]), false),
        ]);
        assert_eq!(writer_excludes_everyone(&reader_inside, &who, "t").len(), 1);
        let reader_around = history(vec![
            (guard(0, 1, &[(0, 30)]), false),
            (guard(1, 2, &[(10, 12)]), true),
        ]);
        assert_eq!(writer_excludes_everyone(&reader_around, &who, "t").len(), 1);
        let two_writers = history(vec![
            (guard(0, 1, &[(0, 10)]), true),
            (guard(1, 2, &[(5, 12)]), true),
        ]);
        assert_eq!(writer_excludes_everyone(&two_writers, &who, "t").len(), 2);
        assert_eq!(shared_and_exclusive_happened(&two_writers, "t").len(), 1);
    }

    #[test]
    fn the_writers_part_keeps_their_checks_renumbered() {
        let mut h = history(vec![
            (guard(0, 1, &[(0, 10)]), false),
            (guard(1, 4, &[(12, 20)]), true),
        ]);
        h.lease.held_checks = vec![(0, Duration::from_secs(1)), (1, Duration::from_secs(13))];
        let w = writers_only(&h);
        assert_eq!(w.guards.len(), 1);
        assert_eq!(w.guards[0].token, 4);
        assert_eq!(w.held_checks, vec![(0, Duration::from_secs(13))]);
    }
}
