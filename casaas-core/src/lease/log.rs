//! A sequenced, fenced log: entry N+1 is created only if absent, by a writer
//! whose token is at least that of the latest entry (the commit pattern of
//! Delta-Lake-style table formats and LSM engines on object storage).

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version, validate_key};

use super::attempt::{Attempts, Unresolved, attempt_knobs};
use super::clock::{Clock, Entropy};
use super::pending::{PendingWrite, PendingWrites, Settled};
use super::record::{check_envelope, foreign};
use super::retry::{RequestPolicy, count_ambiguous, timed};
use super::{LeaseError, metric_names};

const LOG_KIND: &str = "casaas.log";
/// An entry holding one record (`value`): what [`FencedLog::append`] writes.
const LOG_SCHEMA: u64 = 1;
/// An entry holding a batch of records (`values`, in order): what a
/// [group commit](super::GroupLog) writes. Readers of schema 1 only refuse it.
const LOG_SCHEMA_BATCH: u64 = 2;
/// Digits of the zero-padded sequence number in entry keys (sorts numerically).
const SEQ_DIGITS: usize = 20;
/// How an append that may still land reports an error.
const UNRESOLVED_APPEND: Unresolved = Unresolved {
    what: "the append may or may not have been made",
    advice: "read the log to find out",
};
const HEAD_HINT_KIND: &str = "casaas.log-head";
const HEAD_HINT_SCHEMA: u64 = 1;
/// The head hint is advanced every this many entries, so that a new handle
/// finds the end of a long log in a few reads instead of a listing.
const HEAD_HINT_EVERY: u64 = 64;

/// The highest entry known to exist, and its token. Entries are immutable
/// and never deleted, so a known head is always a lower bound of the real
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    seq: u64,
    token: u64,
}

#[derive(Serialize, Deserialize)]
struct HeadHint {
    kind: String,
    schema: u64,
    seq: u64,
}

#[derive(Serialize, Deserialize)]
struct LogRecord<T> {
    kind: String,
    schema: u64,
    seq: u64,
    token: u64,
    nonce: String,
    value: T,
}

#[derive(Serialize)]
struct BatchRecord<'a> {
    kind: &'a str,
    schema: u64,
    seq: u64,
    token: u64,
    nonce: &'a str,
    values: &'a [serde_json::Value],
}

/// The envelope of an entry of either schema; its records are read apart.
#[derive(Deserialize)]
struct EntryHeader {
    schema: u64,
    seq: u64,
    token: u64,
    nonce: String,
}

/// What one append writes in its entry.
#[derive(Debug, Clone, Copy)]
enum EntryPayload<'a> {
    /// One record (schema 1, readable by every version).
    One(&'a serde_json::Value),
    /// Records in order (schema 2).
    Batch(&'a [serde_json::Value]),
}

/// An entry as stored: its records still encoded.
#[derive(Debug)]
struct StoredEntry {
    seq: u64,
    token: u64,
    nonce: String,
    records: Vec<serde_json::Value>,
    version: Version,
}

/// One entry of a [`FencedLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogEntry<T> {
    /// Sequence number of the entry holding the record, from 1.
    pub seq: u64,
    /// The record's place in its entry, from 0: always 0 in an entry
    /// written by [`FencedLog::append`]; a [group commit](super::GroupLog)
    /// writes several records in one entry. Records are ordered by
    /// `(seq, offset)`.
    pub offset: usize,
    /// The fencing token of the writer.
    pub token: u64,
    /// The record's value.
    pub value: T,
    /// The version of the entry's object.
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
/// **Exactly once**: an append whose answer is lost, or whose write lands
/// after its timeout, is found again by its nonce; a new attempt goes to the
/// same sequence number as long as the unanswered one may still land there,
/// so at most one of them can. An append that cannot be resolved fails with
/// [`ErrorKind::Ambiguous`], never with a second copy.
///
/// **Cost**: the handle (and its clones) remember where the log ends, so an
/// append costs one create in steady state, plus one GET and a few probes per
/// entry written by others since. A new handle finds the end from a hint
/// object (`PREFIX/_head`, advanced every 64 entries) and a few GETs; only a
/// log without a hint (empty, or written by an older version) is listed once.
/// `latest` costs two GETs on a warm handle. Entries must never be deleted
/// except from the start of the log (pruning old entries is fine).
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
#[derive(Debug)]
pub struct FencedLog<T> {
    store: Arc<dyn CasStore>,
    prefix: String,
    policy: RequestPolicy,
    head: Arc<Mutex<Option<Head>>>,
    _value: PhantomData<fn() -> T>,
}

// By hand: a derive would ask `T: Clone`, which a handle never needs.
impl<T> Clone for FencedLog<T> {
    fn clone(&self) -> Self {
        FencedLog {
            store: self.store.clone(),
            prefix: self.prefix.clone(),
            policy: self.policy.clone(),
            head: self.head.clone(),
            _value: PhantomData,
        }
    }
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
            head: Arc::default(),
            _value: PhantomData,
        })
    }

    attempt_knobs!("a FencedLog");

    /// The key of entry `seq`.
    pub fn entry_key(&self, seq: u64) -> String {
        format!("{}/{seq:0width$}", self.prefix, width = SEQ_DIGITS)
    }

    fn hint_key(&self) -> String {
        format!("{}/_head", self.prefix)
    }

    fn seq_of(&self, key: &str) -> Option<u64> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        (rest.len() == SEQ_DIGITS && rest.bytes().all(|b| b.is_ascii_digit()))
            .then(|| rest.parse().ok())
            .flatten()
    }

    fn known_head(&self) -> Option<Head> {
        *self.head.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Raises the remembered head to `head` if that is further.
    fn learn(&self, head: Head) {
        let mut known = self.head.lock().unwrap_or_else(|p| p.into_inner());
        if known.is_none_or(|k| k.seq < head.seq) {
            *known = Some(head);
        }
    }

    /// The highest sequence number present (no LIST on a warm handle).
    pub async fn latest_seq(&self) -> Result<Option<u64>, LeaseError> {
        let head = self.find_head().await?;
        Ok((head.seq > 0).then_some(head.seq))
    }

    /// Reads every record of entry `seq`, in order (one GET; empty if the
    /// entry is absent), whatever wrote it: one record for an entry of
    /// [`append`](FencedLog::append), the whole batch for one of a
    /// [group commit](super::GroupLog), each with its `offset`. An entry of
    /// a schema this version does not know is refused with
    /// [`LeaseError::UnsupportedSchema`], never misread.
    pub async fn read(&self, seq: u64) -> Result<Vec<LogEntry<T>>, LeaseError> {
        match self.read_stored(seq).await? {
            Some(entry) => self.records_of(entry),
            None => Ok(Vec::new()),
        }
    }

    /// The records of a stored entry, decoded.
    fn records_of(&self, entry: StoredEntry) -> Result<Vec<LogEntry<T>>, LeaseError> {
        let key = self.entry_key(entry.seq);
        entry
            .records
            .into_iter()
            .enumerate()
            .map(|(offset, value)| {
                let value = serde_json::from_value(value).map_err(|e| LeaseError::Codec {
                    key: key.clone(),
                    message: e.to_string(),
                })?;
                Ok(LogEntry {
                    seq: entry.seq,
                    offset,
                    token: entry.token,
                    value,
                    version: entry.version.clone(),
                })
            })
            .collect()
    }

    async fn get(&self, key: &str) -> Result<Option<crate::StoredObject>, CasError> {
        timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            key,
            self.store.get(key),
        )
        .await
    }

    /// Reads entry `seq` of either schema, its records still encoded.
    async fn read_stored(&self, seq: u64) -> Result<Option<StoredEntry>, LeaseError> {
        let key = self.entry_key(seq);
        let Some(object) = self.get(&key).await? else {
            return Ok(None);
        };
        let entry = decode_entry(&key, seq, &object.body, object.version)?;
        self.learn(Head {
            seq,
            token: entry.token,
        });
        Ok(Some(entry))
    }

    /// Reads entry `seq` as a head, `None` if absent.
    async fn probe(&self, seq: u64) -> Result<Option<Head>, LeaseError> {
        Ok(self.read_stored(seq).await?.map(|e| Head {
            seq,
            token: e.token,
        }))
    }

    /// Where the log ends, checked: from the remembered (or discovered)
    /// head, forward to the real end.
    async fn find_head(&self) -> Result<Head, LeaseError> {
        match self.known_head() {
            Some(head) => self.advance_from(head).await,
            None => self.discover_head().await,
        }
    }

    /// Where an append should try first: the remembered head as it is (the
    /// create itself finds out whether the log has moved on), else the
    /// discovered one.
    async fn head_for_append(&self) -> Result<Head, LeaseError> {
        match self.known_head() {
            Some(head) => Ok(head),
            None => self.discover_head().await,
        }
    }

    /// Finds the end of the log for a handle that knows nothing yet: from
    /// the hint and a few probes, else from one listing.
    async fn discover_head(&self) -> Result<Head, LeaseError> {
        if let Some(seq) = self.read_hint().await?.map(|(seq, _)| seq)
            && let Some(head) = self.probe(seq).await?
        {
            return self.advance_from(head).await;
        }
        let list_prefix = format!("{}/", self.prefix);
        let listed = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            &self.prefix,
            self.store.list(&list_prefix),
        )
        .await?;
        let Some(seq) = listed.iter().filter_map(|e| self.seq_of(&e.key)).max() else {
            let empty = Head { seq: 0, token: 0 };
            self.learn(empty);
            return Ok(empty);
        };
        match self.probe(seq).await? {
            Some(head) => Ok(head),
            None => Err(self.vanished(seq)),
        }
    }

    fn vanished(&self, seq: u64) -> LeaseError {
        LeaseError::Store(
            CasError::new(
                ErrorKind::Misconfigured,
                format!(
                    "log entry {seq} was listed but is gone: entries of a fenced log must never be deleted, except from its start"
                ),
            )
            .with_key(self.entry_key(seq)),
        )
    }

    /// From a head known to exist, the real end: probes forward at growing
    /// steps, then bisects (entries after a known one have no gaps).
    async fn advance_from(&self, known: Head) -> Result<Head, LeaseError> {
        let mut low = known;
        let mut step = 1u64;
        let high = loop {
            if low.seq == u64::MAX {
                // The last number exists: nothing can follow it.
                return Ok(low);
            }
            let probe = low.seq.saturating_add(step);
            match self.probe(probe).await? {
                Some(head) => {
                    low = head;
                    step = step.saturating_mul(2);
                }
                None => break probe,
            }
        };
        let mut high = high;
        while high - low.seq > 1 {
            let mid = low.seq + (high - low.seq) / 2;
            match self.probe(mid).await? {
                Some(head) => low = head,
                None => high = mid,
            }
        }
        Ok(low)
    }

    async fn read_hint(&self) -> Result<Option<(u64, Version)>, LeaseError> {
        let key = self.hint_key();
        let Some(object) = self.get(&key).await? else {
            return Ok(None);
        };
        // A hint only saves requests: one that cannot be read is ignored
        // (and never overwritten).
        let hint = serde_json::from_slice::<HeadHint>(&object.body)
            .ok()
            .filter(|h| h.kind == HEAD_HINT_KIND && h.schema == HEAD_HINT_SCHEMA);
        Ok(hint.map(|h| (h.seq, object.version)))
    }

    /// Advances the hint to `seq` (best effort: a failure costs a later new
    /// handle a few more reads, nothing else).
    async fn advance_hint(&self, seq: u64) {
        let key = self.hint_key();
        let body = match serde_json::to_vec(&HeadHint {
            kind: HEAD_HINT_KIND.to_string(),
            schema: HEAD_HINT_SCHEMA,
            seq,
        }) {
            Ok(body) => body,
            Err(_) => return,
        };
        let current = match self.get(&key).await {
            Ok(current) => current,
            Err(err) => {
                tracing::debug!(error = %err, "could not read the log's head hint");
                return;
            }
        };
        let write = match &current {
            None => self.store.create(&key, body.into()),
            Some(object) => {
                let readable = serde_json::from_slice::<HeadHint>(&object.body)
                    .ok()
                    .filter(|h| h.kind == HEAD_HINT_KIND);
                match readable {
                    Some(hint) if hint.seq < seq => {
                        self.store.replace(&key, &object.version, body.into())
                    }
                    _ => return,
                }
            }
        };
        let result = timed(
            self.policy.clock.as_ref(),
            self.policy.request_timeout,
            &key,
            write,
        )
        .await;
        if let Err(err) = result {
            tracing::debug!(error = %err, "could not advance the log's head hint");
        }
    }

    /// The latest record: the last of the latest entry (two GETs on a warm
    /// handle).
    pub async fn latest(&self) -> Result<Option<LogEntry<T>>, LeaseError> {
        let head = self.find_head().await?;
        if head.seq == 0 {
            return Ok(None);
        }
        match self.read_stored(head.seq).await? {
            Some(entry) => Ok(self.records_of(entry)?.pop()),
            None => Err(self.vanished(head.seq)),
        }
    }

    /// The records of the entries from `from` (inclusive) to the latest,
    /// in order: one item per record, so a batch entry gives several (one
    /// GET per entry; entries pruned from the start are skipped).
    pub async fn entries(&self, from: u64) -> Result<Vec<LogEntry<T>>, LeaseError> {
        let head = self.find_head().await?;
        let mut out = Vec::new();
        let mut seen_one = false;
        for seq in from.max(1)..=head.seq {
            match self.read_stored(seq).await? {
                Some(entry) => {
                    seen_one = true;
                    out.extend(self.records_of(entry)?);
                }
                None if !seen_one => {}
                None => return Err(self.vanished(seq)),
            }
        }
        Ok(out)
    }

    /// Appends `value` as the next entry, fenced by `token`.
    ///
    /// Requests: 1 create on a warm handle; +1 GET per unanswered write and
    /// per entry another writer appended since; every 64th entry also
    /// advances the head hint (1 GET + 1 write).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the value appended, once: a create
    /// already sent can still land at the entry it named (each is
    /// conditioned on that entry being absent, so at most one of this
    /// call's creates does), and nothing retries it. That is the state an
    /// [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous) answer
    /// reports: read the log to find out. A head hint left behind is only
    /// a hint: readers and writers go past it.
    pub async fn append(&self, token: u64, value: T) -> Result<LogEntry<T>, LeaseError> {
        let span = tracing::debug_span!("log.append", prefix = %self.prefix, token);
        async {
            let encoded = serde_json::to_value(&value).map_err(|e| LeaseError::Codec {
                key: self.prefix.clone(),
                message: e.to_string(),
            })?;
            let (seq, version) = self
                .append_payload(token, EntryPayload::One(&encoded))
                .await?;
            Ok(LogEntry {
                seq,
                offset: 0,
                token,
                value,
                version,
            })
        }
        .instrument(span)
        .await
    }

    /// Appends `records` (at least one) as one entry, fenced by `token`:
    /// they land together or not at all. Returns the entry's number and
    /// version.
    pub(crate) async fn append_batch(
        &self,
        token: u64,
        records: &[serde_json::Value],
    ) -> Result<(u64, Version), LeaseError> {
        let span = tracing::debug_span!(
            "log.append_batch",
            prefix = %self.prefix,
            token,
            records = records.len()
        );
        // One record is written as schema 1, readable by every version.
        let payload = match records {
            [one] => EntryPayload::One(one),
            _ => EntryPayload::Batch(records),
        };
        self.append_payload(token, payload).instrument(span).await
    }

    /// The attempts of one append of `payload`: the entry's number and
    /// version once it landed (answered, or found again by its nonce).
    async fn append_payload(
        &self,
        token: u64,
        payload: EntryPayload<'_>,
    ) -> Result<(u64, Version), LeaseError> {
        // The guard checks what the log relies on: on a create-only store,
        // create (through the epoch view), not replace.
        let view = crate::layout::lease_view(self.store.clone());
        self.policy.verify(view.as_ref()).await?;
        // Our writes whose outcome is unknown; all at one sequence
        // number, since a new attempt moves on only once they are dead.
        let mut attempts: Attempts<'_, u64> =
            Attempts::new(&self.policy, &self.prefix, UNRESOLVED_APPEND);
        while attempts.next().await {
            let (settled, moved_on) = match self.settle(&mut attempts.pending).await {
                Ok(settled) => settled,
                Err(LeaseError::Store(err)) if err.is_retryable() => {
                    attempts.retry(err);
                    continue;
                }
                Err(other) => return Err(attempts.fail(other)),
            };
            if let Some(landed) = settled {
                return Ok(landed);
            }
            let head = match self.head_before(&attempts.pending, moved_on).await {
                Ok(head) => head,
                Err(LeaseError::Store(err)) if err.is_retryable() => {
                    attempts.retry(err);
                    continue;
                }
                Err(other) => return Err(attempts.fail(other)),
            };
            let seq = match self.next_seq(&head, token) {
                Ok(seq) => seq,
                Err(err) => return Err(attempts.fail(err)),
            };
            let key = self.entry_key(seq);
            let nonce = self.policy.entropy.nonce();
            let body = encode_entry(&key, seq, token, &nonce, payload)?;
            let write = PendingWrite {
                nonce,
                sent_at: attempts.now(),
                condition: None,
                payload: seq,
            };
            let request = self.store.create(&key, body);
            // Lost the race for `seq` (the next round reads who won and
            // moves on at once), or an unknown outcome (resolved after a
            // pause).
            let sent = attempts.send(write, &key, request).await;
            if let Some(version) = attempts.created(sent)? {
                self.appended(&head, seq, token).await;
                return Ok((seq, version));
            }
        }
        Err(attempts.give_up())
    }

    /// The entry after which this round appends: just before our live
    /// writes, or the end of the log found afresh.
    async fn head_before(
        &self,
        pending: &PendingWrites<u64>,
        moved_on: bool,
    ) -> Result<Head, LeaseError> {
        match pending.iter().next() {
            // Still live at `seq`: the log ends just before it.
            Some(write) => Ok(Head {
                seq: write.payload - 1,
                token: self.known_head().map_or(0, |h| h.token),
            }),
            // Another writer took our slot: find the end afresh.
            None if moved_on => self.find_head().await,
            None => self.head_for_append().await,
        }
    }

    /// The sequence number to append at after `head`, for a writer with
    /// `token`: refused when the log holds a higher token, or is full.
    fn next_seq(&self, head: &Head, token: u64) -> Result<u64, LeaseError> {
        if head.token > token {
            metrics::counter!(metric_names::FENCING_REJECTIONS).increment(1);
            return Err(LeaseError::FencedOut {
                presented: token,
                recorded: head.token,
            });
        }
        // A log at the last number cannot grow: refuse rather than aim at
        // an entry that exists.
        head.seq
            .checked_add(1)
            .ok_or_else(|| LeaseError::Exhausted {
                key: self.prefix.clone(),
                counter: "log sequence number",
            })
    }

    /// Our create at `seq` landed after `head`: learn the new end (and
    /// advance the hint every 64 entries).
    async fn appended(&self, head: &Head, seq: u64, token: u64) {
        // We checked the entry before ours: tokens along the log never
        // decrease.
        debug_assert!(head.token <= token && head.seq < seq);
        self.learn(Head { seq, token });
        if seq.is_multiple_of(HEAD_HINT_EVERY) {
            self.advance_hint(seq).await;
        }
    }

    /// Reads the entry our unresolved writes went to: `Some` if one of
    /// them is there; otherwise drops them if another writer's entry is
    /// (and says the log moved on).
    async fn settle(
        &self,
        pending: &mut PendingWrites<u64>,
    ) -> Result<(Option<(u64, Version)>, bool), LeaseError> {
        let Some(seq) = pending.iter().next().map(|w| w.payload) else {
            return Ok((None, false));
        };
        let found = self.read_stored(seq).await?;
        let (version, nonce) = match &found {
            Some(entry) => (Some(&entry.version), entry.nonce.as_str()),
            None => (None, ""),
        };
        match pending.settle(version, |n| n == nonce) {
            Settled::Landed(_) => {
                count_ambiguous("ours");
                Ok((found.map(|entry| (seq, entry.version)), false))
            }
            Settled::NotLanded => {
                count_ambiguous(if found.is_some() {
                    "not_ours"
                } else {
                    "absent"
                });
                Ok((None, found.is_some()))
            }
        }
    }
}

/// The body of the entry at `seq` (stored under `key`).
fn encode_entry(
    key: &str,
    seq: u64,
    token: u64,
    nonce: &str,
    payload: EntryPayload<'_>,
) -> Result<bytes::Bytes, LeaseError> {
    let encoded = match payload {
        EntryPayload::One(value) => serde_json::to_vec(&LogRecord {
            kind: LOG_KIND.to_string(),
            schema: LOG_SCHEMA,
            seq,
            token,
            nonce: nonce.to_string(),
            value,
        }),
        EntryPayload::Batch(values) => serde_json::to_vec(&BatchRecord {
            kind: LOG_KIND,
            schema: LOG_SCHEMA_BATCH,
            seq,
            token,
            nonce,
            values,
        }),
    };
    encoded
        .map(bytes::Bytes::from)
        .map_err(|e| LeaseError::Codec {
            key: key.to_string(),
            message: e.to_string(),
        })
}

/// The entry stored at `seq` (under `key`), of either schema.
fn decode_entry(
    key: &str,
    seq: u64,
    body: &[u8],
    version: Version,
) -> Result<StoredEntry, LeaseError> {
    let mut value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| foreign(key, body))?;
    // A schema newer than both is refused by the check against schema 1.
    let schema = match value.get("schema").and_then(serde_json::Value::as_u64) {
        Some(LOG_SCHEMA_BATCH) => LOG_SCHEMA_BATCH,
        _ => LOG_SCHEMA,
    };
    check_envelope(key, body, &value, LOG_KIND, schema)?;
    let codec = |message: String| LeaseError::Codec {
        key: key.to_string(),
        message,
    };
    let header: EntryHeader =
        serde_json::from_value(value.clone()).map_err(|e| codec(e.to_string()))?;
    if header.seq != seq {
        return Err(foreign(key, body));
    }
    // Schema 1 holds one record; a record may itself be JSON null, so the
    // field is taken as it is rather than through an Option.
    let records = match header.schema {
        LOG_SCHEMA => vec![
            value
                .get_mut("value")
                .map(serde_json::Value::take)
                .ok_or_else(|| codec("the entry has no value".to_string()))?,
        ],
        _ => match value.get_mut("values").map(serde_json::Value::take) {
            Some(serde_json::Value::Array(values)) if !values.is_empty() => values,
            _ => return Err(codec("a batch entry holds no records".to_string())),
        },
    };
    Ok(StoredEntry {
        seq,
        token: header.token,
        nonce: header.nonce,
        records,
        version,
    })
}
