//! [`FaultyStore`]: seeded fault injection around any backend.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{CasError, CasStore, ErrorKind, ForwardingStore, ListEntry, StoredObject, Version};

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail before the request reaches the store: nothing is applied and the
    /// caller gets [`ErrorKind::NotSent`].
    FailBeforeApply,
    /// Apply the request, then lose the response: the caller gets
    /// [`ErrorKind::Ambiguous`] although the write took effect.
    LoseResponse,
    /// Reject the request with [`ErrorKind::Throttled`]; nothing is applied.
    Throttle,
    /// Answer 5xx without applying: [`ErrorKind::Ambiguous`] although nothing
    /// was written (the other half of what an ambiguous answer can mean).
    ServerErrorNotApplied,
    /// Hold the request this long before it reaches the store. The request
    /// travels on a detached task, as on a real network: a caller that stops
    /// waiting (a timeout, a dropped future) does not cancel it, so a write
    /// whose caller gave up and was told "ambiguous" still lands later.
    Delay(Duration),
    /// Send the request twice, as an SDK's transport retry would, and answer
    /// with the second attempt's result (a won create comes back as
    /// precondition failed).
    Duplicate,
}

/// Probabilities of random faults per request. All zero by default.
#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// Probability of [`Fault::FailBeforeApply`].
    pub fail_before_apply: f64,
    /// Probability of [`Fault::LoseResponse`] (writes only).
    pub lose_response: f64,
    /// Probability of [`Fault::Throttle`].
    pub throttle: f64,
    /// Probability of [`Fault::ServerErrorNotApplied`] (writes only).
    pub server_error: f64,
    /// Probability of [`Fault::Duplicate`] (writes only).
    pub duplicate: f64,
    /// Probability of a [`Fault::Delay`] of up to `max_delay`.
    pub delay: f64,
    /// Upper bound of random delays.
    pub max_delay: Duration,
}

impl FaultConfig {
    /// Every fault at the same probability `p`, delays up to `max_delay`.
    pub fn uniform(p: f64, max_delay: Duration) -> Self {
        FaultConfig {
            fail_before_apply: p,
            lose_response: p,
            throttle: p,
            server_error: p,
            duplicate: p,
            delay: p,
            max_delay,
        }
    }
}

/// How many faults of each kind a [`FaultyStore`] has injected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Requests failed before being applied.
    pub failed_before_apply: u64,
    /// Writes applied whose response was lost.
    pub lost_responses: u64,
    /// Requests throttled.
    pub throttled: u64,
    /// Writes answered 5xx without being applied.
    pub server_errors: u64,
    /// Writes sent twice.
    pub duplicated: u64,
    /// Requests delayed.
    pub delayed: u64,
}

#[derive(Debug)]
struct FaultState {
    rng: ChaCha8Rng,
    config: FaultConfig,
    scripted: VecDeque<Fault>,
    counts: FaultCounts,
}

/// Wraps any [`CasStore`] and injects faults, from a script or at random from
/// a seed, so a failing run replays exactly (given a deterministic executor).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use bytes::Bytes;
/// use casaas_core::{CasStore, ErrorKind, MemoryStore};
/// use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};
///
/// let store = FaultyStore::new(MemoryStore::new(), 42, FaultConfig::default());
/// store.inject(Fault::LoseResponse);
/// let err = store.create("k", Bytes::from_static(b"v")).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Ambiguous);
/// // ...but the write happened.
/// assert!(store.get("k").await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: Arc<S>,
    state: Arc<Mutex<FaultState>>,
}

impl<S> Clone for FaultyStore<S> {
    fn clone(&self) -> Self {
        FaultyStore {
            inner: self.inner.clone(),
            state: self.state.clone(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

impl<S: CasStore> FaultyStore<S> {
    /// Wraps `inner`, drawing random faults from `config` with `seed`.
    pub fn new(inner: S, seed: u64, config: FaultConfig) -> Self {
        FaultyStore {
            inner: Arc::new(inner),
            state: Arc::new(Mutex::new(FaultState {
                rng: ChaCha8Rng::seed_from_u64(seed),
                config,
                scripted: VecDeque::new(),
                counts: FaultCounts::default(),
            })),
        }
    }

    /// Queues `fault` for the next request (scripted faults come before
    /// random ones, in order).
    pub fn inject(&self, fault: Fault) {
        self.lock().scripted.push_back(fault);
    }

    /// Replaces the random-fault probabilities (e.g. to heal the store).
    pub fn set_config(&self, config: FaultConfig) {
        self.lock().config = config;
    }

    /// The faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.lock().counts.clone()
    }

    /// The wrapped store, to inspect the truth without faults.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn draw(&self, op: Op) -> Option<Fault> {
        let mut state = self.lock();
        if let Some(fault) = state.scripted.pop_front() {
            return Some(fault);
        }
        let config = state.config.clone();
        let rng = &mut state.rng;
        let roll = |rng: &mut ChaCha8Rng, p: f64| p > 0.0 && rng.random_bool(p.min(1.0));
        if roll(rng, config.fail_before_apply) {
            return Some(Fault::FailBeforeApply);
        }
        if roll(rng, config.throttle) {
            return Some(Fault::Throttle);
        }
        if op == Op::Write {
            if roll(rng, config.lose_response) {
                return Some(Fault::LoseResponse);
            }
            if roll(rng, config.server_error) {
                return Some(Fault::ServerErrorNotApplied);
            }
            if roll(rng, config.duplicate) {
                return Some(Fault::Duplicate);
            }
        }
        if roll(rng, config.delay) && !config.max_delay.is_zero() {
            let nanos = rng.random_range(0..=config.max_delay.as_nanos() as u64);
            return Some(Fault::Delay(Duration::from_nanos(nanos)));
        }
        None
    }

    fn count(&self, fault: Fault) {
        let mut state = self.lock();
        let counts = &mut state.counts;
        match fault {
            Fault::FailBeforeApply => counts.failed_before_apply += 1,
            Fault::LoseResponse => counts.lost_responses += 1,
            Fault::Throttle => counts.throttled += 1,
            Fault::ServerErrorNotApplied => counts.server_errors += 1,
            Fault::Delay(_) => counts.delayed += 1,
            Fault::Duplicate => counts.duplicated += 1,
        }
    }

    /// Runs `request` under the drawn fault. `request` may be called twice
    /// (duplicate) and must send the same request each time; `detached`
    /// sends that same request from a task of its own (a delayed request
    /// must outlive a caller that stops waiting for it).
    async fn run<T, F, Fut, D, DFut>(
        &self,
        key: &str,
        op: Op,
        request: F,
        detached: D,
    ) -> Result<T, CasError>
    where
        T: Send + 'static,
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, CasError>>,
        D: FnOnce(Arc<S>) -> DFut,
        DFut: std::future::Future<Output = Result<T, CasError>> + Send + 'static,
    {
        let Some(fault) = self.draw(op) else {
            return request().await;
        };
        self.count(fault);
        let injected = |kind, message: &str| {
            Err(CasError::new(kind, format!("injected fault: {message}")).with_key(key))
        };
        match fault {
            Fault::FailBeforeApply => injected(ErrorKind::NotSent, "connection refused"),
            Fault::Throttle => injected(ErrorKind::Throttled, "slow down"),
            Fault::ServerErrorNotApplied => injected(ErrorKind::Ambiguous, "500, not applied"),
            Fault::LoseResponse => {
                let _applied = request().await;
                injected(
                    ErrorKind::Ambiguous,
                    "response lost after the request was applied",
                )
            }
            // Nothing to outlive: a zero delay is a scripted "no fault".
            Fault::Delay(delay) if delay.is_zero() => request().await,
            Fault::Delay(delay) => {
                let (answer, answered) = tokio::sync::oneshot::channel();
                let request = detached(self.inner.clone());
                // Detached: once sent, the request is out of the caller's
                // hands and lands even if the caller has given up.
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = answer.send(request.await);
                });
                match answered.await {
                    Ok(result) => result,
                    Err(_) => injected(
                        ErrorKind::Ambiguous,
                        "the delayed request ended without an answer",
                    ),
                }
            }
            Fault::Duplicate => {
                let _first = request().await;
                request().await
            }
        }
    }
}

#[async_trait]
impl<S: CasStore> ForwardingStore for FaultyStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let owned = key.to_string();
        self.run(
            key,
            Op::Read,
            || self.inner.get(key),
            |s| async move { s.get(&owned).await },
        )
        .await
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let (owned, owned_body) = (key.to_string(), body.clone());
        self.run(
            key,
            Op::Write,
            || self.inner.create(key, body.clone()),
            |s| async move { s.create(&owned, owned_body).await },
        )
        .await
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let (owned, owned_expected, owned_body) = (key.to_string(), expected.clone(), body.clone());
        self.run(
            key,
            Op::Write,
            || self.inner.replace(key, expected, body.clone()),
            |s| async move { s.replace(&owned, &owned_expected, owned_body).await },
        )
        .await
    }

    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let (owned, owned_expected) = (key.to_string(), expected.clone());
        self.run(
            key,
            Op::Write,
            || self.inner.delete(key, expected),
            |s| async move { s.delete(&owned, &owned_expected).await },
        )
        .await
    }

    async fn wrap_delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        let owned = key.to_string();
        self.run(
            key,
            Op::Write,
            || self.inner.delete_unconditionally(key),
            |s| async move { s.delete_unconditionally(&owned).await },
        )
        .await
    }

    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        let owned = prefix.to_string();
        self.run(
            prefix,
            Op::Read,
            || self.inner.list(prefix),
            |s| async move { s.list(&owned).await },
        )
        .await
    }

    fn wrap_describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }

    fn wrap_identity(&self) -> String {
        format!("faulty({})", self.inner.identity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[tokio::test]
    async fn duplicate_turns_a_won_create_into_precondition_failed() {
        let store = FaultyStore::new(MemoryStore::new(), 1, FaultConfig::default());
        store.inject(Fault::Duplicate);
        let err = store
            .create("k", Bytes::from_static(b"v"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
        assert_eq!(store.inner().get("k").await.unwrap().unwrap().body, "v");
    }

    #[tokio::test]
    async fn failures_that_apply_nothing() {
        let store = FaultyStore::new(MemoryStore::new(), 1, FaultConfig::default());
        for fault in [
            Fault::FailBeforeApply,
            Fault::Throttle,
            Fault::ServerErrorNotApplied,
        ] {
            store.inject(fault);
            assert!(store.create("k", Bytes::new()).await.is_err());
            assert!(store.inner().get("k").await.unwrap().is_none(), "{fault:?}");
        }
        assert_eq!(store.counts().throttled, 1);
    }

    #[tokio::test]
    async fn same_seed_same_faults() {
        let run = |seed| async move {
            let store = FaultyStore::new(
                MemoryStore::new(),
                seed,
                FaultConfig::uniform(0.2, Duration::ZERO),
            );
            let mut outcomes = Vec::new();
            for i in 0..200 {
                let r = store.create(&format!("k{i}"), Bytes::new()).await;
                outcomes.push(r.map_err(|e| e.kind()).is_ok());
            }
            (outcomes, store.counts())
        };
        assert_eq!(run(7).await, run(7).await);
        assert_ne!(run(7).await.0, run(8).await.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_write_lands_after_its_caller_gave_up() {
        let store = FaultyStore::new(MemoryStore::new(), 1, FaultConfig::default());
        store.inject(Fault::Delay(Duration::from_secs(5)));
        let gave_up = tokio::time::timeout(
            Duration::from_secs(1),
            store.create("k", Bytes::from_static(b"late")),
        )
        .await;
        assert!(gave_up.is_err(), "the caller should have timed out");
        assert!(store.inner().get("k").await.unwrap().is_none());
        tokio::time::sleep(Duration::from_secs(5)).await;
        let landed = store.inner().get("k").await.unwrap().unwrap();
        assert_eq!(landed.body, "late");
        assert_eq!(store.counts().delayed, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_request_answers_once_it_lands() {
        let store = FaultyStore::new(MemoryStore::new(), 1, FaultConfig::default());
        store.inject(Fault::Delay(Duration::from_millis(300)));
        let started = tokio::time::Instant::now();
        store.create("k", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }
}
