//! The histories: what the clients of each primitive did and believed, and
//! what the store applied, recorded in true time. One module per primitive.
//!
//! The dependency runs one way: the clients (`crate::client`) write these
//! records, the checkers (`crate::checker`) read them; this module imports
//! neither.

/// `lease` and `shared_lease`: guards, their beliefs, lease checks and the
/// writes the store applied to the lock object and the fenced resource.
pub mod lease {
    use std::collections::HashSet;
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    /// A value written to the fenced resource: who wrote it, with which
    /// token, and when (true time) the writer passed its lease check
    /// (`ensure_held_for`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub struct SimValue {
        pub client: u32,
        pub token: u64,
        pub checked_at_ns: u64,
    }

    /// One acquisition and what its holder believed.
    #[derive(Debug, Clone)]
    pub struct GuardRec {
        pub client: usize,
        /// The task of the client that acquired (always 0 for `lease`).
        pub task: usize,
        pub token: u64,
        pub acquired_at: Duration,
        /// Intervals of belief `[start, end)` in true time.
        pub beliefs: Vec<(Duration, Duration)>,
    }

    /// Everything the lease checkers look at.
    #[derive(Debug, Default)]
    pub struct History {
        pub guards: Vec<GuardRec>,
        /// (guard, true time) of every lease check that passed.
        pub held_checks: Vec<(usize, Duration)>,
        /// Lock-object writes the store applied: (true time, owner, token, released).
        pub lock_writes: Vec<(Duration, String, u64, bool)>,
        /// Fenced-resource writes the store applied: (true time, token, value).
        pub fenced_writes: Vec<(Duration, u64, SimValue)>,
        /// Fenced updates the clients saw succeed / fenced out / fail otherwise.
        pub fenced_ok: u64,
        pub fenced_out: u64,
        pub fenced_failed: u64,
        pub releases: u64,
        pub abandons: u64,
        pub drops: u64,
        pub stalls: u64,
        pub freezes: u64,
        /// Epochs written so far (epoch layout), per object.
        pub epochs_seen: HashSet<(&'static str, u64)>,
        /// Creates that landed in collected history (epoch layout).
        pub late_epoch_writes: u64,
    }
}

/// `election`: the work of terms in true time, and the leader notices.
pub mod election {
    use std::time::Duration;

    /// The work of one term, in true time.
    #[derive(Debug, Clone)]
    pub struct WorkRec {
        pub client: usize,
        pub token: u64,
        pub start: Duration,
        /// `None` while the work runs.
        pub end: Option<Duration>,
        /// How the runner that started this work ended.
        pub ended_by: &'static str,
    }

    /// `on_new_leader(Some(me))` for a term after `on_stopped_leading` for it.
    #[derive(Debug, Clone)]
    pub struct NoticeAfterStop {
        pub client: usize,
        pub token: u64,
        pub at: Duration,
        pub stopped_at: Duration,
    }

    /// Everything the election checkers look at.
    #[derive(Debug, Default)]
    pub struct History {
        pub works: Vec<WorkRec>,
        pub notices_after_stop: Vec<NoticeAfterStop>,
        /// Lock-object writes the store applied (true time, body length), for
        /// the digest.
        pub lock_writes: Vec<(Duration, usize)>,
        pub runs: u64,
        pub dropped: u64,
        pub aborted: u64,
        pub cancelled: u64,
        pub returned: u64,
        pub stopped_leading: u64,
    }
}

/// What a fenced update (`fenced_resource`) or append (`fenced_log`) was
/// told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Running.
    Pending,
    /// `Ok`: applied.
    Ok,
    /// A store error that may have taken effect.
    Ambiguous,
    /// Refused: a higher token is recorded.
    FencedOut,
    /// Any other error: not applied.
    Failed,
}

/// `fenced_resource`: each update, what it was told and how many of its
/// writes the store applied.
pub mod fenced_resource {
    pub use super::Outcome;

    /// One `update` call.
    #[derive(Debug, Clone)]
    pub struct UpdateRec {
        pub client: usize,
        pub op: u64,
        pub token: u64,
        pub outcome: Outcome,
        /// The error, for messages.
        pub error: String,
        /// How many of its writes the store applied.
        pub applied: u32,
    }

    /// Everything the fenced-resource checkers look at.
    #[derive(Debug, Default)]
    pub struct History {
        pub updates: Vec<UpdateRec>,
        /// Writes the store applied, and their tokens in order.
        pub applied_writes: u64,
        pub applied_tokens: Vec<u64>,
        /// Nonces of applied writes that no update sent.
        pub unknown_writes: Vec<String>,
        pub freezes: u64,
        pub new_tokens: u64,
    }

    impl History {
        /// Updates told `outcome`.
        pub fn count(&self, outcome: Outcome) -> u64 {
            self.updates.iter().filter(|u| u.outcome == outcome).count() as u64
        }
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

/// `fenced_log`: each append and what it was told; and the entries the
/// store holds at the end, read directly.
pub mod fenced_log {
    pub use super::Outcome;

    /// One `append` call.
    #[derive(Debug, Clone)]
    pub struct AppendRec {
        pub client: u32,
        pub op: u64,
        pub token: u64,
        pub log: u64,
        pub outcome: Outcome,
        pub error: String,
        /// The sequence number reported with `Ok`.
        pub seq: u64,
    }

    /// Everything the fenced-log checkers look at, besides the store itself.
    #[derive(Debug, Default)]
    pub struct History {
        pub appends: Vec<AppendRec>,
        pub new_tokens: u64,
    }

    impl History {
        /// Appends told `outcome`.
        pub fn count(&self, outcome: Outcome) -> u64 {
            self.appends.iter().filter(|a| a.outcome == outcome).count() as u64
        }
    }

    /// An entry as the store holds it.
    #[derive(Debug, Clone)]
    pub struct StoredEntry {
        /// The sequence number in the entry's key.
        pub key_seq: u64,
        /// The sequence number recorded in the entry.
        pub seq: u64,
        pub token: u64,
        pub client: u32,
        pub op: u64,
    }
}

/// `session`: per lock, a lease history (`lease::History`, kept by the
/// client beside this one); here what ties the locks to their sessions.
pub mod session {
    use std::collections::HashSet;
    use std::time::Duration;

    /// A write the store applied to a session's heartbeat object.
    #[derive(Debug, Clone, Copy)]
    pub struct HeartbeatWrite {
        pub at: Duration,
        /// The client whose session key it was written to.
        pub client: usize,
        /// The heartbeat's token: the session's term.
        pub term: u64,
        pub released: bool,
    }

    /// Everything the session checkers look at besides the per-lock
    /// histories.
    #[derive(Debug, Default)]
    pub struct History {
        /// Per lock, parallel to its history's `guards`: the term of the
        /// session each guard was held under.
        pub guard_terms: Vec<Vec<u64>>,
        /// Per lock, parallel to its history's `lock_writes`: the session
        /// `(key, term)` each applied lock record names.
        pub lock_terms: Vec<Vec<Option<(String, u64)>>>,
        pub heartbeat_writes: Vec<HeartbeatWrite>,
        /// `(client, term)` of every session closed or dropped (its end
        /// writes a release); the others crashed or were lost.
        pub closed_terms: HashSet<(usize, u64)>,
        pub opened: u64,
        pub acquisitions: u64,
        pub lock_releases: u64,
        pub lock_drops: u64,
        pub closes: u64,
        pub abandons: u64,
        pub drops: u64,
        /// Sessions found lost when their holder came to end them.
        pub lost: u64,
        pub freezes: u64,
    }
}
