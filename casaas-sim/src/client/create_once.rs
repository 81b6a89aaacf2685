//! The `create_once` primitive: clients commit transactions of their own to
//! shared logs the Delta Lake way, through the faulty network, while
//! freezes stop them mid-commit and some calls are dropped unanswered.
//!
//! A commit finds the next free version (listing the log, as Delta's
//! latest-version lookup does, or from a snapshot that may be stale), and
//! calls `CreateOnce::create` for `_delta_log/<version>.json` with a body
//! that carries the transaction's id and the nonce. `Taken`: the version is
//! another's, so the transaction moves to the next one (or now and then is
//! given up, a conflicting commit). An ambiguous error or a dropped call:
//! the client, as a careful application would, reads the version back and
//! looks for its transaction there: found, it is committed; another's, none
//! of its writes can land any more and it moves on; still absent after a
//! few reads (or not read at all), the transaction is left unknown. At the
//! end the checker reads what the store really holds, directly.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{CreateOnce, Created, Entropy, LeaseError};
use casaas_core::{CasError, CasStore, ErrorKind, ForwardingStore, Version};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fenced::{finish, spawn_freezer};
use crate::clock::{SimClock, random_duration};
use crate::config::SimConfig;
use crate::history::create_once::{History, StoredCommit, Told, TxnRec};
use crate::lock;
use crate::network::World;

/// Logs (tables) live under this prefix, a new one every `TXNS_PER_LOG`
/// transactions started, so that no log grows long enough for listing it
/// to dominate the run.
const LOG_PREFIX: &str = "sim/delta";
const TXNS_PER_LOG: u64 = 200;
/// Clients.
const CLIENTS: usize = 4;
/// Attempts per `create` call, drawn per call: few attempts leave more
/// calls ambiguous (a write of ours may still land) or refused (every
/// write refused outright).
const ATTEMPTS: [u32; 6] = [1, 2, 3, 8, 8, 8];
/// Versions a transaction tries before it gives up.
const MAX_VERSIONS: u32 = 32;
/// Probability that a client starts from its last snapshot (possibly stale)
/// instead of listing the log.
const STALE_START: f64 = 0.3;
/// Probability that a transaction told `Taken` is given up (a conflict).
const ABANDON_ON_TAKEN: f64 = 0.1;
/// Probability that a call is dropped after a while (its caller stopped
/// waiting).
const DROP_CALL: f64 = 0.04;
/// Probability that an unknown outcome is left unknown without reading.
const LEAVE_UNKNOWN: f64 = 0.25;
/// Reads of a version that settle an unknown outcome, before it is left
/// unknown.
const SETTLE_READS: u32 = 4;

fn log_dir(log: u64) -> String {
    format!("{LOG_PREFIX}/{log:06}/_delta_log/")
}

fn key_for(log: u64, version: u64) -> String {
    format!("{}{version:020}.json", log_dir(log))
}

/// The (log, version) a commit's key names.
fn parse_key(key: &str) -> Option<(u64, u64)> {
    let rest = key.strip_prefix(LOG_PREFIX)?.strip_prefix('/')?;
    let (log, file) = rest.split_once("/_delta_log/")?;
    let version = file.strip_suffix(".json")?;
    Some((log.parse().ok()?, version.parse().ok()?))
}

/// A commit's body, Delta-style: a `commitInfo` line with the transaction's
/// id and the nonce, then an action.
fn body_with(txn: u64, client: usize, nonce: &str) -> Bytes {
    let info = serde_json::json!({
        "commitInfo": { "txnId": txn, "client": client, "casaasNonce": nonce }
    });
    let add = serde_json::json!({
        "add": { "path": format!("part-{client}-{txn}.parquet"), "size": 1 }
    });
    Bytes::from(format!("{info}\n{add}\n"))
}

/// The `commitInfo` of a stored body.
fn commit_info(body: &[u8]) -> Option<serde_json::Value> {
    let first = body.split(|b| *b == b'\n').next()?;
    let v: serde_json::Value = serde_json::from_slice(first).ok()?;
    v.get("commitInfo").cloned()
}

/// The nonce a stored body carries (`CreateOnce`'s `nonce_in`).
fn nonce_in(body: &[u8]) -> Option<String> {
    Some(commit_info(body)?.get("casaasNonce")?.as_str()?.to_string())
}

/// The (transaction, client) a stored body is a commit of.
fn txn_in(body: &[u8]) -> Option<(u64, usize)> {
    let info = commit_info(body)?;
    let txn = info.get("txnId")?.as_u64()?;
    let client = usize::try_from(info.get("client")?.as_u64()?).ok()?;
    Some((txn, client))
}

/// What the creates of the current call were answered: a 412, an
/// ambiguous error, or nothing (a request given up by its timeout).
#[derive(Debug, Default)]
struct Answers {
    sent: u32,
    answered: u32,
    precondition_failed: bool,
    ambiguous: bool,
}

impl Answers {
    /// An answer was ambiguous or never came.
    fn unknown(&self) -> bool {
        self.ambiguous || self.answered < self.sent
    }
}

/// A client's network path, watched: notes how its creates are answered
/// (for the counts that show outcomes were settled by reading).
#[derive(Debug)]
struct Watch {
    inner: Arc<dyn CasStore>,
    answers: Arc<Mutex<Answers>>,
}

#[async_trait]
impl ForwardingStore for Watch {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        // Commits only: not the store guard's probes.
        if !key.starts_with(LOG_PREFIX) {
            return self.inner.create(key, body).await;
        }
        lock(&self.answers).sent += 1;
        let result = self.inner.create(key, body).await;
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

    fn wrap_describe(&self) -> String {
        format!("watched({})", self.inner.describe())
    }

    fn wrap_identity(&self) -> String {
        // The same store as every other client's path.
        self.inner.identity()
    }
}

/// What reading a version back told about an unknown outcome.
enum Settle {
    /// Our transaction is there.
    Ours,
    /// Another's: none of our writes can land any more.
    Other,
    /// Still absent (or unread): a write of ours may still land there.
    Unknown,
}

struct Client {
    id: usize,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    clock: SimClock,
    net: Arc<Watch>,
    writer: CreateOnce,
    /// Transactions started (by any client): picks the log.
    started: Arc<AtomicU64>,
    /// The next version of each log, as this client last learned it.
    snapshot: BTreeMap<u64, u64>,
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
            let log = self.started.fetch_add(1, Ordering::Relaxed) / TXNS_PER_LOG;
            let id = {
                let mut h = lock(&self.history);
                h.txns.push(TxnRec {
                    client: self.id,
                    log,
                    told: Told::Pending,
                    error: String::new(),
                    taken: Vec::new(),
                });
                (h.txns.len() - 1) as u64
            };
            let (told, error) = self.commit(id, log).await;
            let mut h = lock(&self.history);
            let rec = &mut h.txns[id as usize];
            rec.told = told;
            rec.error = error;
        }
        Ok(())
    }

    /// The version to try first: the log's next version, listed (as
    /// Delta's latest-version lookup does), or now and then this client's
    /// last snapshot of it, which may be stale.
    async fn start_version(&mut self, log: u64) -> u64 {
        let snapshot = self.snapshot.get(&log).copied();
        if snapshot.is_some() && self.rng.random_bool(STALE_START) {
            return snapshot.unwrap_or(0);
        }
        for _ in 0..3 {
            match self.net.list(&log_dir(log)).await {
                Ok(listed) => {
                    let next = listed
                        .iter()
                        .filter_map(|e| parse_key(&e.key))
                        .map(|(_, v)| v + 1)
                        .max()
                        .unwrap_or(0);
                    self.snapshot.insert(log, next);
                    return next;
                }
                Err(_) => self.clock.pause(self.retry_period).await,
            }
        }
        snapshot.unwrap_or(0)
    }

    /// Commits transaction `id` to `log`: what it was told, and the error.
    async fn commit(&mut self, id: u64, log: u64) -> (Told, String) {
        let mut version = self.start_version(log).await;
        let client = self.id;
        for _ in 0..MAX_VERSIONS {
            let key = key_for(log, version);
            *lock(&self.net.answers) = Answers::default();
            let body = move |nonce: &str| -> Result<Bytes, LeaseError> {
                Ok(body_with(id, client, nonce))
            };
            let attempts = ATTEMPTS[self.rng.random_range(0..ATTEMPTS.len())];
            let writer = self.writer.clone().with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(self.request_timeout)
                    .with_retry_period(self.retry_period)
                    .with_max_attempts(attempts),
            );
            let call = writer.create(&key, body, nonce_in);
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
            let unknown = match result {
                Some(Ok(Created::Ours(_))) => {
                    let mut h = lock(&self.history);
                    if answers.precondition_failed {
                        h.ours_after_412 += 1;
                    }
                    if answers.unknown() {
                        h.ours_after_ambiguous += 1;
                    }
                    drop(h);
                    self.snapshot.insert(log, version + 1);
                    return (
                        Told::Committed {
                            version,
                            found: false,
                        },
                        String::new(),
                    );
                }
                Some(Ok(Created::Taken(_))) => {
                    let mut h = lock(&self.history);
                    h.txns[id as usize].taken.push(version);
                    if answers.unknown() {
                        h.taken_after_ambiguous += 1;
                    }
                    drop(h);
                    if self.rng.random_bool(ABANDON_ON_TAKEN) {
                        return (
                            Told::Abandoned,
                            format!("version {version} taken: a conflicting commit"),
                        );
                    }
                    None
                }
                Some(Err(err)) if err.store_kind() == Some(ErrorKind::Ambiguous) => {
                    lock(&self.history).ambiguous_errors += 1;
                    Some(err.to_string())
                }
                Some(Err(err)) => return (Told::Refused, err.to_string()),
                None => {
                    lock(&self.history).dropped += 1;
                    Some("dropped unanswered".to_string())
                }
            };
            if let Some(error) = unknown {
                match self.settle(id, log, version).await {
                    Settle::Ours => {
                        self.snapshot.insert(log, version + 1);
                        return (
                            Told::Committed {
                                version,
                                found: true,
                            },
                            error,
                        );
                    }
                    Settle::Other => {}
                    Settle::Unknown => return (Told::Unknown { version }, error),
                }
            }
            version += 1;
        }
        (Told::Abandoned, format!("{MAX_VERSIONS} versions taken"))
    }

    /// Settles an unknown outcome at `version` by reading it back and
    /// looking for transaction `id` there (or leaves it unknown).
    async fn settle(&mut self, id: u64, log: u64, version: u64) -> Settle {
        if !self.rng.random_bool(LEAVE_UNKNOWN) {
            let key = key_for(log, version);
            for _ in 0..SETTLE_READS {
                if let Ok(Some(object)) = self.net.get(&key).await {
                    let mut h = lock(&self.history);
                    return if txn_in(&object.body).map(|(txn, _)| txn) == Some(id) {
                        h.settled_ours += 1;
                        Settle::Ours
                    } else {
                        h.settled_other += 1;
                        Settle::Other
                    };
                }
                let wait = random_duration(&mut self.rng, self.ttl / 2);
                self.clock.pause(wait).await;
            }
        }
        lock(&self.history).left_unknown += 1;
        Settle::Unknown
    }
}

/// Every commit of every log, read straight from the store (no faults, no
/// `CreateOnce`), in (log, version) order; and what else is stored there.
async fn stored_commits(world: &World) -> Result<(Vec<StoredCommit>, Vec<String>), String> {
    let truth = world.truth();
    let listed = truth
        .list(&format!("{LOG_PREFIX}/"))
        .await
        .map_err(|e| format!("cannot list the logs: {e}"))?;
    let mut commits = Vec::new();
    let mut foreign = Vec::new();
    for entry in listed {
        let object = truth
            .get(&entry.key)
            .await
            .map_err(|e| format!("cannot read {}: {e}", entry.key))?
            .ok_or_else(|| format!("{} vanished", entry.key))?;
        match (parse_key(&entry.key), txn_in(&object.body)) {
            (Some((log, version)), Some((txn, client))) => commits.push(StoredCommit {
                log,
                version,
                txn,
                client,
            }),
            _ => foreign.push(format!(
                "{}: {}",
                entry.key,
                String::from_utf8_lossy(&object.body)
            )),
        }
    }
    commits.sort_by_key(|c| (c.log, c.version));
    Ok((commits, foreign))
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
}

/// Runs the committing clients until they have sent `ops` requests, lets
/// late writes land, and returns what each transaction was told and what
/// the logs hold.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History::default()));
    let applied = Arc::new(AtomicU64::new(0));
    let counted = applied.clone();
    let world = World::new(
        config,
        &mut rng,
        CLIENTS,
        ops,
        Arc::new(move |_at, key: &str, _body: &Bytes| {
            if key.starts_with(LOG_PREFIX) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }),
        None,
    );
    let started = Arc::new(AtomicU64::new(0));
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
        let writer = CreateOnce::new(net.clone())
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(Entropy::seeded(rng.random()));
        let client = Client {
            id,
            world: world.clone(),
            history: history.clone(),
            clock,
            net,
            writer,
            started: started.clone(),
            snapshot: BTreeMap::new(),
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            ttl: config.lease.ttl,
            request_timeout: lease.request_timeout,
            retry_period: lease.retry_period,
        };
        handles.push(tokio::spawn(client.run()));
    }
    let freezes = finish(handles, freezers, "create-once", config.lease.ttl * 3).await?;
    let (commits, foreign) = stored_commits(&world).await?;
    let mut history = std::mem::take(&mut *lock(&history));
    history.commits = commits;
    history.foreign = foreign;
    history.applied = applied.load(Ordering::Relaxed);
    history.freezes = freezes;
    Ok(Recorded { world, history })
}
