//! Leases, leader election and fencing on a [`CasStore`](crate::CasStore).
//!
//! The protocol (see `docs/protocol.md` for the safety argument):
//!
//! - One lock object per lease holds a small JSON [`LeaseRecord`]: owner,
//!   a fresh nonce per write, the fencing token, the TTL, advisory wall
//!   times and a released flag.
//! - **Acquire**: read. Absent → create-if-absent with token 1. Released or
//!   expired → replace-if-match with token + 1. Held → not acquired.
//! - **Expiry** ([`ExpiryMode::ObservedUnchanged`], the default): a contender
//!   takes over only after observing the same version unchanged for the
//!   record's TTL (plus drift margin) on its own monotonic [`Clock`]. The
//!   holder counts its validity from the moment it *sent* its last
//!   successful write, minus drift and safety margins. Only a bound on clock
//!   *rate* drift is assumed, never synchronized clocks.
//! - **Renew** every `ttl/3` with replace-if-match on the holder's version;
//!   precondition failed means lost at once; no success before the renew
//!   deadline means step down, before validity ends.
//! - **Release**: replace-if-match with `released = true`, keeping the token.
//!   The object is never deleted (that would reset the fencing token).
//! - **Ambiguous writes** (and a precondition failure on our own write, which
//!   a transport-level duplicate can produce) are resolved by re-reading and
//!   looking for our nonce. Never assumed.
//!
//! The API has one shape throughout: a failed write answers
//! [`LeaseError::may_have_taken_effect`]; every call that waits for others
//! takes [`WaitOptions`] (deadline, cancellation), every writer bounded by
//! its attempts a [`RetryPolicy`]; one attempt answers [`AcquireOutcome`];
//! builders use `with_*` setters. Each async method that writes says under
//! `# Cancel safety` what dropping its future can leave; the reads
//! ([`Lease::read`], [`Election::leader`], [`FencedResource::read`],
//! [`FencedLog::read`] and the like) leave nothing.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use casaas_core::MemoryStore;
//! use casaas_core::lease::{Lease, LeaseConfig};
//!
//! let store = Arc::new(MemoryStore::new());
//! let lease = Lease::new(store, "locks/leader", "worker-1", LeaseConfig::default())?;
//! let guard = lease.acquire(Default::default()).await?;
//! assert_eq!(guard.token(), 1);
//! guard.ensure_held_for(Duration::from_secs(1))?; // before each side effect
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

mod acquire;
mod attempt;
mod clock;
mod config;
mod create_once;
mod election;
mod fair;
mod fenced;
mod group;
mod handle;
mod listing;
mod log;
mod pending;
mod record;
mod retry;
mod rwlock;
mod semaphore;
mod session;
mod swap_once;
mod wait;

pub(crate) use retry::timed;

use std::fmt;
use std::time::Duration;

pub use acquire::{AcquireOutcome, HeldBy, Lease, default_owner_id};
pub use clock::{Clock, DriftingClock, Entropy, SleepFuture, SystemClock};
pub use config::{ExpiryMode, LeaseConfig};
pub use create_once::{CreateOnce, Created};
pub use election::{Election, ElectionRunner, HealthCheck, Leader, Leadership};
pub use fair::FairLease;
pub use fenced::{Fenced, FencedResource};
pub use group::{Applied, Cancelled, GroupCommitConfig, GroupLog, GroupResource, Ticket};
pub use handle::{Health, LeaseGuard, LeaseStatus};
pub use listing::{
    DEFAULT_LIST_CONCURRENCY, Heartbeat, LockEntry, LockListing, LockSession, LockState,
    SessionLiveness, list_locks,
};
pub use log::{FencedLog, LogEntry};
pub use record::{
    LEASE_RECORD_KIND, LEASE_SCHEMA_VERSION, LeaseRecord, MAX_VALUE_BYTES, SessionRef,
};
pub use rwlock::RwLock;
pub use semaphore::{MAX_SLOTS, Semaphore};
pub use session::Session;
pub use swap_once::{SwapOnce, Swapped};
pub use wait::{RetryPolicy, WaitOptions};

use crate::{CasError, ErrorKind};

/// Why a held lease ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// Someone else's write replaced ours (a renewal's precondition failed
    /// and the stored record is not ours).
    Superseded {
        /// The owner now named in the record, if it could be read.
        owner: Option<String>,
        /// The token now in the record, if it could be read.
        token: Option<u64>,
    },
    /// The lock object disappeared (deleted by someone outside the protocol).
    Deleted,
    /// The lock object now holds something that is not a lease record.
    Corrupted,
    /// No renewal succeeded before the renew deadline; the holder stepped
    /// down before its validity ended.
    RenewDeadlineExceeded,
    /// The holder released the lease.
    Released,
    /// The handle was dropped without an explicit release.
    Dropped,
    /// The [`Session`] the lock was held under ended (every lock under it
    /// ends at the same moment); `reason` says why the session ended.
    SessionLost {
        /// The session's heartbeat key.
        session: String,
        /// Why the session ended.
        reason: Box<LostReason>,
    },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Superseded { owner, token } => {
                write!(f, "superseded")?;
                if let Some(o) = owner {
                    write!(f, " by '{o}'")?;
                }
                if let Some(t) = token {
                    write!(f, " (token {t})")?;
                }
                Ok(())
            }
            LostReason::Deleted => f.write_str("the lock object was deleted"),
            LostReason::Corrupted => f.write_str("the lock object no longer holds a lease record"),
            LostReason::RenewDeadlineExceeded => {
                f.write_str("no renewal succeeded before the renew deadline; stepped down")
            }
            LostReason::Released => f.write_str("released"),
            LostReason::Dropped => f.write_str("the lease handle was dropped"),
            LostReason::SessionLost { session, reason } => {
                write!(
                    f,
                    "the session '{session}' it was held under ended: {reason}"
                )
            }
        }
    }
}

/// Everything that can go wrong with leases, elections and fenced resources.
///
/// # Did the write happen?
///
/// The first question after a failed write is whether it may have taken
/// effect anyway (a lost answer, a timeout, a batch cut off mid-write). Ask
/// [`may_have_taken_effect`](LeaseError::may_have_taken_effect): `true`
/// means the outcome is unknown, so read before writing again (a fenced
/// update or log entry may be there, a [`CreateOnce`] object may hold your
/// body); `false` means the store refused the request or never got it, so
/// nothing of this call was written. No need to match
/// `LeaseError::Store(e)` and then `e.kind()`.
///
/// ```
/// use casaas_core::{CasError, ErrorKind};
/// use casaas_core::lease::LeaseError;
///
/// let lost = LeaseError::from(CasError::new(ErrorKind::Ambiguous, "connection reset"));
/// assert!(lost.may_have_taken_effect());
/// let refused = LeaseError::from(CasError::new(ErrorKind::Throttled, "slow down"));
/// assert!(!refused.may_have_taken_effect());
/// assert!(!LeaseError::Cancelled.may_have_taken_effect());
/// ```
///
/// # The caller's own errors
///
/// Where code of yours runs inside an operation (the body of
/// [`CreateOnce::create`], a job under a lease in an adapter), it returns
/// an error type of your choosing, `E: From<LeaseError>`, and so does the
/// operation: your error comes back as it is (no downcasting), the
/// protocol's own failures reach you through `From`, and `?` works inside
/// your code on both. Keep a variant holding the `LeaseError` to ask
/// [`may_have_taken_effect`](LeaseError::may_have_taken_effect) later;
/// `LeaseError` itself is such an `E`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The store failed (after the retries the protocol allows). When its
    /// kind is [`ErrorKind::Ambiguous`] the write may have taken effect:
    /// see [`may_have_taken_effect`](LeaseError::may_have_taken_effect).
    #[error(transparent)]
    Store(#[from] CasError),
    /// The store does not honour the conditional writes leases rely on:
    /// the [store guard](crate::guard) saw it accept a write it should have
    /// refused (or the reverse). The error, of kind
    /// [`ErrorKind::UnsafeStore`], names what the store did.
    #[error(transparent)]
    UnsafeStore(CasError),
    /// The object at `key` is not a casaas record; it is never overwritten.
    #[error(
        "the object at key '{key}' is not a casaas record (found {found}); refusing to touch it: use another key or remove the object"
    )]
    ForeignObject {
        /// The key.
        key: String,
        /// The first bytes found, sanitized.
        found: String,
    },
    /// The record at `key` has a newer schema than this library understands.
    #[error(
        "the record at key '{key}' has schema version {version}, newer than this library understands ({LEASE_SCHEMA_VERSION}); upgrade casaas"
    )]
    UnsupportedSchema {
        /// The key.
        key: String,
        /// The schema version found.
        version: u64,
    },
    /// The lease is no longer held.
    #[error("lease lost: {0}")]
    Lost(LostReason),
    /// The lease is held but has less validity left than the caller requires.
    #[error("lease has {remaining:?} of validity left, less than the {required:?} required")]
    InsufficientValidity {
        /// Validity left.
        remaining: Duration,
        /// Validity the caller required.
        required: Duration,
    },
    /// A fenced write presented a token lower than the one recorded.
    #[error("fenced out: token {presented} is lower than the recorded token {recorded}")]
    FencedOut {
        /// The token presented.
        presented: u64,
        /// The highest token the resource has accepted.
        recorded: u64,
    },
    /// The configuration is inconsistent; the message names what to change.
    #[error("invalid lease configuration: {0}")]
    InvalidConfig(String),
    /// The lock at `key` is held under a session whose heartbeat lies
    /// outside the store's prefix, so its term cannot be judged from here.
    /// Nothing was written: open the store at a prefix that contains both
    /// the lock and the heartbeat (the `casaas` command: `--root PREFIX`).
    #[error(
        "the lock at key '{key}' is held under a session whose heartbeat ('{heartbeat}' from the lock's directory) lies outside this store's prefix: open the store at a prefix that contains both (with the casaas command: --root PREFIX, a directory above both)"
    )]
    HeartbeatOutOfReach {
        /// The lock's key.
        key: String,
        /// The heartbeat as the lock names it, relative to the lock's
        /// directory (e.g. `../sessions/worker-1`).
        heartbeat: String,
    },
    /// The operation was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The operation's deadline passed.
    #[error("deadline exceeded after {0:?}")]
    DeadlineExceeded(Duration),
    /// A value could not be encoded or decoded.
    #[error("could not encode or decode the value at key '{key}': {message}")]
    Codec {
        /// The key.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// A counter the protocol only ever increases (a lease's fencing token,
    /// a fenced resource's write count, a fenced log's sequence number) is
    /// at `u64::MAX`: the next one would repeat it, which would hand two
    /// holders (or two writes) the same number, so the write is refused.
    #[error(
        "the {counter} at key '{key}' is at its maximum ({max}) and cannot grow; refusing rather than repeating it: use a new key",
        max = u64::MAX
    )]
    Exhausted {
        /// The key.
        key: String,
        /// Which counter: "fencing token", "write count" or "log sequence number".
        counter: &'static str,
    },
    /// Too many concurrent writers: the write lost every attempt.
    #[error("write to key '{key}' lost {attempts} races in a row; giving up")]
    Contended {
        /// The key.
        key: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl LeaseError {
    /// May the write that failed with this error have taken effect? `true`
    /// only for a store error of kind [`ErrorKind::Ambiguous`]: the store's
    /// answer was lost, or a write of this call was sent and never settled
    /// (read before writing again). Every other error means nothing of this
    /// call was written. Cancellation and deadlines are not writes: a
    /// blocking call's `# Cancel safety` section says what it may leave.
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(self, LeaseError::Store(e) if e.may_have_taken_effect())
    }

    /// The store error kind, if this is a store error.
    pub fn store_kind(&self) -> Option<ErrorKind> {
        match self {
            LeaseError::Store(e) | LeaseError::UnsafeStore(e) => Some(e.kind()),
            _ => None,
        }
    }
}

/// Names of the metrics this module records through the `metrics` facade.
pub mod metric_names {
    /// Histogram, seconds: time from `acquire` start to success.
    pub const ACQUIRE_WAIT: &str = "casaas_lease_acquire_wait_seconds";
    /// Counter: leases acquired.
    pub const ACQUIRED: &str = "casaas_lease_acquired_total";
    /// Histogram, seconds: how long a lease was held.
    pub const HOLD_TIME: &str = "casaas_lease_hold_seconds";
    /// Histogram, seconds: latency of successful renewals.
    pub const RENEW_LATENCY: &str = "casaas_lease_renew_latency_seconds";
    /// Counter: failed renewal attempts, label `kind`.
    pub const RENEW_FAILURES: &str = "casaas_lease_renew_failures_total";
    /// Counter: leases lost, label `reason`.
    pub const LOST: &str = "casaas_lease_lost_total";
    /// Counter: ambiguous writes, label `resolution` = `ours` | `not_ours` | `absent`.
    pub const AMBIGUOUS_WRITES: &str = "casaas_lease_ambiguous_writes_total";
    /// Counter: writes refused by a fenced resource or log.
    pub const FENCING_REJECTIONS: &str = "casaas_fencing_rejections_total";
}
