//! The `fenced_log` primitive: clients append to `FencedLog`s with tokens
//! that a new "holder" raises now and then, through the faulty network,
//! while freezes stop clients mid-append. At the end the checker reads what
//! the store really holds, directly (not through `FencedLog`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::lease::{Entropy, FencedLog};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::fenced::{Holder, finish, outcome, spawn_freezer, stored_log_objects};
use crate::clock::SimClock;
use crate::config::SimConfig;
use crate::history::fenced_log::{AppendRec, History, StoredEntry};
use crate::lock;
use crate::network::World;

/// Logs live under this prefix, one per `ENTRIES_PER_LOG` appends started,
/// so that no log grows long enough for listing it to dominate the run.
const LOG_PREFIX: &str = "sim/log";
const ENTRIES_PER_LOG: u64 = 200;
/// Clients.
const CLIENTS: usize = 4;

/// An entry's value: which append wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogOp {
    pub client: u32,
    pub op: u64,
}

fn log_prefix(log: u64) -> String {
    format!("{LOG_PREFIX}/{log:06}")
}

struct Client {
    id: u32,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    clock: SimClock,
    net: Arc<dyn CasStore>,
    entropy: Entropy,
    /// The highest token handed out so far (by any client).
    epoch: Arc<AtomicU64>,
    /// Appends started (by any client): picks the log.
    started: Arc<AtomicU64>,
    rng: ChaCha8Rng,
    config: SimConfig,
}

impl Client {
    async fn run(mut self) -> Result<(), String> {
        let ttl = self.config.lease.ttl;
        let lease = &self.world.leases[self.id as usize];
        let (timeout, retry_period) = (lease.request_timeout, lease.retry_period);
        let mut holder = Holder::join(self.epoch.clone());
        let mut op = 0u64;
        while !self.world.stop.is_cancelled() {
            if holder.next_turn(&self.clock, &mut self.rng, ttl).await {
                lock(&self.history).new_tokens += 1;
            }
            let token = holder.token();
            op += 1;
            let log = self.started.fetch_add(1, Ordering::Relaxed) / ENTRIES_PER_LOG;
            let writer = FencedLog::<LogOp>::new(self.net.clone(), log_prefix(log))
                .map_err(|e| e.to_string())?
                .with_clock(Arc::new(self.clock.clone()))
                .with_entropy(self.entropy.clone())
                .with_retry_policy(
                    casaas_core::lease::RetryPolicy::default()
                        .with_request_timeout(timeout)
                        .with_retry_period(retry_period)
                        .with_max_attempts(8),
                );
            let result = writer
                .append(
                    token,
                    LogOp {
                        client: self.id,
                        op,
                    },
                )
                .await;
            let (told, error) = outcome(&result);
            lock(&self.history).appends.push(AppendRec {
                client: self.id,
                op,
                token,
                log,
                outcome: told,
                error,
                seq: result.as_ref().map_or(0, |e| e.seq),
            });
            holder.told(told);
        }
        Ok(())
    }
}

/// Reads every log straight from the store (no faults, no `FencedLog`).
async fn stored_logs(world: &World) -> Result<BTreeMap<u64, Vec<StoredEntry>>, String> {
    let mut logs: BTreeMap<u64, Vec<StoredEntry>> = BTreeMap::new();
    for object in stored_log_objects(world, LOG_PREFIX).await? {
        let value: Option<LogOp> = object
            .body
            .get("value")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let (Some(seq), Some(token), Some(value)) =
            (object.field("seq"), object.field("token"), value)
        else {
            return Err(format!("{} is not a log entry of this run", object.key));
        };
        logs.entry(object.log).or_default().push(StoredEntry {
            key_seq: object.key_seq,
            seq,
            token,
            client: value.client,
            op: value.op,
        });
    }
    for entries in logs.values_mut() {
        entries.sort_by_key(|e| e.key_seq);
    }
    Ok(logs)
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
    /// Every log as the store holds it at the end, by log number.
    pub logs: BTreeMap<u64, Vec<StoredEntry>>,
    /// Writes the store applied.
    pub entries: u64,
    pub freezes: u64,
}

/// Runs the appending clients until they have sent `ops` requests, lets
/// late writes land, and returns what each append was told and what the
/// store holds.
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
        Arc::new(move |_at, _key: &str, _body: &Bytes| {
            counted.fetch_add(1, Ordering::Relaxed);
        }),
        None,
    );
    let epoch = Arc::new(AtomicU64::new(1));
    let started = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    let mut freezers = Vec::new();
    for id in 0..world.rates.len() {
        let (clock, net) = world.client(id, config, &mut rng);
        freezers.push(spawn_freezer(&world, &clock, &mut rng, config.lease.ttl));
        let client = Client {
            id: id as u32,
            world: world.clone(),
            history: history.clone(),
            clock,
            net,
            entropy: Entropy::seeded(rng.random()),
            epoch: epoch.clone(),
            started: started.clone(),
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            config: config.clone(),
        };
        handles.push(tokio::spawn(client.run()));
    }
    let freezes = finish(handles, freezers, "fenced-log", config.lease.ttl * 3).await?;
    let logs = stored_logs(&world).await?;
    let history = std::mem::take(&mut *lock(&history));
    Ok(Recorded {
        world,
        history,
        logs,
        entries: applied.load(Ordering::Relaxed),
        freezes,
    })
}
