//! `group_commit`: exactly once through batching, for the counter and the
//! logs, and positions consistent with what each caller observed.

use std::collections::BTreeMap;

use crate::history::group_commit::{Caller, History, Outcome, StoredRecord};

/// An update reported applied was applied exactly once; none was applied
/// twice; one reported not applied (fenced out, failed, removed from its
/// queue) was never applied.
pub fn updates_exactly_once(h: &History, context: &str) -> Vec<String> {
    h.updates
        .iter()
        .enumerate()
        .filter_map(|(id, u)| {
            let times = u.applied.len();
            let wrong = match u.outcome {
                Outcome::Ok => times != 1,
                Outcome::FencedOut | Outcome::Failed => times != 0,
                Outcome::Ambiguous | Outcome::Pending => times > 1,
            };
            wrong.then(|| {
                format!(
                    "{context}: update {id} of {:?} (token {}) was told {:?} ({}) but the store applied it {times} times",
                    u.caller, u.token, u.outcome, u.error
                )
            })
        })
        .collect()
}

/// The final counter equals the increments the store applied, and lies
/// between the updates reported applied and those plus the ambiguous ones.
pub fn final_value_counts_updates(h: &History, context: &str) -> Vec<String> {
    let ok = h.updates_told(Outcome::Ok);
    let ambiguous = h.updates_told(Outcome::Ambiguous);
    let applied: u64 = h.counter_batches.iter().sum();
    let mut violations = Vec::new();
    if h.final_value != applied {
        violations.push(format!(
            "{context}: the counter holds {} but the store applied {applied} increments",
            h.final_value
        ));
    }
    if h.final_value < ok || h.final_value > ok + ambiguous {
        violations.push(format!(
            "{context}: the counter holds {}: {ok} updates were reported applied and {ambiguous} ambiguous, so it must lie in [{ok}, {}]",
            h.final_value,
            ok + ambiguous
        ));
    }
    violations
}

/// The value each `Ok` update was told is the counter right after the store
/// applied it; and each caller was told increasing values.
pub fn updates_told_their_place(h: &History, context: &str) -> Vec<String> {
    let mut violations = Vec::new();
    let mut last: BTreeMap<Caller, u64> = BTreeMap::new();
    for (id, u) in h.updates.iter().enumerate() {
        if u.outcome != Outcome::Ok {
            continue;
        }
        if u.applied.first().is_some_and(|a| a.at != u.reported) {
            violations.push(format!(
                "{context}: update {id} of {:?} was told the counter became {} but it was applied at {:?}",
                u.caller,
                u.reported,
                u.applied_at()
            ));
        }
        if let Some(before) = last.insert(u.caller, u.reported)
            && before >= u.reported
        {
            violations.push(format!(
                "{context}: {:?} was told {} after {before}: its updates went back in order",
                u.caller, u.reported
            ));
        }
    }
    violations
}

/// Fencing per update: every update and record the store applied was
/// applied by a write fenced with the very token it was submitted under
/// (never carried by a batch of a newer token), and none submitted under a
/// token already superseded when its write landed (a higher token written
/// before) was applied at all.
pub fn applied_under_submitted_token(h: &History, context: &str) -> Vec<String> {
    let mut violations = Vec::new();
    for (id, u) in h.updates.iter().enumerate() {
        for a in &u.applied {
            if a.token != u.token {
                violations.push(format!(
                    "{context}: update {id} of {:?} was submitted under token {} (stale: {}) but applied by a write under token {} (the counter at {})",
                    u.caller, u.token, u.stale, a.token, a.at
                ));
            }
            if u.token < a.fence {
                violations.push(format!(
                    "{context}: update {id} of {:?} was submitted under token {}, superseded by token {} already written, yet applied (the counter at {})",
                    u.caller, u.token, a.fence, a.at
                ));
            }
        }
    }
    // The highest token of the entries before each one, per log.
    let mut fence: Option<(u64, u64, u64)> = None; // (log, entry, highest before it)
    let mut highest: Option<(u64, u64)> = None; // (log, highest so far)
    for r in &h.records {
        let before = match (fence, highest) {
            (Some((log, entry, before)), _) if log == r.log && entry == r.key_seq => before,
            (_, Some((log, top))) if log == r.log => top,
            _ => 0,
        };
        fence = Some((r.log, r.key_seq, before));
        highest = Some((
            r.log,
            highest
                .filter(|(log, _)| *log == r.log)
                .map_or(r.token, |(_, top)| top.max(r.token)),
        ));
        let Some(a) = h.appends.get(r.id as usize) else {
            continue; // a stray record: `records_exactly_once` reports it
        };
        if a.token != r.token {
            violations.push(format!(
                "{context}: append {} of {:?} was submitted under token {} (stale: {}) but stored in log {} entry {} under token {}",
                r.id, a.caller, a.token, a.stale, r.log, r.key_seq, r.token
            ));
        }
        if a.token < before {
            violations.push(format!(
                "{context}: append {} of {:?} was submitted under token {}, superseded by token {} already in log {}, yet stored at entry {}",
                r.id, a.caller, a.token, before, r.log, r.key_seq
            ));
        }
    }
    violations
}

/// Every applied counter write came from known updates, and the fence
/// never let a lower token follow a higher one.
pub fn counter_writes_known_and_fenced(h: &History, context: &str) -> Vec<String> {
    let mut violations: Vec<String> = h
        .unknown_writes
        .iter()
        .map(|w| format!("{context}: a counter write no update explains: {w}"))
        .collect();
    for pair in h.counter_tokens.windows(2) {
        if pair[1] < pair[0] {
            violations.push(format!(
                "{context}: fence: the counter accepted token {} after token {}",
                pair[1], pair[0]
            ));
        }
    }
    violations
}

/// Each log's entries have no gaps, record their own number, and their
/// tokens never decrease.
pub fn logs_well_formed(records: &[StoredRecord], context: &str) -> Vec<String> {
    let mut violations = Vec::new();
    let mut previous: Option<&StoredRecord> = None;
    for r in records {
        if r.seq != r.key_seq {
            violations.push(format!(
                "{context}: log {} entry {} records number {}",
                r.log, r.key_seq, r.seq
            ));
        }
        match previous {
            Some(p) if p.log == r.log && p.key_seq == r.key_seq => {}
            Some(p) if p.log == r.log => {
                if r.key_seq != p.key_seq + 1 {
                    violations.push(format!(
                        "{context}: log {} jumps from entry {} to {}",
                        r.log, p.key_seq, r.key_seq
                    ));
                }
                if r.token < p.token {
                    violations.push(format!(
                        "{context}: fence: log {} entry {} has token {} after token {}",
                        r.log, r.key_seq, r.token, p.token
                    ));
                }
            }
            _ if r.key_seq != 1 => violations.push(format!(
                "{context}: log {} starts at entry {}",
                r.log, r.key_seq
            )),
            _ => {}
        }
        previous = Some(r);
    }
    violations
}

/// Every record reported `Ok` is stored exactly once, where its caller was
/// told; no record is stored twice; one reported not appended is absent;
/// every stored record comes from an append.
pub fn records_exactly_once(h: &History, context: &str) -> Vec<String> {
    let mut found: BTreeMap<u64, Vec<&StoredRecord>> = BTreeMap::new();
    let mut violations = Vec::new();
    for r in &h.records {
        if h.appends.get(r.id as usize).is_none() {
            violations.push(format!(
                "{context}: log {} entry {} holds a record no append sent (id {})",
                r.log, r.key_seq, r.id
            ));
        }
        found.entry(r.id).or_default().push(r);
    }
    for (id, a) in h.appends.iter().enumerate() {
        let places: Vec<(u64, u64, u64)> = found
            .get(&(id as u64))
            .map(|rs| rs.iter().map(|r| (r.log, r.key_seq, r.offset)).collect())
            .unwrap_or_default();
        let wrong = match a.outcome {
            Outcome::Ok => places != [(a.log, a.place.0, a.place.1)],
            Outcome::FencedOut | Outcome::Failed => !places.is_empty(),
            Outcome::Ambiguous | Outcome::Pending => places.len() > 1,
        };
        if wrong {
            violations.push(format!(
                "{context}: append {id} of {:?} (token {}) was told {:?} ({}) at log {} {:?} but is stored at {places:?}",
                a.caller, a.token, a.outcome, a.error, a.log, a.place
            ));
        }
    }
    violations
}

/// Each caller's `Ok` appends to one log were told increasing places.
pub fn appends_in_caller_order(h: &History, context: &str) -> Vec<String> {
    let mut last: BTreeMap<(Caller, u64), (u64, u64)> = BTreeMap::new();
    let mut violations = Vec::new();
    for (id, a) in h.appends.iter().enumerate() {
        if a.outcome != Outcome::Ok {
            continue;
        }
        if let Some(before) = last.insert((a.caller, a.log), a.place)
            && before >= a.place
        {
            violations.push(format!(
                "{context}: append {id} of {:?} was told {:?} in log {} after {before:?}",
                a.caller, a.place, a.log
            ));
        }
    }
    violations
}

/// In a run long enough, what the checks rest on happened: batches of more
/// than one update and record, ambiguous outcomes, removals, fencing.
pub fn exercised(h: &History, ops: u64, context: &str) -> Vec<String> {
    if ops < 100_000 {
        return Vec::new();
    }
    let checks = [
        (
            "a counter write carried several updates",
            h.counter_batches.iter().any(|n| *n > 1),
        ),
        (
            "a log entry held several records",
            h.entry_sizes().iter().any(|n| *n > 1),
        ),
        (
            "an update was ambiguous",
            h.updates_told(Outcome::Ambiguous) > 0,
        ),
        ("an update was removed from its queue", h.removed > 0),
        (
            "a batch was fenced out",
            h.updates_told(Outcome::FencedOut) + h.appends_told(Outcome::FencedOut) > 0,
        ),
        (
            "an update or append under a superseded token was refused",
            h.updates
                .iter()
                .any(|u| u.stale && u.outcome == Outcome::FencedOut)
                || h.appends
                    .iter()
                    .any(|a| a.stale && a.outcome == Outcome::FencedOut),
        ),
    ];
    checks
        .iter()
        .filter(|(_, happened)| !happened)
        .map(|(what, _)| format!("{context}: in {ops} requests, never: {what}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::group_commit::{AppendRec, Application, UpdateRec};

    const CALLER: Caller = Caller { client: 0, task: 0 };

    fn update(outcome: Outcome, reported: u64, applied_at: &[u64]) -> UpdateRec {
        UpdateRec {
            caller: CALLER,
            token: 1,
            stale: false,
            outcome,
            error: String::new(),
            reported,
            applied: applied_at
                .iter()
                .map(|&at| Application {
                    at,
                    token: 1,
                    fence: 1,
                })
                .collect(),
        }
    }

    fn append(outcome: Outcome, place: (u64, u64)) -> AppendRec {
        AppendRec {
            caller: CALLER,
            token: 1,
            stale: false,
            log: 0,
            outcome,
            error: String::new(),
            place,
        }
    }

    fn record(key_seq: u64, offset: u64, token: u64, id: u64) -> StoredRecord {
        StoredRecord {
            log: 0,
            key_seq,
            seq: key_seq,
            offset,
            token,
            id,
        }
    }

    #[test]
    fn counter_checkers_report_double_missing_misplaced_and_unexpected_applies() {
        let h = History {
            updates: vec![
                update(Outcome::Ok, 1, &[1]),
                update(Outcome::Ok, 2, &[]),
                update(Outcome::Ambiguous, 0, &[2, 3]),
                update(Outcome::Failed, 0, &[4]),
                update(Outcome::Ok, 3, &[5]),
            ],
            counter_batches: vec![1, 2, 2],
            final_value: 5,
            ..History::default()
        };
        assert_eq!(updates_exactly_once(&h, "t").len(), 3);
        // ok = 3, ambiguous = 1: at most 4.
        assert_eq!(final_value_counts_updates(&h, "t").len(), 1);
        // Update 4 told 3 but applied at 5; update 1 told 2 after... 1: fine.
        assert_eq!(updates_told_their_place(&h, "t").len(), 1);
        let clean = History {
            updates: vec![update(Outcome::Ok, 1, &[1]), update(Outcome::Ok, 2, &[2])],
            counter_batches: vec![2],
            final_value: 2,
            counter_tokens: vec![1, 1],
            ..History::default()
        };
        assert!(updates_exactly_once(&clean, "t").is_empty());
        assert!(final_value_counts_updates(&clean, "t").is_empty());
        assert!(updates_told_their_place(&clean, "t").is_empty());
        assert!(counter_writes_known_and_fenced(&clean, "t").is_empty());
        let fenced = History {
            counter_tokens: vec![2, 1],
            unknown_writes: vec!["x".into()],
            ..History::default()
        };
        assert_eq!(counter_writes_known_and_fenced(&fenced, "t").len(), 2);
    }

    #[test]
    fn log_checkers_report_gaps_regressions_duplicates_misplaced_and_strays() {
        let gappy = [record(1, 0, 2, 0), record(3, 0, 1, 1)];
        assert_eq!(logs_well_formed(&gappy, "t").len(), 2);
        let h = History {
            appends: vec![
                append(Outcome::Ok, (1, 0)),
                append(Outcome::Ok, (1, 1)),
                append(Outcome::Ambiguous, (0, 0)),
                append(Outcome::FencedOut, (0, 0)),
                append(Outcome::Ok, (1, 0)),
            ],
            records: vec![
                record(1, 0, 1, 0),
                record(1, 1, 1, 2),
                record(2, 0, 1, 2),
                record(2, 1, 1, 3),
                record(2, 2, 1, 4),
                record(2, 3, 1, 9),
            ],
            ..History::default()
        };
        // Missing 1, twice 2, fenced 3 stored, 4 misplaced, 9 a stray.
        assert_eq!(records_exactly_once(&h, "t").len(), 5);
        // Append 4 was told (1, 0) after (1, 1).
        assert_eq!(appends_in_caller_order(&h, "t").len(), 1);
        let clean = History {
            appends: vec![append(Outcome::Ok, (1, 0)), append(Outcome::Ok, (1, 1))],
            records: vec![record(1, 0, 1, 0), record(1, 1, 1, 1)],
            ..History::default()
        };
        assert!(records_exactly_once(&clean, "t").is_empty());
        assert!(appends_in_caller_order(&clean, "t").is_empty());
        assert!(logs_well_formed(&clean.records, "t").is_empty());
        assert_eq!(exercised(&clean, 1_000_000, "t").len(), 5);
    }

    #[test]
    fn fencing_per_update_reports_updates_and_records_applied_under_another_token() {
        let applied = |at, token, fence| Application { at, token, fence };
        let mut zombie = update(Outcome::Ok, 2, &[]);
        zombie.token = 1;
        zombie.stale = true;
        // Submitted under 1, carried by a batch fenced with 2 after 2 was
        // written: both rules broken.
        zombie.applied = vec![applied(2, 2, 2)];
        let mut late = update(Outcome::Ambiguous, 0, &[]);
        // Under its own token, but after a higher one landed.
        late.applied = vec![applied(3, 1, 2)];
        let mut fine = update(Outcome::Ok, 1, &[]);
        fine.token = 2;
        fine.applied = vec![applied(1, 2, 1)];
        let h = History {
            updates: vec![fine.clone(), zombie, late],
            ..History::default()
        };
        assert_eq!(applied_under_submitted_token(&h, "t").len(), 3);
        let clean = History {
            updates: vec![update(Outcome::Ok, 1, &[1]), fine],
            ..History::default()
        };
        assert!(applied_under_submitted_token(&clean, "t").is_empty());

        let mut old = append(Outcome::Ok, (2, 1));
        old.stale = true;
        let mut new = append(Outcome::Ok, (2, 0));
        new.token = 2;
        let logs = History {
            appends: vec![append(Outcome::Ok, (1, 0)), new.clone(), old],
            // Append 2 (token 1) is stored in entry 2, fenced with 2.
            records: vec![record(1, 0, 1, 0), record(2, 0, 2, 1), record(2, 1, 2, 2)],
            ..History::default()
        };
        let found = applied_under_submitted_token(&logs, "t");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("append 2"), "{found:?}");
        // A record of token 1 in a later entry than one of token 2.
        let superseded = History {
            appends: vec![new, append(Outcome::Ok, (3, 0))],
            records: vec![record(2, 0, 2, 0), record(3, 0, 1, 1)],
            ..History::default()
        };
        let found = applied_under_submitted_token(&superseded, "t");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("superseded"), "{found:?}");
        let clean = History {
            appends: vec![append(Outcome::Ok, (1, 0)), append(Outcome::Ok, (1, 1))],
            records: vec![record(1, 0, 1, 0), record(1, 1, 1, 1)],
            ..History::default()
        };
        assert!(applied_under_submitted_token(&clean, "t").is_empty());
    }
}
