//! The `swap_once` primitive: clients commit transactions to shared tables
//! the Iceberg way, through the faulty network, while freezes stop them
//! mid-commit and some calls are dropped unanswered.
//!
//! A table is one pointer object. A commit reads it and calls
//! `SwapOnce::swap` with a body on top of what it read: the transaction's
//! id, the nonce, the parent's nonce, a write count and the nonces of the
//! writes before it (the lineage, bounded as Iceberg's `metadata-log` is).
//! The lineage check says a stored body descends from our write when its
//! lineage lists our nonce, and cannot tell (an error) when our write is
//! older than the oldest it lists. `Conflict`: the client rebases on the
//! current pointer (or now and then gives up). An ambiguous error or a
//! dropped call leaves the transaction unknown. Every write the store
//! applies is recorded (the truth the checker reads).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{Entropy, LeaseError, RetryPolicy, SwapOnce, Swapped};
use casaas_core::{CasError, CasStore, ErrorKind, ForwardingStore, StoredObject, Version};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::fenced::{finish, spawn_freezer};
use crate::clock::{SimClock, random_duration};
use crate::config::SimConfig;
use crate::history::swap_once::{Answer, CallRec, History, Landed, Told, TxnRec};
use crate::lock;
use crate::network::World;

/// Tables live under this prefix.
const TABLE_PREFIX: &str = "sim/iceberg";
/// Tables the clients share.
const TABLES: u64 = 2;
/// Clients.
const CLIENTS: usize = 4;
/// Attempts per `swap` call, drawn per call: few attempts leave more calls
/// ambiguous or refused.
const ATTEMPTS: [u32; 6] = [1, 2, 3, 8, 8, 8];
/// Conflicts a transaction rebases over before it gives up.
const MAX_REBASES: u32 = 16;
/// Probability that a transaction told `Conflict` is given up.
const ABANDON_ON_CONFLICT: f64 = 0.05;
/// Probability that a call is dropped after a while.
const DROP_CALL: f64 = 0.04;
/// Nonces a body's lineage keeps (Iceberg keeps 100 metadata files by
/// default; fewer here, so that the bound is reached).
const LINEAGE: usize = 8;

fn pointer_key(table: u64) -> String {
    format!("{TABLE_PREFIX}/{table:04}/pointer")
}

fn table_of(key: &str) -> Option<u64> {
    key.strip_prefix(TABLE_PREFIX)?
        .strip_prefix('/')?
        .strip_suffix("/pointer")?
        .parse()
        .ok()
}

/// A pointer body.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pointer {
    txn: u64,
    client: usize,
    nonce: String,
    parent: Option<String>,
    /// Writes so far, this one included.
    seq: u64,
    /// Nonces of the writes before this one, oldest first.
    lineage: Vec<String>,
}

impl Pointer {
    fn parse(body: &[u8]) -> Option<Pointer> {
        serde_json::from_slice(body).ok()
    }

    /// The body of transaction `txn`'s write on top of `read`.
    fn on_top(read: Option<&Pointer>, txn: u64, client: usize, nonce: &str) -> Pointer {
        let (parent, seq, lineage) = match read {
            Some(p) => {
                let mut lineage = p.lineage.clone();
                lineage.push(p.nonce.clone());
                let excess = lineage.len().saturating_sub(LINEAGE);
                lineage.drain(..excess);
                (Some(p.nonce.clone()), p.seq + 1, lineage)
            }
            None => (None, 1, Vec::new()),
        };
        Pointer {
            txn,
            client,
            nonce: nonce.to_string(),
            parent,
            seq,
            lineage,
        }
    }
}

fn nonce_in(body: &[u8]) -> Option<String> {
    Pointer::parse(body).map(|p| p.nonce)
}

/// Does `stored` descend from our write, number `seq` of its table, that
/// carried `nonce`? An error when the lineage no longer reaches that far.
fn descends(stored: &[u8], nonce: &str, seq: u64) -> Result<bool, LeaseError> {
    let Some(p) = Pointer::parse(stored) else {
        return Ok(false);
    };
    if p.lineage.iter().any(|n| n == nonce) {
        return Ok(true);
    }
    let oldest_listed = p.seq.saturating_sub(p.lineage.len() as u64);
    if seq < oldest_listed {
        return Err(LeaseError::InvalidConfig(format!(
            "write {seq} is older than the oldest the pointer lists ({oldest_listed})"
        )));
    }
    Ok(false)
}

/// How the writes of the current call were answered.
#[derive(Debug, Default)]
struct Answers {
    sent: u32,
    answered: u32,
    precondition_failed: bool,
    ambiguous: bool,
}

impl Answers {
    fn unknown(&self) -> bool {
        self.ambiguous || self.answered < self.sent
    }
}

/// A client's network path, watched: notes how its pointer writes are
/// answered (for the counts that show outcomes were settled by reading).
#[derive(Debug)]
struct Watch {
    inner: Arc<dyn CasStore>,
    answers: Arc<Mutex<Answers>>,
}

impl Watch {
    async fn watched(
        &self,
        key: &str,
        write: impl std::future::Future<Output = Result<Version, CasError>>,
    ) -> Result<Version, CasError> {
        if !key.starts_with(TABLE_PREFIX) {
            return write.await;
        }
        lock(&self.answers).sent += 1;
        let result = write.await;
        let mut answers = lock(&self.answers);
        answers.answered += 1;
        if let Err(err) = &result {
            if err.kind() == ErrorKind::PreconditionFailed {
                answers.precondition_failed = true;
            } else if err.may_have_taken_effect() {
                answers.ambiguous = true;
            }
        }
        result
    }
}

#[async_trait]
impl ForwardingStore for Watch {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.watched(key, self.inner.create(key, body)).await
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.watched(key, self.inner.replace(key, expected, body))
            .await
    }

    fn wrap_describe(&self) -> String {
        format!("watched({})", self.inner.describe())
    }

    fn wrap_identity(&self) -> String {
        self.inner.identity()
    }
}

struct Client {
    id: usize,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    clock: SimClock,
    net: Arc<Watch>,
    writer: SwapOnce,
    rng: ChaCha8Rng,
    ttl: Duration,
    request_timeout: Duration,
    retry_period: Duration,
}

impl Client {
    async fn run(mut self) -> Result<(), String> {
        while !self.world.stop.is_cancelled() {
            let quiet = self.rng.random_bool(0.2);
            let idle = random_duration(&mut self.rng, if quiet { self.ttl } else { self.ttl / 20 });
            self.clock.pause(idle).await;
            let table = self.rng.random_range(0..TABLES);
            let id = {
                let mut h = lock(&self.history);
                h.txns.push(TxnRec {
                    client: self.id,
                    table,
                    told: Told::Pending,
                    error: String::new(),
                    calls: Vec::new(),
                });
                (h.txns.len() - 1) as u64
            };
            let (told, error) = self.commit(id, table).await;
            let mut h = lock(&self.history);
            let rec = &mut h.txns[id as usize];
            rec.told = told;
            rec.error = error;
        }
        Ok(())
    }

    /// Reads the pointer (a few tries): `Err` if the store kept failing.
    async fn read(&mut self, key: &str) -> Result<Option<StoredObject>, String> {
        let mut last = String::new();
        for _ in 0..4 {
            match self.writer.read(key).await {
                Ok(found) => return Ok(found),
                Err(err) => last = err.to_string(),
            }
            self.clock.pause(self.retry_period).await;
        }
        Err(last)
    }

    /// Commits transaction `id` to `table`: what it was told, and the error.
    async fn commit(&mut self, id: u64, table: u64) -> (Told, String) {
        let key = pointer_key(table);
        let client = self.id;
        for _ in 0..MAX_REBASES {
            let read = match self.read(&key).await {
                Ok(read) => read,
                Err(err) => return (Told::Refused, err),
            };
            let parent = read.as_ref().and_then(|o| Pointer::parse(&o.body));
            if read.is_some() && parent.is_none() {
                return (Told::Refused, "the pointer holds a foreign body".into());
            }
            let seq = parent.as_ref().map_or(1, |p| p.seq + 1);
            let expected = read.as_ref().map(|o| o.version.clone());
            let sent = Mutex::new(Vec::new());
            let body = |nonce: &str| -> Result<Bytes, LeaseError> {
                lock(&sent).push(nonce.to_string());
                let pointer = Pointer::on_top(parent.as_ref(), id, client, nonce);
                serde_json::to_vec(&pointer)
                    .map(Bytes::from)
                    .map_err(|e| LeaseError::InvalidConfig(e.to_string()))
            };
            let lineage = |stored: &[u8], nonce: &str| descends(stored, nonce, seq);
            *lock(&self.net.answers) = Answers::default();
            let attempts = ATTEMPTS[self.rng.random_range(0..ATTEMPTS.len())];
            let writer = self.writer.clone().with_retry_policy(
                RetryPolicy::default()
                    .with_request_timeout(self.request_timeout)
                    .with_retry_period(self.retry_period)
                    .with_max_attempts(attempts),
            );
            let call = writer.swap(&key, expected.as_ref(), body, nonce_in, lineage);
            let result = if self.rng.random_bool(DROP_CALL) {
                let after = random_duration(&mut self.rng, self.ttl / 2);
                tokio::select! {
                    biased;
                    result = call => Some(result),
                    () = self.clock.pause(after) => None,
                }
            } else {
                Some(call.await)
            };
            let answers = std::mem::take(&mut *lock(&self.net.answers));
            let nonces = std::mem::take(&mut *lock(&sent));
            let (answer, outcome) = match result {
                Some(Ok(Swapped::Ours { replaced, .. })) => {
                    let mut h = lock(&self.history);
                    h.ours_after_412 += u64::from(answers.precondition_failed);
                    h.ours_after_ambiguous += u64::from(answers.unknown());
                    h.ours_replaced += u64::from(replaced);
                    (
                        Answer::Ours,
                        Some((Told::Committed { replaced }, String::new())),
                    )
                }
                Some(Ok(Swapped::Conflict(_))) => {
                    lock(&self.history).conflict_after_ambiguous += u64::from(answers.unknown());
                    let give_up = self.rng.random_bool(ABANDON_ON_CONFLICT);
                    (
                        Answer::Conflict,
                        give_up.then(|| (Told::Abandoned, "a conflicting commit".to_string())),
                    )
                }
                Some(Err(err)) if err.may_have_taken_effect() => {
                    (Answer::Ambiguous, Some((Told::Unknown, err.to_string())))
                }
                Some(Err(err)) => (Answer::Refused, Some((Told::Refused, err.to_string()))),
                None => (
                    Answer::Dropped,
                    Some((Told::Unknown, "dropped unanswered".to_string())),
                ),
            };
            lock(&self.history).txns[id as usize]
                .calls
                .push(CallRec { nonces, answer });
            if let Some(outcome) = outcome {
                return outcome;
            }
        }
        (Told::Abandoned, format!("{MAX_REBASES} conflicts"))
    }
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
}

/// Runs the committing clients until they have sent `ops` requests, lets
/// late writes land, and returns what each transaction was told, every
/// pointer write the store applied and the pointers as stored.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History::default()));
    let recorded = history.clone();
    let world = World::new(
        config,
        &mut rng,
        CLIENTS,
        ops,
        Arc::new(move |_at, key: &str, body: &Bytes| {
            let Some(table) = table_of(key) else {
                return;
            };
            let mut h = lock(&recorded);
            match Pointer::parse(body) {
                Some(p) => h.landed.push(Landed {
                    table,
                    txn: p.txn,
                    nonce: p.nonce,
                    parent: p.parent,
                }),
                None => h
                    .foreign
                    .push(format!("{key}: {}", String::from_utf8_lossy(body))),
            }
        }),
        None,
    );
    let mut handles = Vec::new();
    let mut freezers = Vec::new();
    for id in 0..world.rates.len() {
        let (clock, net) = world.client(id, config, &mut rng);
        freezers.push(spawn_freezer(&world, &clock, &mut rng, config.lease.ttl));
        let net = Arc::new(Watch {
            inner: net,
            answers: Arc::new(Mutex::new(Answers::default())),
        });
        let lease = &world.leases[id];
        let writer = SwapOnce::new(net.clone())
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(Entropy::seeded(rng.random()));
        let client = Client {
            id,
            world: world.clone(),
            history: history.clone(),
            clock,
            net,
            writer,
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            ttl: config.lease.ttl,
            request_timeout: lease.request_timeout,
            retry_period: lease.retry_period,
        };
        handles.push(tokio::spawn(client.run()));
    }
    finish(handles, freezers, "swap-once", config.lease.ttl * 3).await?;
    let truth = world.truth();
    let mut heads = Vec::new();
    for table in 0..TABLES {
        let key = pointer_key(table);
        let found = truth
            .get(&key)
            .await
            .map_err(|e| format!("cannot read {key}: {e}"))?;
        if let Some(object) = found {
            match Pointer::parse(&object.body) {
                Some(p) => heads.push((table, p.nonce)),
                None => lock(&history)
                    .foreign
                    .push(format!("{key}: {}", String::from_utf8_lossy(&object.body))),
            }
        }
    }
    let mut history = std::mem::take(&mut *lock(&history));
    history.heads = heads;
    Ok(Recorded { world, history })
}
