//! A resource guarded by fencing tokens: the protection a lock cannot give alone.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version, validate_key};

use super::attempt::{Attempts, Sent, Unresolved, attempt_knobs};
use super::clock::{Clock, Entropy};
use super::handle::LeaseGuard;
use super::pending::{PendingWrite, PendingWrites, Settled};
use super::record::{check_envelope_schemas, foreign};
use super::retry::{RequestPolicy, count_ambiguous, timed};
use super::{LeaseError, metric_names};

/// The `kind` of a fenced-resource record.
pub(crate) const FENCED_KIND: &str = "casaas.fenced";
/// Schema 2 added `seq` and `applied`; schema 1 records are still read.
const FENCED_SCHEMA: u64 = 2;
/// How an update that may still land reports an error.
const UNRESOLVED_UPDATE: Unresolved = Unresolved {
    what: "the update may or may not have been applied",
    advice: "read the resource to find out",
};
/// How many earlier writes' nonces a record carries. A writer whose answer
/// was lost can tell whether its write landed as long as fewer than this
/// many writes followed it before it reads again.
const APPLIED_HISTORY: usize = 32;

#[derive(Serialize, Deserialize)]
struct FencedRecord<T> {
    kind: String,
    schema: u64,
    token: u64,
    nonce: String,
    value: T,
    /// Writes so far, this one included (absent in schema 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    /// Nonces of the writes before this one, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    applied: Vec<String>,
}

/// Which writes a stored record proves applied.
#[derive(Debug)]
struct WriteHistory {
    nonce: String,
    seq: Option<u64>,
    applied: Vec<String>,
}

impl WriteHistory {
    fn holds(&self, nonce: &str) -> bool {
        self.nonce == nonce || self.applied.iter().any(|n| n == nonce)
    }

    /// Could a write made on top of write number `before` be missing from
    /// this record without our knowing whether it landed?
    fn can_tell(&self, before: Option<u64>) -> bool {
        match (before, self.seq) {
            (Some(before), Some(seq)) => {
                let oldest_known = seq.saturating_sub(self.applied.len() as u64);
                before.saturating_add(1) >= oldest_known
            }
            _ => false,
        }
    }

    /// The history a write replacing this record carries; refused once the
    /// write count cannot grow (a repeated count would make an unanswered
    /// write's outcome unknowable).
    fn next(&self, key: &str) -> Result<(u64, Vec<String>), LeaseError> {
        let seq = self
            .seq
            .unwrap_or(0)
            .checked_add(1)
            .ok_or_else(|| LeaseError::Exhausted {
                key: key.to_string(),
                counter: "write count",
            })?;
        let mut applied = self.applied.clone();
        applied.push(self.nonce.clone());
        let excess = applied.len().saturating_sub(APPLIED_HISTORY);
        applied.drain(..excess);
        Ok((seq, applied))
    }
}

/// What an update remembers of each of its writes.
#[derive(Debug, Clone)]
struct UpdateWrite {
    value: serde_json::Value,
    /// The number of writes the record had when ours was made on it.
    before: Option<u64>,
    /// Which call of the update function (from 0) produced the value: a
    /// batch maps it back to the values its callers saw in that call.
    call: usize,
}

/// A value read from a [`FencedResource`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fenced<T> {
    /// The value.
    pub value: T,
    /// The highest fencing token the resource has accepted.
    pub token: u64,
    /// The version of the object.
    pub version: Version,
}

/// An object whose every update is a compare-and-swap that also refuses a
/// writer whose fencing token is lower than the highest one recorded.
///
/// This is what protects the resource against a holder that was paused past
/// its lease and resumes believing it still leads: its token is lower than
/// the new holder's, so its write is refused with [`LeaseError::FencedOut`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{FencedResource, LeaseError};
///
/// let pointer = FencedResource::<u64>::new(Arc::new(MemoryStore::new()), "table/head")?;
/// pointer.update(2, |v| v.copied().unwrap_or(0) + 1).await?;
/// let err = pointer.update(1, |v| v.copied().unwrap_or(0) + 1).await.unwrap_err();
/// assert!(matches!(err, LeaseError::FencedOut { presented: 1, recorded: 2 }));
/// assert_eq!(pointer.read().await?.unwrap().value, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FencedResource<T> {
    store: Arc<dyn CasStore>,
    key: String,
    policy: RequestPolicy,
    _value: PhantomData<fn() -> T>,
}

impl<T> FencedResource<T>
where
    T: Serialize + DeserializeOwned + Send + Sync,
{
    /// The resource stored at `key`.
    pub fn new(store: Arc<dyn CasStore>, key: impl Into<String>) -> Result<Self, LeaseError> {
        let key = key.into();
        validate_key(&key)?;
        Ok(FencedResource {
            store: crate::layout::lease_view(store),
            key,
            policy: RequestPolicy::default(),
            _value: PhantomData,
        })
    }

    attempt_knobs!("a FencedResource");

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Reads the value, its recorded token and version (one GET).
    pub async fn read(&self) -> Result<Option<Fenced<T>>, LeaseError> {
        Ok(self.read_full().await?.map(|(f, _)| f))
    }

    async fn read_full(&self) -> Result<Option<(Fenced<T>, WriteHistory)>, LeaseError> {
        let object = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            &self.key,
            self.store.get(&self.key),
        )
        .await?;
        let Some(object) = object else {
            return Ok(None);
        };
        let value: serde_json::Value =
            serde_json::from_slice(&object.body).map_err(|_| foreign(&self.key, &object.body))?;
        check_envelope_schemas(
            &self.key,
            &object.body,
            &value,
            FENCED_KIND,
            1..=FENCED_SCHEMA,
        )?;
        let record: FencedRecord<T> =
            serde_json::from_value(value).map_err(|e| LeaseError::Codec {
                key: self.key.clone(),
                message: e.to_string(),
            })?;
        Ok(Some((
            Fenced {
                value: record.value,
                token: record.token,
                version: object.version,
            },
            WriteHistory {
                nonce: record.nonce,
                seq: record.seq,
                applied: record.applied,
            },
        )))
    }

    /// Applies `f` to the current value (`None` if absent) and writes the
    /// result, only if `token` is at least the recorded token and nobody
    /// wrote in between (read-modify-CAS, retried on a lost race).
    ///
    /// **Exactly once**: `f`'s result is written at most once, even when an
    /// answer is lost, a write lands after its timeout, or a transport
    /// duplicate answers 412. Every record carries the nonces of the
    /// writes before it, so a later read tells whether an unanswered write
    /// landed even after others have written on top of it; a new attempt is
    /// made only once every earlier one is known not to have landed, or is
    /// conditioned on the same state so that at most one of them can. If
    /// that cannot be told (more than 32 writes by others in between, or a
    /// record written by an older version of this library), the update
    /// fails with [`ErrorKind::Ambiguous`] rather than risk a second apply.
    /// `f` may be called once per attempt; only one result is ever stored.
    ///
    /// A lower token fails with [`LeaseError::FencedOut`].
    ///
    /// On success, `version` is that of our write, or of the object as read
    /// if writes of others already replaced ours.
    ///
    /// Requests: 1 GET + 1 write; +1 GET per unanswered write and per lost
    /// race.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the update applied, once: a write
    /// already sent can still land (it is conditioned on the version read,
    /// so at most one of this call's writes does), and nothing retries it.
    /// That is the state an [`ErrorKind::Ambiguous`] answer reports: read
    /// the resource to find out. Nothing else is left behind.
    pub async fn update<F>(&self, token: u64, f: F) -> Result<Fenced<T>, LeaseError>
    where
        F: FnMut(Option<&T>) -> T + Send,
    {
        Ok(self.update_counted(token, f).await?.0)
    }

    /// [`update`](FencedResource::update), also saying which call of `f`
    /// (from 0) produced the value that landed: a batch of updates applies
    /// them all once per call, and answers each caller from that call.
    pub(crate) async fn update_counted<F>(
        &self,
        token: u64,
        mut f: F,
    ) -> Result<(Fenced<T>, usize), LeaseError>
    where
        F: FnMut(Option<&T>) -> T + Send,
    {
        let span = tracing::debug_span!("fenced.update", key = %self.key, token);
        async {
            self.policy.verify(self.store.as_ref()).await?;
            let mut attempts: Attempts<'_, UpdateWrite> =
                Attempts::new(&self.policy, &self.key, UNRESOLVED_UPDATE);
            let mut calls = 0usize;
            while attempts.next().await {
                let current = match self.read_full().await {
                    Ok(c) => c,
                    Err(LeaseError::Store(err)) if err.is_retryable() => {
                        attempts.retry(err);
                        continue;
                    }
                    Err(other) => return Err(attempts.fail(other)),
                };
                if let Some(landed) = self.settle(&mut attempts.pending, current.as_ref(), token)? {
                    return Ok(landed);
                }
                let call = calls;
                let (expected, old, history) = match &current {
                    Some((fenced, history)) => {
                        if fenced.token > token {
                            metrics::counter!(metric_names::FENCING_REJECTIONS).increment(1);
                            return Err(LeaseError::FencedOut {
                                presented: token,
                                recorded: fenced.token,
                            });
                        }
                        (
                            Some(fenced.version.clone()),
                            Some(&fenced.value),
                            Some(history),
                        )
                    }
                    None => (None, None, None),
                };
                let (seq, applied) = match history {
                    Some(history) => history.next(&self.key)?,
                    None => (1, Vec::new()),
                };
                let value = f(old);
                calls += 1;
                let nonce = self.policy.entropy.nonce();
                let record = FencedRecord {
                    kind: FENCED_KIND.to_string(),
                    schema: FENCED_SCHEMA,
                    token,
                    nonce: nonce.clone(),
                    value,
                    seq: Some(seq),
                    applied,
                };
                let codec = |e: serde_json::Error| LeaseError::Codec {
                    key: self.key.clone(),
                    message: e.to_string(),
                };
                let body = serde_json::to_vec(&record).map_err(codec)?;
                let write = PendingWrite {
                    nonce,
                    sent_at: attempts.now(),
                    condition: expected.clone(),
                    payload: UpdateWrite {
                        value: serde_json::to_value(&record.value).map_err(codec)?,
                        before: history.map_or(Some(0), |h| h.seq),
                        call,
                    },
                };
                let request = match &expected {
                    None => self.store.create(&self.key, body.into()),
                    Some(v) => self.store.replace(&self.key, v, body.into()),
                };
                match attempts.send(write, &self.key, request).await {
                    Sent::Written(version) => {
                        let written = Fenced {
                            value: record.value,
                            token,
                            version,
                        };
                        return Ok((written, call));
                    }
                    Sent::Unknown(err) => {
                        // Unknown outcome (or a 412 that may be our own
                        // duplicate): the next round reads and settles it.
                        tracing::debug!(error = %err, "update outcome unknown; reading");
                        attempts.retry(err);
                    }
                    Sent::Refused(err) => {
                        if !(err.is_retryable() || err.kind() == ErrorKind::NotFound) {
                            return Err(attempts.fail(err.into()));
                        }
                        attempts.retry(err);
                    }
                }
            }
            Err(attempts.give_up())
        }
        .instrument(span)
        .await
    }

    /// Settles the update's unresolved writes against the record just read:
    /// `Some` if one landed, an error if that cannot be told.
    fn settle(
        &self,
        pending: &mut PendingWrites<UpdateWrite>,
        current: Option<&(Fenced<T>, WriteHistory)>,
        token: u64,
    ) -> Result<Option<(Fenced<T>, usize)>, LeaseError> {
        if pending.is_empty() {
            return Ok(None);
        }
        let Some((fenced, history)) = current else {
            pending.settle(None, |_| false);
            count_ambiguous("absent");
            return Ok(None);
        };
        let unknowable = pending.iter().any(|w| {
            !history.holds(&w.nonce)
                && w.condition.as_ref() != Some(&fenced.version)
                && !history.can_tell(w.payload.before)
        });
        if unknowable {
            count_ambiguous("unknown");
            return Err(LeaseError::Store(
                CasError::new(
                    ErrorKind::Ambiguous,
                    "an update's write got no answer and too many writes followed it to tell whether it landed; read the resource before updating again",
                )
                .with_key(&self.key),
            ));
        }
        match pending.settle(Some(&fenced.version), |n| history.holds(n)) {
            Settled::Landed(write) => {
                count_ambiguous("ours");
                let value =
                    serde_json::from_value(write.payload.value).map_err(|e| LeaseError::Codec {
                        key: self.key.clone(),
                        message: e.to_string(),
                    })?;
                let landed = Fenced {
                    value,
                    token,
                    version: fenced.version.clone(),
                };
                Ok(Some((landed, write.payload.call)))
            }
            Settled::NotLanded => {
                count_ambiguous("not_ours");
                Ok(None)
            }
        }
    }

    /// [`LeaseGuard::ensure_held_for`] with `min_remaining`, then
    /// [`update`](FencedResource::update) with the guard's token.
    ///
    /// # Cancel safety
    ///
    /// As [`update`](FencedResource::update)'s.
    pub async fn update_guarded<F>(
        &self,
        guard: &LeaseGuard,
        min_remaining: Duration,
        f: F,
    ) -> Result<Fenced<T>, LeaseError>
    where
        F: FnMut(Option<&T>) -> T + Send,
    {
        guard.ensure_held_for(min_remaining)?;
        self.update(guard.token(), f).await
    }
}
