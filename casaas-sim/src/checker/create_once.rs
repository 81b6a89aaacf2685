//! `create_once`: a log committed the Delta Lake way holds each
//! transaction at most once, where its client was told, never one told
//! not committed, and no holes; and the run did what the checks rest on.

use std::collections::BTreeMap;

use crate::history::create_once::{History, StoredCommit, Told};

/// From this many requests on, a run must show unknown answers settled by
/// reading (below it, faults are too few to expect them).
pub const MIN_OPS_FOR_SETTLEMENTS: u64 = 20_000;

/// Where each transaction is stored: (log, version) of every commit whose
/// body is its.
fn places(h: &History) -> BTreeMap<u64, Vec<(u64, u64)>> {
    let mut found: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for c in &h.commits {
        found.entry(c.txn).or_default().push((c.log, c.version));
    }
    found
}

fn at(places: &BTreeMap<u64, Vec<(u64, u64)>>, id: usize) -> Vec<(u64, u64)> {
    places.get(&(id as u64)).cloned().unwrap_or_default()
}

/// A transaction told committed (`Ours`, or found by reading) is stored
/// exactly once, at the version it was told.
pub fn committed_where_told(h: &History, context: &str) -> Vec<String> {
    let places = places(h);
    h.txns
        .iter()
        .enumerate()
        .filter_map(|(id, t)| {
            let Told::Committed { version, found } = t.told else {
                return None;
            };
            let stored = at(&places, id);
            (stored != [(t.log, version)]).then(|| {
                format!(
                    "{context}: transaction {id} of client {} was told committed at log {} version {version} ({}) but is stored at {stored:?}",
                    t.client,
                    t.log,
                    if found { "found by reading" } else { "Ours" }
                )
            })
        })
        .collect()
}

/// No transaction is stored at two versions, whatever it was told.
pub fn never_twice(h: &History, context: &str) -> Vec<String> {
    places(h)
        .into_iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(id, at)| {
            let told = h
                .txns
                .get(id as usize)
                .map_or_else(|| "nothing".to_string(), |t| format!("{:?}", t.told));
            format!(
                "{context}: duplicate commit: transaction {id} (told {told}) is stored at {at:?}"
            )
        })
        .collect()
}

/// A transaction told `Taken` and given up, or refused with a definite
/// error, is not stored (not even by a write that landed later).
pub fn definite_failures_absent(h: &History, context: &str) -> Vec<String> {
    let places = places(h);
    h.txns
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(t.told, Told::Abandoned | Told::Refused))
        .filter_map(|(id, t)| {
            let stored = at(&places, id);
            (!stored.is_empty()).then(|| {
                format!(
                    "{context}: transaction {id} of client {} was told {:?} ({}; taken at {:?}) but is stored at {stored:?}",
                    t.client, t.told, t.error, t.taken
                )
            })
        })
        .collect()
}

/// A transaction left unknown is stored nowhere but at the version its
/// unsettled call wrote to (every write of that call went there).
pub fn unknown_only_where_sent(h: &History, context: &str) -> Vec<String> {
    let places = places(h);
    h.txns
        .iter()
        .enumerate()
        .filter_map(|(id, t)| {
            let Told::Unknown { version } = t.told else {
                return None;
            };
            let stored = at(&places, id);
            stored
                .iter()
                .any(|&place| place != (t.log, version))
                .then(|| {
                    format!(
                        "{context}: transaction {id} of client {} was left unknown at log {} version {version} but is stored at {stored:?}",
                        t.client, t.log
                    )
                })
        })
        .collect()
}

/// `Taken` is never answered for a version that holds the transaction's
/// own body.
pub fn taken_never_ours(h: &History, context: &str) -> Vec<String> {
    let places = places(h);
    let mut violations = Vec::new();
    for (id, t) in h.txns.iter().enumerate() {
        let stored = at(&places, id);
        for version in &t.taken {
            if stored.contains(&(t.log, *version)) {
                violations.push(format!(
                    "{context}: transaction {id} of client {} was told Taken at log {} version {version}, which holds its own commit",
                    t.client, t.log
                ));
            }
        }
    }
    violations
}

/// Every log's versions are dense from 0 to its last, each held by a
/// commit of this run, and nothing else is stored under the logs.
pub fn versions_dense(h: &History, context: &str) -> Vec<String> {
    let mut violations: Vec<String> = h
        .foreign
        .iter()
        .map(|f| format!("{context}: the log holds an object that is no commit of this run: {f}"))
        .collect();
    let mut previous: Option<&StoredCommit> = None;
    for c in &h.commits {
        let expected = match previous {
            Some(p) if p.log == c.log => p.version + 1,
            _ => 0,
        };
        if c.version != expected {
            violations.push(format!(
                "{context}: log {} has a hole: version {} follows {}",
                c.log,
                c.version,
                match previous {
                    Some(p) if p.log == c.log => p.version.to_string(),
                    _ => "nothing".to_string(),
                }
            ));
        }
        if h.txns.get(c.txn as usize).is_none_or(|t| t.log != c.log) {
            violations.push(format!(
                "{context}: log {} version {} holds transaction {} that no client committed to it",
                c.log, c.version, c.txn
            ));
        }
        previous = Some(c);
    }
    violations
}

/// Transactions left unknown whose write landed after all (at the version
/// their call wrote to).
pub fn unknown_landed(h: &History) -> u64 {
    let places = places(h);
    h.txns
        .iter()
        .enumerate()
        .filter(|(id, t)| matches!(t.told, Told::Unknown { .. }) && !at(&places, *id).is_empty())
        .count() as u64
}

/// The run did what the checks rest on: transactions committed, races
/// lost (`Taken`), and, in a run of `ops` requests long enough, unknown
/// answers settled by reading: inside `CreateOnce` (our own duplicate's
/// 412 and a lost answer found to be ours) and by the client (an
/// ambiguous error or a dropped call settled by reading the version); and
/// every outcome the checks judge: ambiguous errors, definite refusals,
/// transactions given up after `Taken`, and unknown ones that landed.
pub fn work_happened(h: &History, ops: u64, context: &str) -> Vec<String> {
    let mut checks = vec![
        ("a transaction committed", h.committed() > 0),
        (
            "a commit answered Taken",
            h.txns.iter().any(|t| !t.taken.is_empty()),
        ),
    ];
    if ops >= MIN_OPS_FOR_SETTLEMENTS {
        checks.extend([
            (
                "a 412 settled as our own commit by reading",
                h.ours_after_412 > 0,
            ),
            (
                "a lost answer settled as our own commit by reading",
                h.ours_after_ambiguous > 0,
            ),
            (
                "an unknown outcome settled by the client's read: its own commit found",
                h.settled_ours > 0,
            ),
            (
                "an unknown outcome settled by the client's read: another commit found",
                h.settled_other > 0,
            ),
            ("CreateOnce failed ambiguous", h.ambiguous_errors > 0),
            (
                "CreateOnce refused with a definite error",
                h.count(|t| *t == Told::Refused) > 0,
            ),
            (
                "a transaction was given up after Taken",
                h.count(|t| *t == Told::Abandoned) > 0,
            ),
            (
                "a transaction left unknown landed after all",
                unknown_landed(h) > 0,
            ),
        ]);
    }
    checks
        .iter()
        .filter(|(_, happened)| !happened)
        .map(|(what, _)| format!("{context}: inconclusive: in {ops} requests, never: {what}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::create_once::TxnRec;

    fn txn(log: u64, told: Told, taken: &[u64]) -> TxnRec {
        TxnRec {
            client: 0,
            log,
            told,
            error: String::new(),
            taken: taken.to_vec(),
        }
    }

    fn commit(log: u64, version: u64, txn: u64) -> StoredCommit {
        StoredCommit {
            log,
            version,
            txn,
            client: 0,
        }
    }

    fn committed(version: u64) -> Told {
        Told::Committed {
            version,
            found: false,
        }
    }

    #[test]
    fn a_clean_log_passes() {
        let h = History {
            txns: vec![
                txn(0, committed(0), &[]),
                txn(0, committed(1), &[0]),
                txn(0, Told::Abandoned, &[1]),
                txn(0, Told::Unknown { version: 2 }, &[]),
                txn(0, Told::Unknown { version: 3 }, &[]),
                txn(0, Told::Refused, &[]),
            ],
            commits: vec![commit(0, 0, 0), commit(0, 1, 1), commit(0, 2, 3)],
            ours_after_412: 1,
            ours_after_ambiguous: 1,
            settled_ours: 1,
            settled_other: 1,
            ambiguous_errors: 1,
            ..History::default()
        };
        assert_eq!(unknown_landed(&h), 1);
        assert!(committed_where_told(&h, "t").is_empty());
        assert!(never_twice(&h, "t").is_empty());
        assert!(definite_failures_absent(&h, "t").is_empty());
        assert!(unknown_only_where_sent(&h, "t").is_empty());
        assert!(taken_never_ours(&h, "t").is_empty());
        assert!(versions_dense(&h, "t").is_empty());
        assert!(work_happened(&h, 1_000_000, "t").is_empty());
    }

    #[test]
    fn each_checker_reports_its_violation() {
        let h = History {
            txns: vec![
                // Told 1, stored at 0 and 2: misplaced and twice; Taken at
                // 0, which holds it.
                txn(0, committed(1), &[0]),
                // Abandoned, yet stored.
                txn(0, Told::Abandoned, &[1]),
                // Unknown at 5, stored at 3.
                txn(0, Told::Unknown { version: 5 }, &[]),
                // Told committed, stored nowhere.
                txn(0, committed(6), &[]),
            ],
            // Version 4 missing; 9 is no transaction of the run.
            commits: vec![
                commit(0, 0, 0),
                commit(0, 1, 1),
                commit(0, 2, 0),
                commit(0, 3, 2),
                commit(0, 5, 9),
            ],
            foreign: vec!["x".into()],
            ..History::default()
        };
        assert_eq!(committed_where_told(&h, "t").len(), 2);
        assert_eq!(never_twice(&h, "t").len(), 1);
        assert_eq!(definite_failures_absent(&h, "t").len(), 1);
        assert_eq!(unknown_only_where_sent(&h, "t").len(), 1);
        // Transaction 0 told Taken at 0 and transaction 1 at 1: their own.
        assert_eq!(taken_never_ours(&h, "t").len(), 2);
        // The foreign object, the hole, the unknown transaction 9.
        assert_eq!(versions_dense(&h, "t").len(), 3);
    }

    #[test]
    fn a_run_where_nothing_happened_is_inconclusive() {
        let empty = History::default();
        assert_eq!(work_happened(&empty, 10, "t").len(), 2);
        assert_eq!(work_happened(&empty, 1_000_000, "t").len(), 10);
        let unsettled = History {
            txns: vec![txn(0, committed(1), &[0])],
            ..History::default()
        };
        assert!(work_happened(&unsettled, 10, "t").is_empty());
        assert_eq!(work_happened(&unsettled, 1_000_000, "t").len(), 8);
    }
}
