//! Create-if-absent, exactly once, for objects whose format is the caller's.
//!
//! A table format commits by creating the next entry of its log if it is
//! absent (Delta Lake's `_delta_log/<version>.json`). When the store's
//! answer is lost, or is a refusal that may be the store seeing our own
//! request twice, a writer that takes the refusal at face value believes it
//! lost the race and commits the same transaction again at the next
//! entry: a duplicate no reader can undo. [`CreateOnce`] settles every
//! such answer by reading the object back and looking for the nonce the
//! caller put in the body ([`super::pending`]'s rule), inside the shared
//! attempt loop, so that the outcome is exactly one of:
//!
//! - [`Created::Ours`]: our body holds the key (answered, or found again);
//! - [`Created::Taken`]: another writer's object holds it, and none of our
//!   writes can land any more (each was conditioned on the key being
//!   absent);
//! - an error of kind [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous)
//!   only while a write of ours may still land (the key stayed absent and
//!   the store kept failing): never reported as a conflict.

use std::sync::Arc;

use bytes::Bytes;
use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version};

use super::attempt::{Attempts, Sent, Unresolved, attempt_knobs};
use super::pending::{PendingWrite, PendingWrites, Settled};
use super::retry::{RequestPolicy, timed};
use super::{Clock, Entropy, LeaseError};

const UNRESOLVED_CREATE: Unresolved = Unresolved {
    what: "the object may or may not have been created",
    advice: "read the key to find out before writing it again",
};

/// What [`CreateOnce::create`] settled. Check it: `create(..).await?;`
/// alone would take [`Created::Taken`] (our body was not written) for a
/// commit, so dropping a `Created` is refused at compile time when the
/// crate denies warnings:
///
/// ```compile_fail
/// # #![deny(unused_must_use)]
/// # async fn commit(writer: casaas_core::lease::CreateOnce) -> Result<(), casaas_core::lease::LeaseError> {
/// # let body = |n: &str| Ok::<_, casaas_core::lease::LeaseError>(bytes::Bytes::from(n.to_string()));
/// # let nonce_in = |b: &[u8]| Some(String::from_utf8_lossy(b).into_owned());
/// writer.create("log/1", body, nonce_in).await?; // Taken would pass for a commit
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "Created::Taken means another writer's object holds the key and ours was not written; match on it"]
pub enum Created {
    /// Our body holds the key, at this version.
    Ours(Version),
    /// Another writer's object holds the key, at this version; ours was not
    /// written and can never be.
    Taken(Version),
}

/// Creates objects of the caller's format exactly once.
///
/// A create whose answer is lost, or is a refusal that may be the store
/// seeing our request twice, is settled by reading the key back and looking
/// for the nonce the caller put in the body, so the outcome is exactly one
/// of [`Created::Ours`], [`Created::Taken`] (another writer's body holds the
/// key, and none of ours can land any more) or an error, of kind
/// [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous) only while a write
/// of ours may still land. Never a conflict it caused itself.
///
/// The caller makes the body from a nonce and finds the nonce in a stored
/// body again; everything else (the store guard, timeouts, pauses, reading
/// back after an unknown answer) is the shared attempt loop's.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{CreateOnce, Created, LeaseError};
///
/// let store = Arc::new(MemoryStore::new());
/// let writer = CreateOnce::new(store);
/// // The body's error type is the call's (here LeaseError; any E: From<LeaseError>).
/// let body = |nonce: &str| Ok::<_, LeaseError>(Bytes::from(format!("commit 1\nnonce {nonce}\n")));
/// let nonce_in = |stored: &[u8]| {
///     let text = std::str::from_utf8(stored).ok()?;
///     Some(text.lines().find_map(|l| l.strip_prefix("nonce "))?.to_string())
/// };
/// assert!(matches!(writer.create("log/1", body, nonce_in).await?, Created::Ours(_)));
/// // A second writer finds the entry taken: its body was never written.
/// assert!(matches!(writer.create("log/1", body, nonce_in).await?, Created::Taken(_)));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CreateOnce {
    store: Arc<dyn CasStore>,
    policy: RequestPolicy,
}

impl CreateOnce {
    /// A writer on `store` with the default knobs (request timeout 10 s,
    /// retry period 100 ms, 32 attempts, the store guard on).
    pub fn new(store: Arc<dyn CasStore>) -> Self {
        CreateOnce {
            store,
            policy: RequestPolicy::default(),
        }
    }

    attempt_knobs!("create-once writer");

    /// The store written to.
    pub fn store(&self) -> &Arc<dyn CasStore> {
        &self.store
    }

    /// Creates `key` holding `body(nonce)` unless it exists, exactly once.
    ///
    /// `body` is called once per write sent, each time with a fresh nonce;
    /// `nonce_in` returns the nonce a stored body carries (`None` for a
    /// body of another writer that carries none). Two bodies must never
    /// carry the same nonce, and `nonce_in(&body(n))` must be `Some(n)`.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] with [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous)
    /// while a write may still land; other store errors (nothing was
    /// written); [`LeaseError::UnsafeStore`] when the store guard finds
    /// that the store does not honour create-if-absent;
    /// [`LeaseError::Contended`] after every attempt was refused as
    /// retryable with nothing written (each converted into `E`); the error
    /// `body` returns, as it is, when no write of this call may still land.
    /// A body that fails while an earlier write of this call may still land
    /// is reported as [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous)
    /// (its error in the message): "may have been created" is what the
    /// caller must act on, by reading the key.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the object created with one of the
    /// bodies sent: a create already on its way can still land (each one is
    /// conditioned on the key being absent, so at most one does). Nothing
    /// else is left behind and nothing retries it. To learn the outcome,
    /// read the key and look for the nonces your `body` was given.
    pub async fn create<B, N, E>(&self, key: &str, body: B, nonce_in: N) -> Result<Created, E>
    where
        B: Fn(&str) -> Result<Bytes, E>,
        N: Fn(&[u8]) -> Option<String>,
        E: From<LeaseError> + std::fmt::Display,
    {
        crate::validate_key(key).map_err(LeaseError::from)?;
        let span = tracing::debug_span!("create_once", key);
        self.create_inner(key, body, nonce_in)
            .instrument(span)
            .await
    }

    async fn create_inner<B, N, E>(&self, key: &str, body: B, nonce_in: N) -> Result<Created, E>
    where
        B: Fn(&str) -> Result<Bytes, E>,
        N: Fn(&[u8]) -> Option<String>,
        E: From<LeaseError> + std::fmt::Display,
    {
        // The guard checks what this writer relies on, create-if-absent,
        // and nothing more: through the epoch view, whose every write is a
        // create (a store whose replace needs options is fine here).
        let view = crate::layout::lease_view(crate::layout::with_layout(
            self.store.clone(),
            crate::layout::LeaseLayout::Epochs,
        ));
        self.policy.verify(view.as_ref()).await?;
        let mut attempts: Attempts<'_, ()> = Attempts::new(&self.policy, key, UNRESOLVED_CREATE);
        // The last answer said the key exists: one read settles it.
        let mut answered_present = false;
        while attempts.next().await {
            if !attempts.pending.is_empty() {
                match self.settle(key, &mut attempts.pending, &nonce_in).await {
                    Ok(Some(created)) => return Ok(created),
                    // Still absent: our writes are live, and the next one is
                    // conditioned on the same absence, so at most one lands.
                    Ok(None) => {}
                    Err(err) if err.is_retryable() => {
                        attempts.retry(err);
                        continue;
                    }
                    Err(err) => return Err(attempts.fail(err.into()).into()),
                }
            }
            let nonce = self.policy.entropy.nonce();
            let bytes = match body(&nonce) {
                Ok(bytes) => bytes,
                // Nothing of ours can land: the caller's error, untouched.
                Err(err) if attempts.pending.is_empty() => return Err(err),
                Err(err) => {
                    let failed = LeaseError::Codec {
                        key: key.to_string(),
                        message: format!("the body failed: {err}"),
                    };
                    return Err(attempts.fail(failed).into());
                }
            };
            // A `nonce_in` that cannot find the nonce in our own body would
            // turn a lost answer for our write into `Taken`: refused before
            // anything is sent, in release builds too.
            if nonce_in(&bytes).as_deref() != Some(nonce.as_str()) {
                let refused = LeaseError::Codec {
                    key: key.to_string(),
                    message: "nonce_in does not find, in the body just made, the nonce it was \
                              made with: nonce_in(&body(n)) must be Some(n), or a lost answer \
                              could not be settled"
                        .to_string(),
                };
                return Err(if attempts.pending.is_empty() {
                    refused.into()
                } else {
                    attempts.fail(refused).into()
                });
            }
            let write = PendingWrite {
                nonce,
                sent_at: attempts.now(),
                condition: None,
                payload: (),
            };
            // Taken, or our own request seen twice: the next round reads
            // which, at once.
            let sent = attempts
                .send(write, key, self.store.create(key, bytes))
                .await;
            answered_present =
                matches!(&sent, Sent::Unknown(err) if err.kind() == ErrorKind::PreconditionFailed);
            if let Some(version) = attempts.created(sent)? {
                return Ok(Created::Ours(version));
            }
        }
        // Out of attempts right after an answer that the key exists: the
        // outcome is one read away, not unknown.
        if answered_present
            && let Ok(Some(created)) = self.settle(key, &mut attempts.pending, &nonce_in).await
        {
            return Ok(created);
        }
        Err(attempts.give_up().into())
    }

    /// Reads `key` and settles our unresolved writes against it: `Some`
    /// once the outcome is known, `None` while the key is absent.
    async fn settle<N>(
        &self,
        key: &str,
        pending: &mut PendingWrites<()>,
        nonce_in: &N,
    ) -> Result<Option<Created>, CasError>
    where
        N: Fn(&[u8]) -> Option<String>,
    {
        let found = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            key,
            self.store.get(key),
        )
        .await?;
        let Some(object) = found else {
            return Ok(None);
        };
        let stored_nonce = nonce_in(&object.body);
        let holds = |nonce: &str| stored_nonce.as_deref() == Some(nonce);
        Ok(Some(match pending.settle(Some(&object.version), holds) {
            Settled::Landed(_) => {
                tracing::debug!(key, "an unanswered create landed");
                Created::Ours(object.version)
            }
            // Every write of ours was conditioned on absence: with another
            // body there, none of them can land.
            Settled::NotLanded => {
                debug_assert!(pending.is_empty());
                Created::Taken(object.version)
            }
        }))
    }
}
