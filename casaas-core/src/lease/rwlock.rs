//! Shared and exclusive holdings: [`RwLock`], many readers or one writer.
//!
//! The writer holds the lock object itself, through the ordinary
//! [`Lease::acquire`]: exclusion among writers and the fencing token are
//! exactly the lease's. Each reader holds a lease of its own on a *slot*
//! under `{key}.readers/` (`{owner}.{n}`, the first slot of its owner not
//! held), renewed and expired like any lease.
//!
//! - **Read**: wait until the lock object is absent, released, or seen
//!   unchanged for its TTL (plus drift) on the reader's own clock; take a
//!   slot; read the lock object again. Unchanged, absent or released: the
//!   reader holds. Anything else means a writer arrived in between: the
//!   reader gives its slot back and waits again.
//! - **Write**: acquire the lock object (from then on no new reader
//!   passes its second read), then list the slots and wait for each one
//!   held to be released or to expire by the observed-unchanged rule. Only
//!   then does the writer hold.
//!
//! A reader's slot write lands before its second read, and the writer's
//! lock write before its listing: whichever of the two reads comes later
//! sees the other's write, so a reader and a writer never both pass. A
//! waiting writer holds the lock object, which stops new readers: writers
//! are not starved. The safety argument is in `docs/protocol.md`
//! (*Read-write locks*).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version};

use super::acquire::{AcquireOutcome, Lease};
use super::clock::Entropy;
use super::fair::{Budget, is_transient};
use super::handle::LeaseGuard;
use super::record::unix_ms;
use super::retry::{backoff, read_record, timed};
use super::wait::WaitOptions;
use super::{LeaseError, LostReason};

/// What follows a lock's key to name the folder of its readers' slots.
const READERS_SUFFIX: &str = ".readers/";

/// How many slots one owner may hold at once under one lock (readers of
/// one process holding the lock side by side each take one).
const MAX_SLOTS_PER_OWNER: u32 = 64;

/// A read-write lock: many readers at once, or one writer with a fencing
/// token.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{Lease, LeaseConfig, RwLock, WaitOptions};
///
/// let store = Arc::new(MemoryStore::new());
/// let lock = |owner: &str| -> Result<RwLock, casaas_core::lease::LeaseError> {
///     RwLock::new(Lease::new(store.clone(), "locks/table", owner, LeaseConfig::default())?)
/// };
/// let (a, b) = (lock("reader-a")?, lock("reader-b")?);
/// let ra = a.read(WaitOptions::default()).await?;
/// let rb = b.read(WaitOptions::default()).await?; // readers share
/// ra.release().await?;
/// rb.release().await?;
/// let writer = lock("writer")?.write(WaitOptions::default()).await?;
/// assert_eq!(writer.token(), 1); // the fencing token of the writer
/// writer.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    lease: Lease,
    readers: String,
    entropy: Entropy,
}

/// The lock object as a reader saw it free.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SeenFree {
    /// No lock object.
    Absent,
    /// Released, or held by a writer whose lease expired, at this version.
    At(Version),
}

/// The folder of the reader slots of the lock at `key`.
fn readers_of(key: &str) -> String {
    format!("{key}{READERS_SUFFIX}")
}

impl RwLock {
    /// A read-write lock on `lease`'s key: writers take the lease itself,
    /// readers take slots under [`readers_prefix`](RwLock::readers_prefix).
    /// The store must list keys and keep lease records in place (the
    /// record layout: create-only stores are refused), and the lease must
    /// not hang from a session.
    pub fn new(lease: Lease) -> Result<Self, LeaseError> {
        let store = lease.store();
        if !store.capabilities().list {
            return Err(LeaseError::Store(CasError::unsupported(format!(
                "{} cannot list keys; a read-write lock's writer lists its readers: take an ordinary (exclusive) lock instead",
                store.describe()
            ))));
        }
        if crate::layout::inner_identity(&store.identity()).is_some() {
            return Err(LeaseError::Store(CasError::unsupported(format!(
                "{} keeps leases as epochs (create-only); a read-write lock needs the record layout: take an ordinary (exclusive) lock instead",
                store.describe()
            ))));
        }
        if lease.session().is_some() {
            return Err(LeaseError::InvalidConfig(
                "a read-write lock cannot hang from a session: pass a Lease made with Lease::new"
                    .to_string(),
            ));
        }
        let readers = readers_of(lease.key());
        crate::validate_key(&format!("{readers}{}.{MAX_SLOTS_PER_OWNER}", lease.owner()))?;
        Ok(RwLock {
            lease,
            readers,
            entropy: Entropy::from_os(),
        })
    }

    /// Uses `entropy` for the slots' nonces and the polls' jitter.
    #[must_use = "the setter returns the changed lock"]
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = entropy;
        self
    }

    /// The lease writers take (the lock object itself).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Where the readers' slots live: the lock's key followed by `.readers/`.
    pub fn readers_prefix(&self) -> &str {
        &self.readers
    }

    /// Holds the lock shared: waits until no writer holds or waits, takes a
    /// reader slot, and checks that no writer came meanwhile (else gives
    /// the slot back and waits again), until held, the deadline passes or
    /// the token is cancelled. A deadline of zero makes one attempt.
    ///
    /// The guard is the slot's lease: renewed, lost and released like any
    /// lease (check [`LeaseGuard::ensure_held_for`] before each read of the
    /// protected data). Its token numbers the slot's holdings and fences
    /// nothing; only writers need fencing.
    ///
    /// Requests: 1 GET of the lock object per
    /// [`poll_period`](super::LeaseConfig::poll_period) while a writer
    /// holds or waits; 1 GET + 1 write to take a slot; 1 GET to check for
    /// writers; 1 write per `renew_interval` while held; 1 write to release.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while a slot is being taken is
    /// [`Lease::try_acquire`]'s case for the slot: a slot whose write lands
    /// unclaimed delays writers by one TTL·(1 + drift). At any other point
    /// the slot, if taken, is released in the background.
    #[must_use = "the shared holding ends as soon as the returned guard is dropped; hold it while you read"]
    pub async fn read(&self, options: WaitOptions) -> Result<LeaseGuard, LeaseError> {
        let span =
            tracing::info_span!("lease.read", key = %self.lease.key(), owner = %self.lease.owner());
        async {
            let budget = Budget::new(self.lease.clock().clone(), options);
            loop {
                let seen = self.wait_for_no_writer(&budget).await?;
                let slot = self.take_slot(&budget).await?;
                match self.writer_came(&seen).await {
                    Ok(false) => return Ok(slot),
                    Ok(true) => {
                        tracing::debug!(slot = %slot.key(), "a writer came while we took a slot; waiting behind it");
                        let _ = slot.release().await;
                    }
                    Err(err) if is_transient(&err) => {
                        let _ = slot.release().await;
                        let pause = backoff(&self.entropy, self.lease.config().retry_period, None);
                        budget.pause(pause).await?;
                    }
                    Err(err) => {
                        let _ = slot.release().await;
                        return Err(err);
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Holds the lock exclusively: acquires the lock object through
    /// [`Lease::acquire`] (new readers wait from then on), then waits for
    /// every reader slot to be released or to expire, until held, the
    /// deadline passes or the token is cancelled (a deadline of zero makes
    /// one attempt). The guard's token is the writer's fencing token.
    ///
    /// Requests: [`Lease::acquire`]'s; then 1 LIST of the slots, 1 GET per
    /// slot listed and per [`poll_period`](super::LeaseConfig::poll_period)
    /// while a reader holds it, 1 delete per released or expired slot
    /// (where the store deletes on a condition; else an expired slot is
    /// marked released with 1 write), and 1 LIST more once they are passed.
    ///
    /// # Cancel safety
    ///
    /// Cancelling through [`WaitOptions::cancel`] or the deadline releases
    /// the lock object before returning. Dropping the future drops the
    /// guard, whose release is sent in the background; while acquiring the
    /// lock object, it is [`Lease::acquire`]'s case.
    #[must_use = "the exclusive holding ends as soon as the returned guard is dropped; hold it while you write"]
    pub async fn write(&self, options: WaitOptions) -> Result<LeaseGuard, LeaseError> {
        let span = tracing::info_span!("lease.write", key = %self.lease.key(), owner = %self.lease.owner());
        async {
            let budget = Budget::new(self.lease.clock().clone(), options);
            let guard = self.lease.acquire(budget.remaining()).await?;
            match self.drain_readers(&guard, &budget).await {
                Ok(()) => Ok(guard),
                Err(err) => {
                    if let Err(release) = guard.release().await {
                        tracing::debug!(error = %release, "releasing the lock after a failed wait for readers failed; it will expire");
                    }
                    Err(err)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Polls the lock object until no writer holds or waits: absent,
    /// released, or the same version seen for the record's takeover wait.
    async fn wait_for_no_writer(&self, budget: &Budget) -> Result<SeenFree, LeaseError> {
        let config = self.lease.config();
        let clock = self.lease.clock();
        let mut first_seen: Option<(Version, Duration)> = None;
        loop {
            let pause = match self.lease.read().await {
                Ok(None) => return Ok(SeenFree::Absent),
                Ok(Some((record, version))) if record.released => {
                    return Ok(SeenFree::At(version));
                }
                Ok(Some((record, version))) => {
                    let now = clock.now();
                    let since = match &first_seen {
                        Some((seen, since)) if *seen == version => *since,
                        _ => {
                            first_seen = Some((version.clone(), now));
                            now
                        }
                    };
                    // A lock under a session lives as long as its session,
                    // which only its heartbeat shows: wait for its release.
                    let left = if record.session.is_some() {
                        config.poll_period
                    } else {
                        (since + config.takeover_wait(record.ttl())).saturating_sub(now)
                    };
                    if left.is_zero() {
                        tracing::info!(writer = %record.owner, token = record.token, "the writer's lease expired; reading");
                        return Ok(SeenFree::At(version));
                    }
                    left.min(config.poll_period)
                        .saturating_add(self.entropy.jitter(config.poll_jitter()))
                }
                Err(err) if is_transient(&err) => backoff(&self.entropy, config.retry_period, None),
                Err(err) => return Err(err),
            };
            budget.pause(pause).await?;
        }
    }

    /// Whether the lock object changed since it was `seen` free into
    /// anything but a released record (or nothing): a writer came.
    async fn writer_came(&self, seen: &SeenFree) -> Result<bool, LeaseError> {
        Ok(match self.lease.read().await? {
            None => false,
            Some((record, _)) if record.released => false,
            Some((_, version)) => *seen != SeenFree::At(version),
        })
    }

    /// The lease on slot `n` of this lock's owner.
    fn slot_lease(&self, n: u32) -> Result<Lease, LeaseError> {
        Ok(Lease::new(
            self.lease.store().clone(),
            format!("{}{}.{n}", self.readers, self.lease.owner()),
            self.lease.owner(),
            self.lease.config().clone(),
        )?
        .with_clock(self.lease.clock().clone())
        .with_entropy(Entropy::seeded(self.entropy.next_u64())))
    }

    /// Takes the first slot of this owner that is free (absent, released,
    /// or won from a lost race), retrying transient failures.
    async fn take_slot(&self, budget: &Budget) -> Result<LeaseGuard, LeaseError> {
        let mut n = 0;
        while n < MAX_SLOTS_PER_OWNER {
            match self.slot_lease(n)?.attempt().await {
                Ok(AcquireOutcome::Acquired(guard)) => return Ok(guard),
                // Held by another reader of ours (or one that crashed and
                // is not expired yet), or taken between our read and write.
                Ok(AcquireOutcome::Held(_)) => n += 1,
                Err(LeaseError::Store(err))
                    if matches!(
                        err.kind(),
                        ErrorKind::PreconditionFailed | ErrorKind::NotFound
                    ) =>
                {
                    n += 1;
                }
                Err(err) if is_transient(&err) => {
                    let pause = backoff(&self.entropy, self.lease.config().retry_period, None);
                    budget.pause(pause).await?;
                }
                Err(err) => return Err(err),
            }
        }
        Err(LeaseError::Contended {
            key: self.readers.clone(),
            attempts: MAX_SLOTS_PER_OWNER,
        })
    }

    /// Waits until every reader slot listed is released, gone or expired,
    /// while `guard` (the writer's holding of the lock object) is held.
    async fn drain_readers(&self, guard: &LeaseGuard, budget: &Budget) -> Result<(), LeaseError> {
        let config = self.lease.config();
        // Slots released at the version listed (where the store cannot
        // delete them): passed, without reading them again.
        let mut passed: HashSet<(String, Version)> = HashSet::new();
        // When each version of each slot was first seen, over the whole
        // wait: k crashed readers cost one expiry, not k.
        let mut first_seen: HashMap<(String, Version), Duration> = HashMap::new();
        // The slots of the round before: listed again unchanged (a listing
        // that lags behind our deletes), they wait a poll. The deadline is
        // checked by the pauses alone, so a deadline of zero still makes
        // one attempt.
        let mut previous: Vec<(String, Version)> = Vec::new();
        loop {
            ensure_held(guard)?;
            let listed = match timed(
                self.lease.clock().as_ref(),
                config.request_timeout,
                &self.readers,
                self.lease.store().list(&self.readers),
            )
            .await
            {
                Ok(listed) => listed,
                Err(err) if err.is_retryable() => {
                    let pause = backoff(&self.entropy, config.retry_period, Some(&err));
                    budget.pause(pause).await?;
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            let now = self.lease.clock().now();
            let live: Vec<(String, Version)> = listed
                .into_iter()
                .map(|e| (e.key, e.version))
                .filter(|slot| !passed.contains(slot))
                .collect();
            if live.is_empty() {
                return Ok(());
            }
            if live == previous {
                budget.pause(config.poll_period).await?;
            }
            previous.clone_from(&live);
            for slot in &live {
                first_seen.entry(slot.clone()).or_insert(now);
            }
            for (key, _) in live.iter().cloned() {
                if let Some(version) = self
                    .watch_slot(&key, guard, budget, &mut first_seen)
                    .await?
                {
                    passed.insert((key, version));
                }
            }
        }
    }

    /// Polls the slot at `key` until it is gone, released or expired
    /// (deleted where the store can; `Some(version)` when it stays as a
    /// released record at that version).
    async fn watch_slot(
        &self,
        key: &str,
        guard: &LeaseGuard,
        budget: &Budget,
        first_seen: &mut HashMap<(String, Version), Duration>,
    ) -> Result<Option<Version>, LeaseError> {
        let config = self.lease.config();
        let clock = self.lease.clock();
        loop {
            ensure_held(guard)?;
            let read = read_record(
                self.lease.store().as_ref(),
                clock.as_ref(),
                config.request_timeout,
                key,
            )
            .await;
            let pause = match read {
                Ok(None) => return Ok(None),
                Ok(Some((record, version))) if record.released => {
                    return Ok(self.remove_released(key, &version).await);
                }
                Ok(Some((record, version))) => {
                    let now = clock.now();
                    let since = *first_seen
                        .entry((key.to_string(), version.clone()))
                        .or_insert(now);
                    let left = (since + config.takeover_wait(record.ttl())).saturating_sub(now);
                    if left.is_zero() {
                        tracing::info!(slot = %key, reader = %record.owner, "a reader's slot expired; passing it");
                        return Ok(self.retire_expired(key, &record, &version).await);
                    }
                    left.min(config.poll_period)
                        .saturating_add(self.entropy.jitter(config.poll_jitter()))
                }
                Err(err) if is_transient(&err) => backoff(&self.entropy, config.retry_period, None),
                Err(err) => return Err(err),
            };
            budget.pause(pause).await?;
        }
    }

    /// Deletes a released slot on its version where the store can; else
    /// it stays, passed at that version (its owner takes it again later).
    async fn remove_released(&self, key: &str, version: &Version) -> Option<Version> {
        let store = self.lease.store();
        if !store.capabilities().conditional_delete {
            return Some(version.clone());
        }
        let clock = self.lease.clock().as_ref();
        let timeout = self.lease.config().request_timeout;
        match timed(clock, timeout, key, store.delete(key, version)).await {
            Ok(()) => None,
            Err(err) => {
                // Taken again meanwhile, or a lost answer: read it again.
                tracing::debug!(error = %err, slot = %key, "could not delete a released slot");
                None
            }
        }
    }

    /// Ends an expired slot seen at `version`: a delete on that version, or
    /// where the store cannot delete on a condition, a released record in
    /// its place (`Some` of the new version). Failing is harmless: the
    /// next read decides again.
    async fn retire_expired(
        &self,
        key: &str,
        record: &super::LeaseRecord,
        version: &Version,
    ) -> Option<Version> {
        let store: &Arc<dyn CasStore> = self.lease.store();
        let clock = self.lease.clock().as_ref();
        let timeout = self.lease.config().request_timeout;
        if store.capabilities().conditional_delete {
            if let Err(err) = timed(clock, timeout, key, store.delete(key, version)).await {
                tracing::debug!(error = %err, slot = %key, "could not delete an expired slot");
            }
            return None;
        }
        let mut released = record.clone();
        released.released = true;
        released.nonce = self.entropy.nonce();
        released.renewed_at_ms = unix_ms(clock.wall());
        match timed(
            clock,
            timeout,
            key,
            store.replace(key, version, released.encode()),
        )
        .await
        {
            Ok(version) => Some(version),
            Err(err) => {
                tracing::debug!(error = %err, slot = %key, "could not mark an expired slot released");
                None
            }
        }
    }
}

/// An error once the writer's holding of the lock object ended.
fn ensure_held(guard: &LeaseGuard) -> Result<(), LeaseError> {
    if guard.is_held() {
        Ok(())
    } else {
        Err(LeaseError::Lost(
            guard
                .lost_reason()
                .unwrap_or(LostReason::RenewDeadlineExceeded),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_live_beside_the_lock() {
        assert_eq!(readers_of("locks/a"), "locks/a.readers/");
    }
}
