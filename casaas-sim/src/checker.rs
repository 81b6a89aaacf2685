//! The checkers: one function per property, each over a history recorded
//! in true time (or over what the store really holds), each returning the
//! violations it found, described for debugging. They read the histories
//! (`crate::history`) and nothing of the clients that wrote them.

/// `lease` and `shared_lease`: belief intervals, tokens, held_checks, fencing.
pub mod lease {
    use std::time::Duration;

    use crate::history::lease::History;
    use crate::secs;

    /// Describes guard `g` (client, task, clock rate, token) for messages.
    pub type Who<'a> = &'a dyn Fn(usize) -> String;

    /// Mutual exclusion: belief intervals `[start, end)` of different guards
    /// never overlap, whoever holds them (other clients, or other tasks
    /// sharing one `Lease`).
    pub fn mutual_exclusion(h: &History, who: Who<'_>, context: &str) -> Vec<String> {
        let mut violations = Vec::new();
        // Sweep by start, keeping the latest-ending interval of the two
        // guards that end latest.
        let mut top: [Option<(Duration, usize)>; 2] = [None, None];
        for (start, end, g) in intervals(h) {
            for (other_end, other) in top.iter().flatten() {
                if *other != g && start < *other_end {
                    violations.push(format!(
                        "{context}: mutual exclusion: {} believed it held from {} while {} believed it held until {}",
                        who(g),
                        secs(start),
                        who(*other),
                        secs(*other_end)
                    ));
                }
            }
            let mut candidates: Vec<(Duration, usize)> = top.iter().flatten().copied().collect();
            candidates.retain(|(_, o)| *o != g);
            let own = top
                .iter()
                .flatten()
                .filter(|(_, o)| *o == g)
                .map(|(e, _)| *e)
                .fold(end, Duration::max);
            candidates.push((own, g));
            candidates.sort_by(|a, b| b.cmp(a));
            top = [candidates.first().copied(), candidates.get(1).copied()];
        }
        violations
    }

    /// Validity rests on a write: a holder never believes longer than `ttl`
    /// (its client's, in true time) after the store applied the latest lock
    /// write of its holding. A contender whose clock runs at the fastest
    /// rate the drift bound allows waits exactly that long after seeing the
    /// write, so a belief past it is unsafe even when no contender was
    /// there to collide with (validity counted from an answer, not the
    /// send; a margin left out).
    pub fn belief_rests_on_a_write(
        h: &History,
        ttls: &[Duration],
        who: Who<'_>,
        context: &str,
    ) -> Vec<String> {
        // Records keep whole milliseconds.
        let slack = Duration::from_millis(1);
        let mut violations = Vec::new();
        for (g, guard) in h.guards.iter().enumerate() {
            let owner = format!("client-{}", guard.client);
            let ttl = ttls.get(guard.client).copied().unwrap_or_default();
            for &(_, end) in &guard.beliefs {
                let latest = h
                    .lock_writes
                    .iter()
                    .filter(|(at, o, t, _)| *o == owner && *t == guard.token && *at < end)
                    .map(|(at, ..)| *at)
                    .max();
                match latest {
                    Some(at) if end <= at + ttl + slack => {}
                    Some(at) => violations.push(format!(
                        "{context}: validity: {} believed it held until {}, more than the TTL ({}) after its latest write was applied at {}",
                        who(g),
                        secs(end),
                        secs(ttl),
                        secs(at)
                    )),
                    None => violations.push(format!(
                        "{context}: validity: {} believed it held until {} with no write of its holding applied before",
                        who(g),
                        secs(end)
                    )),
                }
            }
        }
        violations
    }

    /// Every belief interval `(start, end, guard)`, sorted by start.
    pub fn intervals(h: &History) -> Vec<(Duration, Duration, usize)> {
        let mut intervals: Vec<(Duration, Duration, usize)> = h
            .guards
            .iter()
            .enumerate()
            .flat_map(|(g, r)| r.beliefs.iter().map(move |&(s, e)| (s, e, g)))
            .collect();
        intervals.sort();
        intervals
    }

    /// Tokens strictly increase across acquisitions, in the order the
    /// holders got them (two guards with one token are two holders).
    ///
    /// Guards are ordered by when they began to believe; a guard that never
    /// believed (its `acquire` returned after a freeze longer than its
    /// validity) never acted and has no place in the order.
    pub fn token_order(h: &History, who: Who<'_>, context: &str) -> Vec<String> {
        let start = |g: usize| h.guards[g].beliefs.first().map(|b| b.0);
        let mut order: Vec<(Duration, usize)> = (0..h.guards.len())
            .filter_map(|g| start(g).map(|s| (s, g)))
            .collect();
        order.sort();
        order
            .windows(2)
            .filter_map(|pair| {
                let ((sa, ga), (sb, gb)) = (pair[0], pair[1]);
                let (a, b) = (&h.guards[ga], &h.guards[gb]);
                (b.token <= a.token).then(|| {
                    format!(
                        "{context}: token order: {} believed from {} after {} believed from {}",
                        who(gb),
                        secs(sb),
                        who(ga),
                        secs(sa)
                    )
                })
            })
            .collect()
    }

    /// The token in the lock object never decreases.
    pub fn lock_token_monotonic(h: &History, context: &str) -> Vec<String> {
        h.lock_writes
            .windows(2)
            .filter(|pair| pair[1].2 < pair[0].2)
            .map(|pair| {
                format!(
                    "{context}: the lock object's token went from {} to {} at {}",
                    pair[0].2,
                    pair[1].2,
                    secs(pair[1].0)
                )
            })
            .collect()
    }

    /// Every lease check that passed lies within its guard's belief (the
    /// guard's check agrees with its remaining validity). The end is
    /// included: a guard released or lost at the instant of a check
    /// (same simulated time, later in execution) still held at the check.
    pub fn held_checks_within_belief(h: &History, who: Who<'_>, context: &str) -> Vec<String> {
        h.held_checks
            .iter()
            .filter(|&&(g, at)| !h.guards[g].beliefs.iter().any(|&(s, e)| s <= at && at <= e))
            .map(|&(g, at)| {
                format!(
                    "{context}: held check passed outside belief: {} at {}; acquired at {}, believed {}",
                    who(g),
                    secs(at),
                    secs(h.guards[g].acquired_at),
                    h.guards[g]
                        .beliefs
                        .iter()
                        .map(|(s, e)| format!("[{}, {})", secs(*s), secs(*e)))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            })
            .collect()
    }

    /// Fencing: every write the resource accepted carries a token no lower
    /// than any accepted before it, and came from the holder of the highest
    /// token granted so far when it passed its lease check. Also returns how
    /// many writes were accepted after a newer token was granted but before
    /// its holder wrote (allowed: the window fencing leaves open).
    pub fn fencing(h: &History, context: &str) -> (Vec<String>, u64) {
        let mut violations = Vec::new();
        let mut acquisitions: Vec<(Duration, u64)> =
            h.guards.iter().map(|g| (g.acquired_at, g.token)).collect();
        acquisitions.sort();
        let granted_before = |t: Duration| {
            acquisitions
                .iter()
                .take_while(|(at, _)| *at < t)
                .map(|(_, tok)| *tok)
                .max()
                .unwrap_or(0)
        };
        let mut highest_accepted = 0;
        let mut late = 0u64;
        for &(at, token, value) in &h.fenced_writes {
            if token < highest_accepted {
                violations.push(format!(
                    "{context}: fence: resource accepted token {token} from client {} at {} after token {highest_accepted}",
                    value.client,
                    secs(at)
                ));
            }
            highest_accepted = highest_accepted.max(token);
            let checked_at = Duration::from_nanos(value.checked_at_ns);
            let granted = granted_before(checked_at);
            if token < granted {
                violations.push(format!(
                    "{context}: fence: client {} wrote with token {token} (lease checked at {}) though token {granted} was granted by then",
                    value.client,
                    secs(checked_at)
                ));
            }
            if token < granted_before(at) {
                late += 1;
            }
        }
        (violations, late)
    }

    /// Figures for the summary.
    pub struct Handovers {
        /// Token increases over a record that was not released.
        pub takeovers: usize,
        /// The smallest gap between one holder's last belief and the next
        /// holder's first.
        pub min_gap: Option<Duration>,
        /// Total belief time.
        pub believed: Duration,
    }

    /// Takeovers, the smallest handover gap and the total belief time.
    pub fn handovers(h: &History) -> Handovers {
        let intervals = intervals(h);
        let takeovers = h
            .lock_writes
            .windows(2)
            .filter(|w| w[1].2 > w[0].2 && !w[0].3)
            .count();
        let mut min_gap: Option<Duration> = None;
        let mut last: Option<(Duration, usize)> = None;
        for &(start, end, g) in &intervals {
            if let Some((prev_end, prev)) = last
                && prev != g
                && start >= prev_end
            {
                let gap = start - prev_end;
                min_gap = Some(min_gap.map_or(gap, |m| m.min(gap)));
            }
            last = Some(last.map_or((end, g), |(e, p)| if end >= e { (end, g) } else { (e, p) }));
        }
        Handovers {
            takeovers,
            min_gap,
            believed: intervals.iter().map(|(s, e, _)| *e - *s).sum(),
        }
    }
}

/// `election`: the work of terms in true time, and the leader notices.
pub mod election {
    use std::time::Duration;

    use crate::history::election::History;
    use crate::secs;

    /// The leader's work of one term never overlaps another term's work in
    /// true time: a term's work (including the cleanup after its
    /// cancellation) ends before the next term's work starts, whether its
    /// runner finished, was cancelled, dropped or aborted. Work still
    /// running at the end of the run counts as running until then.
    pub fn work_never_overlaps(h: &History, end_of_run: Duration, context: &str) -> Vec<String> {
        let mut works: Vec<(Duration, Duration, usize)> = h
            .works
            .iter()
            .enumerate()
            .map(|(i, w)| (w.start, w.end.unwrap_or(end_of_run), i))
            .collect();
        works.sort();
        let mut violations = Vec::new();
        let mut latest: Option<(Duration, usize)> = None;
        for (start, end, i) in works {
            if let Some((other_end, other)) = latest
                && start < other_end
            {
                let (w, o) = (&h.works[i], &h.works[other]);
                violations.push(format!(
                    "{context}: work overlap: client {} term {} started its work at {} while client {} term {} (runner {}) worked until {}",
                    w.client,
                    w.token,
                    secs(start),
                    o.client,
                    o.token,
                    o.ended_by,
                    secs(other_end)
                ));
            }
            if latest.is_none_or(|(e, _)| end > e) {
                latest = Some((end, i));
            }
        }
        violations
    }

    /// Terms' tokens strictly increase in the order their work started.
    pub fn term_tokens_increase(h: &History, context: &str) -> Vec<String> {
        let mut works: Vec<_> = h.works.iter().collect();
        works.sort_by_key(|w| w.start);
        works
            .windows(2)
            .filter(|pair| pair[1].token <= pair[0].token)
            .map(|pair| {
                format!(
                    "{context}: term order: client {} started term {} at {} after client {} started term {} at {}",
                    pair[1].client,
                    pair[1].token,
                    secs(pair[1].start),
                    pair[0].client,
                    pair[0].token,
                    secs(pair[0].start)
                )
            })
            .collect()
    }

    /// `on_new_leader(Some(me))` never fires for a term after
    /// `on_stopped_leading` was called for it.
    pub fn no_leader_notice_after_stop(h: &History, context: &str) -> Vec<String> {
        h.notices_after_stop
            .iter()
            .map(|n| {
                format!(
                    "{context}: on_new_leader reported client {} (term {}) as leader at {}, after on_stopped_leading for that term at {}",
                    n.client,
                    n.token,
                    secs(n.at),
                    secs(n.stopped_at)
                )
            })
            .collect()
    }
}

/// `fenced_resource`: exactly-once increments, judged per update.
pub mod fenced_resource {
    use crate::history::fenced_resource::{History, Outcome};

    /// An update reported applied was applied exactly once.
    pub fn ok_applied_exactly_once(h: &History, context: &str) -> Vec<String> {
        h.updates
            .iter()
            .filter(|u| u.outcome == Outcome::Ok && u.applied != 1)
            .map(|u| {
                format!(
                    "{context}: update {} of client {} (token {}) was reported applied but the store applied it {} times",
                    u.op, u.client, u.token, u.applied
                )
            })
            .collect()
    }

    /// No update is applied twice, whatever it was told (the counter would
    /// count one increment twice).
    pub fn never_applied_twice(h: &History, context: &str) -> Vec<String> {
        h.updates
            .iter()
            .filter(|u| u.applied > 1)
            .map(|u| {
                format!(
                    "{context}: double apply: update {} of client {} (token {}, reported {:?}) was applied {} times",
                    u.op, u.client, u.token, u.outcome, u.applied
                )
            })
            .collect()
    }

    /// An update reported as not applied (fenced out, contended, a
    /// definite store error) was not applied, not even later.
    pub fn failed_never_applied(h: &History, context: &str) -> Vec<String> {
        h.updates
            .iter()
            .filter(|u| matches!(u.outcome, Outcome::FencedOut | Outcome::Failed) && u.applied > 0)
            .map(|u| {
                format!(
                    "{context}: update {} of client {} (token {}) was reported {:?} ({}) but the store applied it",
                    u.op, u.client, u.token, u.outcome, u.error
                )
            })
            .collect()
    }

    /// The final counter equals the increments the store applied, and lies
    /// between the updates reported applied and those plus the ambiguous
    /// ones.
    pub fn final_value_counts_updates(h: &History, final_value: u64, context: &str) -> Vec<String> {
        let ok = h.count(Outcome::Ok);
        let ambiguous = h.count(Outcome::Ambiguous);
        let mut violations = Vec::new();
        if final_value != h.applied_writes {
            violations.push(format!(
                "{context}: the counter holds {final_value} but the store applied {} increments",
                h.applied_writes
            ));
        }
        if final_value < ok || final_value > ok + ambiguous {
            violations.push(format!(
                "{context}: the counter holds {final_value}: {ok} updates were reported applied and {ambiguous} ambiguous, so it must lie in [{ok}, {}]",
                ok + ambiguous
            ));
        }
        violations
    }

    /// Every applied write came from a known update, and the recorded
    /// token never decreases.
    pub fn writes_known_and_fenced(h: &History, context: &str) -> Vec<String> {
        let mut violations: Vec<String> = h
            .unknown_writes
            .iter()
            .map(|nonce| {
                format!("{context}: the store applied a write no update sent (nonce {nonce})")
            })
            .collect();
        for pair in h.applied_tokens.windows(2) {
            if pair[1] < pair[0] {
                violations.push(format!(
                    "{context}: fence: the resource accepted token {} after token {}",
                    pair[1], pair[0]
                ));
            }
        }
        violations
    }
}

/// `group_commit` (in a file of its own).
pub mod group_commit;

/// `create_once` (in a file of its own).
pub mod create_once;

/// `swap_once` (in a file of its own).
pub mod swap_once;

/// `first_use` (in a file of its own).
pub mod first_use;

/// `rwlock` (in a file of its own).
pub mod rwlock;

/// `semaphore` (in a file of its own).
pub mod semaphore;

/// `fenced_log`: what the store really holds at the end, read directly.
pub mod fenced_log {
    use std::collections::BTreeMap;

    use crate::history::fenced_log::{History, Outcome, StoredEntry};

    /// Each log's entries are numbered 1, 2, ... without a gap, and every
    /// entry's recorded sequence number is its key's.
    pub fn no_gaps(logs: &BTreeMap<u64, Vec<StoredEntry>>, context: &str) -> Vec<String> {
        let mut violations = Vec::new();
        for (log, entries) in logs {
            for (i, e) in entries.iter().enumerate() {
                let expected = i as u64 + 1;
                if e.key_seq != expected {
                    violations.push(format!(
                        "{context}: log {log}: gap: entry {} follows entry {}",
                        e.key_seq,
                        expected - 1
                    ));
                    break;
                }
                if e.seq != e.key_seq {
                    violations.push(format!(
                        "{context}: log {log}: entry {} records sequence number {}",
                        e.key_seq, e.seq
                    ));
                }
            }
        }
        violations
    }

    /// Tokens never decrease along a log.
    pub fn tokens_never_decrease(
        logs: &BTreeMap<u64, Vec<StoredEntry>>,
        context: &str,
    ) -> Vec<String> {
        let mut violations = Vec::new();
        for (log, entries) in logs {
            for pair in entries.windows(2) {
                if pair[1].token < pair[0].token {
                    violations.push(format!(
                        "{context}: log {log}: entry {} has token {} after entry {} with token {}",
                        pair[1].key_seq, pair[1].token, pair[0].key_seq, pair[0].token
                    ));
                }
            }
        }
        violations
    }

    /// Where each append appears: (log, sequence numbers), by append id.
    fn appearances(
        logs: &BTreeMap<u64, Vec<StoredEntry>>,
    ) -> BTreeMap<(u32, u64), Vec<(u64, u64)>> {
        let mut seen: BTreeMap<(u32, u64), Vec<(u64, u64)>> = BTreeMap::new();
        for (log, entries) in logs {
            for e in entries {
                seen.entry((e.client, e.op))
                    .or_default()
                    .push((*log, e.key_seq));
            }
        }
        seen
    }

    fn places(found: &[(u64, u64)]) -> String {
        found
            .iter()
            .map(|(log, seq)| format!("{log}/{seq}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every append reported `Ok` appears exactly once, where it was
    /// reported.
    pub fn ok_appended_exactly_once(
        h: &History,
        logs: &BTreeMap<u64, Vec<StoredEntry>>,
        context: &str,
    ) -> Vec<String> {
        let seen = appearances(logs);
        let mut violations = Vec::new();
        for a in h.appends.iter().filter(|a| a.outcome == Outcome::Ok) {
            let found = seen.get(&(a.client, a.op)).map_or(&[][..], Vec::as_slice);
            if found != [(a.log, a.seq)] {
                violations.push(format!(
                    "{context}: append {} of client {} (token {}) was reported at {}/{} but is at [{}]",
                    a.op,
                    a.client,
                    a.token,
                    a.log,
                    a.seq,
                    places(found)
                ));
            }
        }
        violations
    }

    /// No append appears twice, whatever it was told (ambiguous included).
    pub fn never_appended_twice(
        h: &History,
        logs: &BTreeMap<u64, Vec<StoredEntry>>,
        context: &str,
    ) -> Vec<String> {
        let seen = appearances(logs);
        h.appends
            .iter()
            .filter_map(|a| {
                let found = seen.get(&(a.client, a.op))?;
                (found.len() > 1).then(|| {
                    format!(
                        "{context}: duplicate append: append {} of client {} (token {}, reported {:?}) appears {} times: at {}",
                        a.op,
                        a.client,
                        a.token,
                        a.outcome,
                        found.len(),
                        places(found)
                    )
                })
            })
            .collect()
    }

    /// An append reported as not made (fenced out, contended, a definite
    /// error) does not appear, not even by a write that landed later.
    pub fn failed_never_appended(
        h: &History,
        logs: &BTreeMap<u64, Vec<StoredEntry>>,
        context: &str,
    ) -> Vec<String> {
        let seen = appearances(logs);
        h.appends
            .iter()
            .filter(|a| matches!(a.outcome, Outcome::FencedOut | Outcome::Failed))
            .filter_map(|a| {
                let found = seen.get(&(a.client, a.op))?;
                Some(format!(
                    "{context}: append {} of client {} (token {}) was reported {:?} ({}) but is in the log at {}",
                    a.op,
                    a.client,
                    a.token,
                    a.outcome,
                    a.error,
                    places(found)
                ))
            })
            .collect()
    }

    /// Every entry comes from an append of this run.
    pub fn entries_from_appends(
        h: &History,
        logs: &BTreeMap<u64, Vec<StoredEntry>>,
        context: &str,
    ) -> Vec<String> {
        let sent: std::collections::BTreeSet<(u32, u64)> =
            h.appends.iter().map(|a| (a.client, a.op)).collect();
        appearances(logs)
            .into_iter()
            .filter(|(id, _)| !sent.contains(id))
            .map(|((client, op), found)| {
                format!(
                    "{context}: the log holds an entry (client {client}, append {op}) at {} that no append sent",
                    places(&found)
                )
            })
            .collect()
    }
}

/// Each checker, fed a history that breaks its property, reports it (and
/// stays quiet on one that keeps it): the checkers can fail.
#[cfg(test)]
#[allow(clippy::field_reassign_with_default)] // histories built up step by step
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::{election, fenced_log, fenced_resource, lease};
    use crate::history::election::{History as ElectionHistory, NoticeAfterStop, WorkRec};
    use crate::history::fenced_log::{AppendRec, History as LogHistory, StoredEntry};
    use crate::history::fenced_resource::{History as CounterHistory, Outcome, UpdateRec};
    use crate::history::lease::{GuardRec, History as LeaseHistory, SimValue};

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn guard(client: usize, token: u64, at: u64, beliefs: &[(u64, u64)]) -> GuardRec {
        GuardRec {
            client,
            task: 0,
            token,
            acquired_at: s(at),
            beliefs: beliefs.iter().map(|&(a, b)| (s(a), s(b))).collect(),
        }
    }

    fn who(g: usize) -> String {
        format!("guard {g}")
    }

    #[test]
    fn lease_checkers_report_two_holders_and_equal_tokens() {
        let mut h = LeaseHistory::default();
        h.guards = vec![guard(0, 1, 0, &[(0, 10)]), guard(1, 2, 12, &[(12, 20)])];
        assert!(lease::mutual_exclusion(&h, &who, "t").is_empty());
        assert!(lease::token_order(&h, &who, "t").is_empty());
        h.guards.push(guard(2, 2, 15, &[(15, 18)]));
        assert_eq!(lease::mutual_exclusion(&h, &who, "t").len(), 1);
        assert_eq!(lease::token_order(&h, &who, "t").len(), 1);
    }

    #[test]
    fn lease_checkers_report_held_checks_tokens_and_fencing() {
        let mut h = LeaseHistory::default();
        h.guards = vec![guard(0, 1, 0, &[(0, 10)]), guard(1, 2, 12, &[(12, 20)])];
        h.held_checks = vec![(0, s(5)), (0, s(11))];
        assert_eq!(lease::held_checks_within_belief(&h, &who, "t").len(), 1);
        h.lock_writes = vec![
            (s(0), "a".into(), 1, false),
            (s(12), "b".into(), 2, false),
            (s(13), "a".into(), 1, false),
        ];
        assert_eq!(lease::lock_token_monotonic(&h, "t").len(), 1);
        let value = |client, token, checked_at: u64| SimValue {
            client,
            token,
            checked_at_ns: checked_at * 1_000_000_000,
        };
        h.fenced_writes = vec![(s(5), 1, value(0, 1, 4)), (s(14), 2, value(1, 2, 13))];
        assert!(lease::fencing(&h, "t").0.is_empty());
        // Token 1 accepted after token 2, from a lease check after token 2
        // was granted.
        h.fenced_writes.push((s(15), 1, value(0, 1, 13)));
        assert_eq!(lease::fencing(&h, "t").0.len(), 2);
    }

    fn work(client: usize, token: u64, start: u64, end: Option<u64>) -> WorkRec {
        WorkRec {
            client,
            token,
            start: s(start),
            end: end.map(s),
            ended_by: "dropped",
        }
    }

    #[test]
    fn election_checkers_report_overlapping_work_and_late_notices() {
        let mut h = ElectionHistory::default();
        h.works = vec![work(0, 1, 0, Some(10)), work(1, 2, 10, Some(20))];
        assert!(election::work_never_overlaps(&h, s(30), "t").is_empty());
        assert!(election::term_tokens_increase(&h, "t").is_empty());
        // Work still running at the end of the run counts until then.
        h.works.push(work(2, 3, 25, None));
        h.works.push(work(0, 3, 29, Some(30)));
        assert_eq!(election::work_never_overlaps(&h, s(40), "t").len(), 1);
        assert_eq!(election::term_tokens_increase(&h, "t").len(), 1);
        h.notices_after_stop.push(NoticeAfterStop {
            client: 0,
            token: 1,
            at: s(11),
            stopped_at: s(10),
        });
        assert_eq!(election::no_leader_notice_after_stop(&h, "t").len(), 1);
    }

    fn update(op: u64, outcome: Outcome, applied: u32) -> UpdateRec {
        UpdateRec {
            client: 0,
            op,
            token: 1,
            outcome,
            error: String::new(),
            applied,
        }
    }

    #[test]
    fn counter_checkers_report_double_missing_and_unexpected_applies() {
        let mut h = CounterHistory::default();
        h.updates = vec![
            update(1, Outcome::Ok, 1),
            update(2, Outcome::Ambiguous, 0),
            update(3, Outcome::Ambiguous, 1),
        ];
        h.applied_writes = 2;
        h.applied_tokens = vec![1, 1];
        assert!(fenced_resource::ok_applied_exactly_once(&h, "t").is_empty());
        assert!(fenced_resource::never_applied_twice(&h, "t").is_empty());
        assert!(fenced_resource::failed_never_applied(&h, "t").is_empty());
        assert!(fenced_resource::final_value_counts_updates(&h, 2, "t").is_empty());
        assert!(fenced_resource::writes_known_and_fenced(&h, "t").is_empty());
        h.updates = vec![
            update(1, Outcome::Ok, 2),
            update(2, Outcome::Ok, 0),
            update(3, Outcome::FencedOut, 1),
        ];
        h.applied_writes = 3;
        h.applied_tokens = vec![2, 1, 2];
        h.unknown_writes = vec!["n".into()];
        assert_eq!(fenced_resource::ok_applied_exactly_once(&h, "t").len(), 2);
        assert_eq!(fenced_resource::never_applied_twice(&h, "t").len(), 1);
        assert_eq!(fenced_resource::failed_never_applied(&h, "t").len(), 1);
        // 2 reported applied and none ambiguous: 3 is out of [2, 2]; and the
        // store applied 3 increments, not 4.
        assert_eq!(
            fenced_resource::final_value_counts_updates(&h, 4, "t").len(),
            2
        );
        assert_eq!(fenced_resource::writes_known_and_fenced(&h, "t").len(), 2);
    }

    fn entry(key_seq: u64, token: u64, op: u64) -> StoredEntry {
        StoredEntry {
            key_seq,
            seq: key_seq,
            token,
            client: 0,
            op,
        }
    }

    fn append(op: u64, outcome: Outcome, seq: u64) -> AppendRec {
        AppendRec {
            client: 0,
            op,
            token: 1,
            log: 0,
            outcome,
            error: String::new(),
            seq,
        }
    }

    #[test]
    fn log_checkers_report_gaps_regressions_duplicates_and_strays() {
        let mut h = LogHistory::default();
        h.appends = vec![
            append(1, Outcome::Ok, 1),
            append(2, Outcome::Ambiguous, 0),
            append(3, Outcome::FencedOut, 0),
        ];
        let good = BTreeMap::from([(0, vec![entry(1, 1, 1), entry(2, 2, 2)])]);
        assert!(fenced_log::no_gaps(&good, "t").is_empty());
        assert!(fenced_log::tokens_never_decrease(&good, "t").is_empty());
        assert!(fenced_log::ok_appended_exactly_once(&h, &good, "t").is_empty());
        assert!(fenced_log::never_appended_twice(&h, &good, "t").is_empty());
        assert!(fenced_log::failed_never_appended(&h, &good, "t").is_empty());
        assert!(fenced_log::entries_from_appends(&h, &good, "t").is_empty());
        let bad = BTreeMap::from([(
            0,
            vec![
                entry(1, 2, 1),
                entry(2, 1, 1),
                entry(3, 1, 3),
                entry(5, 1, 9),
            ],
        )]);
        assert_eq!(fenced_log::no_gaps(&bad, "t").len(), 1);
        assert_eq!(fenced_log::tokens_never_decrease(&bad, "t").len(), 1);
        assert_eq!(fenced_log::ok_appended_exactly_once(&h, &bad, "t").len(), 1);
        assert_eq!(fenced_log::never_appended_twice(&h, &bad, "t").len(), 1);
        assert_eq!(fenced_log::failed_never_appended(&h, &bad, "t").len(), 1);
        assert_eq!(fenced_log::entries_from_appends(&h, &bad, "t").len(), 1);
    }
}

/// `session`: the lease checkers run per lock (see `crate::report`); here
/// what is particular to locks held under a session.
pub mod session {
    use std::time::Duration;

    use crate::history::lease::History as LockHistory;
    use crate::history::session::History;
    use crate::secs;

    /// Validity rests on the heartbeat: a lock's holder never believes
    /// longer than the TTL (its client's, in true time) after the store
    /// applied the latest heartbeat write of the session term it holds the
    /// lock under (a lock is never rewritten while held: its validity is
    /// the session's).
    pub fn belief_rests_on_heartbeat(
        lock: usize,
        locks: &LockHistory,
        h: &History,
        ttls: &[Duration],
        context: &str,
    ) -> Vec<String> {
        // Records keep whole milliseconds.
        let slack = Duration::from_millis(1);
        let mut violations = Vec::new();
        for (g, guard) in locks.guards.iter().enumerate() {
            let Some(&term) = h.guard_terms.get(lock).and_then(|t| t.get(g)) else {
                violations.push(format!(
                    "{context}: lock {lock} guard {g} has no term recorded"
                ));
                continue;
            };
            let ttl = ttls.get(guard.client).copied().unwrap_or_default();
            for &(_, end) in &guard.beliefs {
                let latest = h
                    .heartbeat_writes
                    .iter()
                    .filter(|w| w.client == guard.client && w.term == term && w.at < end)
                    .map(|w| w.at)
                    .max();
                match latest {
                    Some(at) if end <= at + ttl + slack => {}
                    Some(at) => violations.push(format!(
                        "{context}: validity: client {} held lock {lock} (token {}, term {term}) until {}, more than the TTL ({}) after its session's latest heartbeat landed at {}",
                        guard.client,
                        guard.token,
                        secs(end),
                        secs(ttl),
                        secs(at)
                    )),
                    None => violations.push(format!(
                        "{context}: validity: client {} held lock {lock} (token {}, term {term}) until {} with no heartbeat of that term applied before",
                        guard.client,
                        guard.token,
                        secs(end)
                    )),
                }
            }
        }
        violations
    }

    /// Heartbeat writes that marked a term released although its holder
    /// never closed it: contenders ending an expired term.
    pub fn terms_ended_by_contenders(h: &History) -> usize {
        h.heartbeat_writes
            .iter()
            .filter(|w| w.released && !h.closed_terms.contains(&(w.client, w.term)))
            .count()
    }

    /// Takeovers of one lock (a token increase over a record not
    /// released): `(after a close, after an expiry)`, by whether the
    /// session term the replaced record named was closed or dropped by its
    /// holder (one write ends it) or crashed or lost (its heartbeat had to
    /// be waited out and the term ended by a contender).
    pub fn takeovers(lock: usize, locks: &LockHistory, h: &History) -> (usize, usize) {
        let terms = h.lock_terms.get(lock).map_or(&[][..], Vec::as_slice);
        let mut after_close = 0;
        let mut after_expiry = 0;
        for (i, pair) in locks.lock_writes.windows(2).enumerate() {
            let (before, after) = (&pair[0], &pair[1]);
            if after.2 <= before.2 || before.3 {
                continue;
            }
            let closed = terms.get(i).cloned().flatten().is_some_and(|(key, term)| {
                key.rsplit('-')
                    .next()
                    .and_then(|c| c.parse::<usize>().ok())
                    .is_some_and(|client| h.closed_terms.contains(&(client, term)))
            });
            if closed {
                after_close += 1;
            } else {
                after_expiry += 1;
            }
        }
        (after_close, after_expiry)
    }
}
