//! `create_once`: each transaction a client committed to a shared log the
//! Delta Lake way (create-if-absent of the next version, moving on when it
//! is taken), what it was told and settled, and the commits the store
//! holds at the end.

/// What became of one transaction, as its client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// Running.
    Pending,
    /// Committed at `version` of its log: told `Created::Ours`, or (`found`)
    /// an unknown outcome settled by reading the version back.
    Committed { version: u64, found: bool },
    /// Told `Created::Taken` and given up (a conflicting commit): nothing of
    /// it may be in the log.
    Abandoned,
    /// A definite error (not ambiguous): nothing of it may be in the log.
    Refused,
    /// An ambiguous error or a dropped call at `version`, not settled: it
    /// may be at that version (its writes all went there), nowhere else.
    Unknown { version: u64 },
}

/// One transaction (its id is its index in `History::txns`).
#[derive(Debug, Clone)]
pub struct TxnRec {
    pub client: usize,
    pub log: u64,
    pub told: Told,
    /// The error, for messages.
    pub error: String,
    /// Versions `CreateOnce` answered `Taken` for, in order.
    pub taken: Vec<u64>,
}

/// A commit as the store holds it at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCommit {
    pub log: u64,
    pub version: u64,
    /// The transaction whose body it is.
    pub txn: u64,
    pub client: usize,
}

/// Everything the create-once checkers look at.
#[derive(Debug, Default)]
pub struct History {
    pub txns: Vec<TxnRec>,
    /// Every log's commits as stored at the end, in (log, version) order.
    pub commits: Vec<StoredCommit>,
    /// Stored objects under the logs that are not commits of this run.
    pub foreign: Vec<String>,
    /// `CreateOnce` answered `Ours` after one of its requests was answered
    /// 412 (our own duplicate, found by reading) or ambiguously (a lost
    /// answer, found by reading).
    pub ours_after_412: u64,
    pub ours_after_ambiguous: u64,
    /// `CreateOnce` answered `Taken` after an ambiguous answer to one of its
    /// requests (settled by reading: another body there).
    pub taken_after_ambiguous: u64,
    /// `CreateOnce` failed `Ambiguous`.
    pub ambiguous_errors: u64,
    /// Calls whose future the client dropped before an answer.
    pub dropped: u64,
    /// Unknown outcomes (ambiguous or dropped) the client settled by
    /// reading the version back: its own commit found there, another's
    /// found there (it went on), or the version still absent after its
    /// reads (left unknown).
    pub settled_ours: u64,
    pub settled_other: u64,
    pub left_unknown: u64,
    /// Writes the store applied to the logs.
    pub applied: u64,
    pub freezes: u64,
}

impl History {
    /// Transactions whose outcome matches `pick`.
    pub fn count(&self, pick: impl Fn(&Told) -> bool) -> u64 {
        self.txns.iter().filter(|t| pick(&t.told)).count() as u64
    }

    /// Transactions committed (told `Ours`, or found by reading).
    pub fn committed(&self) -> u64 {
        self.count(|t| matches!(t, Told::Committed { .. }))
    }
}
