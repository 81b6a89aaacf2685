//! Counting semaphores: [`Semaphore`] lets up to N holders in at once.
//!
//! A semaphore named `name` with N slots is N ordinary leases, at
//! `{name}.slots/0` … `{name}.slots/{N-1}`, and one record at `name` that
//! states N. Taking a permit is acquiring one free slot; each slot is a
//! lease like any other (its own fencing token, renewal, expiry by the
//! observer's monotonic clock, lost answers settled by the nonce), so
//! "never more than N holders" is the lease's "never two holders of one
//! key", N times over, and nothing new has to be argued except that every
//! caller counts the same N: the record at `name` is created once with N
//! and a caller asking for another count is refused before any slot is
//! touched.
//!
//! Waiters queue as [`FairLease`] waiters do (a ticket each under
//! `{name}.queue/`, each watching the one before); the head of the queue
//! takes the first slot that frees up. An arrival that finds the queue
//! empty tries the slots at once, without a ticket. Where tickets cannot
//! be kept (a store that cannot list, or the epoch layout of a create-only
//! store) the slots are polled without a queue: still never more than N
//! holders, without the promise of turns.
//!
//! The layout and the safety argument are in `docs/protocol.md`
//! (*Semaphores*).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::ErrorKind;

use super::LeaseError;
use super::acquire::{AcquireOutcome, HeldBy, Lease};
use super::clock::Entropy;
use super::fair::{Budget, FairLease, is_transient};
use super::handle::LeaseGuard;
use super::retry::{backoff, timed};
use super::wait::WaitOptions;

/// What follows a semaphore's name to name the folder of its slots.
const SLOTS_SUFFIX: &str = ".slots/";

/// The most slots a semaphore may have: a waiter at the head reads every
/// slot in turn, so a count far beyond this belongs to another tool.
pub const MAX_SLOTS: u32 = 1024;

/// How many times the record of the count is read and created before
/// giving up (it only goes missing again when deleted under us).
const CAPACITY_ATTEMPTS: u32 = 4;

/// The `kind` of the record at a semaphore's name.
const CAPACITY_KIND: &str = "casaas.semaphore";

/// The record at a semaphore's name: how many slots it has.
#[derive(Debug, Serialize, Deserialize)]
struct Capacity {
    kind: String,
    slots: u32,
}

/// A semaphore of N slots: up to N holders at once, each with the
/// [`LeaseGuard`] of its slot (a lease of its own, with its own fencing
/// token).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{Lease, LeaseConfig, Semaphore, WaitOptions};
///
/// let store = Arc::new(MemoryStore::new());
/// let jobs = |owner: &str| -> Result<Semaphore, casaas_core::lease::LeaseError> {
///     let lease = Lease::new(store.clone(), "locks/jobs", owner, LeaseConfig::default())?;
///     Semaphore::new(lease, 2)
/// };
/// let a = jobs("worker-1")?.acquire(WaitOptions::default()).await?;
/// let b = jobs("worker-2")?.acquire(WaitOptions::default()).await?;
/// assert_ne!(a.key(), b.key()); // two slots, one each
/// assert!(jobs("worker-3")?.try_acquire().await?.into_result().is_err()); // full
/// let freed = a.key().to_owned();
/// a.release().await?;
/// let c = jobs("worker-3")?.acquire(WaitOptions::default()).await?;
/// assert_eq!(c.key(), freed); // the slot given back
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    lease: Lease,
    slots: Arc<[Lease]>,
    queue: Option<FairLease>,
    entropy: Entropy,
    /// The slot this semaphore held last: tried first, so that taking it
    /// again after our own release is one write.
    last_slot: Arc<Mutex<Option<usize>>>,
    /// Whether the record at the name was found to state our count.
    capacity_checked: Arc<Mutex<bool>>,
}

/// The folder of the slots of the semaphore `name`.
fn slots_of(name: &str) -> String {
    format!("{name}{SLOTS_SUFFIX}")
}

/// Store errors that mean a race lost on one slot: try the next one.
fn lost_race(err: &LeaseError) -> bool {
    matches!(
        err.store_kind(),
        Some(ErrorKind::PreconditionFailed | ErrorKind::NotFound)
    )
}

/// Gives back a slot taken after the caller cancelled (the write was in
/// flight when the cancellation came).
async fn keep_unless_cancelled(
    guard: LeaseGuard,
    cancel: Option<&CancellationToken>,
) -> Result<LeaseGuard, LeaseError> {
    if cancel.is_some_and(CancellationToken::is_cancelled) {
        if let Err(err) = guard.release().await {
            tracing::debug!(error = %err, "releasing a slot taken after cancellation failed; it will expire");
        }
        return Err(LeaseError::Cancelled);
    }
    Ok(guard)
}

impl Semaphore {
    /// A semaphore of `slots` slots named by `lease`'s key, taken with
    /// `lease`'s owner, configuration, clock and session (a semaphore
    /// built from [`Session::lease`](super::Session::lease) holds its slots
    /// under that session). Every caller of one name must count the same
    /// `slots`: the first to take a slot records the count, and a caller
    /// that counts differently is refused with
    /// [`LeaseError::InvalidConfig`].
    pub fn new(lease: Lease, slots: u32) -> Result<Self, LeaseError> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(LeaseError::InvalidConfig(format!(
                "a semaphore has from 1 to {MAX_SLOTS} slots, not {slots}"
            )));
        }
        let entropy = Entropy::from_os();
        let prefix = slots_of(lease.key());
        let slot_leases = (0..slots)
            .map(|i| lease.sibling(format!("{prefix}{i}"), Entropy::seeded(entropy.next_u64())))
            .collect::<Result<Vec<_>, _>>()?;
        // Turns need tickets kept in place and listed; without them the
        // slots are polled, which keeps the count but promises no order.
        let queue = match FairLease::new(lease.clone()) {
            Ok(queue) => Some(queue.with_entropy(Entropy::seeded(entropy.next_u64()))),
            Err(LeaseError::Store(err)) if err.kind() == ErrorKind::Unsupported => {
                tracing::debug!(error = %err, "semaphore without a queue: waiters poll the slots");
                None
            }
            Err(err) => return Err(err),
        };
        Ok(Semaphore {
            lease,
            slots: slot_leases.into(),
            queue,
            entropy,
            last_slot: Arc::default(),
            capacity_checked: Arc::default(),
        })
    }

    /// Uses `entropy` for the order slots are tried in, the nonces of the
    /// slots and tickets, and the polls' jitter (a simulation's seed).
    #[must_use = "the setter returns the changed semaphore"]
    pub fn with_entropy(self, entropy: Entropy) -> Self {
        let slots: Arc<[Lease]> = self
            .slots
            .iter()
            .map(|s| s.clone().with_entropy(Entropy::seeded(entropy.next_u64())))
            .collect::<Vec<_>>()
            .into();
        let queue = self
            .queue
            .map(|q| q.with_entropy(Entropy::seeded(entropy.next_u64())));
        Semaphore {
            slots,
            queue,
            entropy,
            ..self
        }
    }

    /// The semaphore's name (the key of the record of its count).
    pub fn name(&self) -> &str {
        self.lease.key()
    }

    /// How many slots it has.
    pub fn slots(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }

    /// The key of slot `slot`'s lease: `{name}.slots/{slot}`.
    pub fn slot_key(&self, slot: u32) -> String {
        format!("{}{slot}", slots_of(self.name()))
    }

    /// The slot whose lease lives at `key` (a guard's
    /// [`key`](LeaseGuard::key)), if it is one of this semaphore's.
    pub fn slot_of(&self, key: &str) -> Option<u32> {
        let prefix = slots_of(self.name());
        let digits = key.strip_prefix(prefix.as_str())?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().filter(|s| *s < self.slots())
    }

    /// Whether waiters queue for turns (`false`: they poll the slots, on a
    /// store that cannot list or keeps leases as epochs).
    pub fn is_fair(&self) -> bool {
        self.queue.is_some()
    }

    /// One pass over the slots: the first free one is taken. `Held` names
    /// the holder whose slot could be taken over soonest.
    ///
    /// Requests: 1 GET once per `Semaphore` (and its clones) to check the
    /// count (1 create instead on first use of the name); then per slot
    /// tried, 1 GET, and 1 write for the one taken: 1 GET + 1 write when
    /// the first slot tried is free, and the slot this semaphore held last
    /// is tried first (1 write alone when nobody wrote it since our
    /// release). When every slot is held, N GETs.
    ///
    /// # Cancel safety
    ///
    /// [`Lease::try_acquire`]'s, for the slot being tried.
    #[must_use = "an acquired slot is given up as soon as the returned guard is dropped"]
    pub async fn try_acquire(&self) -> Result<AcquireOutcome, LeaseError> {
        let span = tracing::debug_span!("semaphore.try_acquire", name = %self.name(), owner = %self.lease.owner());
        async {
            self.check_capacity().await?;
            self.pass().await
        }
        .instrument(span)
        .await
    }

    /// Takes a slot, waiting while all are held, until acquired, the
    /// deadline passes or the token is cancelled. An arrival that finds no
    /// one queued tries the slots at once; else it queues (a ticket, as
    /// [`FairLease::acquire`] takes) and at the head of the queue takes the
    /// first slot that frees up, polling the slots every
    /// [`poll_period`](super::LeaseConfig::poll_period) (sooner when a
    /// takeover falls due).
    ///
    /// Requests, when a slot is free: 1 LIST of the queue, then
    /// [`try_acquire`](Semaphore::try_acquire)'s. Waiting: the ticket's
    /// (see [`FairLease::acquire`]), and at the head N GETs per poll.
    ///
    /// # Cancel safety
    ///
    /// [`FairLease::acquire`]'s; at the head, [`Lease::acquire`]'s for the
    /// slot being tried.
    #[must_use = "the slot is given up as soon as the returned guard is dropped; hold it while you work"]
    pub async fn acquire(&self, options: WaitOptions) -> Result<LeaseGuard, LeaseError> {
        let span = tracing::info_span!("semaphore.acquire", name = %self.name(), owner = %self.lease.owner());
        async {
            self.check_capacity().await?;
            let Some(queue) = &self.queue else {
                return self.wait_for_slot(options).await;
            };
            // Nobody waiting: a free slot is ours without a ticket.
            let cancel = options.cancel.clone();
            let budget = Budget::new(self.lease.clock().clone(), options);
            loop {
                match queue.queue_is_empty().await {
                    Ok(false) => break,
                    Ok(true) => match self.pass().await {
                        Ok(AcquireOutcome::Acquired(guard)) => {
                            return keep_unless_cancelled(guard, cancel.as_ref()).await;
                        }
                        Ok(AcquireOutcome::Held(_)) => break,
                        Err(err) if is_transient(&err) => {
                            let pause =
                                backoff(&self.entropy, self.lease.config().retry_period, None);
                            budget.pause(pause).await?;
                        }
                        Err(err) => return Err(err),
                    },
                    Err(err) if is_transient(&err) => {
                        let pause = backoff(&self.entropy, self.lease.config().retry_period, None);
                        budget.pause(pause).await?;
                    }
                    Err(err) => return Err(err),
                }
            }
            queue
                .acquire_in_turn(budget.remaining(), |remaining| {
                    self.wait_for_slot(remaining)
                })
                .await
        }
        .instrument(span)
        .await
    }

    /// Polls the slots until one is taken.
    async fn wait_for_slot(&self, options: WaitOptions) -> Result<LeaseGuard, LeaseError> {
        let cancel = options.cancel.clone();
        let budget = Budget::new(self.lease.clock().clone(), options);
        let config = self.lease.config();
        // The deadline is checked by the pauses: a deadline of zero makes
        // one pass.
        loop {
            if cancel.as_ref().is_some_and(CancellationToken::is_cancelled) {
                return Err(LeaseError::Cancelled);
            }
            let wait = match self.pass().await {
                Ok(AcquireOutcome::Acquired(guard)) => {
                    return keep_unless_cancelled(guard, cancel.as_ref()).await;
                }
                Ok(AcquireOutcome::Held(held)) => held
                    .takeover_in
                    .min(config.poll_period)
                    .saturating_add(self.entropy.jitter(config.poll_jitter())),
                Err(err) if is_transient(&err) => {
                    tracing::debug!(error = %err, "retrying the slots");
                    backoff(&self.entropy, config.retry_period, None)
                }
                Err(err) => return Err(err),
            };
            budget.pause(wait).await?;
        }
    }

    /// The order of one pass: the slots we released last (one write each
    /// to take again if nobody wrote since), the slot taken last, then the
    /// others from a random one on (arrivals at one moment spread over the
    /// slots).
    fn order(&self) -> Vec<usize> {
        let n = self.slots.len();
        let last = *self.last_slot.lock().unwrap_or_else(|p| p.into_inner());
        let start = usize::try_from(self.entropy.next_u64() % n as u64).unwrap_or(0);
        let mut order: Vec<usize> = (0..n)
            .filter(|i| self.slots[*i].remembers_release())
            .collect();
        order.extend(last.filter(|l| !order.contains(l)));
        let first = order.clone();
        order.extend(
            (0..n)
                .map(|i| (start + i) % n)
                .filter(|i| !first.contains(i)),
        );
        order
    }

    /// One attempt at each slot, in [`order`](Semaphore::order), until one
    /// is taken. A race lost on a slot moves on to the next; a store error
    /// on one is returned only when no slot was free.
    async fn pass(&self) -> Result<AcquireOutcome, LeaseError> {
        let mut soonest: Option<HeldBy> = None;
        let mut failed: Option<LeaseError> = None;
        for slot in self.order() {
            match self.slots[slot].attempt().await {
                Ok(AcquireOutcome::Acquired(guard)) => {
                    *self.last_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(slot);
                    tracing::debug!(slot, token = guard.token(), "took a slot");
                    return Ok(AcquireOutcome::Acquired(guard));
                }
                Ok(AcquireOutcome::Held(held)) => {
                    if soonest
                        .as_ref()
                        .is_none_or(|s| held.takeover_in < s.takeover_in)
                    {
                        soonest = Some(held);
                    }
                }
                // Taken between our read and our write: someone as recent
                // as us; the next slot may still be free.
                Err(err) if lost_race(&err) => {
                    soonest
                        .get_or_insert_with(|| HeldBy::new(self.lease.owner(), 0, Duration::ZERO));
                }
                Err(err) if is_transient(&err) || err.may_have_taken_effect() => {
                    failed.get_or_insert(err);
                }
                Err(err) => return Err(err),
            }
        }
        match (failed, soonest) {
            (Some(err), _) => Err(err),
            (None, Some(held)) => Ok(AcquireOutcome::Held(held)),
            (None, None) => Err(LeaseError::InvalidConfig(
                "a semaphore without slots".to_string(),
            )),
        }
    }

    /// Makes sure the record at the name states our count: creates it on
    /// first use, reads it once per `Semaphore` after. Any answer settles a
    /// lost one (a create's body is the same whoever wrote it).
    async fn check_capacity(&self) -> Result<(), LeaseError> {
        if *self
            .capacity_checked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
        {
            return Ok(());
        }
        let key = self.name();
        let store = self.lease.store();
        let clock = self.lease.clock().as_ref();
        let timeout = self.lease.config().request_timeout;
        let mut found = None;
        for _ in 0..CAPACITY_ATTEMPTS {
            if let Some(object) = timed(clock, timeout, key, store.get(key)).await? {
                found = Some(object.body);
                break;
            }
            let body = Capacity {
                kind: CAPACITY_KIND.to_string(),
                slots: self.slots(),
            };
            let body = serde_json::to_vec(&body).map_err(|e| LeaseError::Codec {
                key: key.to_string(),
                message: e.to_string(),
            })?;
            match timed(clock, timeout, key, store.create(key, Bytes::from(body))).await {
                Ok(_) => {
                    *self
                        .capacity_checked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = true;
                    return Ok(());
                }
                // Someone's create came first, or ours may have landed:
                // the read decides.
                Err(err)
                    if err.kind() == ErrorKind::PreconditionFailed
                        || err.may_have_taken_effect() => {}
                Err(err) => return Err(err.into()),
            }
        }
        let Some(found) = found else {
            return Err(LeaseError::Contended {
                key: key.to_string(),
                attempts: CAPACITY_ATTEMPTS,
            });
        };
        let capacity: Capacity = match serde_json::from_slice::<Capacity>(&found) {
            Ok(c) if c.kind == CAPACITY_KIND => c,
            _ => {
                return Err(LeaseError::ForeignObject {
                    key: key.to_string(),
                    found: String::from_utf8_lossy(&found[..found.len().min(64)])
                        .chars()
                        .map(|c| if c.is_control() { '?' } else { c })
                        .collect(),
                });
            }
        };
        if capacity.slots != self.slots() {
            return Err(LeaseError::InvalidConfig(format!(
                "the semaphore '{key}' has {} slots (recorded when it was first used), and this caller counts {}: every caller of one semaphore must pass the same count (--slots {} with the casaas command), or use another name",
                capacity.slots,
                self.slots(),
                capacity.slots
            )));
        }
        *self
            .capacity_checked
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::lease::LeaseConfig;

    fn semaphore(store: &Arc<MemoryStore>, owner: &str, slots: u32) -> Semaphore {
        let lease = Lease::new(store.clone(), "locks/s", owner, LeaseConfig::default())
            .expect("valid lease");
        Semaphore::new(lease, slots).expect("valid semaphore")
    }

    #[test]
    fn slot_keys_name_slots_below_the_count_only() {
        let store = Arc::new(MemoryStore::new());
        let s = semaphore(&store, "a", 3);
        assert_eq!(s.slot_key(2), "locks/s.slots/2");
        assert_eq!(s.slot_of("locks/s.slots/2"), Some(2));
        assert_eq!(s.slot_of("locks/s.slots/3"), None);
        assert_eq!(s.slot_of("locks/s.slots/"), None);
        assert_eq!(s.slot_of("locks/s.slots/1x"), None);
        assert_eq!(s.slot_of("locks/t.slots/1"), None);
    }

    #[test]
    fn a_count_of_zero_or_past_the_maximum_is_refused() {
        let store = Arc::new(MemoryStore::new());
        let lease = Lease::new(store, "locks/s", "a", LeaseConfig::default()).expect("lease");
        for slots in [0, MAX_SLOTS + 1] {
            let err = Semaphore::new(lease.clone(), slots).expect_err("refused");
            assert!(matches!(err, LeaseError::InvalidConfig(_)), "{err}");
        }
    }

    #[tokio::test]
    async fn never_more_holders_than_slots_and_each_slot_has_its_own_tokens() {
        let store = Arc::new(MemoryStore::new());
        let mut guards = Vec::new();
        for i in 0..3 {
            let s = semaphore(&store, &format!("w{i}"), 3);
            guards.push(
                s.try_acquire()
                    .await
                    .expect("no error")
                    .into_result()
                    .expect("free"),
            );
        }
        let mut keys: Vec<_> = guards.iter().map(|g| g.key().to_string()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 3);
        assert!(guards.iter().all(|g| g.token() == 1));
        let fourth = semaphore(&store, "w3", 3);
        assert!(
            fourth
                .try_acquire()
                .await
                .expect("no error")
                .into_result()
                .is_err()
        );
        let freed = guards.remove(0);
        let key = freed.key().to_string();
        freed.release().await.expect("released");
        let taken = fourth
            .try_acquire()
            .await
            .expect("no error")
            .into_result()
            .expect("free");
        assert_eq!((taken.key(), taken.token()), (key.as_str(), 2));
    }

    #[tokio::test]
    async fn a_caller_that_counts_differently_is_refused() {
        let store = Arc::new(MemoryStore::new());
        let first = semaphore(&store, "a", 2);
        let _held = first.try_acquire().await.expect("no error");
        let other = semaphore(&store, "b", 3);
        let err = other.try_acquire().await.expect_err("refused");
        let message = err.to_string();
        assert!(matches!(err, LeaseError::InvalidConfig(_)), "{message}");
        assert!(
            message.contains("has 2 slots") && message.contains("--slots 2"),
            "{message}"
        );
        let err = other
            .acquire(WaitOptions::default())
            .await
            .expect_err("refused");
        assert!(matches!(err, LeaseError::InvalidConfig(_)), "{err}");
    }

    #[tokio::test]
    async fn a_lock_at_the_name_is_not_taken_for_a_semaphore() {
        let store = Arc::new(MemoryStore::new());
        let lock =
            Lease::new(store.clone(), "locks/s", "a", LeaseConfig::default()).expect("lease");
        let _guard = lock.try_acquire().await.expect("no error");
        let err = semaphore(&store, "b", 2)
            .try_acquire()
            .await
            .expect_err("refused");
        assert!(matches!(err, LeaseError::ForeignObject { .. }), "{err}");
    }
}
