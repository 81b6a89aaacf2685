//! `swap_once`: a table committed the Iceberg way holds each transaction
//! at most once, exactly once when its client was told `Ours`, never one
//! told `Conflict`, and no write replaced a body it did not read (no lost
//! update); and the run did what the checks rest on.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::swap_once::{Answer, History, Told};

/// From this many requests on, a run must show unknown answers settled by
/// reading (below it, faults are too few to expect them).
pub const MIN_OPS_FOR_SETTLEMENTS: u64 = 20_000;

/// How many times each nonce landed.
fn landings(h: &History) -> BTreeMap<&str, usize> {
    let mut found: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &h.landed {
        *found.entry(l.nonce.as_str()).or_default() += 1;
    }
    found
}

/// How many writes of transaction `t`'s calls landed.
fn landed_of(landings: &BTreeMap<&str, usize>, nonces: &[String]) -> usize {
    nonces
        .iter()
        .map(|n| landings.get(n.as_str()).copied().unwrap_or(0))
        .sum()
}

/// A transaction told `Ours` landed exactly once.
pub fn ours_landed_once(h: &History, context: &str) -> Vec<String> {
    let landings = landings(h);
    h.txns
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(t.told, Told::Committed { .. }))
        .filter_map(|(id, t)| {
            let nonces: Vec<String> = t.calls.iter().flat_map(|c| c.nonces.clone()).collect();
            let n = landed_of(&landings, &nonces);
            (n != 1).then(|| {
                format!(
                    "{context}: transaction {id} of client {} on table {} was told {:?} but landed {n} times",
                    t.client, t.table, t.told
                )
            })
        })
        .collect()
}

/// No transaction landed twice, whatever it was told.
pub fn never_twice(h: &History, context: &str) -> Vec<String> {
    let mut per_txn: BTreeMap<u64, usize> = BTreeMap::new();
    for l in &h.landed {
        *per_txn.entry(l.txn).or_default() += 1;
    }
    per_txn
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, n)| {
            let told = h
                .txns
                .get(id as usize)
                .map_or_else(|| "nothing".to_string(), |t| format!("{:?}", t.told));
            format!("{context}: duplicate commit: transaction {id} (told {told}) landed {n} times")
        })
        .collect()
}

/// No write of a call answered `Conflict` or refused with a definite error
/// landed (not even late).
pub fn conflict_never_landed(h: &History, context: &str) -> Vec<String> {
    let landings = landings(h);
    let mut violations = Vec::new();
    for (id, t) in h.txns.iter().enumerate() {
        for (call, c) in t.calls.iter().enumerate() {
            if matches!(c.answer, Answer::Conflict | Answer::Refused)
                && landed_of(&landings, &c.nonces) > 0
            {
                violations.push(format!(
                    "{context}: call {call} of transaction {id} (client {}, table {}) was answered {:?}, yet a write of it landed",
                    t.client, t.table, c.answer
                ));
            }
        }
    }
    violations
}

/// No lost update: on each table, every write landed on top of the body
/// it read, so the writes form one chain from the pointer's creation to its
/// head: one root, no two writes on top of the same body, each parent a
/// write of the same table, and the head descends from every write.
pub fn no_lost_update(h: &History, context: &str) -> Vec<String> {
    let mut violations: Vec<String> = h
        .foreign
        .iter()
        .map(|f| format!("{context}: a pointer holds a body that is no write of this run: {f}"))
        .collect();
    let mut tables: BTreeMap<u64, Vec<&crate::history::swap_once::Landed>> = BTreeMap::new();
    for l in &h.landed {
        tables.entry(l.table).or_default().push(l);
    }
    let heads: BTreeMap<u64, &str> = h.heads.iter().map(|(t, n)| (*t, n.as_str())).collect();
    for (table, writes) in tables {
        let nonces: BTreeSet<&str> = writes.iter().map(|l| l.nonce.as_str()).collect();
        let parent_of: BTreeMap<&str, Option<&str>> = writes
            .iter()
            .map(|l| (l.nonce.as_str(), l.parent.as_deref()))
            .collect();
        let roots = writes.iter().filter(|l| l.parent.is_none()).count();
        if roots != 1 {
            violations.push(format!(
                "{context}: table {table}: {roots} writes created the pointer"
            ));
        }
        let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for l in &writes {
            if let Some(parent) = l.parent.as_deref() {
                if !nonces.contains(parent) {
                    violations.push(format!(
                        "{context}: table {table}: transaction {} landed on top of {parent}, which never landed there",
                        l.txn
                    ));
                }
                children.entry(parent).or_default().push(&l.nonce);
            }
        }
        for (parent, on_top) in &children {
            if on_top.len() > 1 {
                violations.push(format!(
                    "{context}: table {table}: lost update: {} writes landed on top of {parent}: {on_top:?}",
                    on_top.len()
                ));
            }
        }
        let Some(head) = heads.get(&table) else {
            violations.push(format!(
                "{context}: table {table}: writes landed but the pointer is absent"
            ));
            continue;
        };
        // Walk from the head to the root: every write must be on the way.
        let mut seen = BTreeSet::new();
        let mut at = Some(*head);
        while let Some(nonce) = at {
            if !seen.insert(nonce) {
                break;
            }
            at = parent_of.get(nonce).copied().flatten();
        }
        let off_chain = nonces.difference(&seen).count();
        if off_chain > 0 {
            violations.push(format!(
                "{context}: table {table}: lost update: {off_chain} landed writes are not in the head's history"
            ));
        }
    }
    violations
}

/// Transactions left unknown that landed after all.
pub fn unknown_landed(h: &History) -> u64 {
    let landings = landings(h);
    h.txns
        .iter()
        .filter(|t| t.told == Told::Unknown)
        .filter(|t| {
            let nonces: Vec<String> = t.calls.iter().flat_map(|c| c.nonces.clone()).collect();
            landed_of(&landings, &nonces) > 0
        })
        .count() as u64
}

/// The run did what the checks rest on: commits, conflicts, and, in a run
/// of `ops` requests long enough, unknown answers settled by reading inside
/// `SwapOnce` (our own duplicate's 412, a lost answer, a write of ours
/// found only in a later body's lineage, a conflict after a lost answer),
/// ambiguous errors, dropped calls and unknown transactions that landed.
pub fn work_happened(h: &History, ops: u64, context: &str) -> Vec<String> {
    let mut checks = vec![
        (
            "a transaction committed",
            h.count(|t| matches!(t, Told::Committed { .. })) > 0,
        ),
        ("a call answered Conflict", h.answered(Answer::Conflict) > 0),
    ];
    if ops >= MIN_OPS_FOR_SETTLEMENTS {
        checks.extend([
            (
                "a 412 settled as our own swap by reading",
                h.ours_after_412 > 0,
            ),
            (
                "a lost answer settled as our own swap by reading",
                h.ours_after_ambiguous > 0,
            ),
            (
                "a write of ours found only in a later body's lineage",
                h.ours_replaced > 0,
            ),
            (
                "a lost answer settled as a conflict by reading",
                h.conflict_after_ambiguous > 0,
            ),
            (
                "SwapOnce failed ambiguous",
                h.answered(Answer::Ambiguous) > 0,
            ),
            ("a call dropped unanswered", h.answered(Answer::Dropped) > 0),
            (
                "a transaction given up after conflicts",
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
    use crate::history::swap_once::{CallRec, Landed, TxnRec};

    fn call(nonces: &[&str], answer: Answer) -> CallRec {
        CallRec {
            nonces: nonces.iter().map(|n| n.to_string()).collect(),
            answer,
        }
    }

    fn txn(told: Told, calls: Vec<CallRec>) -> TxnRec {
        TxnRec {
            client: 0,
            table: 0,
            told,
            error: String::new(),
            calls,
        }
    }

    fn landed(txn: u64, nonce: &str, parent: Option<&str>) -> Landed {
        Landed {
            table: 0,
            txn,
            nonce: nonce.into(),
            parent: parent.map(String::from),
        }
    }

    fn ours() -> Told {
        Told::Committed { replaced: false }
    }

    /// t0 creates (a); t1 conflicts once (b never landed), then lands c on
    /// a; t2 is unknown and its write d landed on c; t3 gave up.
    fn clean() -> History {
        History {
            txns: vec![
                txn(ours(), vec![call(&["a"], Answer::Ours)]),
                txn(
                    ours(),
                    vec![
                        call(&["b"], Answer::Conflict),
                        call(&["c", "c2"], Answer::Ours),
                    ],
                ),
                txn(Told::Unknown, vec![call(&["d"], Answer::Ambiguous)]),
                txn(Told::Abandoned, vec![call(&["e"], Answer::Conflict)]),
            ],
            landed: vec![
                landed(0, "a", None),
                landed(1, "c", Some("a")),
                landed(2, "d", Some("c")),
            ],
            heads: vec![(0, "d".into())],
            ours_after_412: 1,
            ours_after_ambiguous: 1,
            ours_replaced: 1,
            conflict_after_ambiguous: 1,
            ..History::default()
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let h = clean();
        assert!(ours_landed_once(&h, "t").is_empty());
        assert!(never_twice(&h, "t").is_empty());
        assert!(conflict_never_landed(&h, "t").is_empty());
        assert!(no_lost_update(&h, "t").is_empty());
        assert_eq!(unknown_landed(&h), 1);
    }

    #[test]
    fn ours_that_never_landed_or_landed_twice_is_reported() {
        let mut h = clean();
        // Told ours, nothing landed.
        h.txns.push(txn(ours(), vec![call(&["f"], Answer::Ours)]));
        assert_eq!(ours_landed_once(&h, "t").len(), 1);
        // t1's second write of the same call landed too.
        let mut h = clean();
        h.landed.push(landed(1, "c2", Some("d")));
        h.heads = vec![(0, "c2".into())];
        assert_eq!(ours_landed_once(&h, "t").len(), 1);
        assert_eq!(never_twice(&h, "t").len(), 1);
    }

    #[test]
    fn a_conflict_whose_write_landed_is_reported() {
        let mut h = clean();
        // t1's first call was answered Conflict, yet b landed (on d): it
        // would commit twice after rebasing.
        h.landed.push(landed(1, "b", Some("d")));
        h.heads = vec![(0, "b".into())];
        assert_eq!(conflict_never_landed(&h, "t").len(), 1);
        assert_eq!(never_twice(&h, "t").len(), 1);
    }

    #[test]
    fn a_lost_update_is_reported() {
        let mut h = clean();
        // t3's write landed on c, as d did: one of them was overwritten
        // without being read.
        h.txns[3] = txn(ours(), vec![call(&["e"], Answer::Ours)]);
        h.landed.push(landed(3, "e", Some("c")));
        let found = no_lost_update(&h, "t");
        // Two on top of c, and e is not in the head's history.
        assert_eq!(found.len(), 2, "{found:?}");
        // A second creation of the pointer.
        let mut h = clean();
        h.landed.push(landed(3, "e", None));
        assert_eq!(no_lost_update(&h, "t").len(), 2);
    }

    #[test]
    fn a_run_where_nothing_happened_is_inconclusive() {
        let empty = History::default();
        assert_eq!(work_happened(&empty, 10, "t").len(), 2);
        assert_eq!(work_happened(&empty, 1_000_000, "t").len(), 10);
        let h = clean();
        assert!(work_happened(&h, 10, "t").is_empty());
        // No ambiguous error, no drop, nothing abandoned... in the clean
        // history above only the Dropped call is missing.
        assert_eq!(work_happened(&h, 1_000_000, "t").len(), 1);
    }
}
