//! Replace-if-unchanged, exactly once, for objects whose format is the
//! caller's: the one atomic step of a table catalog (swap a table's
//! metadata pointer if it still points where the writer read it).
//!
//! A plain conditional replace has the failure [`CreateOnce`](super::CreateOnce)
//! exists for, and one more. When the answer is lost, or is a refusal that
//! may be the store seeing our own request twice, a writer that takes the
//! refusal at face value commits its transaction again on top of itself.
//! And a write of ours can land, then be replaced by another writer before
//! we read the object back: the object no longer holds our nonce, yet our
//! commit is in its history. [`SwapOnce`] settles every unknown answer by
//! reading the object (the [`super::pending`] rule, inside the shared
//! attempt loop) and asks the caller's lineage check whether the body it
//! finds descends from our write, so that the outcome is exactly one of:
//!
//! - [`Swapped::Ours`]: our body replaced the one the caller read (answered,
//!   found again, or found in the history of a later body);
//! - [`Swapped::Conflict`]: another writer's body replaced the one the caller
//!   read, it does not descend from ours, and none of our writes can land
//!   any more (each was conditioned on the version the caller read);
//! - an error of kind [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous)
//!   only while a write of ours may still land, or when the lineage check
//!   could not tell: never reported as a conflict.
//!
//! Both lease layouts are supported: in the create-only layout the object
//! is an epoch chain ([`EpochStore`](crate::layout::EpochStore)), written
//! and read through [`SwapOnce::read`]; every process that swaps a key must
//! use the same layout.

use std::sync::Arc;

use bytes::Bytes;
use tracing::Instrument;

use crate::layout::LeaseLayout;
use crate::{CasError, CasStore, ErrorKind, StoredObject, Version};

use super::attempt::{Attempts, Sent, Unresolved, attempt_knobs};
use super::pending::{PendingWrite, PendingWrites, Settled};
use super::retry::{RequestPolicy, count_ambiguous, timed};
use super::{Clock, Entropy, LeaseError};

const UNRESOLVED_SWAP: Unresolved = Unresolved {
    what: "the swap may or may not have been applied",
    advice: "read the object and look for this write (or a body descending from it) before \
             writing it again",
};

/// What [`SwapOnce::swap`] settled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a conflict means the body was not written: rebase on the current object or give up"]
pub enum Swapped {
    /// Our body replaced the one the caller read: written exactly once.
    Ours {
        /// The version of our write, or, when `replaced`, of the object as
        /// read (a body descending from ours).
        version: Version,
        /// Writes of others, descending from ours, have replaced our body
        /// since it landed (found by the lineage check).
        replaced: bool,
    },
    /// Another writer's body replaced the one the caller read, and does not
    /// descend from ours: ours was not written and can never be. The
    /// current object (`None`: the key is absent) is what to rebase on.
    Conflict(Option<StoredObject>),
}

impl Swapped {
    /// Is it our write?
    pub fn is_ours(&self) -> bool {
        matches!(self, Swapped::Ours { .. })
    }
}

/// Replaces an object only if it is still the version its caller read,
/// exactly once.
///
/// A write whose answer is lost, late, duplicated or refused as stale is
/// settled by reading the object back: our nonce there, or a body the
/// caller's lineage check says descends from our write, is
/// [`Swapped::Ours`]; another writer's body is [`Swapped::Conflict`] (no
/// write of ours can land any more, so committing again after rebasing is
/// safe); while a write of ours may still land the error is
/// [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous), never a conflict.
///
/// The caller makes the body from a nonce, finds the nonce in a stored body
/// again, and says whether a stored body descends from the write that
/// carried a nonce (an Iceberg catalog: the current metadata's
/// `metadata-log` lists the metadata file we pointed to). Everything else
/// (the store guard, the layout, timeouts, pauses, reading back after an
/// unknown answer) is the shared attempt loop's.
///
/// **Dropping the future** of [`swap`](SwapOnce::swap) forgets its
/// unresolved writes: one may still land. A caller that stops waiting must
/// treat the swap as ambiguous, and read (with [`read`](SwapOnce::read)) to
/// find its nonce or a descendant before writing the same change again.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{LeaseError, SwapOnce, Swapped};
///
/// // A pointer body: the target, then the nonce of the write. The body's
/// // and the lineage check's error type is the call's (here LeaseError;
/// // any E: From<LeaseError>).
/// let body = |target: &'static str| {
///     move |nonce: &str| Ok::<_, LeaseError>(Bytes::from(format!("{target}\n{nonce}")))
/// };
/// let nonce_in = |stored: &[u8]| {
///     Some(std::str::from_utf8(stored).ok()?.split_once('\n')?.1.to_string())
/// };
/// // No lineage in this format: only our own body proves our write.
/// let descends = |_: &[u8], _: &str| Ok::<_, LeaseError>(false);
///
/// let pointer = SwapOnce::new(Arc::new(MemoryStore::new()));
/// let first = pointer.swap("t/pointer", None, body("v1"), nonce_in, descends).await?;
/// let Swapped::Ours { version, .. } = first else { unreachable!() };
/// let second = pointer.swap("t/pointer", Some(&version), body("v2"), nonce_in, descends).await?;
/// assert!(second.is_ours());
/// // A writer that read v1 too is told what replaced it.
/// let stale = pointer.swap("t/pointer", Some(&version), body("v3"), nonce_in, descends).await?;
/// let Swapped::Conflict(Some(current)) = stale else { unreachable!() };
/// assert!(current.body.starts_with(b"v2\n"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SwapOnce {
    /// The store as the layout presents it (an epoch view in the
    /// create-only layout).
    store: Arc<dyn CasStore>,
    layout: LeaseLayout,
    policy: RequestPolicy,
}

impl SwapOnce {
    /// A writer on `store`, in the layout chosen for it
    /// ([`layout_of`](crate::layout::layout_of)), with the default knobs
    /// (request timeout 10 s, retry period 100 ms, 32 attempts, the store
    /// guard on).
    pub fn new(store: Arc<dyn CasStore>) -> Self {
        let layout = crate::layout::layout_of(store.as_ref());
        SwapOnce {
            store: crate::layout::lease_view(store),
            layout,
            policy: RequestPolicy::default(),
        }
    }

    attempt_knobs!("a swap-once writer");

    /// The layout the objects are written in.
    pub fn layout(&self) -> LeaseLayout {
        self.layout
    }

    /// Reads the object at `key` (one GET in the record layout; the head of
    /// its epoch chain in the create-only layout): what a caller reads
    /// before a swap, to pass its version as `expected`.
    ///
    /// # Errors
    ///
    /// Store errors; a key written in the other layout is
    /// [`ErrorKind::Misconfigured`](crate::ErrorKind::Misconfigured).
    pub async fn read(&self, key: &str) -> Result<Option<StoredObject>, LeaseError> {
        crate::validate_key(key)?;
        Ok(self.get(key).await?)
    }

    /// Replaces the object at `key` with `body(nonce)` if it is still at
    /// `expected` (`None`: creates it if absent), exactly once.
    ///
    /// `body` is called once per write sent, each time with a fresh nonce;
    /// `nonce_in` returns the nonce a stored body carries (`None` for a
    /// body without one); `descends(stored, nonce)` says whether `stored`
    /// was written on top of the write that carried `nonce`, directly or
    /// not (return `Ok(false)` if the format keeps no lineage, an error if
    /// the lineage cannot tell: the swap then ends ambiguous rather than
    /// guess). Two bodies must never carry the same nonce, and
    /// `nonce_in(&body(n))` must be `Some(n)`.
    ///
    /// A delete of the object after our write landed erases its lineage:
    /// the swap then reports [`Swapped::Conflict`] with no current object.
    ///
    /// Requests: 1 write; +1 GET per unanswered or refused write.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Store`] with [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous)
    /// while a write may still land; other store errors (nothing was
    /// written); [`LeaseError::UnsafeStore`] when the store guard finds
    /// that the store does not honour conditional writes;
    /// [`LeaseError::Contended`] after every attempt was refused as
    /// retryable with nothing written (each converted into `E`); the error
    /// `body` returns, as it is, when no write of this call may still land.
    /// A body or lineage check that fails while a write of this call may
    /// still land is reported as
    /// [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous) (its error in
    /// the message): the caller must read the key before writing again.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the swap applied, once: a write
    /// already sent can still land (each is conditioned on the same
    /// `expected` state, so at most one of this call's writes does), and
    /// nothing retries it. That is the state an
    /// [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous) answer
    /// reports: read the key and look for your nonces to find out.
    pub async fn swap<B, N, D, E>(
        &self,
        key: &str,
        expected: Option<&Version>,
        body: B,
        nonce_in: N,
        descends: D,
    ) -> Result<Swapped, E>
    where
        B: Fn(&str) -> Result<Bytes, E>,
        N: Fn(&[u8]) -> Option<String>,
        D: Fn(&[u8], &str) -> Result<bool, E>,
        E: From<LeaseError> + std::fmt::Display,
    {
        crate::validate_key(key).map_err(LeaseError::from)?;
        let span = tracing::debug_span!("swap_once", key, layout = %self.layout);
        let rule = Lineage {
            nonce_in: &nonce_in,
            descends: &descends,
        };
        self.swap_inner(key, expected, body, rule)
            .instrument(span)
            .await
    }

    async fn swap_inner<B, N, D, E>(
        &self,
        key: &str,
        expected: Option<&Version>,
        body: B,
        rule: Lineage<'_, N, D>,
    ) -> Result<Swapped, E>
    where
        B: Fn(&str) -> Result<Bytes, E>,
        N: Fn(&[u8]) -> Option<String>,
        D: Fn(&[u8], &str) -> Result<bool, E>,
        E: From<LeaseError> + std::fmt::Display,
    {
        // The guard checks the view we write through: conditional replace
        // in the record layout, create-if-absent under the epoch chain.
        self.policy.verify(self.store.as_ref()).await?;
        let mut attempts: Attempts<'_, ()> = Attempts::new(&self.policy, key, UNRESOLVED_SWAP);
        // The last answer said the object moved on: one read settles it.
        let mut answered_stale = false;
        while attempts.next().await {
            if !attempts.pending.is_empty() {
                match self.settle(key, &mut attempts.pending, &rule).await {
                    Ok(Some(swapped)) => return Ok(swapped),
                    // Still at `expected`: our writes are live, and the next
                    // one is conditioned on the same version, so at most one
                    // lands.
                    Ok(None) => {}
                    Err(LeaseError::Store(err)) if err.is_retryable() => {
                        attempts.retry(err);
                        continue;
                    }
                    Err(err) => return Err(attempts.fail(err).into()),
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
            debug_assert_eq!((rule.nonce_in)(&bytes).as_deref(), Some(nonce.as_str()));
            let write = PendingWrite {
                nonce,
                sent_at: attempts.now(),
                condition: expected.cloned(),
                payload: (),
            };
            let request = async {
                match expected {
                    None => self.store.create(key, bytes).await,
                    Some(version) => self.store.replace(key, version, bytes).await,
                }
            };
            // Stale, or our own request seen twice: the next round reads
            // which, at once.
            let sent = attempts.send(write, key, request).await;
            answered_stale =
                matches!(&sent, Sent::Unknown(err) if err.kind() == ErrorKind::PreconditionFailed);
            if let Some(version) = attempts.created(sent)? {
                return Ok(Swapped::Ours {
                    version,
                    replaced: false,
                });
            }
        }
        // Out of attempts right after an answer that the object moved on:
        // the outcome is one read away, not unknown.
        if answered_stale
            && let Ok(Some(swapped)) = self.settle(key, &mut attempts.pending, &rule).await
        {
            return Ok(swapped);
        }
        Err(attempts.give_up().into())
    }

    /// Reads `key` and settles our unresolved writes against it: `Some`
    /// once the outcome is known, `None` while the object is still at the
    /// version they were conditioned on.
    async fn settle<N, D, E>(
        &self,
        key: &str,
        pending: &mut PendingWrites<()>,
        rule: &Lineage<'_, N, D>,
    ) -> Result<Option<Swapped>, LeaseError>
    where
        N: Fn(&[u8]) -> Option<String>,
        D: Fn(&[u8], &str) -> Result<bool, E>,
        E: std::fmt::Display,
    {
        let found = self.get(key).await?;
        let Some(object) = found else {
            // Creates stay live on an absent key; replaces are dead.
            return Ok(match pending.settle(None, |_| false) {
                Settled::NotLanded if !pending.is_empty() => None,
                _ => {
                    count_ambiguous("not_ours");
                    Some(Swapped::Conflict(None))
                }
            });
        };
        let stored_nonce = (rule.nonce_in)(&object.body);
        // Ask the lineage only about writes the object has moved past
        // (still at their condition, it cannot descend from them).
        let mut descended = Vec::new();
        for write in pending.iter() {
            let moved_on = write.condition.as_ref() != Some(&object.version);
            if moved_on
                && stored_nonce.as_deref() != Some(write.nonce.as_str())
                && (rule.descends)(&object.body, &write.nonce).map_err(|err| {
                    // Asked only with a write of ours pending: the caller
                    // (through `fail`) sees it as ambiguous, not as its own.
                    LeaseError::Codec {
                        key: key.to_string(),
                        message: format!("the lineage check failed: {err}"),
                    }
                })?
            {
                descended.push(write.nonce.clone());
            }
        }
        let holds = |nonce: &str| {
            stored_nonce.as_deref() == Some(nonce) || descended.iter().any(|n| n == nonce)
        };
        Ok(match pending.settle(Some(&object.version), holds) {
            Settled::Landed(write) => {
                let replaced = stored_nonce.as_deref() != Some(write.nonce.as_str());
                tracing::debug!(key, replaced, "an unanswered swap landed");
                count_ambiguous("ours");
                Some(Swapped::Ours {
                    version: object.version,
                    replaced,
                })
            }
            Settled::NotLanded if !pending.is_empty() => None,
            // Every write of ours was conditioned on the version the caller
            // read: with another body there, none of them can land.
            Settled::NotLanded => {
                count_ambiguous("not_ours");
                Some(Swapped::Conflict(Some(object)))
            }
        })
    }

    /// One timed GET through the layout's view; a record-layout reader
    /// refuses the create-only layout's marker by name.
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let found = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            key,
            self.store.get(key),
        )
        .await?;
        if self.layout == LeaseLayout::Record
            && let Some(object) = &found
            && crate::layout::is_layout_marker(&object.body)
        {
            return Err(crate::layout::layout_mismatch(
                key,
                LeaseLayout::Epochs,
                LeaseLayout::Record,
            ));
        }
        Ok(found)
    }
}

/// The caller's two questions about a stored body.
struct Lineage<'a, N, D> {
    nonce_in: &'a N,
    descends: &'a D,
}
