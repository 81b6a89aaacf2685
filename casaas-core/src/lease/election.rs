//! Leader election on a lease, in the shape Kubernetes and etcd users know.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::acquire::Lease;
use super::handle::{Health, LeaseGuard, Shared};
use super::record::LeaseRecord;
use super::wait::WaitOptions;
use super::{ExpiryMode, LeaseError, LostReason};
use crate::Version;

/// Who leads, as seen by an observer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's owner id.
    pub owner: String,
    /// The leader's fencing token.
    pub token: u64,
    /// What the leader publishes (its address, say): see
    /// [`Lease::with_value`] and [`Leadership::proclaim`].
    pub value: Option<String>,
}

impl Leader {
    /// A leader `owner` holding fencing token `token`, publishing no value
    /// (to compare with what [`Election::leader`] reports).
    pub fn new(owner: impl Into<String>, token: u64) -> Self {
        Leader {
            owner: owner.into(),
            token,
            value: None,
        }
    }

    /// The same leader, publishing `value`.
    #[must_use = "the setter returns the changed leader"]
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }
}

/// An election for one lease key.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{Election, Lease, LeaseConfig, WaitOptions};
///
/// let store = Arc::new(MemoryStore::new());
/// let election = Election::new(Lease::new(store, "election/db", "node-a", LeaseConfig::default())?);
/// let leadership = election.campaign(WaitOptions::default()).await?;
/// assert_eq!(election.leader().await?.unwrap().owner, "node-a");
/// leadership.resign().await?;
/// assert_eq!(election.leader().await?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    lease: Lease,
    leader: Arc<watch::Sender<Option<Leader>>>,
    observing: Arc<AtomicBool>,
    /// The highest token of a term of ours that has ended: a record that
    /// still names us with it is not reported as a leader.
    ended_term: Arc<Mutex<u64>>,
}

/// Held leadership: a [`LeaseGuard`] plus election bookkeeping.
#[derive(Debug)]
#[must_use = "dropping Leadership ends the term at once (its lease is given up); hold it while you lead, then call resign()"]
pub struct Leadership {
    guard: LeaseGuard,
    leader: Arc<watch::Sender<Option<Leader>>>,
}

impl Leadership {
    /// The fencing token of this term.
    pub fn token(&self) -> u64 {
        self.guard.token()
    }

    /// The lease guard (remaining validity, `ensure_held_for`, lost future, ...).
    pub fn guard(&self) -> &LeaseGuard {
        &self.guard
    }

    /// See [`LeaseGuard::ensure_held_for`].
    pub fn ensure_held_for(&self, min_remaining: Duration) -> Result<(), LeaseError> {
        self.guard.ensure_held_for(min_remaining)
    }

    /// See [`LeaseGuard::lost`].
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// A token cancelled when leadership is lost.
    pub fn cancellation(&self) -> CancellationToken {
        self.guard.cancellation()
    }

    /// Publishes `value` with this term, without a new election (etcd's
    /// `Proclaim`): see [`LeaseGuard::proclaim`]. Observers in this process
    /// see it at once, others at their next read.
    ///
    /// # Cancel safety
    ///
    /// As [`LeaseGuard::proclaim`]'s.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), LeaseError> {
        self.proclaim_detached(value.into()).await
    }

    /// [`proclaim`](Self::proclaim) as a future that does not borrow the
    /// term, for callers that keep it behind a lock of their own (language
    /// bindings). A term ended before the write answers [`LeaseError::Lost`].
    pub fn proclaim_detached(
        &self,
        value: String,
    ) -> impl std::future::Future<Output = Result<(), LeaseError>> + Send + 'static + use<> {
        let write = self.guard.proclaim_detached(value.clone());
        let token = self.guard.token();
        let leader = self.leader.clone();
        async move {
            write.await?;
            leader.send_if_modified(|l| match l {
                Some(leader) if leader.token == token && leader.value.as_ref() != Some(&value) => {
                    leader.value = Some(value);
                    true
                }
                _ => false,
            });
            Ok(())
        }
    }

    /// Gives up leadership: releases the lease (keeping the token, so the
    /// next leader gets a higher one). Stop the work you started as leader
    /// before calling this; [`ElectionRunner`] does that for you.
    ///
    /// # Cancel safety
    ///
    /// As [`LeaseGuard::release`]'s: dropping the future leaves the term
    /// ended here, and the record, if the release did not land, held until
    /// it expires for the other candidates.
    pub async fn resign(self) -> Result<(), LeaseError> {
        let token = self.guard.token();
        let result = self.guard.release().await;
        self.leader.send_if_modified(|l| take_if_token(l, token));
        result
    }
}

fn take_if_token(leader: &mut Option<Leader>, token: u64) -> bool {
    if leader.as_ref().is_some_and(|l| l.token == token) {
        *leader = None;
        true
    } else {
        false
    }
}

impl Election {
    /// An election on `lease`'s key, campaigning as `lease`'s owner.
    pub fn new(lease: Lease) -> Self {
        Election {
            lease,
            leader: Arc::new(watch::channel(None).0),
            observing: Arc::new(AtomicBool::new(false)),
            ended_term: Arc::default(),
        }
    }

    fn end_term(ended_term: &Mutex<u64>, token: u64) {
        let mut ended = ended_term.lock().unwrap_or_else(|p| p.into_inner());
        *ended = (*ended).max(token);
    }

    /// The leader a record names, unless it is released or a term of ours
    /// that has ended.
    fn leader_in(&self, record: &LeaseRecord) -> Option<Leader> {
        let ended = *self.ended_term.lock().unwrap_or_else(|p| p.into_inner());
        if record.owner == self.lease.owner() && record.token <= ended {
            return None;
        }
        leader_of(record)
    }

    /// The underlying lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Waits until we lead, or until `options` give up
    /// ([`LeaseError::DeadlineExceeded`], [`LeaseError::Cancelled`]).
    ///
    /// # Cancel safety
    ///
    /// As [`Lease::acquire`]'s: a cancellation through `options` leaves
    /// nothing; dropping the future while a write is in flight may leave
    /// the election's record naming us, unrenewed, until this election's
    /// lease claims it at its next campaign or it expires for the other
    /// candidates (one TTL·(1 + drift) after they first see it).
    #[must_use = "leadership ends as soon as the returned Leadership is dropped"]
    pub async fn campaign(&self, options: WaitOptions) -> Result<Leadership, LeaseError> {
        let span = tracing::info_span!("election.campaign", key = %self.lease.key(), owner = %self.lease.owner());
        let guard = self.lease.acquire(options).instrument(span).await?;
        let me = Leader {
            owner: guard.owner().to_string(),
            token: guard.token(),
            value: guard.value(),
        };
        self.leader
            .send_if_modified(|l| replace_if_changed(l, Some(me)));
        // However the term ends (lost, resigned, dropped), observers stop
        // reporting us from then on, even while the record still names us.
        let lost = guard.lost();
        let (leader, ended_term, token) =
            (self.leader.clone(), self.ended_term.clone(), guard.token());
        tokio::spawn(async move {
            lost.await;
            Election::end_term(&ended_term, token);
            leader.send_if_modified(|l| take_if_token(l, token));
        });
        Ok(Leadership {
            guard,
            leader: self.leader.clone(),
        })
    }

    /// Who leads now, by one read: the record's holder unless it is
    /// released (an expired but unreleased holder is still reported; use
    /// [`observe`](Election::observe) for expiry tracking).
    pub async fn leader(&self) -> Result<Option<Leader>, LeaseError> {
        Ok(self
            .lease
            .read()
            .await?
            .and_then(|(record, _)| self.leader_in(&record)))
    }

    /// A watch of who leads: polls the record every `retry_period` while
    /// any receiver is alive, and reports `None` when the lease is absent,
    /// released, or observed unchanged for longer than its TTL. Our own
    /// acquisitions and resignations are reported at once.
    ///
    /// Not a blocking call, so it takes no [`WaitOptions`]: the polling
    /// runs in a task of its own (started within the caller's tokio
    /// runtime) and stops once every receiver is dropped. It only reads.
    pub fn observe(&self) -> watch::Receiver<Option<Leader>> {
        let rx = self.leader.subscribe();
        if self
            .observing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let span = tracing::debug_span!("election.observe", key = %self.lease.key());
            tokio::spawn(self.clone().poll().instrument(span));
        }
        rx
    }

    /// [`observe`](Election::observe) as a stream: the current leader
    /// first, then every change.
    pub fn observe_stream(&self) -> impl futures::Stream<Item = Option<Leader>> + Send + 'static {
        let rx = self.observe();
        futures::stream::unfold((rx, true), |(mut rx, first)| async move {
            if !first {
                rx.changed().await.ok()?;
            }
            let current = rx.borrow_and_update().clone();
            Some((current, (rx, false)))
        })
    }

    async fn poll(self) {
        let config = self.lease.config().clone();
        let clock = self.lease.clock().clone();
        let mut observed: Option<(Version, Duration)> = None;
        loop {
            if self.leader.receiver_count() == 0 {
                self.observing.store(false, Ordering::Release);
                // Someone may have subscribed between the check and the store.
                if self.leader.receiver_count() == 0
                    || self
                        .observing
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                {
                    return;
                }
            }
            match self.lease.read().await {
                Ok(current) => {
                    let now = clock.now();
                    let leader = current.and_then(|(record, version)| {
                        let since = match &observed {
                            Some((v, since)) if *v == version => *since,
                            _ => {
                                observed = Some((version, now));
                                now
                            }
                        };
                        let mut expired =
                            now.saturating_sub(since) >= config.takeover_wait(record.ttl());
                        if let ExpiryMode::WallClock { max_skew } = config.expiry {
                            expired |= clock.wall() > record.wall_expiry() + max_skew;
                        }
                        if expired {
                            None
                        } else {
                            self.leader_in(&record)
                        }
                    });
                    self.leader
                        .send_if_modified(|l| replace_if_changed(l, leader));
                }
                Err(err) => tracing::debug!(error = %err, "could not read the election record"),
            }
            clock.sleep(config.retry_period).await;
        }
    }

    /// A callback-style runner for this election.
    pub fn runner(self) -> ElectionRunner {
        ElectionRunner {
            election: self,
            started: None,
            stopped: None,
            new_leader: None,
            health: HealthCheck::default(),
            recampaign: true,
        }
    }
}

fn leader_of(record: &LeaseRecord) -> Option<Leader> {
    (!record.released).then(|| Leader {
        owner: record.owner.clone(),
        token: record.token,
        value: record.value.clone(),
    })
}

fn replace_if_changed(current: &mut Option<Leader>, new: Option<Leader>) -> bool {
    if *current == new {
        false
    } else {
        *current = new;
        true
    }
}

type StartedFn =
    Box<dyn Fn(u64, CancellationToken) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;
type StoppedFn = Box<dyn Fn(LostReason) + Send + Sync>;
type NewLeaderFn = Box<dyn Fn(Option<Leader>) + Send + Sync>;

/// Runs an election with callbacks, in the shape of client-go's
/// `LeaderElector`, with two guarantees it lacks:
///
/// - `on_stopped_leading` is called only after `on_started_leading`, and only
///   once the future `on_started_leading` returned has completed;
/// - when leadership ends (lost, cancelled, or the work returned), the work's
///   cancellation token fires first, the runner waits for the work to
///   finish, and only then releases the lease and calls `on_stopped_leading`.
///
/// On a loss (not a cancellation) the runner campaigns again unless
/// [`with_recampaign(false)`](ElectionRunner::with_recampaign) was set. If the work future returns on its
/// own, the runner resigns and returns.
#[must_use = "an ElectionRunner does nothing until it is run"]
pub struct ElectionRunner {
    election: Election,
    started: Option<StartedFn>,
    stopped: Option<StoppedFn>,
    new_leader: Option<NewLeaderFn>,
    health: HealthCheck,
    recampaign: bool,
}

impl fmt::Debug for ElectionRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElectionRunner")
            .field("election", &self.election)
            .field("recampaign", &self.recampaign)
            .finish_non_exhaustive()
    }
}

/// A liveness check for an elector: healthy unless it leads and its renewal
/// loop is dead or past the renew deadline (plus a tolerance).
#[derive(Debug, Clone, Default)]
pub struct HealthCheck {
    current: Arc<Mutex<Option<Arc<Shared>>>>,
    tolerance: Duration,
}

impl HealthCheck {
    /// Allows renewals to be `tolerance` late before reporting unhealthy.
    #[must_use = "the setter returns the changed check"]
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    fn set(&self, shared: Option<Arc<Shared>>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = shared;
    }

    /// The renewal health while leading, `None` when not leading.
    pub fn health(&self) -> Option<Health> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| s.health())
    }

    /// `Ok` when not leading or leading with renewal alive and on time.
    pub fn check(&self) -> Result<(), String> {
        let Some(h) = self.health() else {
            return Ok(());
        };
        if !h.held {
            return Ok(());
        }
        if !h.renewal_alive {
            return Err("leading, but the lease renewal task has stopped".to_string());
        }
        let limit = self.current_deadline().unwrap_or_default() + self.tolerance;
        if h.since_last_renewal >= limit {
            return Err(format!(
                "leading, but the last successful renewal was {:?} ago (limit {limit:?})",
                h.since_last_renewal
            ));
        }
        Ok(())
    }

    fn current_deadline(&self) -> Option<Duration> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| s.renew_deadline())
    }
}

enum Stop {
    Lost(LostReason),
    Cancelled,
    WorkEnded,
}

impl ElectionRunner {
    /// Called with the term's token and a cancellation token when we become
    /// leader; the returned future is the leader's work, spawned on the
    /// runtime. It must stop soon after the token is cancelled (the lease's
    /// remaining validity at that moment is at least
    /// `holder_validity − renew_deadline`).
    pub fn on_started_leading<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(u64, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.started = Some(Box::new(move |token, cancel| Box::pin(f(token, cancel))));
        self
    }

    /// Called after the leader's work has stopped, with why leadership ended
    /// ([`LostReason::Released`] after a resignation).
    pub fn on_stopped_leading(mut self, f: impl Fn(LostReason) + Send + Sync + 'static) -> Self {
        self.stopped = Some(Box::new(f));
        self
    }

    /// Called whenever the observed leader changes (including to us).
    pub fn on_new_leader(mut self, f: impl Fn(Option<Leader>) + Send + Sync + 'static) -> Self {
        self.new_leader = Some(Box::new(f));
        self
    }

    /// Whether to campaign again after a term ends in a loss (default
    /// true); `false` returns after the first term.
    pub fn with_recampaign(mut self, recampaign: bool) -> Self {
        self.recampaign = recampaign;
        self
    }

    /// A health check bound to this runner (clone it into a probe handler).
    pub fn health_check(&self) -> HealthCheck {
        self.health.clone()
    }

    /// Campaigns, leads, and repeats until `options` stop it: once
    /// cancelled, or once its deadline has passed (measured from this call,
    /// on the lease's clock), the runner stops as below and returns `Ok`.
    /// Otherwise it returns the first error that is not retryable (a
    /// foreign object at the key, bad credentials, ...). Must be called
    /// within a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// The terms run in a task of their own. Dropping this future (inside a
    /// `select!` or a `timeout`, or by aborting the task that awaits it) is a
    /// cancellation: the leader's work is told to stop and the lease is
    /// released only once the work has finished, never before (the release
    /// runs on in that task). A campaign dropped mid-write is
    /// [`Election::campaign`]'s case.
    pub async fn run(self, options: WaitOptions) -> Result<(), LeaseError> {
        let stop = options.cancel.unwrap_or_default().child_token();
        let _stop_when_dropped = stop.clone().drop_guard();
        if let Some(deadline) = options.deadline {
            let (clock, stop) = (self.election.lease.clock().clone(), stop.clone());
            tokio::spawn(async move {
                tokio::select! {
                    // Polled in order, so that a replayed run takes the same branch.
                    biased;
                    () = stop.cancelled() => {}
                    () = clock.sleep(deadline) => stop.cancel(),
                }
            });
        }
        match tokio::spawn(self.run_terms(stop)).await {
            Ok(result) => result,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            // The runtime is shutting down.
            Err(_) => Err(LeaseError::Cancelled),
        }
    }

    async fn run_terms(self, cancel: CancellationToken) -> Result<(), LeaseError> {
        let ElectionRunner {
            election,
            started,
            stopped,
            new_leader,
            health,
            recampaign,
        } = self;
        let done = CancellationToken::new();
        let _stop_forwarder = done.clone().drop_guard();
        if let Some(notify) = new_leader {
            let mut rx = election.observe();
            let done = done.clone();
            tokio::spawn(async move {
                // The value is copied out before the callback runs: a
                // borrow held across it would block every sender to the
                // watch (the observer's poll, a campaign's win) for as long
                // as the callback takes, and the worker threads with them.
                let first = rx.borrow_and_update().clone();
                notify(first);
                loop {
                    tokio::select! {
                        // Polled in order, so that a replayed run takes the same branch.
                        biased;
                        () = done.cancelled() => return,
                        changed = rx.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            let leader = rx.borrow_and_update().clone();
                            notify(leader);
                        }
                    }
                }
            });
        }
        loop {
            let wait = WaitOptions::default().with_cancel(cancel.clone());
            let leadership = match election.campaign(wait).await {
                Ok(l) => l,
                Err(LeaseError::Cancelled) => return Ok(()),
                Err(err) => return Err(err),
            };
            let token = leadership.token();
            health.set(Some(leadership.guard.shared()));
            let work_cancel = leadership.cancellation();
            let mut work = match &started {
                Some(start) => tokio::spawn(start(token, work_cancel.clone())),
                None => {
                    let wait = work_cancel.clone();
                    tokio::spawn(async move { wait.cancelled().await })
                }
            };
            let lost = leadership.lost();
            let stop = tokio::select! {
                // Polled in order, so that a replayed run takes the same branch.
                biased;
                reason = lost => Stop::Lost(reason),
                () = cancel.cancelled() => Stop::Cancelled,
                result = &mut work => {
                    if let Err(err) = result {
                        tracing::error!(error = %err, "the leader's work panicked");
                    }
                    Stop::WorkEnded
                }
            };
            // Stop the work and wait for it before giving the lease up.
            work_cancel.cancel();
            if !matches!(stop, Stop::WorkEnded)
                && let Err(err) = work.await
            {
                tracing::error!(error = %err, "the leader's work panicked");
            }
            let reason = match stop {
                Stop::Lost(reason) => {
                    Election::end_term(&election.ended_term, token);
                    election
                        .leader
                        .send_if_modified(|l| take_if_token(l, token));
                    reason
                }
                Stop::Cancelled | Stop::WorkEnded => match leadership.guard.lost_reason() {
                    // Lost while the work was stopping: say so, not "released".
                    Some(reason) => {
                        Election::end_term(&election.ended_term, token);
                        reason
                    }
                    None => match leadership.resign().await {
                        Ok(()) => LostReason::Released,
                        Err(LeaseError::Lost(reason)) => reason,
                        Err(err) => {
                            tracing::warn!(error = %err, "resigning failed; the lease will expire");
                            LostReason::Released
                        }
                    },
                },
            };
            health.set(None);
            if let Some(stopped) = &stopped {
                stopped(reason.clone());
            }
            if reason == LostReason::Released || !recampaign || cancel.is_cancelled() {
                return Ok(());
            }
        }
    }
}
