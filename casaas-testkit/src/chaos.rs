//! The torture run: worker processes that take a lease and write fenced
//! updates through the chaos proxy while the harness kills and freezes
//! them, and a checker that trusts nothing the workers believed.
//!
//! Every worker logs, one line per event with `CLOCK_MONOTONIC` nanoseconds
//! (one clock for every process on the machine): when it acquired, each
//! moment it checked the lease and until when it then believed it held it,
//! when it released, and every fenced write it started and what it was
//! told. The checker reads those logs and the objects on the server
//! directly (its own JSON parsing, not the fenced helpers) and counts:
//!
//! - `overlaps`: two acquisitions whose believed holding intervals overlap;
//! - `stale_writes_accepted`: log entries whose token is below an earlier
//!   entry's;
//! - `lost_updates`: increments reported applied that the counter lacks, and
//!   appends reported applied that are not in the log;
//! - `duplicate_updates`: increments counted more often than they were
//!   started, and appends that appear twice; plus gaps in the log.
//!
//! With sessions, each worker holds the lock under a session of its own (a
//! heartbeat at `SESSION_PREFIX/worker-N`), so a killed or frozen holder's
//! lock is taken over by ending its session's term; the checks are the same.
//!
//! With group commit, each worker writes its updates through `GroupResource`
//! and `GroupLog` from several tasks at once, so one write carries several
//! updates: a log entry of schema 2 holds several records (`values`), and
//! the checker reads every record of every entry, so that a record lost or
//! written twice inside a batch counts as one inside an entry of its own
//! would. `batched_entries` counts the entries of more than one record.
//!
//! With `--primitive semaphore` or `--primitive rwlock` the workers hold
//! parts of a [`Primitive`] instead (a semaphore's slots; a read-write
//! lock's shared and exclusive sides), logged as holdings of a *lane*
//! (`s0`, `s1`, … for slots, `r` and `w` for readers and the writer):
//! see [`check_primitive`] for what is counted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

/// Key of the lease.
pub const LOCK_KEY: &str = "chaos/lock";
/// Key of the fenced counter.
pub const COUNTER_KEY: &str = "chaos/counter";
/// Prefix of the fenced log.
pub const LOG_PREFIX: &str = "chaos/log";
/// Prefix of the workers' session heartbeats (`--sessions true`: each
/// worker holds the lock under a session of its own, `SESSION_PREFIX/worker-N`).
pub const SESSION_PREFIX: &str = "chaos/sessions";
/// Name of the semaphore (`--primitive semaphore`); its slots are leases
/// at `chaos/sem.slots/N`.
pub const SEMAPHORE_KEY: &str = "chaos/sem";
/// Lane of a read-write lock's writer.
pub const WRITER_LANE: &str = "w";
/// Lane of a read-write lock's readers.
pub const READER_LANE: &str = "r";

/// Prefix of the fenced log that holders of semaphore slot `slot` append
/// to with that slot's token.
pub fn slot_log_prefix(slot: u32) -> String {
    format!("chaos/slots/{slot}/log")
}

/// Lane of semaphore slot `slot`.
pub fn slot_lane(slot: u32) -> String {
    format!("s{slot}")
}

/// The kind of the appends to slot `slot`'s log, in write events.
pub fn slot_append_kind(slot: u32) -> String {
    format!("app{slot}")
}

/// What the workers of a run hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    /// One lease (the lock), as every run did before primitives.
    Lease,
    /// A semaphore of this many slots.
    Semaphore {
        /// How many slots.
        slots: u32,
    },
    /// A read-write lock: readers share, the writer writes fenced.
    RwLock,
}

/// Nanoseconds on `CLOCK_MONOTONIC`, shared by every process here.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// One line of a worker's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Acquired the lease with `token` at `at`.
    Acquired {
        /// Worker id.
        worker: u32,
        /// Fencing token.
        token: u64,
        /// When (monotonic ns).
        at: u64,
    },
    /// A lease check passed: the worker believed it held `token` until `until`.
    Belief {
        /// Worker id.
        worker: u32,
        /// Fencing token.
        token: u64,
        /// End of the belief (monotonic ns).
        until: u64,
    },
    /// Started releasing `token` at `at` (no belief after this).
    Released {
        /// Worker id.
        worker: u32,
        /// Fencing token.
        token: u64,
        /// When (monotonic ns).
        at: u64,
    },
    /// A fenced write was started (`kind` = `inc` or `app`).
    WriteStarted {
        /// Worker id.
        worker: u32,
        /// `inc` or `app`.
        kind: String,
        /// Operation id, unique per worker.
        op: u64,
    },
    /// What the worker was told about a write.
    WriteResult {
        /// Worker id.
        worker: u32,
        /// `inc` or `app`.
        kind: String,
        /// Operation id.
        op: u64,
        /// `ok`, `amb` (may have been applied) or `no` (not applied).
        result: String,
    },
    /// Took a part of a primitive (lane `s0`… a semaphore slot, `r` a
    /// read-write lock's shared side, `w` its writer) with `token` at `at`.
    Took {
        /// Worker id.
        worker: u32,
        /// The lane.
        lane: String,
        /// The token of the lane's lease.
        token: u64,
        /// When (monotonic ns).
        at: u64,
    },
    /// A check of a lane's holding passed: believed held until `until`.
    Holds {
        /// Worker id.
        worker: u32,
        /// The lane.
        lane: String,
        /// The token.
        token: u64,
        /// End of the belief (monotonic ns).
        until: u64,
    },
    /// Started giving a lane's holding back at `at`.
    Gave {
        /// Worker id.
        worker: u32,
        /// The lane.
        lane: String,
        /// The token.
        token: u64,
        /// When (monotonic ns).
        at: u64,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Acquired { worker, token, at } => write!(f, "acq {worker} {token} {at}"),
            Event::Belief {
                worker,
                token,
                until,
            } => write!(f, "belief {worker} {token} {until}"),
            Event::Released { worker, token, at } => write!(f, "rel {worker} {token} {at}"),
            Event::WriteStarted { worker, kind, op } => write!(f, "start {worker} {kind} {op}"),
            Event::WriteResult {
                worker,
                kind,
                op,
                result,
            } => write!(f, "result {worker} {kind} {op} {result}"),
            Event::Took {
                worker,
                lane,
                token,
                at,
            } => write!(f, "took {worker} {lane} {token} {at}"),
            Event::Holds {
                worker,
                lane,
                token,
                until,
            } => write!(f, "holds {worker} {lane} {token} {until}"),
            Event::Gave {
                worker,
                lane,
                token,
                at,
            } => write!(f, "gave {worker} {lane} {token} {at}"),
        }
    }
}

impl Event {
    /// Parses a line written by `Display`; `None` for a torn last line.
    pub fn parse(line: &str) -> Option<Event> {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| parts.get(i).and_then(|p| p.parse::<u64>().ok());
        let worker = parts.get(1)?.parse::<u32>().ok()?;
        Some(match *parts.first()? {
            "acq" => Event::Acquired {
                worker,
                token: n(2)?,
                at: n(3)?,
            },
            "belief" => Event::Belief {
                worker,
                token: n(2)?,
                until: n(3)?,
            },
            "rel" => Event::Released {
                worker,
                token: n(2)?,
                at: n(3)?,
            },
            "start" => Event::WriteStarted {
                worker,
                kind: parts.get(2)?.to_string(),
                op: n(3)?,
            },
            "result" => Event::WriteResult {
                worker,
                kind: parts.get(2)?.to_string(),
                op: n(3)?,
                result: parts.get(4)?.to_string(),
            },
            "took" => Event::Took {
                worker,
                lane: parts.get(2)?.to_string(),
                token: n(3)?,
                at: n(4)?,
            },
            "holds" => Event::Holds {
                worker,
                lane: parts.get(2)?.to_string(),
                token: n(3)?,
                until: n(4)?,
            },
            "gave" => Event::Gave {
                worker,
                lane: parts.get(2)?.to_string(),
                token: n(3)?,
                at: n(4)?,
            },
            _ => return None,
        })
    }
}

/// What the checker found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Acquisitions seen in the logs.
    pub acquisitions: usize,
    /// Acquisitions by another worker than the one before (in time): the
    /// moments where mutual exclusion and fencing are at stake.
    pub handovers: usize,
    /// Fenced writes the workers were told were applied.
    pub writes_applied: usize,
    /// Pairs of overlapping belief intervals.
    pub overlaps: usize,
    /// Log entries with a token below an earlier entry's.
    pub stale_writes_accepted: usize,
    /// Updates reported applied but missing.
    pub lost_updates: usize,
    /// Updates applied twice (and log gaps).
    pub duplicate_updates: usize,
    /// Log entries holding more than one record (written by group commit).
    pub batched_entries: usize,
    /// Semaphore: moments at which more holders believed they held a slot
    /// than the semaphore has slots.
    pub over_capacity: usize,
    /// Acquisitions of a fencing lane (a semaphore slot, a read-write
    /// lock's writer) whose token is not above the one before in that lane,
    /// or that another acquisition of the lane also got.
    pub token_regressions: usize,
    /// Fenced log records whose token no acquisition of that lane by their
    /// writer got: a write accepted from no holder.
    pub unheld_writes: usize,
    /// Semaphore: the most holders believing at once; read-write lock: the
    /// most readers believing at once.
    pub most_at_once: usize,
    /// Read-write lock: acquisitions by writers.
    pub writer_acquisitions: usize,
    /// Human-readable details of each violation.
    pub details: Vec<String>,
}

/// The least work a run must do for "no violation" to mean anything. A
/// run on a loaded machine can spend its minute waiting; below these counts
/// its verdict is inconclusive, never a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinimumWork {
    /// Acquisitions.
    pub acquisitions: usize,
    /// Handovers between workers.
    pub handovers: usize,
    /// Fenced writes reported applied.
    pub writes_applied: usize,
    /// Log entries of more than one record (0 unless the run used group
    /// commit: see [`MinimumWork::group_commit`]).
    pub batched_entries: usize,
    /// Holders believing at once ([`Verdict::most_at_once`]; 0 unless the
    /// run held a semaphore or a read-write lock).
    pub most_at_once: usize,
    /// Writer acquisitions of a read-write lock.
    pub writer_acquisitions: usize,
}

impl Default for MinimumWork {
    /// 20 acquisitions, 5 handovers, 20 applied writes: a one-minute run on
    /// an idle machine does several times that.
    fn default() -> Self {
        MinimumWork {
            acquisitions: 20,
            handovers: 5,
            writes_applied: 20,
            batched_entries: 0,
            most_at_once: 0,
            writer_acquisitions: 0,
        }
    }
}

impl MinimumWork {
    /// The default, and also 5 log entries of more than one record: a group
    /// commit run whose batches never held two updates tested nothing of
    /// batching.
    pub fn group_commit() -> Self {
        MinimumWork {
            batched_entries: 5,
            ..MinimumWork::default()
        }
    }

    /// The least work of a run over `primitive`: the default, and for a
    /// semaphore two holders at once (else capacity was never at stake),
    /// for a read-write lock two readers at once and 5 writer acquisitions.
    pub fn of(primitive: Primitive) -> Self {
        match primitive {
            Primitive::Lease => MinimumWork::default(),
            Primitive::Semaphore { slots } => MinimumWork {
                most_at_once: 2.min(slots as usize),
                ..MinimumWork::default()
            },
            Primitive::RwLock => MinimumWork {
                most_at_once: 2,
                writer_acquisitions: 5,
                ..MinimumWork::default()
            },
        }
    }
}

impl MinimumWork {
    /// `None` if `verdict` did at least this much work, else what it lacked,
    /// for people ("inconclusive: 5 acquisitions (at least 20 needed) …").
    pub fn shortfall(&self, verdict: &Verdict) -> Option<String> {
        let lacking: Vec<String> = [
            ("acquisitions", verdict.acquisitions, self.acquisitions),
            ("handovers", verdict.handovers, self.handovers),
            (
                "applied writes",
                verdict.writes_applied,
                self.writes_applied,
            ),
            (
                "log entries of several records",
                verdict.batched_entries,
                self.batched_entries,
            ),
            ("holders at once", verdict.most_at_once, self.most_at_once),
            (
                "writer acquisitions",
                verdict.writer_acquisitions,
                self.writer_acquisitions,
            ),
        ]
        .iter()
        .filter(|(_, done, needed)| done < needed)
        .map(|(what, done, needed)| format!("{done} {what} (at least {needed} needed)"))
        .collect();
        (!lacking.is_empty()).then(|| {
            format!(
                "inconclusive: the run did too little work to count as a pass: {}; run it longer or on a less loaded machine",
                lacking.join(", ")
            )
        })
    }
}

impl Verdict {
    /// Any violation at all?
    pub fn violations(&self) -> usize {
        self.overlaps
            + self.stale_writes_accepted
            + self.lost_updates
            + self.duplicate_updates
            + self.over_capacity
            + self.token_regressions
            + self.unheld_writes
    }
}

/// The raw objects the checker reads from the server.
#[derive(Debug, Default)]
pub struct Observed {
    /// Body of the counter object, if any.
    pub counter: Option<Bytes>,
    /// Bodies of the log entries, by key.
    pub log_entries: BTreeMap<String, Bytes>,
    /// Semaphore: the bodies of each slot's log entries, by slot and key.
    pub slot_logs: BTreeMap<u32, BTreeMap<String, Bytes>>,
}

/// Checks the workers' events against what the server holds.
pub fn check(events: &[Event], observed: &Observed) -> Verdict {
    let mut verdict = Verdict::default();
    count_work(events, &mut verdict);
    check_beliefs(events, &mut verdict);
    check_counter(events, observed, &mut verdict);
    check_log(events, observed, &mut verdict);
    verdict
}

/// Handovers (acquisitions in time order, by another worker than the one
/// before) and fenced writes reported applied.
fn count_work(events: &[Event], verdict: &mut Verdict) {
    let mut acquired: Vec<(u64, u32)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Acquired { worker, at, .. } => Some((*at, *worker)),
            _ => None,
        })
        .collect();
    acquired.sort_unstable();
    verdict.handovers = acquired.windows(2).filter(|w| w[0].1 != w[1].1).count();
    verdict.writes_applied = events
        .iter()
        .filter(|e| matches!(e, Event::WriteResult { result, .. } if result == "ok"))
        .count();
}

/// No two acquisitions' believed holding intervals overlap.
fn check_beliefs(events: &[Event], verdict: &mut Verdict) {
    // (worker, token) -> (start, end)
    let mut intervals: HashMap<(u32, u64), (u64, u64)> = HashMap::new();
    let mut released: HashMap<(u32, u64), u64> = HashMap::new();
    for event in events {
        match event {
            Event::Acquired { worker, token, at } => {
                verdict.acquisitions += 1;
                intervals.insert((*worker, *token), (*at, *at));
            }
            Event::Belief {
                worker,
                token,
                until,
            } => {
                if let Some(interval) = intervals.get_mut(&(*worker, *token)) {
                    interval.1 = interval.1.max(*until);
                }
            }
            Event::Released { worker, token, at } => {
                released.insert((*worker, *token), *at);
            }
            _ => {}
        }
    }
    let mut list: Vec<((u32, u64), (u64, u64))> = intervals
        .into_iter()
        .map(|(id, (start, end))| {
            let end = released.get(&id).map_or(end, |r| end.min(*r));
            (id, (start, end.max(start)))
        })
        .collect();
    list.sort_by_key(|(_, (start, _))| *start);
    for (i, (a, (_, a_end))) in list.iter().enumerate() {
        for (b, (b_start, _)) in list.iter().skip(i + 1) {
            if *b_start >= *a_end {
                break;
            }
            verdict.overlaps += 1;
            verdict.details.push(format!(
                "overlap: worker {} token {} believed it held until {a_end}, worker {} token {} acquired at {b_start}",
                a.0, a.1, b.0, b.1
            ));
        }
    }
}

/// A write: (worker, op).
type WriteId = (u32, u64);

/// The writes of one kind that were started, and what each was told.
fn results(events: &[Event], kind: &str) -> (HashSet<WriteId>, HashMap<WriteId, String>) {
    let mut started = HashSet::new();
    let mut told = HashMap::new();
    for event in events {
        match event {
            Event::WriteStarted {
                worker,
                kind: k,
                op,
            } if k == kind => {
                started.insert((*worker, *op));
            }
            Event::WriteResult {
                worker,
                kind: k,
                op,
                result,
            } if k == kind => {
                told.insert((*worker, *op), result.clone());
            }
            _ => {}
        }
    }
    (started, told)
}

/// The counter holds at least every increment reported applied and at
/// most those plus the ones whose outcome the worker never learned.
fn check_counter(events: &[Event], observed: &Observed, verdict: &mut Verdict) {
    let (started, told) = results(events, "inc");
    let ok = told.values().filter(|r| *r == "ok").count() as u64;
    let unknown = started
        .iter()
        .filter(|id| told.get(*id).is_none_or(|r| r == "amb"))
        .count() as u64;
    let value = observed
        .counter
        .as_ref()
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| v.get("value").and_then(Value::as_u64))
        .unwrap_or(0);
    if value < ok {
        verdict.lost_updates += (ok - value) as usize;
        verdict.details.push(format!(
            "counter is {value}, but {ok} increments were reported applied"
        ));
    }
    if value > ok + unknown {
        verdict.duplicate_updates += (value - ok - unknown) as usize;
        verdict.details.push(format!(
            "counter is {value}, above the {ok} increments reported applied plus {unknown} of unknown outcome"
        ));
    }
}

/// The log has no gaps and no duplicates, holds every append reported
/// applied, and its tokens never decrease. An entry of schema 2 (group
/// commit) holds several records, each checked as an append of its own.
fn check_log(events: &[Event], observed: &Observed, verdict: &mut Verdict) {
    check_log_at(events, "app", &observed.log_entries, verdict);
}

/// A log's record: its entry's token, and the record's writer and op.
type LogRecord = (u64, u32, u64);

/// [`check_log`] over the entries of one log, whose appends are logged as
/// writes of `kind`: the records found, with their entries' tokens.
fn check_log_at(
    events: &[Event],
    kind: &str,
    entries: &BTreeMap<String, Bytes>,
    verdict: &mut Verdict,
) -> Vec<LogRecord> {
    let (_, told) = results(events, kind);
    let mut found = Vec::new();
    let mut by_seq: BTreeMap<u64, (u64, Vec<(u32, u64)>)> = BTreeMap::new();
    for (key, body) in entries {
        let Some(value) = serde_json::from_slice::<Value>(body).ok() else {
            verdict.details.push(format!("unreadable log entry {key}"));
            verdict.duplicate_updates += 1;
            continue;
        };
        let field = |name: &str| value.get(name).and_then(Value::as_u64);
        let record = |r: &Value| {
            let n = |name: &str| r.get(name).and_then(Value::as_u64);
            match (n("w"), n("op")) {
                (Some(w), Some(op)) => Some((u32::try_from(w).unwrap_or(u32::MAX), op)),
                _ => None,
            }
        };
        // Schema 1: one record in `value`; schema 2: records in `values`.
        let records: Option<Vec<(u32, u64)>> = match value.get("values") {
            Some(Value::Array(values)) if !values.is_empty() => values.iter().map(record).collect(),
            Some(_) => None,
            None => value.get("value").and_then(record).map(|r| vec![r]),
        };
        match (field("seq"), field("token"), records) {
            (Some(seq), Some(token), Some(records)) => {
                if records.len() > 1 {
                    verdict.batched_entries += 1;
                }
                by_seq.insert(seq, (token, records));
            }
            _ => {
                verdict
                    .details
                    .push(format!("log entry {key} lacks fields"));
                verdict.duplicate_updates += 1;
            }
        }
    }
    let mut seen: HashSet<(u32, u64)> = HashSet::new();
    let mut max_token = 0;
    let mut expected_seq = by_seq.keys().next().copied().unwrap_or(1);
    for (seq, (token, records)) in &by_seq {
        if *seq != expected_seq {
            verdict.duplicate_updates += 1;
            verdict
                .details
                .push(format!("log gap: entry {seq} follows {}", expected_seq - 1));
        }
        expected_seq = seq + 1;
        if *token < max_token {
            verdict.stale_writes_accepted += 1;
            verdict.details.push(format!(
                "log entry {seq} has token {token}, below the earlier {max_token}"
            ));
        }
        max_token = max_token.max(*token);
        for (offset, (worker, op)) in records.iter().enumerate() {
            found.push((*token, *worker, *op));
            if !seen.insert((*worker, *op)) {
                verdict.duplicate_updates += 1;
                verdict.details.push(format!(
                    "append {op} of worker {worker} appears twice (again at {seq}, record {offset})"
                ));
            }
        }
    }
    for ((worker, op), result) in &told {
        if result == "ok" && !seen.contains(&(*worker, *op)) {
            verdict.lost_updates += 1;
            verdict.details.push(format!(
                "append {op} of worker {worker} was reported applied but is not in the log"
            ));
        }
    }
    found
}

/// One holding of a primitive's lane, and when it was believed: from its
/// acquisition to its last passing check (or its release, if earlier).
#[derive(Debug, Clone)]
struct Holding {
    worker: u32,
    lane: String,
    token: u64,
    start: u64,
    end: u64,
}

impl Holding {
    /// Whether any check of the holding passed before it ended.
    fn believed(&self) -> bool {
        self.end > self.start
    }

    /// Whether the two were believed at one moment (`[start, end)`).
    fn overlaps(&self, other: &Holding) -> bool {
        self.believed() && other.believed() && self.start < other.end && other.start < self.end
    }
}

/// Every holding in the events, in order of acquisition. A worker holds
/// one thing at a time, so its checks and release belong to its latest
/// acquisition (a reader slot's token repeats: the writer deletes released
/// slots and their owner takes them again at token 1).
fn holdings(events: &[Event]) -> Vec<Holding> {
    let mut latest: HashMap<u32, usize> = HashMap::new();
    let mut list: Vec<Holding> = Vec::new();
    let mut released: Vec<Option<u64>> = Vec::new();
    let same = |h: &Holding, lane: &str, token: u64| h.lane == lane && h.token == token;
    for event in events {
        match event {
            Event::Took {
                worker,
                lane,
                token,
                at,
            } => {
                latest.insert(*worker, list.len());
                list.push(Holding {
                    worker: *worker,
                    lane: lane.clone(),
                    token: *token,
                    start: *at,
                    end: *at,
                });
                released.push(None);
            }
            Event::Holds {
                worker,
                lane,
                token,
                until,
            } => {
                if let Some(&i) = latest.get(worker)
                    && same(&list[i], lane, *token)
                {
                    list[i].end = list[i].end.max(*until);
                }
            }
            Event::Gave {
                worker,
                lane,
                token,
                at,
            } => {
                if let Some(&i) = latest.get(worker)
                    && same(&list[i], lane, *token)
                {
                    released[i] = Some(released[i].map_or(*at, |r: u64| r.min(*at)));
                }
            }
            _ => {}
        }
    }
    for (holding, released) in list.iter_mut().zip(released) {
        if let Some(at) = released {
            holding.end = holding.end.min(at).max(holding.start);
        }
    }
    list.sort_by_key(|h| h.start);
    list
}

/// The most holdings believed at one moment, and each moment (with the
/// count) at which more than `limit` were.
fn most_at_once<'a>(
    holdings: impl Iterator<Item = &'a Holding>,
    limit: usize,
) -> (usize, Vec<(u64, usize)>) {
    let mut edges: Vec<(u64, i8)> = holdings
        .filter(|h| h.believed())
        .flat_map(|h| [(h.start, 1), (h.end, -1)])
        .collect();
    // An end sorts before a start at the same moment: `[start, end)`.
    edges.sort_unstable();
    let (mut now, mut most, mut over) = (0usize, 0usize, Vec::new());
    for (at, delta) in edges {
        if delta > 0 {
            now += 1;
            most = most.max(now);
            if now > limit {
                over.push((at, now));
            }
        } else {
            now = now.saturating_sub(1);
        }
    }
    (most, over)
}

/// Acquisitions, handovers (per lane, to another worker than the one
/// before) and applied writes.
fn count_lane_work(holdings: &[Holding], events: &[Event], verdict: &mut Verdict) {
    verdict.acquisitions = holdings.len();
    let mut last: HashMap<&str, u32> = HashMap::new();
    for h in holdings {
        if last
            .insert(h.lane.as_str(), h.worker)
            .is_some_and(|w| w != h.worker)
        {
            verdict.handovers += 1;
        }
    }
    verdict.writes_applied = events
        .iter()
        .filter(|e| matches!(e, Event::WriteResult { result, .. } if result == "ok"))
        .count();
}

/// In a fencing lane, no token is got twice and the tokens of the believed
/// holdings rise strictly in the order they began.
fn check_lane_tokens(holdings: &[Holding], lane: &str, verdict: &mut Verdict) {
    let mut taken: HashMap<u64, u32> = HashMap::new();
    for h in holdings.iter().filter(|h| h.lane == lane) {
        if let Some(other) = taken.insert(h.token, h.worker) {
            verdict.token_regressions += 1;
            verdict.details.push(format!(
                "lane {lane}: token {} was got by worker {other} and again by worker {}",
                h.token, h.worker
            ));
        }
    }
    let believed: Vec<&Holding> = holdings
        .iter()
        .filter(|h| h.lane == lane && h.believed())
        .collect();
    for pair in believed.windows(2) {
        if pair[1].token <= pair[0].token {
            verdict.token_regressions += 1;
            verdict.details.push(format!(
                "lane {lane}: worker {} held token {} from {}, after worker {} held token {} from {}",
                pair[1].worker, pair[1].token, pair[1].start, pair[0].worker, pair[0].token, pair[0].start
            ));
        }
    }
}

/// Every record of a fenced log carries a token that its writer got in
/// `lane`: a write accepted from no holder of that token is counted.
fn check_writers_held(
    holdings: &[Holding],
    lane: &str,
    records: &[LogRecord],
    verdict: &mut Verdict,
) {
    let held: HashSet<(u32, u64)> = holdings
        .iter()
        .filter(|h| h.lane == lane)
        .map(|h| (h.worker, h.token))
        .collect();
    for (token, worker, op) in records {
        if !held.contains(&(*worker, *token)) {
            verdict.unheld_writes += 1;
            verdict.details.push(format!(
                "lane {lane}: append {op} of worker {worker} was accepted with token {token}, which that worker never got"
            ));
        }
    }
}

/// Checks a run over `primitive` ([`check`] for a lease):
///
/// - semaphore: `over_capacity` counts the moments more holders believed
///   they held a slot than there are slots, across slots; `overlaps`, two
///   believed holdings of one slot at once; `token_regressions`, a slot's
///   token got twice or not rising in the order its holdings began; each
///   slot's fenced log is checked as the lock's is (gaps, duplicates,
///   lost appends, falling tokens) and `unheld_writes` counts its records
///   whose token their writer never got for that slot;
/// - read-write lock: `overlaps` counts the pairs of a believed writer
///   holding with any other believed holding, reader or writer;
///   `token_regressions` the writer's tokens as a slot's above; the fenced
///   counter and log, written by writers only, are checked as the lock's,
///   and `unheld_writes` counts log records whose token their writer never
///   got as writer.
pub fn check_primitive(events: &[Event], observed: &Observed, primitive: Primitive) -> Verdict {
    let slots = match primitive {
        Primitive::Lease => return check(events, observed),
        Primitive::Semaphore { slots } => slots,
        Primitive::RwLock => return check_rwlock(events, observed),
    };
    let mut verdict = Verdict::default();
    let holdings = holdings(events);
    count_lane_work(&holdings, events, &mut verdict);
    let lanes: Vec<String> = (0..slots).map(slot_lane).collect();
    for h in holdings.iter().filter(|h| !lanes.contains(&h.lane)) {
        verdict.over_capacity += 1;
        verdict.details.push(format!(
            "worker {} held lane {}, which is no slot of the semaphore's {slots}",
            h.worker, h.lane
        ));
    }
    let (most, over) = most_at_once(holdings.iter(), slots as usize);
    verdict.most_at_once = most;
    for (at, n) in over {
        verdict.over_capacity += 1;
        verdict.details.push(format!(
            "{n} holders believed they held a slot at {at}; the semaphore has {slots}"
        ));
    }
    for (slot, lane) in (0..slots).zip(&lanes) {
        let in_lane: Vec<&Holding> = holdings.iter().filter(|h| &h.lane == lane).collect();
        for (i, a) in in_lane.iter().enumerate() {
            for b in &in_lane[i + 1..] {
                if a.overlaps(b) {
                    verdict.overlaps += 1;
                    verdict.details.push(format!(
                        "slot {slot}: worker {} token {} and worker {} token {} believed at once",
                        a.worker, a.token, b.worker, b.token
                    ));
                }
            }
        }
        check_lane_tokens(&holdings, lane, &mut verdict);
        let empty = BTreeMap::new();
        let entries = observed.slot_logs.get(&slot).unwrap_or(&empty);
        let records = check_log_at(events, &slot_append_kind(slot), entries, &mut verdict);
        check_writers_held(&holdings, lane, &records, &mut verdict);
    }
    verdict
}

/// [`check_primitive`] for a read-write lock.
fn check_rwlock(events: &[Event], observed: &Observed) -> Verdict {
    let mut verdict = Verdict::default();
    let holdings = holdings(events);
    count_lane_work(&holdings, events, &mut verdict);
    verdict.writer_acquisitions = holdings.iter().filter(|h| h.lane == WRITER_LANE).count();
    verdict.most_at_once = most_at_once(
        holdings.iter().filter(|h| h.lane == READER_LANE),
        usize::MAX,
    )
    .0;
    for w in holdings.iter().filter(|h| h.lane == WRITER_LANE) {
        for other in &holdings {
            let counted_once = other.lane != WRITER_LANE
                || (other.start, other.worker, other.token) > (w.start, w.worker, w.token);
            if counted_once && w.overlaps(other) {
                verdict.overlaps += 1;
                verdict.details.push(format!(
                    "writer {} token {} believed from {} to {} while {} {} token {} believed from {} to {}",
                    w.worker,
                    w.token,
                    w.start,
                    w.end,
                    if other.lane == WRITER_LANE { "writer" } else { "reader" },
                    other.worker,
                    other.token,
                    other.start,
                    other.end
                ));
            }
        }
    }
    check_lane_tokens(&holdings, WRITER_LANE, &mut verdict);
    check_counter(events, observed, &mut verdict);
    let records = check_log_at(events, "app", &observed.log_entries, &mut verdict);
    check_writers_held(&holdings, WRITER_LANE, &records, &mut verdict);
    verdict
}

/// Parses every line of every log, ignoring torn lines.
pub fn parse_logs<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vec<Event> {
    texts
        .into_iter()
        .flat_map(str::lines)
        .filter_map(Event::parse)
        .collect()
}

/// A duration in whole nanoseconds.
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` acquisitions, alternating between two workers, each followed by
    /// one applied increment.
    fn busy_run(n: u64) -> Vec<Event> {
        (0..n)
            .flat_map(|i| {
                let worker = (i % 2) as u32;
                let mut events = vec![Event::Acquired {
                    worker,
                    token: i + 1,
                    at: i * 10,
                }];
                events.extend(result(worker, "inc", i, "ok"));
                events.push(Event::Released {
                    worker,
                    token: i + 1,
                    at: i * 10 + 5,
                });
                events
            })
            .collect()
    }

    #[test]
    fn a_run_that_did_too_little_is_inconclusive() {
        let minimum = MinimumWork::default();
        let observed = |n: u64| Observed {
            counter: Some(Bytes::from(
                serde_json::json!({"token": n, "value": {"count": n}}).to_string(),
            )),
            ..Observed::default()
        };
        let small = check(&busy_run(5), &observed(5));
        assert_eq!((small.acquisitions, small.handovers), (5, 4));
        assert_eq!(small.writes_applied, 5);
        let why = minimum.shortfall(&small).unwrap();
        assert!(why.starts_with("inconclusive"), "{why}");
        assert!(why.contains("5 acquisitions (at least 20 needed)"), "{why}");
        let big = check(&busy_run(40), &observed(40));
        assert_eq!(minimum.shortfall(&big), None, "{big:?}");
    }

    fn entry(seq: u64, token: u64, w: u32, op: u64) -> (String, Bytes) {
        (
            format!("{LOG_PREFIX}/{seq:020}"),
            Bytes::from(
                serde_json::json!({"seq": seq, "token": token, "value": {"w": w, "op": op}})
                    .to_string(),
            ),
        )
    }

    /// A group commit's entry: records `(w, op)` in order.
    fn batch(seq: u64, token: u64, records: &[(u32, u64)]) -> (String, Bytes) {
        let values: Vec<_> = records
            .iter()
            .map(|(w, op)| serde_json::json!({"w": w, "op": op}))
            .collect();
        (
            format!("{LOG_PREFIX}/{seq:020}"),
            Bytes::from(
                serde_json::json!({"schema": 2, "seq": seq, "token": token, "values": values})
                    .to_string(),
            ),
        )
    }

    fn result(worker: u32, kind: &str, op: u64, result: &str) -> [Event; 2] {
        [
            Event::WriteStarted {
                worker,
                kind: kind.into(),
                op,
            },
            Event::WriteResult {
                worker,
                kind: kind.into(),
                op,
                result: result.into(),
            },
        ]
    }

    #[test]
    fn events_round_trip_through_their_lines() {
        let events = [
            Event::Acquired {
                worker: 1,
                token: 2,
                at: 3,
            },
            Event::Belief {
                worker: 1,
                token: 2,
                until: 9,
            },
            Event::Released {
                worker: 1,
                token: 2,
                at: 8,
            },
        ];
        for e in events.iter().chain(result(4, "inc", 5, "amb").iter()) {
            assert_eq!(Event::parse(&e.to_string()).as_ref(), Some(e));
        }
        assert_eq!(Event::parse("acq 1 2"), None);
    }

    #[test]
    fn overlapping_beliefs_are_found_and_a_release_ends_one() {
        let mut events = vec![
            Event::Acquired {
                worker: 1,
                token: 1,
                at: 0,
            },
            Event::Belief {
                worker: 1,
                token: 1,
                until: 100,
            },
            Event::Acquired {
                worker: 2,
                token: 2,
                at: 50,
            },
        ];
        assert_eq!(check(&events, &Observed::default()).overlaps, 1);
        events.push(Event::Released {
            worker: 1,
            token: 1,
            at: 40,
        });
        assert_eq!(check(&events, &Observed::default()).overlaps, 0);
    }

    #[test]
    fn the_counter_bounds_are_checked_both_ways() {
        let mut events: Vec<Event> = Vec::new();
        events.extend(result(1, "inc", 1, "ok"));
        events.extend(result(1, "inc", 2, "amb"));
        let counter = |v: u64| Observed {
            counter: Some(Bytes::from(serde_json::json!({"value": v}).to_string())),
            ..Default::default()
        };
        assert_eq!(check(&events, &counter(0)).lost_updates, 1);
        assert_eq!(check(&events, &counter(1)).violations(), 0);
        assert_eq!(check(&events, &counter(2)).violations(), 0);
        assert_eq!(check(&events, &counter(3)).duplicate_updates, 1);
    }

    #[test]
    fn log_gaps_duplicates_stale_tokens_and_lost_appends_are_found() {
        let mut events: Vec<Event> = Vec::new();
        events.extend(result(1, "app", 1, "ok"));
        events.extend(result(1, "app", 2, "ok"));
        let log = |entries: Vec<(String, Bytes)>| Observed {
            log_entries: entries.into_iter().collect(),
            ..Default::default()
        };
        let good = log(vec![entry(1, 1, 1, 1), entry(2, 1, 1, 2)]);
        assert_eq!(check(&events, &good).violations(), 0);
        let lost = log(vec![entry(1, 1, 1, 1)]);
        assert_eq!(check(&events, &lost).lost_updates, 1);
        let twice = log(vec![
            entry(1, 1, 1, 1),
            entry(2, 1, 1, 1),
            entry(3, 1, 1, 2),
        ]);
        assert_eq!(check(&events, &twice).duplicate_updates, 1);
        let stale = log(vec![entry(1, 2, 1, 1), entry(2, 1, 1, 2)]);
        assert_eq!(check(&events, &stale).stale_writes_accepted, 1);
        let gap = log(vec![entry(1, 1, 1, 1), entry(3, 1, 1, 2)]);
        assert_eq!(check(&events, &gap).duplicate_updates, 1);
    }

    #[test]
    fn records_inside_batch_entries_are_each_checked() {
        let mut events: Vec<Event> = Vec::new();
        for op in 1..=4 {
            events.extend(result(1, "app", op, "ok"));
        }
        let log = |entries: Vec<(String, Bytes)>| Observed {
            log_entries: entries.into_iter().collect(),
            ..Default::default()
        };
        let good = log(vec![
            entry(1, 1, 1, 1),
            batch(2, 1, &[(1, 2), (1, 3)]),
            batch(3, 2, &[(1, 4)]),
        ]);
        let verdict = check(&events, &good);
        assert_eq!(verdict.violations(), 0, "{:?}", verdict.details);
        assert_eq!(verdict.batched_entries, 1);
        let lost = log(vec![entry(1, 1, 1, 1), batch(2, 1, &[(1, 2), (1, 4)])]);
        assert_eq!(check(&events, &lost).lost_updates, 1, "record 3 is missing");
        let twice = log(vec![
            batch(1, 1, &[(1, 1), (1, 2)]),
            batch(2, 1, &[(1, 3), (1, 2), (1, 4)]),
        ]);
        assert_eq!(check(&events, &twice).duplicate_updates, 1);
        let stale = log(vec![
            batch(1, 2, &[(1, 1), (1, 2)]),
            batch(2, 1, &[(1, 3), (1, 4)]),
        ]);
        assert_eq!(check(&events, &stale).stale_writes_accepted, 1);
        let empty = log(vec![batch(1, 1, &[])]);
        assert_eq!(
            check(&events, &empty).duplicate_updates,
            1,
            "an empty batch is malformed"
        );
    }

    #[test]
    fn a_group_commit_run_without_batches_is_inconclusive() {
        let busy = Verdict {
            acquisitions: 40,
            handovers: 20,
            writes_applied: 100,
            ..Verdict::default()
        };
        assert_eq!(MinimumWork::default().shortfall(&busy), None);
        let why = MinimumWork::group_commit().shortfall(&busy).unwrap();
        assert!(why.contains("0 log entries of several records"), "{why}");
        let batched = Verdict {
            batched_entries: 5,
            ..busy
        };
        assert_eq!(MinimumWork::group_commit().shortfall(&batched), None);
    }

    /// Worker `w` takes `lane` with `token` at `start` and believes it
    /// held until `end`, then gives it back.
    fn held(w: u32, lane: &str, token: u64, start: u64, end: u64) -> [Event; 3] {
        [
            Event::Took {
                worker: w,
                lane: lane.into(),
                token,
                at: start,
            },
            Event::Holds {
                worker: w,
                lane: lane.into(),
                token,
                until: end,
            },
            Event::Gave {
                worker: w,
                lane: lane.into(),
                token,
                at: end,
            },
        ]
    }

    fn flat<const N: usize>(parts: Vec<[Event; N]>) -> Vec<Event> {
        parts.into_iter().flatten().collect()
    }

    const SEMAPHORE: Primitive = Primitive::Semaphore { slots: 3 };

    #[test]
    fn lane_events_round_trip_through_their_lines() {
        for e in held(3, "s2", 7, 10, 20) {
            assert_eq!(Event::parse(&e.to_string()).as_ref(), Some(&e));
        }
        assert_eq!(Event::parse("took 1 s0 2"), None);
    }

    #[test]
    fn a_semaphore_with_more_holders_than_slots_is_a_violation() {
        // Three holders at once on three slots, handovers: a pass.
        let fine = flat(vec![
            held(1, "s0", 1, 0, 10),
            held(2, "s1", 1, 0, 10),
            held(3, "s2", 1, 5, 15),
            held(4, "s0", 2, 10, 20),
        ]);
        let verdict = check_primitive(&fine, &Observed::default(), SEMAPHORE);
        assert_eq!(verdict.violations(), 0, "{:?}", verdict.details);
        assert_eq!((verdict.most_at_once, verdict.handovers), (3, 1));
        assert_eq!(MinimumWork::of(SEMAPHORE).most_at_once, 2);
        // A fourth holder while three believe: over capacity, and two
        // holders of one slot at once.
        let mut over = fine.clone();
        over.extend(held(5, "s1", 2, 8, 9));
        let verdict = check_primitive(&over, &Observed::default(), SEMAPHORE);
        assert_eq!(verdict.over_capacity, 1, "{:?}", verdict.details);
        assert_eq!(verdict.overlaps, 1, "{:?}", verdict.details);
        // A slot the semaphore does not have.
        let mut stray = fine;
        stray.extend(held(5, "s3", 1, 30, 40));
        assert_eq!(
            check_primitive(&stray, &Observed::default(), SEMAPHORE).over_capacity,
            1
        );
    }

    #[test]
    fn a_slot_token_got_twice_or_falling_is_a_violation() {
        let falling = flat(vec![held(1, "s0", 2, 0, 10), held(2, "s0", 1, 20, 30)]);
        let verdict = check_primitive(&falling, &Observed::default(), SEMAPHORE);
        assert_eq!(verdict.token_regressions, 1, "{:?}", verdict.details);
        let twice = flat(vec![held(1, "s1", 4, 0, 10), held(2, "s1", 4, 20, 30)]);
        let verdict = check_primitive(&twice, &Observed::default(), SEMAPHORE);
        assert_eq!(verdict.token_regressions, 2, "{:?}", verdict.details);
        // Tokens rising per slot, whatever the other slots hold: a pass.
        let rising = flat(vec![
            held(1, "s0", 5, 0, 10),
            held(2, "s1", 1, 2, 12),
            held(2, "s0", 6, 20, 30),
        ]);
        assert_eq!(
            check_primitive(&rising, &Observed::default(), SEMAPHORE).violations(),
            0
        );
    }

    #[test]
    fn a_slot_write_from_no_holder_of_its_token_is_a_violation() {
        let mut events = flat(vec![held(1, "s0", 2, 0, 10), held(2, "s1", 1, 0, 10)]);
        events.extend(result(1, "app0", 1, "ok"));
        events.extend(result(2, "app1", 2, "ok"));
        let logs = |slot0: Vec<(String, Bytes)>, slot1: Vec<(String, Bytes)>| Observed {
            slot_logs: [
                (0, slot0.into_iter().collect()),
                (1, slot1.into_iter().collect()),
            ]
            .into_iter()
            .collect(),
            ..Observed::default()
        };
        let good = logs(vec![entry(1, 2, 1, 1)], vec![entry(1, 1, 2, 2)]);
        let verdict = check_primitive(&events, &good, SEMAPHORE);
        assert_eq!(verdict.violations(), 0, "{:?}", verdict.details);
        // Worker 1 holds slot 0 with token 2, not 3.
        let unheld = logs(vec![entry(1, 3, 1, 1)], vec![entry(1, 1, 2, 2)]);
        assert_eq!(
            check_primitive(&events, &unheld, SEMAPHORE).unheld_writes,
            1
        );
        // Worker 2's token 1 is slot 1's, not slot 0's.
        let other_slot = logs(vec![entry(1, 2, 1, 1), entry(2, 1, 2, 2)], vec![]);
        let verdict = check_primitive(&events, &other_slot, SEMAPHORE);
        assert_eq!(verdict.unheld_writes, 1, "{:?}", verdict.details);
        assert_eq!(verdict.stale_writes_accepted, 1, "{:?}", verdict.details);
        assert_eq!(verdict.lost_updates, 1, "{:?}", verdict.details);
    }

    #[test]
    fn a_writer_beside_a_reader_or_a_writer_is_a_violation_and_readers_share() {
        let fine = flat(vec![
            held(1, READER_LANE, 1, 0, 10),
            held(2, READER_LANE, 1, 5, 12),
            held(3, WRITER_LANE, 1, 12, 20),
            held(4, WRITER_LANE, 2, 20, 25),
            held(1, READER_LANE, 1, 26, 30),
        ]);
        let verdict = check_primitive(&fine, &Observed::default(), Primitive::RwLock);
        assert_eq!(verdict.violations(), 0, "{:?}", verdict.details);
        assert_eq!((verdict.most_at_once, verdict.writer_acquisitions), (2, 2));
        let mut reader_inside = fine.clone();
        reader_inside.extend(held(5, READER_LANE, 1, 14, 15));
        let verdict = check_primitive(&reader_inside, &Observed::default(), Primitive::RwLock);
        assert_eq!(verdict.overlaps, 1, "{:?}", verdict.details);
        let mut two_writers = fine.clone();
        two_writers.extend(held(5, WRITER_LANE, 3, 22, 24));
        let verdict = check_primitive(&two_writers, &Observed::default(), Primitive::RwLock);
        assert_eq!(verdict.overlaps, 1, "{:?}", verdict.details);
        let mut falling = fine;
        falling.extend(held(5, WRITER_LANE, 1, 40, 50));
        let verdict = check_primitive(&falling, &Observed::default(), Primitive::RwLock);
        assert_eq!(verdict.token_regressions, 2, "{:?}", verdict.details);
    }

    #[test]
    fn a_lock_write_from_a_reader_token_is_a_violation() {
        let mut events = flat(vec![
            held(1, WRITER_LANE, 4, 0, 10),
            held(2, READER_LANE, 7, 20, 30),
        ]);
        events.extend(result(1, "app", 1, "ok"));
        events.extend(result(2, "app", 2, "ok"));
        let log = |entries: Vec<(String, Bytes)>| Observed {
            log_entries: entries.into_iter().collect(),
            ..Observed::default()
        };
        let verdict = check_primitive(
            &events,
            &log(vec![entry(1, 4, 1, 1), entry(2, 7, 2, 2)]),
            Primitive::RwLock,
        );
        assert_eq!(verdict.unheld_writes, 1, "{:?}", verdict.details);
        assert_eq!(verdict.violations(), 1, "{:?}", verdict.details);
    }
}
