//! A resource guarded by fencing tokens: the protection a lock cannot give alone.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version, validate_key};

use super::clock::{Clock, Entropy};
use super::handle::LeaseGuard;
use super::record::{check_envelope, foreign};
use super::retry::{RequestPolicy, backoff, count_ambiguous, timed};
use super::{LeaseError, metric_names};

/// The `kind` of a fenced-resource record.
pub(crate) const FENCED_KIND: &str = "casaas.fenced";
const FENCED_SCHEMA: u64 = 1;

#[derive(Serialize, Deserialize)]
struct FencedRecord<T> {
    kind: String,
    schema: u64,
    token: u64,
    nonce: String,
    value: T,
}

/// A value read from a [`FencedResource`].
#[derive(Debug, Clone, PartialEq, Eq)]
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
            store,
            key,
            policy: RequestPolicy::default(),
            _value: PhantomData,
        })
    }

    /// Uses `clock` for timeouts and backoff.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.policy.clock = clock;
        self
    }

    /// Uses `entropy` for nonces and jitter.
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.policy.entropy = entropy;
        self
    }

    /// Sets the per-request timeout (default 10 s), base backoff (default
    /// 100 ms) and the attempts before [`LeaseError::Contended`] (default 32).
    pub fn with_retries(
        mut self,
        request_timeout: Duration,
        retry_period: Duration,
        max_attempts: u32,
    ) -> Self {
        self.policy.request_timeout = request_timeout;
        self.policy.retry_period = retry_period;
        self.policy.max_attempts = max_attempts.max(1);
        self
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Reads the value, its recorded token and version (one GET).
    pub async fn read(&self) -> Result<Option<Fenced<T>>, LeaseError> {
        Ok(self.read_full().await?.map(|(f, _)| f))
    }

    async fn read_full(&self) -> Result<Option<(Fenced<T>, String)>, LeaseError> {
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
        check_envelope(&self.key, &object.body, &value, FENCED_KIND, FENCED_SCHEMA)?;
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
            record.nonce,
        )))
    }

    /// Applies `f` to the current value (`None` if absent) and writes the
    /// result, only if `token` is at least the recorded token and nobody
    /// wrote in between (read-modify-CAS, retried on a lost race).
    ///
    /// A lower token fails with [`LeaseError::FencedOut`]. An ambiguous
    /// write is resolved by reading our nonce; if another write has already
    /// replaced it, the outcome cannot be known and the store error is
    /// returned rather than applying `f` twice.
    pub async fn update<F>(&self, token: u64, mut f: F) -> Result<Fenced<T>, LeaseError>
    where
        F: FnMut(Option<&T>) -> T + Send,
    {
        let span = tracing::debug_span!("fenced.update", key = %self.key, token);
        async {
            let mut last_err: Option<CasError> = None;
            for _ in 0..self.policy.max_attempts {
                if let Some(err) = last_err.take() {
                    self.policy
                        .clock
                        .sleep(backoff(
                            &self.policy.entropy,
                            self.policy.retry_period,
                            Some(&err),
                        ))
                        .await;
                }
                let current = self.read_full().await;
                let current = match current {
                    Ok(c) => c,
                    Err(LeaseError::Store(err)) if err.is_retryable() => {
                        last_err = Some(err);
                        continue;
                    }
                    Err(other) => return Err(other),
                };
                let (expected, old) = match &current {
                    Some((fenced, _)) => {
                        if fenced.token > token {
                            metrics::counter!(metric_names::FENCING_REJECTIONS).increment(1);
                            return Err(LeaseError::FencedOut {
                                presented: token,
                                recorded: fenced.token,
                            });
                        }
                        (Some(fenced.version.clone()), Some(&fenced.value))
                    }
                    None => (None, None),
                };
                let value = f(old);
                let nonce = self.policy.entropy.nonce();
                let record = FencedRecord {
                    kind: FENCED_KIND.to_string(),
                    schema: FENCED_SCHEMA,
                    token,
                    nonce: nonce.clone(),
                    value,
                };
                let body = serde_json::to_vec(&record).map_err(|e| LeaseError::Codec {
                    key: self.key.clone(),
                    message: e.to_string(),
                })?;
                let write = match &expected {
                    None => self.store.create(&self.key, body.into()),
                    Some(v) => self.store.replace(&self.key, v, body.into()),
                };
                match timed(
                    self.policy.clock.as_ref(),
                    self.policy.request_timeout,
                    &self.key,
                    write,
                )
                .await
                {
                    Ok(version) => {
                        return Ok(Fenced {
                            value: record.value,
                            token,
                            version,
                        });
                    }
                    Err(err)
                        if err.may_have_taken_effect()
                            || err.kind() == ErrorKind::PreconditionFailed =>
                    {
                        // Did our write land (possibly answered 412 by a duplicate)?
                        match self.read_full().await {
                            Ok(Some((fenced, stored))) if stored == nonce => {
                                count_ambiguous("ours");
                                return Ok(fenced);
                            }
                            Ok(now) => {
                                let unchanged =
                                    now.as_ref().map(|(f, _)| &f.version) == expected.as_ref();
                                count_ambiguous("not_ours");
                                if err.may_have_taken_effect() && !unchanged {
                                    // Ours may have landed and been overwritten since.
                                    return Err(err.into());
                                }
                                last_err = Some(err);
                            }
                            Err(_) if err.may_have_taken_effect() => return Err(err.into()),
                            Err(_) => last_err = Some(err),
                        }
                    }
                    Err(err) if err.is_retryable() || err.kind() == ErrorKind::NotFound => {
                        last_err = Some(err)
                    }
                    Err(err) => return Err(err.into()),
                }
            }
            Err(LeaseError::Contended {
                key: self.key.clone(),
                attempts: self.policy.max_attempts,
            })
        }
        .instrument(span)
        .await
    }

    /// [`LeaseGuard::checkpoint`] with `min_remaining`, then
    /// [`update`](FencedResource::update) with the guard's token.
    pub async fn update_guarded<F>(
        &self,
        guard: &LeaseGuard,
        min_remaining: Duration,
        f: F,
    ) -> Result<Fenced<T>, LeaseError>
    where
        F: FnMut(Option<&T>) -> T + Send,
    {
        guard.checkpoint(min_remaining)?;
        self.update(guard.token(), f).await
    }
}
