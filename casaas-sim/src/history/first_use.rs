//! `first_use`: clients racing for locks that do not exist yet, in both
//! layouts; each lock's lease history, and what every call was told.

use crate::history::lease::History as LockHistory;

/// Where a round's lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One record, replaced in place.
    Record,
    /// The create-only layout: epochs and collection markers.
    Epochs,
}

/// How a call for a fresh lock ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    Acquired,
    /// `try_acquire` found it held.
    Held,
    /// A blocking acquire ran out of time (or the run stopped).
    TimedOut,
    /// `try_acquire` lost races to holdings that ended, the most it may.
    Contended,
    /// An error that says the race was lost (precondition failed or not
    /// found): what the caller must never be told.
    LostRace,
    /// Any other error (the store's faults).
    Failed,
}

/// One call of `try_acquire` or `acquire` on a round's lock.
#[derive(Debug, Clone)]
pub struct Call {
    pub client: usize,
    pub round: usize,
    pub layout: Layout,
    pub blocking: bool,
    pub told: Told,
    pub error: String,
}

/// One round: a lock nobody used before, the clients that raced for it.
#[derive(Debug, Default)]
pub struct Round {
    pub layout: Option<Layout>,
    pub lock: LockHistory,
}

/// Everything the first-use checkers look at.
#[derive(Debug, Default)]
pub struct History {
    pub rounds: Vec<Round>,
    pub calls: Vec<Call>,
    pub releases: u64,
    pub abandons: u64,
    pub drops: u64,
}

impl History {
    /// Calls told `told` in rounds of `layout`.
    pub fn told(&self, layout: Layout, told: Told) -> usize {
        self.calls
            .iter()
            .filter(|c| c.told == told && c.layout == layout)
            .count()
    }
}
