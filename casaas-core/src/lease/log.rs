//! A sequenced, fenced log: entry N+1 is created only if absent, by a writer
//! whose token is at least that of the latest entry (the commit pattern of
//! Delta-Lake-style table formats and LSM engines on object storage).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version, validate_key};

use super::clock::{Clock, Entropy};
use super::record::{check_envelope, foreign};
use super::retry::{RequestPolicy, backoff, count_ambiguous, timed};
use super::{LeaseError, metric_names};

const LOG_KIND: &str = "casaas.log";
const LOG_SCHEMA: u64 = 1;
/// Digits of the zero-padded sequence number in entry keys (sorts numerically).
const SEQ_DIGITS: usize = 20;

#[derive(Serialize, Deserialize)]
struct LogRecord<T> {
    kind: String,
    schema: u64,
    seq: u64,
    token: u64,
    nonce: String,
    value: T,
}

/// One entry of a [`FencedLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry<T> {
    /// Sequence number, from 1.
    pub seq: u64,
    /// The fencing token of the writer.
    pub token: u64,
    /// The entry's value.
    pub value: T,
    /// The object's version.
    pub version: Version,
}

/// An append-only log of objects `PREFIX/00000000000000000001`, ... Each
/// append creates the next entry with create-if-absent, so exactly one
/// writer wins each sequence number; a writer whose token is lower than the
/// latest entry's is refused with [`LeaseError::FencedOut`].
///
/// Fencing takes effect from the first entry a new holder writes: a new
/// leader should append (for example a marker entry) right after acquiring,
/// so that a paused predecessor is refused from then on.
///
/// Requests: `append` = 1 LIST + 1 GET + 1 create (+1 GET per ambiguous
/// answer, and the whole again per lost race); `latest` = 1 LIST + 1 GET.
/// The store must support listing.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
/// use std::sync::Arc;
/// use casaas_core::MemoryStore;
/// use casaas_core::lease::{FencedLog, LeaseError};
///
/// let log = FencedLog::<String>::new(Arc::new(MemoryStore::new()), "table/_log")?;
/// assert_eq!(log.append(1, "create table".into()).await?.seq, 1);
/// assert_eq!(log.append(2, "add file".into()).await?.seq, 2);
/// let err = log.append(1, "zombie".into()).await.unwrap_err();
/// assert!(matches!(err, LeaseError::FencedOut { presented: 1, recorded: 2 }));
/// assert_eq!(log.latest().await?.unwrap().value, "add file");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FencedLog<T> {
    store: Arc<dyn CasStore>,
    prefix: String,
    policy: RequestPolicy,
    _value: PhantomData<fn() -> T>,
}

impl<T> FencedLog<T>
where
    T: Serialize + DeserializeOwned + Send + Sync,
{
    /// The log under `prefix` (a key; entries are `prefix/NNN...`).
    pub fn new(store: Arc<dyn CasStore>, prefix: impl Into<String>) -> Result<Self, LeaseError> {
        let prefix = prefix.into().trim_end_matches('/').to_string();
        validate_key(&prefix)?;
        if !store.capabilities().list {
            return Err(LeaseError::Store(CasError::unsupported(format!(
                "{} cannot list keys; a fenced log needs listing",
                store.describe()
            ))));
        }
        Ok(FencedLog {
            store,
            prefix,
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

    /// The key of entry `seq`.
    pub fn entry_key(&self, seq: u64) -> String {
        format!("{}/{seq:0width$}", self.prefix, width = SEQ_DIGITS)
    }

    fn seq_of(&self, key: &str) -> Option<u64> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        (rest.len() == SEQ_DIGITS && rest.bytes().all(|b| b.is_ascii_digit()))
            .then(|| rest.parse().ok())
            .flatten()
    }

    /// The highest sequence number present (one LIST).
    pub async fn latest_seq(&self) -> Result<Option<u64>, LeaseError> {
        let list_prefix = format!("{}/", self.prefix);
        let entries = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            &self.prefix,
            self.store.list(&list_prefix),
        )
        .await?;
        Ok(entries.iter().filter_map(|e| self.seq_of(&e.key)).max())
    }

    /// Reads entry `seq` (one GET).
    pub async fn read(&self, seq: u64) -> Result<Option<LogEntry<T>>, LeaseError> {
        Ok(self.read_full(seq).await?.map(|(e, _)| e))
    }

    async fn read_full(&self, seq: u64) -> Result<Option<(LogEntry<T>, String)>, LeaseError> {
        let key = self.entry_key(seq);
        let Some(object) = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            &key,
            self.store.get(&key),
        )
        .await?
        else {
            return Ok(None);
        };
        let value: serde_json::Value =
            serde_json::from_slice(&object.body).map_err(|_| foreign(&key, &object.body))?;
        check_envelope(&key, &object.body, &value, LOG_KIND, LOG_SCHEMA)?;
        let record: LogRecord<T> =
            serde_json::from_value(value).map_err(|e| LeaseError::Codec {
                key: key.clone(),
                message: e.to_string(),
            })?;
        Ok(Some((
            LogEntry {
                seq: record.seq,
                token: record.token,
                value: record.value,
                version: object.version,
            },
            record.nonce,
        )))
    }

    /// The latest entry (one LIST + one GET).
    pub async fn latest(&self) -> Result<Option<LogEntry<T>>, LeaseError> {
        match self.latest_seq().await? {
            None => Ok(None),
            Some(seq) => self.read(seq).await,
        }
    }

    /// Entries from `from` (inclusive) to the latest, in order.
    pub async fn entries(&self, from: u64) -> Result<Vec<LogEntry<T>>, LeaseError> {
        let list_prefix = format!("{}/", self.prefix);
        let listed = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            &self.prefix,
            self.store.list(&list_prefix),
        )
        .await?;
        let mut seqs: Vec<u64> = listed
            .iter()
            .filter_map(|e| self.seq_of(&e.key))
            .filter(|s| *s >= from)
            .collect();
        seqs.sort_unstable();
        let mut out = Vec::with_capacity(seqs.len());
        for seq in seqs {
            if let Some(entry) = self.read(seq).await? {
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// Appends `value` as the next entry, fenced by `token`.
    pub async fn append(&self, token: u64, value: T) -> Result<LogEntry<T>, LeaseError> {
        let span = tracing::debug_span!("log.append", prefix = %self.prefix, token);
        async {
            let value = serde_json::to_value(&value).map_err(|e| LeaseError::Codec {
                key: self.prefix.clone(),
                message: e.to_string(),
            })?;
            // Nonces of our writes whose outcome is unknown, by sequence number.
            let mut ours: Vec<(u64, String)> = Vec::new();
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
                // Did an earlier write of ours with an unknown outcome land?
                let mut found = None;
                for (seq, nonce) in &ours {
                    if let Ok(Some((entry, stored))) = self.read_full(*seq).await
                        && stored == *nonce
                    {
                        found = Some(entry);
                        break;
                    }
                }
                if let Some(entry) = found {
                    count_ambiguous("ours");
                    return Ok(entry);
                }
                let latest = match self.latest_seq().await {
                    Ok(s) => s,
                    Err(LeaseError::Store(err)) if err.is_retryable() => {
                        last_err = Some(err);
                        continue;
                    }
                    Err(other) => return Err(other),
                };
                if let Some(seq) = latest {
                    match self.read_full(seq).await {
                        Ok(Some((entry, _))) => {
                            if entry.token > token {
                                metrics::counter!(metric_names::FENCING_REJECTIONS).increment(1);
                                return Err(LeaseError::FencedOut {
                                    presented: token,
                                    recorded: entry.token,
                                });
                            }
                        }
                        Ok(None) => {}
                        Err(LeaseError::Store(err)) if err.is_retryable() => {
                            last_err = Some(err);
                            continue;
                        }
                        Err(other) => return Err(other),
                    }
                }
                let seq = latest.map_or(1, |s| s + 1);
                let nonce = self.policy.entropy.nonce();
                let record = LogRecord {
                    kind: LOG_KIND.to_string(),
                    schema: LOG_SCHEMA,
                    seq,
                    token,
                    nonce: nonce.clone(),
                    value: &value,
                };
                let body = serde_json::to_vec(&record).map_err(|e| LeaseError::Codec {
                    key: self.entry_key(seq),
                    message: e.to_string(),
                })?;
                let key = self.entry_key(seq);
                ours.push((seq, nonce));
                match timed(
                    self.policy.clock.as_ref(),
                    self.policy.request_timeout,
                    &key,
                    self.store.create(&key, body.into()),
                )
                .await
                {
                    Ok(version) => {
                        let value =
                            serde_json::from_value(value).map_err(|e| LeaseError::Codec {
                                key: key.clone(),
                                message: e.to_string(),
                            })?;
                        return Ok(LogEntry {
                            seq,
                            token,
                            value,
                            version,
                        });
                    }
                    // Lost the race for `seq`, or unknown outcome: the next
                    // round reads the latest entry and recognises our nonce.
                    Err(err)
                        if err.may_have_taken_effect()
                            || err.kind() == ErrorKind::PreconditionFailed =>
                    {
                        match self.read_full(seq).await {
                            Ok(Some((entry, stored)))
                                if ours.iter().any(|(s, n)| *s == seq && *n == stored) =>
                            {
                                count_ambiguous("ours");
                                return Ok(entry);
                            }
                            Ok(Some(_)) => {
                                // Another writer's entry: ours cannot land there.
                                count_ambiguous("not_ours");
                                ours.retain(|(s, _)| *s != seq);
                            }
                            Ok(None) => count_ambiguous("absent"),
                            Err(_) => {}
                        }
                        last_err = Some(err);
                    }
                    Err(err) if err.is_retryable() => {
                        ours.pop();
                        last_err = Some(err);
                    }
                    Err(err) => return Err(err.into()),
                }
            }
            Err(LeaseError::Contended {
                key: self.prefix.clone(),
                attempts: self.policy.max_attempts,
            })
        }
        .instrument(span)
        .await
    }
}
