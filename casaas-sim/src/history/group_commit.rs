//! `group_commit`: each update of the group-committed counter and each
//! append to a group-committed log, what its caller was told, and what the
//! store applied and holds.

pub use super::Outcome;

/// Which caller made an operation: a task of a client process. A task's
/// operations are sequential, so their positions must increase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Caller {
    pub client: usize,
    pub task: usize,
}

/// One application of an update by a counter write the store applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Application {
    /// The counter's value right after this update.
    pub at: u64,
    /// The token of the write that applied it.
    pub token: u64,
    /// The highest token of the counter writes the store applied before
    /// this one (0 for the first): a lower submitted token was superseded.
    pub fence: u64,
}

/// One `GroupResource::update` (its id is its index in `History::updates`).
#[derive(Debug, Clone)]
pub struct UpdateRec {
    pub caller: Caller,
    /// The token the update was submitted under.
    pub token: u64,
    /// Submitted under a token older than its process's (a task that kept
    /// the token it read before the process was handed a new one).
    pub stale: bool,
    pub outcome: Outcome,
    pub error: String,
    /// The counter's value right after this update, as reported with `Ok`.
    pub reported: u64,
    /// Each time the store applied it (exactly one entry if all is well).
    pub applied: Vec<Application>,
}

impl UpdateRec {
    /// The counter's value right after each application.
    pub fn applied_at(&self) -> Vec<u64> {
        self.applied.iter().map(|a| a.at).collect()
    }
}

/// One `GroupLog::append` (its id is its index in `History::appends`).
#[derive(Debug, Clone)]
pub struct AppendRec {
    pub caller: Caller,
    /// The token the append was submitted under.
    pub token: u64,
    /// Submitted under a token older than its process's.
    pub stale: bool,
    pub log: u64,
    pub outcome: Outcome,
    pub error: String,
    /// (entry, offset) reported with `Ok`.
    pub place: (u64, u64),
}

/// A record as the store holds it at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub log: u64,
    /// The sequence number in the entry's key.
    pub key_seq: u64,
    /// The sequence number recorded in the entry.
    pub seq: u64,
    pub offset: u64,
    /// The token of the entry that holds it (the write that applied it).
    pub token: u64,
    /// The append that wrote it.
    pub id: u64,
}

/// Everything the group-commit checkers look at.
#[derive(Debug, Default)]
pub struct History {
    pub updates: Vec<UpdateRec>,
    pub appends: Vec<AppendRec>,
    /// Counter writes the store applied: their tokens, and how many
    /// updates each carried.
    pub counter_tokens: Vec<u64>,
    pub counter_batches: Vec<u64>,
    /// Applied counter writes that could not be traced to updates.
    pub unknown_writes: Vec<String>,
    /// The counter as stored at the end.
    pub final_value: u64,
    /// Every log's records as stored at the end, in key order.
    pub records: Vec<StoredRecord>,
    /// Updates and appends removed from their queue by `cancel`.
    pub removed: u64,
    /// Cancelled too late (their batch was sealed), or dropped waiting.
    pub abandoned: u64,
    pub new_tokens: u64,
    pub freezes: u64,
}

impl History {
    /// Updates told `outcome`.
    pub fn updates_told(&self, outcome: Outcome) -> u64 {
        self.updates.iter().filter(|u| u.outcome == outcome).count() as u64
    }

    /// Appends told `outcome`.
    pub fn appends_told(&self, outcome: Outcome) -> u64 {
        self.appends.iter().filter(|a| a.outcome == outcome).count() as u64
    }

    /// The number of records of each stored log entry, by (log, entry).
    pub fn entry_sizes(&self) -> Vec<u64> {
        let mut sizes: Vec<u64> = Vec::new();
        let mut last = None;
        for r in &self.records {
            if last == Some((r.log, r.key_seq)) {
                if let Some(n) = sizes.last_mut() {
                    *n += 1;
                }
            } else {
                sizes.push(1);
                last = Some((r.log, r.key_seq));
            }
        }
        sizes
    }
}
