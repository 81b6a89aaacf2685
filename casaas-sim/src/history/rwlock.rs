//! `rwlock`: the guards of readers and writers of one read-write lock, as
//! the lease's history records them, and which of them are writers'.

use super::lease;

/// Everything the read-write lock checkers look at.
#[derive(Debug, Default)]
pub struct History {
    /// Every guard, a reader's or a writer's, with its beliefs and lease
    /// checks; the lock object's writes and the fenced writes (writers
    /// write through the fence, readers only check).
    pub lease: lease::History,
    /// Parallel to `lease.guards`: whether the guard is a writer's.
    pub writer: Vec<bool>,
    /// Shared and exclusive acquisitions that gave up (deadline, error).
    pub reads_given_up: u64,
    pub writes_given_up: u64,
}
