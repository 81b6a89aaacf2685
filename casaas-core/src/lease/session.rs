//! Sessions: one heartbeat that any number of locks hang from.
//!
//! A [`Session`] is an ordinary lease on its own key (the *heartbeat*); its
//! term is that lease's fencing token. A lock taken under it
//! ([`Session::lease`]) is an ordinary lease record that names the session
//! and term ([`SessionRef`](super::SessionRef)) and is never rewritten while held: holding it
//! costs no request beyond the heartbeat, whatever the number of locks.
//!
//! What a held lock knows of its session is `SessionLink`, in `handle.rs`
//! beside the guard that uses it. The contender's rule is in `acquire.rs`,
//! shared by every [`Lease`]: read the lock first, then its session; the
//! term is over when the session's record has moved to another term or says
//! released, or after the session's heartbeat was seen unchanged for its
//! TTL·(1 + drift) and a conditional write on that heartbeat marked the term
//! released. Only then is the lock replaced, conditioned on the version read
//! first. See
//! `docs/protocol.md` ("Sessions") for why each step is needed.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::validate_key;

use super::acquire::{AcquireOutcome, Lease};
use super::handle::{Health, LeaseGuard, SessionLink};
use super::wait::WaitOptions;
use super::{LeaseError, LostReason};

/// One heartbeat under which any number of locks are held.
///
/// Open one per process (or per group of locks that should end together),
/// then take locks with [`lease`](Session::lease): each is a [`Lease`]
/// whose [`LeaseGuard`]s renew nothing themselves and stay valid exactly as
/// long as the session, so [`FencedResource`](super::FencedResource),
/// [`FencedLog`](super::FencedLog) and [`Election`](super::Election) work
/// with them unchanged. Each lock keeps its own fencing token.
///
/// Cost: the heartbeat's renewals (one conditional write every
/// `renew_interval`, TTL/3 by default) whatever the number of locks; a lock
/// costs its acquisition and its release and nothing while held. When the
/// session is lost (its heartbeat was superseded, deleted, or missed its
/// renew deadline), every lock under it is lost at that moment with
/// [`LostReason::SessionLost`]. [`close`](Session::close) ends them all
/// with one write: after it, contenders take each lock at once.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{Lease, LeaseConfig, LostReason, Session};
///
/// let store = Arc::new(MemoryStore::new());
/// let heartbeat = Lease::new(store, "sessions/worker-1", "worker-1", LeaseConfig::default())?;
/// let session = Session::open(heartbeat, Default::default()).await?;
/// let mut held = Vec::new();
/// for shard in 0..100 {
///     let lock = session.lease(format!("shards/{shard}"))?;
///     held.push(lock.try_acquire().await?.into_result().expect("free"));
/// }
/// assert_eq!(session.held_locks(), 100);
/// assert_eq!(held[7].token(), 1); // every lock has its own fencing token
///
/// session.close().await?; // one write ends the session and all 100 locks
/// assert!(matches!(held[7].lost_reason(), Some(LostReason::SessionLost { .. })));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "dropping a Session ends every lock held under it; hold it while you work, then call close()"]
pub struct Session {
    heartbeat: Lease,
    guard: LeaseGuard,
    link: SessionLink,
}

impl Session {
    /// Opens the session: acquires its heartbeat lease (waiting while
    /// another process holds the same session key, as
    /// [`Lease::acquire`] does). The heartbeat's configuration (TTL, clock,
    /// entropy) is the one every lock under the session uses.
    ///
    /// # Cancel safety
    ///
    /// As [`Lease::acquire`]'s: dropping the future while the heartbeat's
    /// write is in flight may leave the heartbeat held by this owner with
    /// nobody renewing it (no lock hangs from it yet), until a clone of
    /// `heartbeat` kept by the caller claims it at its next attempt, or
    /// until it expires for other contenders one TTL·(1 + drift) after
    /// they first see it. Cancelling through `options` instead leaves
    /// nothing but a write whose answer was lost.
    pub async fn open(heartbeat: Lease, options: WaitOptions) -> Result<Session, LeaseError> {
        Self::check_heartbeat(&heartbeat)?;
        let guard = heartbeat.acquire(options).await?;
        Ok(Session::started(heartbeat, guard))
    }

    /// Opens the session if its heartbeat is free now (one attempt), or
    /// says who holds it, in the shape of [`Lease::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`open`](Session::open)'s.
    pub async fn try_open(heartbeat: Lease) -> Result<AcquireOutcome<Session>, LeaseError> {
        Self::check_heartbeat(&heartbeat)?;
        let outcome = heartbeat.try_acquire().await?;
        Ok(outcome.map(|guard| Session::started(heartbeat, guard)))
    }

    fn check_heartbeat(heartbeat: &Lease) -> Result<(), LeaseError> {
        if heartbeat.session().is_some() {
            return Err(LeaseError::InvalidConfig(
                "a session's heartbeat cannot itself be held under a session: open it with a Lease from Lease::new".to_string(),
            ));
        }
        Ok(())
    }

    fn started(heartbeat: Lease, guard: LeaseGuard) -> Session {
        let link = SessionLink {
            heartbeat: guard.shared(),
            key: guard.key().to_string(),
            term: guard.token(),
        };
        tracing::info!(session = %link.key, term = link.term, "session opened");
        Session {
            heartbeat,
            guard,
            link,
        }
    }

    /// A lease on `key` whose holdings hang from this session: acquire it
    /// with [`Lease::try_acquire`] or [`Lease::acquire`] as any lease. Its
    /// owner, store, configuration and clock are the session's.
    ///
    /// Fails when `key` is the session's own key, or when the session has
    /// ended (a lease of an ended session could never hold).
    pub fn lease(&self, key: impl Into<String>) -> Result<Lease, LeaseError> {
        let key = key.into();
        validate_key(&key)?;
        if key == self.link.key {
            return Err(LeaseError::InvalidConfig(format!(
                "'{key}' is the session's own heartbeat key: lock another key under it"
            )));
        }
        self.link.ensure_alive()?;
        Ok(self.heartbeat.under_session(key, self.link.clone()))
    }

    /// The heartbeat key.
    pub fn key(&self) -> &str {
        &self.link.key
    }

    /// The owner id (also the owner of every lock under the session).
    pub fn owner(&self) -> &str {
        self.guard.owner()
    }

    /// The term: the heartbeat's fencing token, written in every lock held
    /// under this opening of the session.
    pub fn term(&self) -> u64 {
        self.link.term
    }

    /// The heartbeat's guard (its status, health and validity).
    pub fn heartbeat(&self) -> &LeaseGuard {
        &self.guard
    }

    /// How many locks are held under the session now.
    pub fn held_locks(&self) -> usize {
        self.link.heartbeat.live_dependents().len()
    }

    /// Validity left: the heartbeat's (and so every lock's).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// Is the session held with validity left?
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// `Ok` only if the session is held with at least `min_remaining` left.
    pub fn ensure_held_for(&self, min_remaining: Duration) -> Result<(), LeaseError> {
        self.guard.ensure_held_for(min_remaining)
    }

    /// Why the session ended, if it did.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.guard.lost_reason()
    }

    /// Resolves with the reason once the session ends.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// A token cancelled as soon as the session ends.
    pub fn cancellation(&self) -> CancellationToken {
        self.guard.cancellation()
    }

    /// The heartbeat's health.
    pub fn health(&self) -> Health {
        self.guard.health()
    }

    /// Ends the session: every lock under it is marked lost first
    /// ([`LostReason::SessionLost`] with [`LostReason::Released`]), then
    /// one conditional write marks the heartbeat released. Contenders then
    /// take each lock at once (two reads and a write), without waiting for
    /// an expiry.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the session ended for this process (its
    /// locks already count as lost), but the heartbeat's release may not
    /// have landed: then contenders take the locks only once the
    /// heartbeat expires, one TTL·(1 + drift) after they first see its
    /// last renewal.
    pub async fn close(self) -> Result<(), LeaseError> {
        tracing::info!(session = %self.link.key, term = self.link.term, locks = self.held_locks(), "closing session");
        self.guard.release().await
    }

    /// Stops heartbeating without a write, as a crashed process would: the
    /// session and its locks end now for us, and for contenders after the
    /// heartbeat's TTL (for tests and simulations; prefer
    /// [`close`](Session::close)).
    pub fn abandon(self) {
        self.guard.abandon();
    }
}
