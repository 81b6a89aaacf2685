//! `swap_once`: each transaction a client committed to a table the Iceberg
//! way (read the table's pointer, swap it for one on top of what was read,
//! rebase on a conflict), every call it made and what each was answered,
//! and every pointer write the store applied.

/// What became of one transaction, as its client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// Running.
    Pending,
    /// Committed: a call was answered `Swapped::Ours` (`replaced`: by a
    /// body descending from ours, found by the lineage check).
    Committed { replaced: bool },
    /// Every call was answered `Swapped::Conflict` and the client gave up:
    /// nothing of it may have landed.
    Abandoned,
    /// A call failed with a definite error (not ambiguous): nothing of that
    /// call may have landed, nor of any before it (each was a conflict).
    Refused,
    /// The last call failed ambiguous or was dropped: it may have landed,
    /// once at most.
    Unknown,
}

/// What one `SwapOnce::swap` call was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `Swapped::Ours`.
    Ours,
    /// `Swapped::Conflict`.
    Conflict,
    /// An error of kind ambiguous.
    Ambiguous,
    /// Any other error.
    Refused,
    /// The caller dropped the call before its answer.
    Dropped,
}

/// One call: the nonces of the writes it sent (one per `body` call), and
/// its answer.
#[derive(Debug, Clone)]
pub struct CallRec {
    pub nonces: Vec<String>,
    pub answer: Answer,
}

/// One transaction (its id is its index in `History::txns`).
#[derive(Debug, Clone)]
pub struct TxnRec {
    pub client: usize,
    pub table: u64,
    pub told: Told,
    /// The error, for messages.
    pub error: String,
    pub calls: Vec<CallRec>,
}

/// A pointer write the store applied, in the order it applied them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub table: u64,
    pub txn: u64,
    pub nonce: String,
    /// The nonce of the body it was written on top of (`None`: it created
    /// the pointer).
    pub parent: Option<String>,
}

/// Everything the swap-once checkers look at.
#[derive(Debug, Default)]
pub struct History {
    pub txns: Vec<TxnRec>,
    /// Every pointer write the store applied, in order.
    pub landed: Vec<Landed>,
    /// The nonce each table's pointer holds at the end, read directly.
    pub heads: Vec<(u64, String)>,
    /// Pointer writes whose body could not be read back.
    pub foreign: Vec<String>,
    /// `Ours` answered after one of the call's writes was answered 412
    /// (our own duplicate, found by reading) or ambiguously (a lost answer,
    /// found by reading).
    pub ours_after_412: u64,
    pub ours_after_ambiguous: u64,
    /// `Ours` answered for a write found only in a later body's lineage.
    pub ours_replaced: u64,
    /// `Conflict` answered after an unknown answer (settled by reading).
    pub conflict_after_ambiguous: u64,
}

impl History {
    /// Transactions whose outcome matches `pick`.
    pub fn count(&self, pick: impl Fn(&Told) -> bool) -> u64 {
        self.txns.iter().filter(|t| pick(&t.told)).count() as u64
    }

    /// Calls answered `answer`.
    pub fn answered(&self, answer: Answer) -> u64 {
        self.txns
            .iter()
            .flat_map(|t| &t.calls)
            .filter(|c| c.answer == answer)
            .count() as u64
    }
}
