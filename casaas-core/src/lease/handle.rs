//! The holder side: [`LeaseGuard`] and its background renewal.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{CasStore, ErrorKind, Version};

use super::clock::{Clock, Entropy};
use super::config::LeaseConfig;
use super::pending::{PendingWrite, PendingWrites, Settled};
use super::record::{LeaseRecord, SessionRef, unix_ms};
use super::retry::{backoff, count_ambiguous, needs_resolution, read_record, timed};
use super::{LeaseError, LostReason, metric_names};

/// What the contender hands to a new guard.
pub(crate) struct HolderStart {
    pub(crate) store: Arc<dyn CasStore>,
    pub(crate) key: String,
    pub(crate) config: LeaseConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Entropy,
    pub(crate) record: LeaseRecord,
    pub(crate) version: Version,
    pub(crate) sent_at: Duration,
    /// Where to note a successful release (the lease that acquired us).
    pub(crate) release_note: Option<Arc<dyn ReleaseNote>>,
    /// The session the lock is held under: then no renewal of its own.
    pub(crate) session: Option<SessionLink>,
}

/// What a lock held under a session knows of it: the heartbeat (whose
/// validity is the lock's), its key and the term.
#[derive(Clone, Debug)]
pub(crate) struct SessionLink {
    pub(crate) heartbeat: Arc<Shared>,
    pub(crate) key: String,
    pub(crate) term: u64,
}

impl SessionLink {
    /// `Err` when the session can no longer hold locks: nothing may be
    /// written under it.
    pub(crate) fn ensure_alive(&self) -> Result<(), LeaseError> {
        match self.heartbeat.lost_reason() {
            Some(reason) => Err(LeaseError::Lost(self.lost(reason))),
            None => Ok(()),
        }
    }

    /// The reason a lock under this session gives when the session ended
    /// for `reason`.
    pub(crate) fn lost(&self, reason: LostReason) -> LostReason {
        LostReason::SessionLost {
            session: self.key.clone(),
            reason: Box::new(reason),
        }
    }

    /// How the lock at `lock_key` names this session.
    pub(crate) fn named_from(&self, lock_key: &str) -> SessionRef {
        SessionRef::new(lock_key, &self.key, self.term)
    }
}

/// Where a guard notes its release for the contender that acquired it, so
/// that acquiring again costs one write. A trait so that the guard does not
/// depend on the contender (`acquire.rs` implements it).
pub(crate) trait ReleaseNote: Send + Sync + std::fmt::Debug {
    /// Our release wrote `version`, keeping `token`.
    fn released(&self, version: Version, token: u64);
}

/// The state of a lease as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseStatus {
    /// Held, valid until `valid_until` on the holder's clock.
    Held {
        /// The fencing token.
        token: u64,
        /// End of validity on the holder's clock ([`Clock::now`] scale).
        valid_until: Duration,
    },
    /// No longer held.
    Lost(LostReason),
}

/// A health report of a holder's renewal (for liveness probes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The lease is still held.
    pub held: bool,
    /// The background renewal task is running.
    pub renewal_alive: bool,
    /// Time since the send time of the last successful write.
    pub since_last_renewal: Duration,
    /// `since_last_renewal` is below the renew deadline.
    pub within_deadline: bool,
}

impl Health {
    /// Held, renewing, and within the renew deadline.
    pub fn is_healthy(&self) -> bool {
        self.held && self.renewal_alive && self.within_deadline
    }
}

#[derive(Debug)]
struct HolderState {
    version: Version,
    nonce: String,
    last_send: Duration,
    /// Our writes whose outcome is unknown.
    pending: PendingWrites<()>,
    lost: Option<LostReason>,
    renewal_alive: bool,
    /// The value our next write carries (see [`LeaseGuard::proclaim`]).
    value: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    store: Arc<dyn CasStore>,
    key: String,
    owner: String,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    entropy: Entropy,
    token: u64,
    ttl_ms: u64,
    acquired_at_ms: u64,
    acquired_at: Duration,
    state: Mutex<HolderState>,
    status: watch::Sender<LeaseStatus>,
    lost_token: CancellationToken,
    release_note: Option<Arc<dyn ReleaseNote>>,
    /// For a lock held under a session: the session's heartbeat, whose
    /// validity is the lock's.
    session: Option<SessionLink>,
    /// For a session's heartbeat: the locks held under it, which end when it
    /// ends. Weak, so a dropped lock guard is not kept alive by its session.
    dependents: Mutex<Vec<Weak<Shared>>>,
    /// Held by each renewal and proclamation for its whole write: one
    /// write of ours in flight at a time, so a proclamation knows whether
    /// the write that landed carries its value.
    writing: tokio::sync::Mutex<()>,
}

/// A held lease. Renews itself in the background every `renew_interval`
/// (a task spawned on the current tokio runtime, which must exist).
///
/// Before each side effect, call [`ensure_held_for`](LeaseGuard::ensure_held_for) (or
/// pass [`token`](LeaseGuard::token) to a fenced resource, which is the only
/// real protection against a paused holder).
///
/// # Dropping
///
/// Dropping the guard stops renewal at once, marks it lost
/// ([`LostReason::Dropped`]) and, if a tokio runtime is running, spawns a
/// best-effort release (a conditional write on our own version, so it can
/// never affect a later holder). Without a runtime, the lease simply
/// expires after its TTL. Prefer [`release`](LeaseGuard::release), which
/// reports the outcome.
#[derive(Debug)]
#[must_use = "dropping a LeaseGuard stops renewal and gives the lease up at once; hold it while you work, then call release()"]
pub struct LeaseGuard {
    shared: Arc<Shared>,
    /// The renewal task; `None` for a lock held under a session.
    task: Option<JoinHandle<()>>,
    stop: CancellationToken,
    /// Released or abandoned: nothing is left for `Drop` to do.
    finished: bool,
}

enum Step {
    Renewed,
    Retry(Duration),
    Lost(LostReason),
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HolderState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn valid_until(&self, last_send: Duration) -> Duration {
        last_send + self.config.holder_validity()
    }

    /// When validity ends on our clock, `None` once lost. A lock held under
    /// a session is valid exactly as long as the session.
    fn validity_end(&self) -> Option<Duration> {
        let last_send = {
            let state = self.lock();
            if state.lost.is_some() {
                return None;
            }
            state.last_send
        };
        match &self.session {
            Some(link) => link.heartbeat.validity_end(),
            None => Some(self.valid_until(last_send)),
        }
    }

    /// Holds `lock` under this heartbeat: it ends when this ends.
    pub(crate) fn add_dependent(&self, lock: &Arc<Shared>) {
        let mut dependents = self.dependents.lock().unwrap_or_else(|p| p.into_inner());
        // Forget the guards already gone, so that a long session taking many
        // short locks keeps a list about as long as the locks it holds; at
        // powers of two, so that taking N locks costs O(N) in all.
        if dependents.len() >= 64 && dependents.len().is_power_of_two() {
            dependents.retain(|d| d.upgrade().is_some_and(|d| d.lock().lost.is_none()));
        }
        dependents.push(Arc::downgrade(lock));
    }

    /// The locks held under this heartbeat now.
    pub(crate) fn live_dependents(&self) -> Vec<Arc<Shared>> {
        let dependents = self.dependents.lock().unwrap_or_else(|p| p.into_inner());
        dependents
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|d| d.lock().lost.is_none())
            .collect()
    }

    /// Is it lost (a lock under a session is lost with its session)?
    pub(crate) fn is_lost(&self) -> bool {
        self.lock().lost.is_some()
    }

    /// Why it was lost, if it was.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.lock().lost.clone()
    }

    /// The TTL its record declares, in milliseconds.
    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// Marks the lease lost (once) and tells everyone.
    fn lose(&self, reason: LostReason) {
        {
            let mut state = self.lock();
            if state.lost.is_some() {
                return;
            }
            state.lost = Some(reason.clone());
        }
        let label = match &reason {
            LostReason::Superseded { .. } => "superseded",
            LostReason::Deleted => "deleted",
            LostReason::Corrupted => "corrupted",
            LostReason::RenewDeadlineExceeded => "renew_deadline",
            LostReason::Released => "released",
            LostReason::Dropped => "dropped",
            LostReason::SessionLost { .. } => "session_lost",
        };
        if matches!(reason, LostReason::Released | LostReason::Dropped) {
            tracing::info!(key = %self.key, token = self.token, %reason, "lease given up");
        } else if matches!(reason, LostReason::SessionLost { .. }) {
            // The session says once why it ended; one line per lock would
            // drown that in thousands.
            tracing::debug!(key = %self.key, token = self.token, %reason, "lock ended with its session");
            metrics::counter!(metric_names::LOST, "reason" => label).increment(1);
        } else {
            tracing::warn!(key = %self.key, token = self.token, %reason, "lease lost");
            metrics::counter!(metric_names::LOST, "reason" => label).increment(1);
        }
        let held = self.clock.now().saturating_sub(self.acquired_at);
        metrics::histogram!(metric_names::HOLD_TIME).record(held.as_secs_f64());
        self.lost_token.cancel();
        self.status.send_replace(LeaseStatus::Lost(reason.clone()));
        // Marked lost before anything else can happen: a session's locks end
        // before the write that releases the session is sent.
        for lock in self.live_dependents() {
            lock.lose(LostReason::SessionLost {
                session: self.key.clone(),
                reason: Box::new(reason.clone()),
            });
        }
    }

    fn record(&self, nonce: &str, released: bool) -> LeaseRecord {
        let wall = unix_ms(self.clock.wall());
        let mut record = LeaseRecord::new(self.owner.clone(), nonce, self.token, self.ttl_ms, wall);
        record.acquired_at_ms = self.acquired_at_ms;
        record.released = released;
        record.value.clone_from(&self.lock().value);
        match &self.session {
            Some(link) => record.under_session(link.named_from(&self.key)),
            None => record,
        }
    }

    /// One renewal attempt, with the step-down `deadline` (on our clock).
    async fn renew_once(&self, deadline: Duration) -> Step {
        let _writing = self.writing.lock().await;
        self.write_once(deadline, self.entropy.nonce()).await
    }

    /// Writes our record again with the value now in the state, until the
    /// write that carries it is the one that landed (a write of ours sent
    /// earlier may land first), or the lease is lost.
    async fn proclaim(&self, value: String) -> Result<(), LeaseError> {
        let _writing = self.writing.lock().await;
        self.lock().value = Some(value);
        loop {
            if let Some(reason) = self.lost_reason() {
                return Err(LeaseError::Lost(reason));
            }
            let deadline = self.lock().last_send + self.config.renew_deadline;
            let now = self.clock.now();
            if now >= deadline {
                self.lose(LostReason::RenewDeadlineExceeded);
                continue;
            }
            let nonce = self.entropy.nonce();
            match self.write_once(deadline, nonce.clone()).await {
                Step::Renewed if self.lock().nonce == nonce => return Ok(()),
                Step::Renewed => {}
                Step::Retry(delay) => {
                    let wait = delay.min(deadline.saturating_sub(self.clock.now()));
                    self.clock.sleep(wait).await;
                }
                Step::Lost(reason) => self.lose(reason),
            }
        }
    }

    /// One write of our record with `nonce`, with the step-down `deadline`.
    async fn write_once(&self, deadline: Duration, nonce: String) -> Step {
        let body = self.record(&nonce, false).encode();
        let sent_at = self.clock.now();
        let version = self.remember(&nonce, sent_at);
        let timeout = self
            .config
            .request_timeout
            .min(deadline.saturating_sub(sent_at));
        let result = timed(
            self.clock.as_ref(),
            timeout,
            &self.key,
            self.store.replace(&self.key, &version, body),
        )
        .await;
        match result {
            Ok(new_version) => {
                let latency = self.clock.now().saturating_sub(sent_at);
                metrics::histogram!(metric_names::RENEW_LATENCY).record(latency.as_secs_f64());
                self.adopt(new_version, nonce, sent_at);
                Step::Renewed
            }
            Err(err) if needs_resolution(&err) => {
                metrics::counter!(metric_names::RENEW_FAILURES, "kind" => err.kind().as_str())
                    .increment(1);
                tracing::debug!(error = %err, "renewal outcome unknown; reading");
                self.resolve(deadline).await
            }
            Err(err) if err.kind() == ErrorKind::NotFound => Step::Lost(LostReason::Deleted),
            Err(err) => {
                metrics::counter!(metric_names::RENEW_FAILURES, "kind" => err.kind().as_str())
                    .increment(1);
                tracing::debug!(error = %err, "renewal failed; retrying");
                // Nothing was written.
                self.lock().pending.forget(&nonce);
                Step::Retry(backoff(&self.entropy, self.config.retry_period, Some(&err)))
            }
        }
    }

    /// Remembers a write of `nonce` on our current version, about to be
    /// sent; returns that version.
    fn remember(&self, nonce: &str, sent_at: Duration) -> Version {
        let mut state = self.lock();
        let version = state.version.clone();
        state.pending.push(PendingWrite {
            nonce: nonce.to_string(),
            sent_at,
            condition: Some(version.clone()),
            payload: (),
        });
        version
    }

    fn adopt(&self, version: Version, nonce: String, sent_at: Duration) {
        let valid_until = {
            let mut state = self.lock();
            // Every write still pending was sent after the last adopted one
            // (adopting clears them), so validity only ever moves forward.
            debug_assert!(
                sent_at >= state.last_send,
                "a renewal moved the holder's validity back: {sent_at:?} < {:?}",
                state.last_send
            );
            state.version = version;
            state.nonce = nonce;
            state.last_send = sent_at;
            state.pending.clear();
            if state.lost.is_some() {
                return;
            }
            self.valid_until(sent_at)
        };
        self.status.send_replace(LeaseStatus::Held {
            token: self.token,
            valid_until,
        });
        // The locks under a session are valid as long as it: tell those
        // someone watches.
        for lock in self.live_dependents() {
            if lock.status.receiver_count() > 0 {
                lock.status.send_replace(LeaseStatus::Held {
                    token: lock.token,
                    valid_until,
                });
            }
        }
    }

    /// Reads to learn whether one of our unresolved writes landed.
    async fn resolve(&self, deadline: Duration) -> Step {
        let now = self.clock.now();
        let left = deadline.saturating_sub(now);
        if left.is_zero() {
            return Step::Retry(Duration::ZERO);
        }
        let read = read_record(
            self.store.as_ref(),
            self.clock.as_ref(),
            self.config.request_timeout.min(left),
            &self.key,
        )
        .await;
        match read {
            Ok(None) => Step::Lost(LostReason::Deleted),
            Ok(Some((record, version))) => {
                let (ours, current) = {
                    let mut state = self.lock();
                    let ours = match state.pending.settle(Some(&version), |n| n == record.nonce) {
                        Settled::Landed(write) => Some(write.sent_at),
                        Settled::NotLanded => None,
                    };
                    (ours, version == state.version)
                };
                if let Some(sent_at) = ours {
                    count_ambiguous("ours");
                    self.adopt(version, record.nonce, sent_at);
                    Step::Renewed
                } else if current {
                    count_ambiguous("not_ours");
                    Step::Retry(backoff(&self.entropy, self.config.retry_period, None))
                } else {
                    count_ambiguous("not_ours");
                    Step::Lost(LostReason::Superseded {
                        owner: Some(record.owner),
                        token: Some(record.token),
                    })
                }
            }
            Err(LeaseError::Store(err)) => {
                tracing::debug!(error = %err, "could not read back the renewal");
                Step::Retry(backoff(&self.entropy, self.config.retry_period, Some(&err)))
            }
            Err(_) => Step::Lost(LostReason::Corrupted),
        }
    }

    async fn renew_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut next = self.lock().last_send + self.config.renew_interval;
        loop {
            let last_send = self.lock().last_send;
            let deadline = last_send + self.config.renew_deadline;
            let now = self.clock.now();
            if now >= deadline {
                self.lose(LostReason::RenewDeadlineExceeded);
                break;
            }
            let wake = next.min(deadline);
            if wake > now {
                tokio::select! {
                    // Polled in order, so that a replayed run takes the same branch.
                    biased;
                    () = stop.cancelled() => break,
                    () = self.clock.sleep(wake - now) => {}
                }
                continue;
            }
            if stop.is_cancelled() {
                break;
            }
            match self.renew_once(deadline).await {
                Step::Renewed => next = self.lock().last_send + self.config.renew_interval,
                Step::Retry(delay) => next = self.clock.now() + delay,
                Step::Lost(reason) => {
                    self.lose(reason);
                    break;
                }
            }
        }
        self.lock().renewal_alive = false;
    }

    /// Writes `released = true` on our version, keeping the token. Retries
    /// until the lease would have expired anyway.
    async fn release_record(&self) -> Result<(), LeaseError> {
        let give_up = match &self.session {
            // Never rewritten while held: it expires with its session.
            Some(link) => link.heartbeat.lock().last_send + link.heartbeat.config.ttl,
            None => self.lock().last_send + self.config.ttl,
        };
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let nonce = self.entropy.nonce();
            let body = self.record(&nonce, true).encode();
            let sent_at = self.clock.now();
            let version = self.remember(&nonce, sent_at);
            let result = timed(
                self.clock.as_ref(),
                self.config.request_timeout,
                &self.key,
                self.store.replace(&self.key, &version, body),
            )
            .await;
            let err = match result {
                Ok(released) => {
                    self.note_release(released);
                    return Ok(());
                }
                Err(err) if err.kind() == ErrorKind::NotFound => {
                    return Err(LeaseError::Lost(LostReason::Deleted));
                }
                Err(err) => err,
            };
            if needs_resolution(&err) {
                match self.resolve_release(&version).await {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(lost) => return Err(lost),
                }
            } else if !err.is_retryable() {
                return Err(err.into());
            }
            if self.clock.now() >= give_up || attempts >= 16 {
                return Err(err.into());
            }
            let delay = backoff(&self.entropy, self.config.retry_period, Some(&err));
            self.clock.sleep(delay).await;
        }
    }

    /// Tells the lease that acquired us that our release wrote `version`.
    fn note_release(&self, version: Version) {
        if let Some(note) = &self.release_note {
            note.released(version, self.token);
        }
    }

    /// Ok(true): released; Ok(false): retry; Err: not ours any more.
    async fn resolve_release(&self, version: &Version) -> Result<bool, LeaseError> {
        let read = read_record(
            self.store.as_ref(),
            self.clock.as_ref(),
            self.config.request_timeout,
            &self.key,
        )
        .await;
        let (record, current) = match read {
            Ok(Some(found)) => found,
            Ok(None) => return Err(LeaseError::Lost(LostReason::Deleted)),
            Err(LeaseError::Store(_)) => return Ok(false),
            Err(other) => return Err(other),
        };
        let ours = matches!(
            self.lock()
                .pending
                .settle(Some(&current), |n| n == record.nonce),
            Settled::Landed(_)
        );
        if ours && record.released {
            count_ambiguous("ours");
            self.note_release(current);
            Ok(true)
        } else if ours {
            // A renewal of ours landed after all: release that version.
            count_ambiguous("ours");
            let mut state = self.lock();
            state.version = current;
            state.nonce = record.nonce;
            Ok(false)
        } else if &current == version {
            count_ambiguous("not_ours");
            Ok(false)
        } else {
            count_ambiguous("not_ours");
            Err(LeaseError::Lost(LostReason::Superseded {
                owner: Some(record.owner),
                token: Some(record.token),
            }))
        }
    }
}

impl LeaseGuard {
    pub(crate) fn start(start: HolderStart) -> Self {
        let HolderStart {
            store,
            key,
            config,
            clock,
            entropy,
            record,
            version,
            sent_at,
            release_note,
            session,
        } = start;
        // Contenders wait for the TTL the record declares (whole
        // milliseconds), so the holder counts its validity from that too.
        let mut config = config;
        config.ttl = config.ttl.min(Duration::from_millis(record.ttl_ms));
        let valid_until = match &session {
            Some(link) => link.heartbeat.validity_end().unwrap_or(sent_at),
            None => sent_at + config.holder_validity(),
        };
        let (status, _) = watch::channel(LeaseStatus::Held {
            token: record.token,
            valid_until,
        });
        let shared = Arc::new(Shared {
            store,
            key,
            owner: record.owner.clone(),
            token: record.token,
            ttl_ms: record.ttl_ms,
            acquired_at_ms: record.acquired_at_ms,
            acquired_at: clock.now(),
            config,
            clock,
            entropy,
            state: Mutex::new(HolderState {
                version,
                nonce: record.nonce,
                last_send: sent_at,
                pending: PendingWrites::default(),
                lost: None,
                renewal_alive: session.is_none(),
                value: record.value,
            }),
            status,
            lost_token: CancellationToken::new(),
            release_note,
            session,
            dependents: Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
        });
        let stop = CancellationToken::new();
        if let Some(link) = &shared.session {
            link.heartbeat.add_dependent(&shared);
            // The session may have ended after the lock was written and
            // before it was registered: then the lock ended with it.
            if let Some(reason) = link.heartbeat.lock().lost.clone() {
                shared.lose(LostReason::SessionLost {
                    session: link.heartbeat.key.clone(),
                    reason: Box::new(reason),
                });
            }
            return LeaseGuard {
                shared,
                task: None,
                stop,
                finished: false,
            };
        }
        let span = tracing::info_span!("lease.renewal", key = %shared.key, token = shared.token);
        let task = tokio::spawn(shared.clone().renew_loop(stop.clone()).instrument(span));
        LeaseGuard {
            shared,
            task: Some(task),
            stop,
            finished: false,
        }
    }

    /// The fencing token of this holding.
    pub fn token(&self) -> u64 {
        self.shared.token
    }

    /// The lock object's key.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// Our owner id.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// The version of our latest write.
    pub fn version(&self) -> Version {
        self.shared.lock().version.clone()
    }

    /// Conservative validity left: the send time of our last successful
    /// write + `ttl·(1 − drift)` − safety margin − now, on our clock. Zero
    /// once lost.
    ///
    /// A lock held under a [`Session`](super::Session) has its session's
    /// validity.
    pub fn remaining(&self) -> Duration {
        match self.shared.validity_end() {
            Some(end) => end.saturating_sub(self.shared.clock.now()),
            None => Duration::ZERO,
        }
    }

    /// When validity ends, on the lease's clock ([`Clock::now`] scale);
    /// `None` once lost.
    pub fn valid_until(&self) -> Option<Duration> {
        self.shared.validity_end()
    }

    /// The session this lock is held under, if any, as its record names it.
    pub fn session(&self) -> Option<super::SessionRef> {
        let shared = &self.shared;
        shared
            .session
            .as_ref()
            .map(|link| link.named_from(&shared.key))
    }

    /// Why the lease was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.shared.lock().lost.clone()
    }

    /// The value published with this holding (see [`Lease::with_value`]).
    ///
    /// [`Lease::with_value`]: super::Lease::with_value
    pub fn value(&self) -> Option<String> {
        self.shared.lock().value.clone()
    }

    /// Publishes `value` with this holding, without giving it up or taking
    /// it again (etcd's `Proclaim`): one conditional write of our record on
    /// our own version, the token unchanged, and every renewal after it
    /// keeps the value. Refused over [`MAX_VALUE_BYTES`](super::MAX_VALUE_BYTES)
    /// and for a lock held under a session (its holder never rewrites it).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the new value written or not; the
    /// renewals after it carry the new value either way.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), LeaseError> {
        self.proclaim_detached(value.into()).await
    }

    /// [`proclaim`](Self::proclaim) as a future that does not borrow the
    /// guard, for callers that keep the guard behind a lock of their own
    /// (language bindings). A holding released or lost before the write
    /// answers [`LeaseError::Lost`].
    pub fn proclaim_detached(
        &self,
        value: String,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send + 'static + use<> {
        let refused = match super::record::check_value(&self.shared.key, &value) {
            Err(err) => Some(err),
            Ok(()) if self.shared.session.is_some() => Some(LeaseError::InvalidConfig(format!(
                "the lock '{}' is held under a session, whose holder never rewrites it: publish the value with Lease::with_value before acquiring",
                self.shared.key
            ))),
            Ok(()) => None,
        };
        let shared = self.shared.clone();
        async move {
            match refused {
                Some(err) => Err(err),
                None => shared.proclaim(value).await,
            }
        }
    }

    /// Is the lease still held with validity left?
    pub fn is_held(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// Call before each side effect: `Ok` only if the lease is held with at
    /// least `min_remaining` of validity left.
    pub fn ensure_held_for(&self, min_remaining: Duration) -> Result<(), LeaseError> {
        if let Some(reason) = self.lost_reason() {
            return Err(LeaseError::Lost(reason));
        }
        let remaining = self.remaining();
        if remaining.is_zero() || remaining < min_remaining {
            return Err(LeaseError::InsufficientValidity {
                remaining,
                required: min_remaining,
            });
        }
        Ok(())
    }

    /// Resolves with the reason once the lease is lost, stepped down,
    /// released or dropped. Does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut rx = self.shared.status.subscribe();
        async move {
            loop {
                if let LeaseStatus::Lost(reason) = &*rx.borrow_and_update() {
                    return reason.clone();
                }
                if rx.changed().await.is_err() {
                    return LostReason::Dropped;
                }
            }
        }
    }

    /// A watch of the lease's status (updated on every renewal and on loss).
    pub fn subscribe(&self) -> watch::Receiver<LeaseStatus> {
        self.shared.status.subscribe()
    }

    /// A token cancelled as soon as the lease is lost (to hand to work that
    /// must stop then).
    pub fn cancellation(&self) -> CancellationToken {
        self.shared.lost_token.child_token()
    }

    /// The renewal's health.
    pub fn health(&self) -> Health {
        self.shared.health()
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Stops renewing without releasing, as a crashed holder would: the
    /// lease expires after its TTL (for tests and simulations; prefer
    /// [`release`](LeaseGuard::release)).
    pub fn abandon(mut self) {
        self.finished = true;
        self.stop.cancel();
        // Detach the renewal task; it exits at its next wake-up.
        self.task.take();
        self.shared.lose(LostReason::Dropped);
    }

    /// Stops renewal and marks the record released (a conditional write on
    /// our own version that keeps the token, so the next holder gets
    /// token + 1). The object is never deleted. Requests: 1 write (+1 read
    /// to resolve an ambiguous answer).
    ///
    /// Returns [`LeaseError::Lost`] if the lease was already lost.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the guard given up for this process (no
    /// renewal runs, [`is_held`](LeaseGuard::is_held) is false), but the
    /// release write may not have been sent or may not land: then the
    /// record still names us, and contenders take the lease only once it
    /// expires, one TTL·(1 + drift) after they first see its last version
    /// (the [`Lease`](super::Lease) that acquired it waits too). Nothing is
    /// left that could act for us: the record just stays until it expires.
    pub async fn release(mut self) -> Result<(), LeaseError> {
        let span =
            tracing::info_span!("lease.release", key = %self.shared.key, token = self.shared.token);
        async {
            self.finished = true;
            self.stop.cancel();
            if let Some(task) = self.task.take() {
                // The renewal task never panics; a join error means the
                // runtime is shutting down, and the write below still applies.
                let _ = task.await;
            }
            if let Some(reason) = self.lost_reason() {
                return Err(LeaseError::Lost(reason));
            }
            self.shared.lose(LostReason::Released);
            self.shared.release_record().await
        }
        .instrument(span)
        .await
    }
}

impl Shared {
    pub(crate) fn renew_deadline(&self) -> Duration {
        match &self.session {
            Some(link) => link.heartbeat.renew_deadline(),
            None => self.config.renew_deadline,
        }
    }

    pub(crate) fn health(&self) -> Health {
        if let Some(link) = &self.session {
            // Its renewal is the session's heartbeat.
            let session = link.heartbeat.health();
            return Health {
                held: session.held && !self.is_lost(),
                ..session
            };
        }
        let state = self.lock();
        let since = self.clock.now().saturating_sub(state.last_send);
        Health {
            held: state.lost.is_none(),
            renewal_alive: state.renewal_alive,
            since_last_renewal: since,
            within_deadline: since < self.config.renew_deadline,
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let task = self.task.take();
        self.stop.cancel();
        let was_held = self.shared.lock().lost.is_none();
        self.shared.lose(LostReason::Dropped);
        if !was_held {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = self.shared.clone();
            let span = tracing::info_span!("lease.release_on_drop", key = %shared.key, token = shared.token);
            runtime.spawn(
                async move {
                    if let Some(task) = task {
                        let _ = task.await;
                    }
                    if let Err(err) = shared.release_record().await {
                        tracing::debug!(error = %err, "best-effort release after drop failed; the lease will expire");
                    }
                }
                .instrument(span),
            );
        }
    }
}
