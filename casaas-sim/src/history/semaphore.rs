//! `semaphore`: each slot's lease history, and what the semaphore's
//! callers were told.

use crate::history::lease::History as SlotHistory;

/// Everything the semaphore checkers look at.
#[derive(Debug, Default)]
pub struct History {
    /// The count every caller but the miscounting one passes.
    pub capacity: usize,
    /// One lease history per slot key written (a slot past the count can
    /// only appear if a caller that counts more was let in).
    pub slots: Vec<SlotHistory>,
    /// Acquisitions per client.
    pub acquired: Vec<u64>,
    /// Times the client that counts one slot more was refused.
    pub refused: u64,
    /// Blocking acquisitions that ended without a slot (deadline, faults).
    pub gave_up: u64,
    /// Guards whose key names no slot.
    pub strays: Vec<String>,
}
