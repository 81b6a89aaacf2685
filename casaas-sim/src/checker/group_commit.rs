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
            let times = u.applied_at.len();
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
        if u.applied_at.first().is_some_and(|at| *at != u.reported) {
            violations.push(format!(
                "{context}: update {id} of {:?} was told the counter became {} but it was applied at {:?}",
                u.caller, u.reported, u.applied_at
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
    use crate::history::group_commit::{AppendRec, UpdateRec};

    const CALLER: Caller = Caller { client: 0, task: 0 };

    fn update(outcome: Outcome, reported: u64, applied_at: &[u64]) -> UpdateRec {
        UpdateRec {
            caller: CALLER,
            token: 1,
            outcome,
            error: String::new(),
            reported,
            applied_at: applied_at.to_vec(),
        }
    }

    fn append(outcome: Outcome, place: (u64, u64)) -> AppendRec {
        AppendRec {
            caller: CALLER,
            token: 1,
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
        assert_eq!(exercised(&clean, 1_000_000, "t").len(), 4);
    }
}
