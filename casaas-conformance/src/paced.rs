//! Pacing, backoff and ambiguity resolution for the probes' writes, so that
//! a verdict is about a store's semantics, not its rate limit or network.
//!
//! A [`Pacer`] is shared by a whole run: it holds the per-key interval
//! between writes (measured by the `throttle` probe, given with
//! `--min-write-interval`, or declared by the backend), what later probes
//! learned about the store (e.g. no conditional delete), and counters for
//! the report. Each probe writes through a [`PacedStore`] on top of it.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ForwardingStore, ListEntry, StoredObject, Version,
};
use serde::{Deserialize, Serialize};

/// Retries of one write answered "throttled" before the probe gives up.
const MAX_THROTTLE_RETRIES: u32 = 12;
/// Retries of one write whose outcome stayed unknown after reading.
const MAX_AMBIGUOUS_RETRIES: u32 = 8;
/// The longest single wait between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The largest interval pacing grows to when a paced write is throttled.
const MAX_INTERVAL: Duration = Duration::from_secs(10);

/// Where the pacing interval came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalSource {
    /// `--min-write-interval` (or [`Settings::min_write_interval`](crate::Settings)).
    Option,
    /// Measured by the `throttle` probe.
    Measured,
    /// Declared by the backend's capabilities (GCS: one write per second).
    Declared,
    /// Raised after paced writes were still throttled.
    Adapted,
}

/// What pacing and retries cost a run, for the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PacingReport {
    /// The per-key interval between writes at the end of the run, in
    /// milliseconds; `None` when writes were not paced.
    pub min_write_interval_ms: Option<u64>,
    /// Where that interval came from.
    pub interval_source: Option<IntervalSource>,
    /// Time writers spent waiting for their pace or backing off after a
    /// throttled answer, in milliseconds, summed over concurrent writers.
    pub waited_ms: u64,
    /// Wall time during which at least one writer was waiting for its pace
    /// or backing off, in milliseconds: about what pacing added to the run.
    pub wall_waited_ms: u64,
    /// Throttled answers (429, 503 SlowDown, …) seen by the probes' writes.
    pub throttled_answers: u64,
    /// What those answers were, e.g. `{"503 SlowDown": 12}`.
    pub throttle_codes: BTreeMap<String, u64>,
    /// Writes given up after the retry budget ran out, still throttled.
    pub gave_up_throttled: u64,
    /// Writes with an unknown outcome that were resolved by reading the key.
    pub ambiguous_resolved: u64,
}

/// Ends a wait when dropped (also when the waiting future is cancelled).
struct WaitDone<'a>(&'a Pacer);

impl Drop for WaitDone<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.waiting = state.waiting.saturating_sub(1);
        if state.waiting == 0
            && let Some(since) = state.waiting_since.take()
        {
            state.report.wall_waited_ms += since.elapsed().as_millis() as u64;
        }
    }
}

#[derive(Debug, Default)]
struct PacerState {
    waiting: usize,
    waiting_since: Option<Instant>,
    interval: Option<Duration>,
    source: Option<IntervalSource>,
    no_conditional_delete: Option<String>,
    report: PacingReport,
}

/// Run-wide pacing state and what the probes learned about the store.
#[derive(Debug, Default)]
pub struct Pacer {
    state: Mutex<PacerState>,
}

impl Pacer {
    /// A pacer that starts with `interval` (from `source`), or unpaced.
    pub fn new(interval: Option<Duration>, source: IntervalSource) -> Self {
        let pacer = Pacer::default();
        if let Some(interval) = interval.filter(|d| !d.is_zero()) {
            let mut state = pacer.lock();
            state.interval = Some(interval);
            state.source = Some(source);
        }
        pacer
    }

    fn lock(&self) -> MutexGuard<'_, PacerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current per-key interval between writes.
    pub fn interval(&self) -> Option<Duration> {
        self.lock().interval
    }

    /// Where the current interval came from.
    pub fn source(&self) -> Option<IntervalSource> {
        self.lock().source
    }

    /// Records the interval the `throttle` probe measured, unless the user
    /// gave one.
    pub fn set_measured(&self, interval: Duration) {
        let mut state = self.lock();
        if state.source != Some(IntervalSource::Option) {
            state.interval = Some(interval);
            state.source = Some(IntervalSource::Measured);
        }
    }

    /// Records that the store answered a conditional delete "unsupported".
    pub fn learn_no_conditional_delete(&self, evidence: String) {
        let mut state = self.lock();
        if state.no_conditional_delete.is_none() {
            state.no_conditional_delete = Some(evidence);
        }
    }

    /// Why conditional delete is known not to work, if it is.
    pub fn no_conditional_delete(&self) -> Option<String> {
        self.lock().no_conditional_delete.clone()
    }

    /// `caps` corrected by what the run found.
    pub fn correct(&self, mut caps: Capabilities) -> Capabilities {
        let state = self.lock();
        if let Some(why) = &state.no_conditional_delete
            && caps.conditional_delete
        {
            caps = caps
                .without_conditional_delete()
                .with_note(format!("conditional delete found unsupported ({why})"));
        }
        if let Some(interval) = state.interval {
            caps.min_write_interval = Some(interval);
        }
        caps
    }

    /// The totals for the report.
    pub fn report(&self) -> PacingReport {
        let state = self.lock();
        let mut report = state.report.clone();
        report.min_write_interval_ms = state.interval.map(|d| d.as_millis() as u64);
        report.interval_source = state.source;
        report
    }

    /// Sleeps `d` for pacing or backoff, counting it: per writer, and as
    /// wall time during which at least one writer waited.
    async fn wait(&self, d: Duration) {
        {
            let mut state = self.lock();
            state.report.waited_ms += d.as_millis() as u64;
            if state.waiting == 0 {
                state.waiting_since = Some(Instant::now());
            }
            state.waiting += 1;
        }
        let _done = WaitDone(self);
        tokio::time::sleep(d).await;
    }

    /// Counts a throttled answer; raises the interval when the write had
    /// already waited its pace (`paced_with`: the interval it waited for),
    /// once per interval: concurrent writers throttled together raise it
    /// once, not once each.
    fn throttled(&self, err: &CasError, paced_with: Option<Duration>) {
        let mut state = self.lock();
        state.report.throttled_answers += 1;
        *state
            .report
            .throttle_codes
            .entry(err.evidence())
            .or_default() += 1;
        if let Some(used) = paced_with
            && state.interval.unwrap_or(Duration::ZERO) == used
        {
            let raised = (used + used / 4)
                .max(err.retry_after().unwrap_or(Duration::ZERO))
                .max(Duration::from_millis(50))
                .min(MAX_INTERVAL);
            if raised > used {
                state.interval = Some(raised);
                if state.source != Some(IntervalSource::Option) {
                    state.source = Some(IntervalSource::Adapted);
                }
            }
        }
    }

    fn gave_up(&self) {
        self.lock().report.gave_up_throttled += 1;
    }

    fn resolved(&self) {
        self.lock().report.ambiguous_resolved += 1;
    }
}

/// When each key of one probe may next be written.
///
/// The next slot of a key is one interval after the *answer* to the
/// previous write to it (or after a write was sent, when it was sent
/// unpaced): the store saw that write arrive before it answered, so a
/// slot counted from the answer keeps the interval on the store's side
/// whatever the jitter of timers and scheduling.
#[derive(Debug, Default)]
pub(crate) struct KeyClock {
    next: Mutex<HashMap<String, Instant>>,
}

impl KeyClock {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.next.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the key's slot if it is free now (answering whether this
    /// probe wrote the key before, so that the pace was really kept);
    /// otherwise says how long until it may be.
    fn try_take(&self, key: &str, interval: Duration) -> Result<bool, Duration> {
        let mut map = self.lock();
        let now = Instant::now();
        match map.get(key) {
            Some(next) if *next > now => Err(*next - now),
            previous => {
                let known = previous.is_some();
                map.insert(key.to_string(), now + interval);
                Ok(known)
            }
        }
    }

    /// Pushes the key's next slot to at least `interval` from now.
    fn push(&self, key: &str, interval: Duration) {
        let mut map = self.lock();
        let at = Instant::now() + interval;
        let next = map.entry(key.to_string()).or_insert(at);
        if *next < at {
            *next = at;
        }
    }
}

/// How a [`PacedStore`] treats writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Pace every write; resolve unknown outcomes by reading the key back
    /// (a nonce in every body makes one's own write recognisable).
    Resolving,
    /// For races: first attempts go out at once (unpaced, so racers really
    /// race); throttled answers are retried, paced; unknown outcomes are
    /// left to the caller, which resolves them as the lease protocol does.
    Racing,
    /// For the lease protocol: every write paced, throttled answers
    /// retried; unknown outcomes are left to the protocol, which resolves
    /// them itself.
    Protocol,
}

/// A probe's view of the store: writes paced per key, throttled answers
/// retried with bounded exponential backoff (honouring `Retry-After`), and
/// in [`Mode::Resolving`] unknown outcomes resolved by reading.
#[derive(Debug, Clone)]
pub(crate) struct PacedStore {
    inner: Arc<dyn CasStore>,
    pacer: Arc<Pacer>,
    clock: Arc<KeyClock>,
    mode: Mode,
}

impl PacedStore {
    pub(crate) fn new(
        inner: Arc<dyn CasStore>,
        pacer: Arc<Pacer>,
        clock: Arc<KeyClock>,
        mode: Mode,
    ) -> Self {
        PacedStore {
            inner,
            pacer,
            clock,
            mode,
        }
    }

    /// Waits for `key`'s next write slot and takes it; returns the
    /// interval it kept since the previous write (`Some(ZERO)` when
    /// unpaced), or `None` when this view never wrote the key before (its
    /// last write, if any, is unknown here).
    pub(crate) async fn pace(&self, key: &str) -> Option<Duration> {
        loop {
            let interval = self.pacer.interval().unwrap_or(Duration::ZERO);
            match self.clock.try_take(key, interval) {
                Ok(known) => return known.then_some(interval),
                Err(wait) => {
                    self.pacer.wait(wait).await;
                }
            }
        }
    }

    /// Records that a write to `key` was answered: its next slot is one
    /// interval from now.
    fn answered(&self, key: &str) {
        if let Some(interval) = self.pacer.interval() {
            self.clock.push(key, interval);
        }
    }

    /// Sends one write, pacing it and retrying throttled answers and
    /// requests that were never sent.
    async fn send<T, F, Fut>(&self, key: &str, op: F) -> Result<T, CasError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, CasError>>,
    {
        let mut backoff = Duration::from_millis(100);
        let mut throttled = 0u32;
        let mut unsent = 0u32;
        let mut first = true;
        loop {
            let paced = if first && self.mode == Mode::Racing {
                // Sent at once; retries queue behind it.
                self.clock
                    .push(key, self.pacer.interval().unwrap_or(Duration::ZERO));
                None
            } else {
                self.pace(key).await
            };
            first = false;
            let result = op().await;
            self.answered(key);
            match result {
                Err(e) if e.kind() == ErrorKind::Throttled => {
                    self.pacer.throttled(&e, paced);
                    throttled += 1;
                    if throttled > MAX_THROTTLE_RETRIES {
                        self.pacer.gave_up();
                        let message = format!(
                            "{} (still throttled after {MAX_THROTTLE_RETRIES} paced retries with backoff)",
                            e.message()
                        );
                        return Err(rebuild(&e, message));
                    }
                    let wait = e.retry_after().unwrap_or(backoff).min(MAX_BACKOFF);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    self.pacer.wait(wait).await;
                }
                // Never sent: nothing was written, so sending again is safe.
                Err(e) if e.kind() == ErrorKind::NotSent && unsent < 3 => {
                    unsent += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                other => return other,
            }
        }
    }
}

/// A copy of `err` with another message (CasError is not Clone).
fn rebuild(err: &CasError, message: String) -> CasError {
    let mut copy = CasError::new(err.kind(), message);
    if let Some(key) = err.key() {
        copy = copy.with_key(key);
    }
    if let Some(status) = err.status() {
        copy = copy.with_status(status);
    }
    if let Some(code) = err.code() {
        copy = copy.with_code(code);
    }
    if let Some(after) = err.retry_after() {
        copy = copy.with_retry_after(after);
    }
    copy
}

#[async_trait]
impl ForwardingStore for PacedStore {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let mut backoff = Duration::from_millis(100);
        for _ in 0..MAX_THROTTLE_RETRIES {
            match self.inner.get(key).await {
                Err(e) if e.is_retryable() => {
                    if e.kind() == ErrorKind::Throttled {
                        self.pacer.throttled(&e, None);
                    }
                    let wait = e.retry_after().unwrap_or(backoff).min(MAX_BACKOFF);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    self.pacer.wait(wait).await;
                }
                other => return other,
            }
        }
        self.inner.get(key).await
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let mut retries = 0;
        loop {
            let err = match self
                .send(key, || self.inner.create(key, body.clone()))
                .await
            {
                Err(e) if e.may_have_taken_effect() && self.mode == Mode::Resolving => e,
                other => return other,
            };
            match self.get(key).await? {
                Some(o) if o.body == body => {
                    self.pacer.resolved();
                    return Ok(o.version);
                }
                // Not applied: the key is still free, so create again.
                None if retries < MAX_AMBIGUOUS_RETRIES => retries += 1,
                // Someone else's object (or still unknown): answer as the
                // store did, for the probe to judge.
                _ => return Err(err),
            }
        }
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let mut retries = 0;
        loop {
            let err = match self
                .send(key, || self.inner.replace(key, expected, body.clone()))
                .await
            {
                Err(e) if e.may_have_taken_effect() && self.mode == Mode::Resolving => e,
                other => return other,
            };
            match self.get(key).await? {
                Some(o) if o.body == body && &o.version != expected => {
                    self.pacer.resolved();
                    return Ok(o.version);
                }
                // Still the expected version: not applied, so send again
                // (content-hash versions of identical bytes land here too,
                // and sending again is harmless for them).
                Some(o) if &o.version == expected && retries < MAX_AMBIGUOUS_RETRIES => {
                    retries += 1
                }
                _ => return Err(err),
            }
        }
    }

    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let mut retries = 0;
        loop {
            let result = self.send(key, || self.inner.delete(key, expected)).await;
            let err = match result {
                Err(e) if e.kind() == ErrorKind::Unsupported => {
                    self.pacer.learn_no_conditional_delete(e.evidence());
                    return Err(e);
                }
                Err(e) if e.may_have_taken_effect() && self.mode == Mode::Resolving => e,
                other => return other,
            };
            match self.get(key).await? {
                None => {
                    self.pacer.resolved();
                    return Ok(());
                }
                Some(o) if &o.version == expected && retries < MAX_AMBIGUOUS_RETRIES => {
                    retries += 1
                }
                Some(_) => return Err(err),
            }
        }
    }

    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        let mut backoff = Duration::from_millis(100);
        for _ in 0..MAX_THROTTLE_RETRIES {
            match self.inner.list(prefix).await {
                Err(e) if e.is_retryable() => {
                    let wait = e.retry_after().unwrap_or(backoff).min(MAX_BACKOFF);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    self.pacer.wait(wait).await;
                }
                other => return other,
            }
        }
        self.inner.list(prefix).await
    }

    async fn wrap_delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        self.send(key, || self.inner.delete_unconditionally(key))
            .await
    }

    fn wrap_capabilities(&self) -> Capabilities {
        self.pacer.correct(self.inner.capabilities())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use casaas_core::MemoryStore;
    use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};

    fn resolving(inner: Arc<dyn CasStore>, pacer: Arc<Pacer>) -> PacedStore {
        PacedStore::new(inner, pacer, Arc::default(), Mode::Resolving)
    }

    #[tokio::test]
    async fn a_lost_answer_is_resolved_by_reading() {
        let faulty = Arc::new(FaultyStore::new(
            MemoryStore::new(),
            1,
            FaultConfig::default(),
        ));
        let pacer = Arc::new(Pacer::default());
        let store = resolving(faulty.clone(), pacer.clone());
        faulty.inject(Fault::LoseResponse);
        let v1 = store.create("k", Bytes::from_static(b"a 1")).await.unwrap();
        faulty.inject(Fault::ServerErrorNotApplied);
        let v2 = store
            .replace("k", &v1, Bytes::from_static(b"b 2"))
            .await
            .unwrap();
        assert_ne!(v1, v2);
        assert_eq!(faulty.get("k").await.unwrap().unwrap().version, v2);
        assert_eq!(pacer.report().ambiguous_resolved, 1);
    }

    #[tokio::test]
    async fn throttled_writes_are_retried_and_counted() {
        let faulty = Arc::new(FaultyStore::new(
            MemoryStore::new(),
            1,
            FaultConfig::default(),
        ));
        let pacer = Arc::new(Pacer::default());
        let store = resolving(faulty.clone(), pacer.clone());
        faulty.inject(Fault::Throttle);
        faulty.inject(Fault::Throttle);
        store.create("k", Bytes::from_static(b"a")).await.unwrap();
        let report = pacer.report();
        assert_eq!(report.throttled_answers, 2);
        assert!(report.waited_ms >= 300, "{report:?}");
    }

    #[tokio::test]
    async fn paced_writes_to_one_key_keep_the_interval() {
        let pacer = Arc::new(Pacer::new(
            Some(Duration::from_millis(50)),
            IntervalSource::Option,
        ));
        let store = resolving(Arc::new(MemoryStore::new()), pacer);
        let started = Instant::now();
        let mut v = store.create("k", Bytes::from_static(b"0")).await.unwrap();
        for i in 1..4u8 {
            v = store.replace("k", &v, Bytes::from(vec![i])).await.unwrap();
        }
        assert!(started.elapsed() >= Duration::from_millis(150));
    }

    #[tokio::test]
    async fn an_unsupported_delete_is_learned() {
        let pacer = Arc::new(Pacer::default());
        let caps = pacer.correct(Capabilities::full());
        assert!(caps.conditional_delete);
        pacer.learn_no_conditional_delete("501 NotImplemented".into());
        let caps = pacer.correct(Capabilities::full());
        assert!(!caps.conditional_delete);
        assert!(caps.notes[0].contains("501"), "{caps:?}");
    }
}
