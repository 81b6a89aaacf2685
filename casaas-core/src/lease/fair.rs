//! Fair turns: [`FairLease`] serves waiters in the order they arrived.
//!
//! A waiter first takes a *ticket*: a lease record created with
//! create-if-absent at `{key}.queue/{n}` (twenty digits), `n` one past the
//! highest ticket listed, renewed by its waiter like any lease. It then
//! watches only its predecessor, the highest ticket below its own (as
//! ZooKeeper's lock recipe does), and when none is left it is at the head
//! and acquires the lock through the ordinary [`Lease::acquire`]: the lock
//! object stays the single point of decision, so exclusion and fencing are
//! exactly the lease's. Once it holds the lock, it ends its ticket and its
//! successor becomes the head. A ticket whose waiter crashed expires by the
//! lease's observed-unchanged rule: its successor, having seen the same
//! version for the record's TTL (plus drift), removes it and moves on.
//!
//! What this promises and what not is in `docs/protocol.md` (*Fair turns*):
//! in short, first come first served among waiters that use `FairLease`
//! and arrive one after another; a waiter using [`Lease`] directly can
//! still take the lock ahead of the queue.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version};

use super::LeaseError;
use super::acquire::{AcquireOutcome, Lease};
use super::clock::{Clock, Entropy};
use super::handle::LeaseGuard;
use super::record::{LeaseRecord, unix_ms};
use super::retry::{backoff, read_record, timed};
use super::wait::WaitOptions;

/// What follows a lock's key to name the folder of its tickets.
const QUEUE_SUFFIX: &str = ".queue/";

/// How many tickets taken by others in a row one arrival tries past before
/// giving up with [`LeaseError::Contended`] (each loss lists the queue
/// again, so one loss is one more arrival that came at the same moment).
const MAX_TICKET_RACES: u32 = 64;

/// How many times the end of a ticket is tried when its renewal moved its
/// version under us.
const END_TICKET_ATTEMPTS: u32 = 3;

/// A [`Lease`] whose blocking acquisition serves waiters in arrival order.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{FairLease, Lease, LeaseConfig, WaitOptions};
///
/// let store = Arc::new(MemoryStore::new());
/// let lease = Lease::new(store, "locks/report", "worker-1", LeaseConfig::default())?;
/// let fair = FairLease::new(lease)?;
/// assert_eq!(fair.queue_prefix(), "locks/report.queue/");
/// let guard = fair.acquire(WaitOptions::default()).await?;
/// assert_eq!(guard.token(), 1);
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct FairLease {
    lease: Lease,
    queue: String,
    entropy: Entropy,
}

/// A ticket of ours in the queue.
struct Ticket {
    number: u64,
    guard: LeaseGuard,
}

/// Whether a waiter reached the head of the queue or lost its ticket (it
/// was taken for a crashed waiter's, e.g. after a long pause).
enum Turn {
    Head,
    TicketLost,
}

/// The deadline and cancellation of one blocking acquisition (shared with
/// the read-write lock's waits).
pub(super) struct Budget {
    clock: Arc<dyn Clock>,
    start: Duration,
    deadline: Option<Duration>,
    cancel: CancellationToken,
}

impl Budget {
    pub(super) fn new(clock: Arc<dyn Clock>, options: WaitOptions) -> Self {
        Budget {
            start: clock.now(),
            clock,
            deadline: options.deadline,
            cancel: options.cancel.unwrap_or_default(),
        }
    }

    /// An error once cancelled or past the deadline.
    pub(super) fn check(&self) -> Result<(), LeaseError> {
        if self.cancel.is_cancelled() {
            return Err(LeaseError::Cancelled);
        }
        let elapsed = self.clock.now().saturating_sub(self.start);
        match self.deadline {
            Some(deadline) if elapsed >= deadline => Err(LeaseError::DeadlineExceeded(elapsed)),
            _ => Ok(()),
        }
    }

    /// Sleeps `wait`, cut short by the deadline or the cancellation.
    pub(super) async fn pause(&self, wait: Duration) -> Result<(), LeaseError> {
        self.check()?;
        let elapsed = self.clock.now().saturating_sub(self.start);
        let wait = match self.deadline {
            Some(deadline) => wait.min(deadline.saturating_sub(elapsed)),
            None => wait,
        };
        tokio::select! {
            // Polled in order, so that a replayed run takes the same branch.
            biased;
            () = self.cancel.cancelled() => Err(LeaseError::Cancelled),
            () = self.clock.sleep(wait) => Ok(()),
        }
    }

    /// The options of what is left of this acquisition.
    pub(super) fn remaining(&self) -> WaitOptions {
        let elapsed = self.clock.now().saturating_sub(self.start);
        let options = WaitOptions::default().with_cancel(self.cancel.clone());
        match self.deadline {
            Some(d) => options.with_deadline(d.saturating_sub(elapsed)),
            None => options,
        }
    }
}

/// The folder of the tickets of the lock at `key`.
fn queue_of(key: &str) -> String {
    format!("{key}{QUEUE_SUFFIX}")
}

/// The key of ticket `number`: zero-padded, so that keys sort as numbers.
fn ticket_key(queue: &str, number: u64) -> String {
    format!("{queue}{number:020}")
}

/// The ticket number of `key`, if it names a ticket in `queue`.
fn ticket_number(queue: &str, key: &str) -> Option<u64> {
    let digits = key.strip_prefix(queue)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Store errors worth another try after a pause.
pub(super) fn is_transient(err: &LeaseError) -> bool {
    matches!(err, LeaseError::Store(e) if e.is_retryable())
}

impl FairLease {
    /// Fair turns for `lease`: its tickets live under
    /// [`queue_prefix`](FairLease::queue_prefix). The store must list keys
    /// and keep lease records in place (the record layout: fair mode is not
    /// offered on create-only stores).
    pub fn new(lease: Lease) -> Result<Self, LeaseError> {
        let store = lease.store();
        if !store.capabilities().list {
            return Err(LeaseError::Store(CasError::unsupported(format!(
                "{} cannot list keys; fair turns need to list the tickets of a lock: take the lock without fair turns",
                store.describe()
            ))));
        }
        if crate::layout::inner_identity(&store.identity()).is_some() {
            return Err(LeaseError::Store(CasError::unsupported(format!(
                "{} keeps leases as epochs (create-only); fair turns need the record layout: take the lock without fair turns",
                store.describe()
            ))));
        }
        let queue = queue_of(lease.key());
        crate::validate_key(&ticket_key(&queue, 0))?;
        Ok(FairLease {
            lease,
            queue,
            entropy: Entropy::from_os(),
        })
    }

    /// Uses `entropy` for the tickets' nonces and the polls' jitter.
    #[must_use = "the setter returns the changed lease"]
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = entropy;
        self
    }

    /// The lease taken in turn (its `try_acquire` and `acquire` barge).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Where the tickets of this lock live: its key followed by `.queue/`.
    pub fn queue_prefix(&self) -> &str {
        &self.queue
    }

    /// Takes a ticket at the back of the queue, waits for every ticket
    /// before it to end, then acquires through [`Lease::acquire`], until
    /// acquired, the deadline passes or the token is cancelled. The ticket
    /// ends (is deleted) once the lock is held or the wait is given up.
    ///
    /// Requests per waiter: 1 LIST + 1 GET + 1 create to take a ticket;
    /// 1 GET of its predecessor per [`poll_period`](super::LeaseConfig::poll_period)
    /// while waiting, 1 LIST each time the predecessor goes, 1 write per
    /// `renew_interval` to keep the ticket; at the head, the lease's own
    /// polling of the lock; 1 delete to end the ticket.
    ///
    /// # Cancel safety
    ///
    /// Cancelling through [`WaitOptions::cancel`] ends the ticket before
    /// returning. Dropping the future drops the ticket's guard: its renewal
    /// stops and a release is sent in the background (best effort), after
    /// which the waiters behind pass it (a released ticket counts as gone);
    /// if that release does not land they pass it once it expires, one
    /// TTL·(1 + drift) after they first see it. The ticket object may stay
    /// in the queue until a waiter deletes it. At the head of the queue, a
    /// drop is [`Lease::acquire`]'s case.
    #[must_use = "the lease is given up as soon as the returned guard is dropped; hold it while you work"]
    pub async fn acquire(&self, options: WaitOptions) -> Result<LeaseGuard, LeaseError> {
        self.acquire_in_turn(options, |remaining| self.lease.acquire(remaining))
            .await
    }

    /// [`acquire`](FairLease::acquire) with `at_head` in place of
    /// [`Lease::acquire`] once at the head of the queue (the semaphore
    /// takes a free slot there): the queue decides who asks, `at_head`
    /// what is taken.
    pub(super) async fn acquire_in_turn<F, Fut>(
        &self,
        options: WaitOptions,
        at_head: F,
    ) -> Result<LeaseGuard, LeaseError>
    where
        F: Fn(WaitOptions) -> Fut,
        Fut: std::future::Future<Output = Result<LeaseGuard, LeaseError>>,
    {
        let span = tracing::info_span!("lease.fair_acquire", key = %self.lease.key(), owner = %self.lease.owner());
        async {
            let budget = Budget::new(self.lease.clock().clone(), options);
            loop {
                let ticket = self.take_ticket(&budget).await?;
                let turn = self.wait_for_turn(&ticket, &budget).await;
                match turn {
                    Ok(Turn::Head) => {
                        tracing::debug!(ticket = ticket.number, "at the head of the queue");
                        let acquired = at_head(budget.remaining()).await;
                        // The guard goes back at once: ending the ticket (a
                        // delete, maybe a read and more tries) runs on its
                        // own, not out of the new holder's validity.
                        if acquired.is_ok() {
                            self.end_ticket_in_background(ticket).await;
                        } else {
                            self.end_ticket(ticket).await;
                        }
                        return acquired;
                    }
                    Ok(Turn::TicketLost) => {
                        // Someone took our ticket for a crashed waiter's: back
                        // to the end of the queue, as a new arrival.
                        tracing::info!(
                            ticket = ticket.number,
                            "lost our place in the queue; queueing again"
                        );
                        // End the old record (its delete checks owner and
                        // token, so someone else's is never touched): our new
                        // ticket must not wait behind our own ghost. Then
                        // pause, so that a ticket lost at once every time
                        // does not spin.
                        self.end_ticket(ticket).await;
                        let pause = backoff(&self.entropy, self.lease.config().retry_period, None);
                        budget.pause(pause).await?;
                    }
                    Err(err) => {
                        self.end_ticket(ticket).await;
                        return Err(err);
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Whether no ticket is listed in the queue (one LIST): an arrival
    /// then has nobody to wait behind.
    pub(super) async fn queue_is_empty(&self) -> Result<bool, LeaseError> {
        Ok(self.list_tickets().await?.is_empty())
    }

    /// The tickets listed in the queue, by number.
    async fn list_tickets(&self) -> Result<Vec<(u64, Version)>, LeaseError> {
        let config = self.lease.config();
        let store = self.lease.store();
        let entries = timed(
            self.lease.clock().as_ref(),
            config.request_timeout,
            &self.queue,
            store.list(&self.queue),
        )
        .await?;
        let mut tickets: Vec<(u64, Version)> = entries
            .into_iter()
            .filter_map(|e| ticket_number(&self.queue, &e.key).map(|n| (n, e.version)))
            .collect();
        tickets.sort_by_key(|(n, _)| *n);
        Ok(tickets)
    }

    /// A lease on ticket `number`, held by this waiter while it waits.
    fn ticket_lease(&self, number: u64) -> Result<Lease, LeaseError> {
        let lease = Lease::new(
            self.lease.store().clone(),
            ticket_key(&self.queue, number),
            self.lease.owner(),
            self.lease.config().clone(),
        )?
        .with_clock(self.lease.clock().clone())
        .with_entropy(Entropy::seeded(self.entropy.next_u64()));
        Ok(lease)
    }

    /// Creates the ticket one past the highest listed; a number someone
    /// else took first moves us one further. A foreign object at a ticket's
    /// key is an error and is left untouched.
    async fn take_ticket(&self, budget: &Budget) -> Result<Ticket, LeaseError> {
        loop {
            budget.check()?;
            match self.try_take_ticket().await {
                Err(err) if is_transient(&err) => {
                    tracing::debug!(error = %err, "retrying to take a ticket");
                    let pause = backoff(&self.entropy, self.lease.config().retry_period, None);
                    budget.pause(pause).await?;
                }
                taken => return taken,
            }
        }
    }

    async fn try_take_ticket(&self) -> Result<Ticket, LeaseError> {
        let mut number = self.next_number(0).await?;
        for lost in 1..=MAX_TICKET_RACES {
            match self.ticket_lease(number)?.attempt().await {
                Ok(AcquireOutcome::Acquired(guard)) => {
                    tracing::debug!(ticket = number, "took a ticket");
                    return Ok(Ticket { number, guard });
                }
                Ok(AcquireOutcome::Held(_)) => {}
                // The number changed hands between our read and our write
                // (taken, ended, or deleted meanwhile): a race lost too.
                Err(LeaseError::Store(err))
                    if matches!(
                        err.kind(),
                        ErrorKind::PreconditionFailed | ErrorKind::NotFound
                    ) => {}
                Err(err) => return Err(err),
            }
            // Taken by an arrival as recent as ours. A crowd that arrived at
            // once all list the same highest ticket, so the next try skips a
            // random few numbers past it (more after each loss): the crowd
            // spreads out in a few rounds instead of one winner per round.
            // Numbers need not be contiguous.
            let spread = self.entropy.next_u64() % u64::from(lost * 2);
            number = self.next_number(number).await?.saturating_add(spread);
        }
        Err(LeaseError::Contended {
            key: self.queue.clone(),
            attempts: MAX_TICKET_RACES,
        })
    }

    /// One past the highest ticket listed, and past `taken`.
    async fn next_number(&self, taken: u64) -> Result<u64, LeaseError> {
        let listed = self.list_tickets().await?;
        let highest = listed.last().map_or(0, |(n, _)| *n).max(taken);
        highest.checked_add(1).ok_or_else(|| LeaseError::Exhausted {
            key: self.queue.clone(),
            counter: "ticket number",
        })
    }

    /// Waits until no live ticket is listed before ours.
    async fn wait_for_turn(&self, ticket: &Ticket, budget: &Budget) -> Result<Turn, LeaseError> {
        // Tickets ended by a release record (on stores without conditional
        // delete) at the version listed: gone, without reading them again.
        let mut passed: HashSet<(u64, Version)> = HashSet::new();
        // When each version of each ticket ahead was first seen, over the
        // whole wait (from every LIST and GET): a ticket already seen
        // unchanged long enough is removed at once when its turn to be
        // watched comes, so k crashed waiters cost one expiry, not k.
        let mut first_seen: HashMap<(u64, Version), Duration> = HashMap::new();
        // The ticket last watched until it was not found (or removed): if
        // the next LIST still names it, the listing lags, so pause.
        let mut gone: Option<u64> = None;
        loop {
            budget.check()?;
            if !ticket.guard.is_held() {
                return Ok(Turn::TicketLost);
            }
            let listed = match self.list_tickets().await {
                Ok(listed) => listed,
                Err(err) if is_transient(&err) => {
                    let pause = backoff(&self.entropy, self.lease.config().retry_period, None);
                    budget.pause(pause).await?;
                    continue;
                }
                Err(err) => return Err(err),
            };
            let now = self.lease.clock().now();
            for (n, v) in &listed {
                if *n < ticket.number {
                    first_seen.entry((*n, v.clone())).or_insert(now);
                }
            }
            let predecessor = listed
                .into_iter()
                .rfind(|(n, v)| *n < ticket.number && !passed.contains(&(*n, v.clone())));
            let Some((number, _)) = predecessor else {
                return Ok(Turn::Head);
            };
            if gone == Some(number) {
                // Listed again after it was found gone: the listing lags.
                budget.pause(self.lease.config().poll_period).await?;
            }
            match self.watch(number, ticket, budget, &mut first_seen).await? {
                Some(released) => {
                    passed.insert((number, released));
                    gone = None;
                }
                None => gone = Some(number),
            }
        }
    }

    /// Polls ticket `number` until it is gone, released (its version is
    /// returned) or expired (then removed), or our own ticket is lost.
    async fn watch(
        &self,
        number: u64,
        ticket: &Ticket,
        budget: &Budget,
        first_seen: &mut HashMap<(u64, Version), Duration>,
    ) -> Result<Option<Version>, LeaseError> {
        let key = ticket_key(&self.queue, number);
        let config = self.lease.config();
        let clock = self.lease.clock();
        loop {
            let read = read_record(
                self.lease.store().as_ref(),
                clock.as_ref(),
                config.request_timeout,
                &key,
            )
            .await;
            let pause = match read {
                Ok(None) => return Ok(None),
                Ok(Some((record, version))) if record.released => {
                    return Ok(self.clear_released(&key, &version).await);
                }
                Ok(Some((record, version))) => {
                    let now = clock.now();
                    let since = *first_seen.entry((number, version.clone())).or_insert(now);
                    let left = (since + config.takeover_wait(record.ttl())).saturating_sub(now);
                    if left.is_zero() {
                        tracing::info!(ticket = number, waiter = %record.owner, "a waiter's ticket expired; removing it");
                        return Ok(self.remove_expired(&key, &record, &version).await);
                    }
                    left.min(config.poll_period)
                        .saturating_add(self.entropy.jitter(config.poll_jitter()))
                }
                Err(err) if is_transient(&err) => {
                    tracing::debug!(error = %err, "retrying to read the ticket ahead");
                    backoff(&self.entropy, config.retry_period, None)
                }
                Err(err) => return Err(err),
            };
            if !ticket.guard.is_held() {
                return Ok(None);
            }
            budget.pause(pause).await?;
        }
    }

    /// A ticket ended by a release record (its waiter's guard was dropped,
    /// or the store cannot delete on a condition): removed, or where even
    /// that fails, returned as passed so it is not read again.
    async fn clear_released(&self, key: &str, version: &Version) -> Option<Version> {
        match self.remove_released(key, version).await {
            Ok(()) => None,
            Err(err) => {
                tracing::debug!(error = %err, %key, "could not delete a released ticket");
                Some(version.clone())
            }
        }
    }

    /// Deletes a released ticket: on its version where the store can make a
    /// delete conditional, else unconditionally. The unconditional delete
    /// can only meet a waiter that took this number again since (a race at
    /// the tail of the queue); that waiter loses its ticket and queues
    /// again, which costs it its place, never exclusion (the lock decides).
    async fn remove_released(&self, key: &str, version: &Version) -> Result<(), CasError> {
        let store = self.lease.store();
        let clock = self.lease.clock().as_ref();
        let timeout = self.lease.config().request_timeout;
        if store.capabilities().conditional_delete {
            timed(clock, timeout, key, store.delete(key, version)).await
        } else {
            timed(clock, timeout, key, store.delete_unconditionally(key)).await
        }
    }

    /// Ends an expired ticket seen at `version`; `Some(version)` when it
    /// could only be marked released (the store cannot delete on a
    /// condition). Failing is harmless: the next read decides again.
    async fn remove_expired(
        &self,
        key: &str,
        record: &LeaseRecord,
        version: &Version,
    ) -> Option<Version> {
        match self.retire(key, record, version).await {
            Ok(released) => released,
            Err(err) => {
                tracing::debug!(error = %err, %key, "could not remove an expired ticket");
                None
            }
        }
    }

    /// Ends the ticket at `key` seen at `version`: deletes it on that
    /// version, or where the store cannot delete on a condition, replaces
    /// it with `record` marked released (so it counts as gone, whatever
    /// happens next) and then deletes that. `Some(version)` when the
    /// released record could not be deleted. Never touches another version
    /// of a live ticket.
    async fn retire(
        &self,
        key: &str,
        record: &LeaseRecord,
        version: &Version,
    ) -> Result<Option<Version>, CasError> {
        let store: &Arc<dyn CasStore> = self.lease.store();
        let clock = self.lease.clock().as_ref();
        let timeout = self.lease.config().request_timeout;
        if store.capabilities().conditional_delete {
            timed(clock, timeout, key, store.delete(key, version)).await?;
            return Ok(None);
        }
        let mut released = record.clone();
        released.released = true;
        released.nonce = self.entropy.nonce();
        released.renewed_at_ms = unix_ms(clock.wall());
        let version = timed(
            clock,
            timeout,
            key,
            store.replace(key, version, released.encode()),
        )
        .await?;
        Ok(self.clear_released(key, &version).await)
    }

    /// Ends our ticket in a task of its own where there is a runtime to
    /// spawn on (its failure is only logged, and a ticket left behind
    /// expires), else here.
    async fn end_ticket_in_background(&self, ticket: Ticket) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let fair = self.clone();
                let span = tracing::Span::current();
                runtime.spawn(async move { fair.end_ticket(ticket).instrument(span).await });
            }
            Err(_) => self.end_ticket(ticket).await,
        }
    }

    /// Ends our ticket: stops its renewal and removes it, so that our
    /// successor moves up at its next poll. If a renewal moved the version
    /// meanwhile, reads it back and tries again; a ticket left behind
    /// expires, which only delays our successor.
    async fn end_ticket(&self, ticket: Ticket) {
        let key = ticket_key(&self.queue, ticket.number);
        let (owner, token) = (ticket.guard.owner().to_string(), ticket.guard.token());
        let mut version = ticket.guard.version();
        ticket.guard.abandon();
        let config = self.lease.config();
        for _ in 0..END_TICKET_ATTEMPTS {
            let record = LeaseRecord::new(owner.clone(), String::new(), token, 0, 0);
            match self.retire(&key, &record, &version).await {
                Ok(_) => return,
                Err(err) if err.kind() == ErrorKind::NotFound => return,
                Err(err) => {
                    tracing::debug!(error = %err, ticket = ticket.number, "ending our ticket failed; reading it")
                }
            }
            match read_record(
                self.lease.store().as_ref(),
                self.lease.clock().as_ref(),
                config.request_timeout,
                &key,
            )
            .await
            {
                Ok(Some((record, current)))
                    if record.owner == owner && record.token == token && !record.released =>
                {
                    version = current;
                }
                // Gone, ended, or someone else's now: nothing of ours is left.
                Ok(_) => return,
                Err(err) => {
                    tracing::debug!(error = %err, ticket = ticket.number, "our ticket is left to expire");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_keys_sort_as_numbers_and_nothing_else_is_a_ticket() {
        let queue = queue_of("locks/a");
        assert_eq!(queue, "locks/a.queue/");
        let (nine, ten) = (ticket_key(&queue, 9), ticket_key(&queue, 10));
        assert!(nine < ten);
        assert_eq!(ticket_number(&queue, &ten), Some(10));
        assert_eq!(ticket_number(&queue, "locks/a.queue/10"), None);
        assert_eq!(
            ticket_number(&queue, "locks/a.queue/0000000000000000000x"),
            None
        );
        assert_eq!(
            ticket_number(&queue, &ticket_key("locks/b.queue/", 3)),
            None
        );
        assert_eq!(
            ticket_number(&queue, &ticket_key(&queue, u64::MAX)),
            Some(u64::MAX)
        );
    }
}
