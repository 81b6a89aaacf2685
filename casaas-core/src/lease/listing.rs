//! Listing the locks under a prefix: one entry per object, read once,
//! nothing written (what `casaas ls` shows).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;

use super::{Clock, Lease, LeaseConfig, LeaseError, LeaseRecord, SessionRef, SystemClock};
use crate::CasStore;
use crate::guard::GUARD_PREFIX;
use crate::layout::{EpochStore, LeaseLayout};

/// What follows a lock's key to name the folder of its fair-mode queue
/// tickets (`KEY.queue/` and twenty digits: [`FairLease`](super::FairLease)).
const QUEUE_SUFFIX: &str = ".queue/";

/// Objects read at once by default.
pub const DEFAULT_LIST_CONCURRENCY: usize = 8;

/// The state of one listed object, as far as one read on this machine's
/// clock tells (advisory: a contender judges expiry by watching, not by
/// wall clocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockState {
    /// Held: not released, and its holder's last write plus its TTL is
    /// still ahead (for a lock under a session: its session is alive, or
    /// its heartbeat is missing, which one read cannot judge).
    Held,
    /// A fair-mode queue ticket whose waiter is live: a waiter, not a
    /// holder.
    Waiting,
    /// Its holder's last write plus its TTL is past on this machine's
    /// clock (for a lock under a session: its heartbeat's, or the session
    /// was superseded).
    Expired,
    /// Released by its holder (or its session was closed).
    Released,
    /// Not a casaas lease record.
    Foreign,
    /// A lock under a session whose heartbeat cannot be read from here.
    Unknown,
}

impl LockState {
    /// The name used in tables and JSON: `held`, `waiting`, `expired`,
    /// `released`, `foreign` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockState::Held => "held",
            LockState::Waiting => "waiting",
            LockState::Expired => "expired",
            LockState::Released => "released",
            LockState::Foreign => "foreign",
            LockState::Unknown => "unknown",
        }
    }
}

/// What a session's heartbeat says of the term a lock names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionLiveness {
    /// The heartbeat is in the lock's term, not released, and its last
    /// write plus its TTL is ahead.
    Alive,
    /// The heartbeat is in the lock's term, but its last write plus its TTL
    /// is past on this machine's clock.
    Expired,
    /// The heartbeat is in the lock's term and released.
    Released,
    /// The heartbeat is in a later term: the lock's term is over.
    Superseded,
    /// No heartbeat in the lock's term: a contender takes the lock only
    /// after watching that for the lock's TTL, which one read cannot do.
    Missing,
    /// The heartbeat is not a lease record this build reads, or lies
    /// outside the store (see [`LockSession::problem`]).
    Unreadable,
}

impl SessionLiveness {
    /// The name used in tables and JSON: `alive`, `expired`, `released`,
    /// `superseded`, `missing` or `unreadable`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionLiveness::Alive => "alive",
            SessionLiveness::Expired => "expired",
            SessionLiveness::Released => "released",
            SessionLiveness::Superseded => "superseded",
            SessionLiveness::Missing => "missing",
            SessionLiveness::Unreadable => "unreadable",
        }
    }
}

/// The session a listed lock is held under.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockSession {
    /// The session as the lock record names it (its heartbeat relative to
    /// the lock's directory, and its term).
    pub named: SessionRef,
    /// The heartbeat's key in the store; `None` when it lies above the
    /// store's root (open the store higher up to judge the lock).
    pub heartbeat_key: Option<String>,
    /// What the heartbeat says of the term; `None` for a released lock,
    /// whose session is not read.
    pub liveness: Option<SessionLiveness>,
    /// Why the heartbeat is [`SessionLiveness::Unreadable`].
    pub problem: Option<String>,
}

impl LockSession {
    /// How output names the session: its heartbeat's key in the store, or,
    /// when that lies above the store's root, the record's own name for it.
    pub fn name(&self) -> &str {
        self.heartbeat_key
            .as_deref()
            .unwrap_or(&self.named.heartbeat)
    }
}

/// One object under the listed prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockEntry {
    /// The key, relative to the listed prefix.
    pub key: String,
    /// What the object is.
    pub state: LockState,
    /// Who holds (or last held, or waits in) it; `None` for a foreign
    /// object.
    pub holder: Option<String>,
    /// The fencing token of the holding.
    pub token: Option<u64>,
    /// The holder's TTL.
    pub ttl: Option<Duration>,
    /// The holder's wall clock at acquisition (advisory).
    pub acquired_at: Option<SystemTime>,
    /// The holder's wall clock at its last write (advisory).
    pub renewed_at: Option<SystemTime>,
    /// The object's version as read (for the epoch layout, its epoch).
    pub version: String,
    /// How the lock is laid out; `None` for a foreign object.
    pub layout: Option<LeaseLayout>,
    /// For a fair-mode queue ticket: the key of the lock it waits for,
    /// relative to the listed prefix.
    pub waiting_for: Option<String>,
    /// What a foreign object starts with.
    pub found: Option<String>,
    /// The session the lock is held under, if any.
    pub session: Option<LockSession>,
}

/// How [`LockListing::list`] lists: a prefix and how many reads at once.
///
/// Every object under the prefix is read once and nothing is written: a
/// read-write lock's reader slots (`KEY.readers/…`) and a semaphore's
/// slots (`KEY.slots/…`) are leases of their own and listed as such; a
/// fair-mode queue ticket (`KEY.queue/…`) is listed as
/// [`LockState::Waiting`] while its waiter renews it; the epochs of a lock
/// in the create-only layout are listed once, as the lock; the store
/// guard's objects (under [`GUARD_PREFIX`]) are left out. A lock under a
/// session is judged by its session's heartbeat, read after every lock
/// (each distinct heartbeat once).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::{CasStore, MemoryStore};
/// use casaas_core::lease::{Lease, LeaseConfig, LockListing, LockState, list_locks};
///
/// let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
/// let lease = Lease::new(store.clone(), "locks/nightly", "worker-1", LeaseConfig::default())?;
/// let held = lease.acquire(Default::default()).await?;
///
/// let locks = list_locks(store.clone(), "locks/").await?;
/// assert_eq!(locks.len(), 1);
/// assert_eq!(locks[0].key, "nightly");
/// assert_eq!(locks[0].state, LockState::Held);
/// assert_eq!(locks[0].holder.as_deref(), Some("worker-1"));
/// assert_eq!(locks[0].token, Some(1));
///
/// held.release().await?;
/// let locks = LockListing::new(store).with_prefix("locks/").list().await?;
/// assert_eq!(locks[0].state, LockState::Released);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockListing {
    store: Arc<dyn CasStore>,
    prefix: String,
    concurrency: usize,
    clock: Arc<dyn Clock>,
}

/// Lists the locks under `prefix` (a key prefix in `store`, `""` for all):
/// [`LockListing`] with its defaults.
pub async fn list_locks(
    store: Arc<dyn CasStore>,
    prefix: &str,
) -> Result<Vec<LockEntry>, LeaseError> {
    LockListing::new(store).with_prefix(prefix).list().await
}

impl LockListing {
    /// Lists every object of `store`.
    pub fn new(store: Arc<dyn CasStore>) -> Self {
        LockListing {
            store,
            prefix: String::new(),
            concurrency: DEFAULT_LIST_CONCURRENCY,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// Judges expiry on `clock`'s wall time instead of this machine's (a
    /// simulation's clock, or a [`DriftingClock`](crate::lease::DriftingClock)
    /// in a test).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Lists only keys that start with `prefix` (entries' keys are then
    /// relative to it).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Reads at most `reads` objects at once (at least one).
    pub fn with_concurrency(mut self, reads: usize) -> Self {
        self.concurrency = reads.max(1);
        self
    }

    /// Lists, reads each object once, then each distinct heartbeat of the
    /// locks held under a session; the entries come sorted by key. An
    /// object deleted between the listing and its read is left out.
    ///
    /// # Cancel safety
    ///
    /// Writes nothing; dropping the future leaves nothing behind.
    pub async fn list(&self) -> Result<Vec<LockEntry>, LeaseError> {
        let mut keys = self.store.list(&self.prefix).await?;
        // The epochs and collection markers of a create-only-layout lock
        // are its parts: the lock is listed once, under its own key.
        keys.retain(|entry| {
            !is_guard_key(&entry.key)
                && EpochStore::lock_of(&entry.key).is_none()
                && entry.key.starts_with(&self.prefix)
        });
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        let epochs = EpochStore::new(self.store.clone());
        let now = self.clock.wall();
        let reads = futures::stream::iter(keys)
            .map(|listed| {
                let (store, epochs) = (self.store.clone(), epochs.clone());
                async move {
                    let Some(object) = store.get(&listed.key).await? else {
                        return Ok(None);
                    };
                    if !EpochStore::is_marker(&object.body) {
                        return Ok(Some((listed.key, LeaseLayout::Record, object)));
                    }
                    // A create-only-layout lock: its current epoch is its state.
                    let head = epochs.get(&listed.key).await?;
                    Ok::<_, crate::CasError>(head.map(|o| (listed.key, LeaseLayout::Epochs, o)))
                }
            })
            .buffered(self.concurrency)
            .collect::<Vec<_>>()
            .await;
        let mut entries = Vec::new();
        let mut under_sessions = Vec::new();
        for read in reads {
            // Deleted between the listing and the read: gone, not listed.
            let Some((full_key, layout, object)) = read? else {
                continue;
            };
            let key = full_key
                .strip_prefix(&self.prefix)
                .unwrap_or(&full_key)
                .to_string();
            let (entry, record) = entry(
                key,
                &full_key,
                layout,
                &object.body,
                object.version.to_string(),
                now,
            );
            if let Some(record) = record.filter(|r| r.session.is_some() && !r.released) {
                under_sessions.push((entries.len(), full_key, record));
            }
            entries.push(entry);
        }
        // Every lock was read before any heartbeat (the term to judge is
        // the one the lock names), and each distinct heartbeat is read once.
        let mut beats: HashMap<String, Heartbeat> = HashMap::new();
        for (at, full_key, record) in under_sessions {
            let Some(entry) = entries.get_mut(at) else {
                continue;
            };
            let Some(session) = &record.session else {
                continue;
            };
            let beat = match session.heartbeat_key(&full_key) {
                None => Heartbeat::Unreadable(format!(
                    "the heartbeat {:?} (from the lock's directory) lies above the store's root: \
                     list from a store opened higher up",
                    session.heartbeat
                )),
                Some(key) => match beats.get(&key) {
                    Some(beat) => beat.clone(),
                    None => {
                        let beat = self.read_heartbeat(&key).await?;
                        beats.insert(key, beat.clone());
                        beat
                    }
                },
            };
            entry.judge_session(&beat, now);
        }
        Ok(entries)
    }

    async fn read_heartbeat(&self, key: &str) -> Result<Heartbeat, LeaseError> {
        let reader = Lease::new(
            self.store.clone(),
            key,
            "casaas-list",
            LeaseConfig::from_ttl(Duration::from_secs(15)),
        )?;
        Ok(match reader.read().await {
            Ok(Some((record, _))) => Heartbeat::Read(record),
            Ok(None) => Heartbeat::Absent,
            Err(LeaseError::ForeignObject { found, .. }) => {
                Heartbeat::Unreadable(format!("not a casaas lease (found {found})"))
            }
            Err(e @ LeaseError::UnsupportedSchema { .. }) => Heartbeat::Unreadable(e.to_string()),
            Err(e) => return Err(e),
        })
    }
}

/// One read of a session's heartbeat, read after the lock that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Heartbeat {
    /// No object at the heartbeat's key.
    Absent,
    /// The heartbeat's record.
    Read(LeaseRecord),
    /// Not a lease record this build reads, or out of reach: why.
    Unreadable(String),
}

impl LockEntry {
    /// Sets the state of a lock held under a session from its session's
    /// heartbeat (`now` on this machine's clock): its holder never rewrites
    /// the lock while holding it, so the lock's own times say nothing. For
    /// a caller that reads a heartbeat [`LockListing`] could not reach;
    /// does nothing to an entry without a session or a released one.
    pub fn judge_session(&mut self, heartbeat: &Heartbeat, now: SystemTime) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        if self.state == LockState::Released {
            return;
        }
        let term = session.named.term;
        let (state, liveness) = match heartbeat {
            Heartbeat::Read(beat) if beat.token > term => {
                (LockState::Expired, SessionLiveness::Superseded)
            }
            Heartbeat::Read(beat) if beat.token == term && beat.released => {
                (LockState::Released, SessionLiveness::Released)
            }
            Heartbeat::Read(beat) if beat.token == term && beat.wall_expiry() <= now => {
                (LockState::Expired, SessionLiveness::Expired)
            }
            Heartbeat::Read(beat) if beat.token == term => {
                (LockState::Held, SessionLiveness::Alive)
            }
            // A contender takes it only after watching the absence for the
            // lock's TTL, which one read cannot do.
            Heartbeat::Read(_) | Heartbeat::Absent => (LockState::Held, SessionLiveness::Missing),
            Heartbeat::Unreadable(_) => (LockState::Unknown, SessionLiveness::Unreadable),
        };
        self.state = state;
        session.liveness = Some(liveness);
        session.problem = match heartbeat {
            Heartbeat::Unreadable(why) => Some(why.clone()),
            _ => None,
        };
    }
}

/// Whether `key` is one of the store guard's probe objects (at the root of
/// the store it guards, which may be any directory of this one).
fn is_guard_key(key: &str) -> bool {
    key.starts_with(GUARD_PREFIX) || key.contains(&format!("/{GUARD_PREFIX}"))
}

/// The lock a fair-mode queue ticket waits for, if `key` is a ticket.
fn ticket_of(key: &str) -> Option<&str> {
    let (lock, number) = key.rsplit_once(QUEUE_SUFFIX)?;
    (!lock.is_empty() && number.len() == 20 && number.bytes().all(|b| b.is_ascii_digit()))
        .then_some(lock)
}

fn wall(unix_ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(unix_ms)
}

/// The entry of the object at `full_key` (listed as `key`), and its record
/// when it is a lease.
fn entry(
    key: String,
    full_key: &str,
    layout: LeaseLayout,
    body: &[u8],
    version: String,
    now: SystemTime,
) -> (LockEntry, Option<LeaseRecord>) {
    let record = match LeaseRecord::decode(full_key, body) {
        Ok(record) => record,
        Err(e) => {
            let found = match e {
                LeaseError::ForeignObject { found, .. } => found,
                other => other.to_string(),
            };
            let entry = LockEntry {
                key,
                state: LockState::Foreign,
                holder: None,
                token: None,
                ttl: None,
                acquired_at: None,
                renewed_at: None,
                version,
                layout: None,
                waiting_for: None,
                found: Some(found),
                session: None,
            };
            return (entry, None);
        }
    };
    let mut state = if record.released {
        LockState::Released
    } else if record.wall_expiry() <= now {
        LockState::Expired
    } else {
        LockState::Held
    };
    // A ticket's waiter renews it as a holder renews a lock, but it holds
    // nothing: it waits for its turn.
    let waiting_for = ticket_of(&key).map(str::to_string);
    if waiting_for.is_some() && state == LockState::Held {
        state = LockState::Waiting;
    }
    // A session lock's liveness is set from its heartbeat later.
    let session = record.session.as_ref().map(|named| LockSession {
        named: named.clone(),
        heartbeat_key: named.heartbeat_key(full_key),
        liveness: None,
        problem: None,
    });
    let entry = LockEntry {
        key,
        state,
        holder: Some(record.owner.clone()),
        token: Some(record.token),
        ttl: Some(record.ttl()),
        acquired_at: Some(wall(record.acquired_at_ms)),
        renewed_at: Some(wall(record.renewed_at_ms)),
        version,
        layout: Some(layout),
        waiting_for,
        found: None,
        session,
    };
    (entry, Some(record))
}
