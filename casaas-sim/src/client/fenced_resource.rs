//! The `fenced_resource` primitive: clients increment one
//! `FencedResource<u64>` (a non-idempotent update) with tokens that a new
//! "holder" raises now and then, through the faulty network, while freezes
//! stop clients mid-update. Each write the store applies is traced back to
//! the update that sent it.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::lease::{Entropy, FencedResource};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fenced::{Holder, finish, outcome, spawn_freezer};
use crate::clock::SimClock;
use crate::config::SimConfig;
use crate::history::fenced_resource::{History, Outcome, UpdateRec};
use crate::lock;
use crate::network::World;

/// The counter every client increments.
const COUNTER_KEY: &str = "sim/counter";
/// Clients.
const CLIENTS: usize = 4;

/// The history, and what it takes to trace each write the store applied
/// back to the update that sent it.
#[derive(Debug, Default)]
struct Recorder {
    history: History,
    /// Which update sent each nonce.
    sent: HashMap<String, usize>,
    /// Each client's update in progress.
    current: Vec<Option<usize>>,
}

impl Recorder {
    /// A write the client sent: its nonce belongs to the client's update
    /// in progress.
    fn sent(&mut self, client: usize, body: &Bytes) {
        if let (Some((nonce, _)), Some(index)) = (nonce_and_token(body), self.current[client]) {
            self.sent.insert(nonce, index);
        }
    }

    /// A write the store applied: counted, and traced back to its update.
    fn applied(&mut self, body: &Bytes) {
        let h = &mut self.history;
        let Some((nonce, token)) = nonce_and_token(body) else {
            h.unknown_writes
                .push(String::from_utf8_lossy(body).into_owned());
            return;
        };
        h.applied_writes += 1;
        h.applied_tokens.push(token);
        match self.sent.get(&nonce).copied() {
            Some(index) => h.updates[index].applied += 1,
            None => h.unknown_writes.push(nonce),
        }
    }

    /// The client starts an update: recorded as pending, and in progress.
    fn start(&mut self, client: usize, op: u64, token: u64) {
        let h = &mut self.history;
        h.updates.push(UpdateRec {
            client,
            op,
            token,
            outcome: Outcome::Pending,
            error: String::new(),
            applied: 0,
        });
        let index = h.updates.len() - 1;
        self.current[client] = Some(index);
    }

    /// The client's update in progress was told `outcome`.
    fn told(&mut self, client: usize, outcome: Outcome, error: String) {
        if let Some(index) = self.current[client].take() {
            self.history.updates[index].outcome = outcome;
            self.history.updates[index].error = error;
        }
    }
}

/// The nonce and token of a fenced record body.
fn nonce_and_token(body: &Bytes) -> Option<(String, u64)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some((
        v.get("nonce")?.as_str()?.to_string(),
        v.get("token")?.as_u64()?,
    ))
}

struct Client {
    id: usize,
    world: Arc<World>,
    recorder: Arc<Mutex<Recorder>>,
    clock: SimClock,
    counter: FencedResource<u64>,
    /// The highest token handed out so far (by any client).
    epoch: Arc<AtomicU64>,
    rng: ChaCha8Rng,
    config: SimConfig,
}

impl Client {
    async fn run(mut self) -> Result<(), String> {
        let ttl = self.config.lease.ttl;
        let mut holder = Holder::join(self.epoch.clone());
        let mut op = 0u64;
        while !self.world.stop.is_cancelled() {
            if holder.next_turn(&self.clock, &mut self.rng, ttl).await {
                lock(&self.recorder).history.new_tokens += 1;
            }
            op += 1;
            lock(&self.recorder).start(self.id, op, holder.token());
            let result = self
                .counter
                .update(holder.token(), |v| v.copied().unwrap_or(0) + 1)
                .await;
            let (told, error) = outcome(&result);
            lock(&self.recorder).told(self.id, told, error);
            holder.told(told);
        }
        Ok(())
    }
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
    /// The counter as the store holds it at the end.
    pub final_value: u64,
}

/// Runs the incrementing clients until they have sent `ops` requests, lets
/// late writes land, and returns the history and the stored counter.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let recorder = Arc::new(Mutex::new(Recorder {
        current: vec![None; CLIENTS.max(2)],
        ..Recorder::default()
    }));
    let world = recorded_world(config, &mut rng, ops, &recorder);
    let epoch = Arc::new(AtomicU64::new(1));
    let mut handles = Vec::new();
    let mut freezers = Vec::new();
    for id in 0..world.rates.len() {
        let (clock, net) = world.client(id, config, &mut rng);
        let counter = FencedResource::<u64>::new(net, COUNTER_KEY)
            .map_err(|e| e.to_string())?
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(Entropy::seeded(rng.random()))
            .with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(world.leases[id].request_timeout)
                    .with_retry_period(world.leases[id].retry_period)
                    .with_max_attempts(8),
            );
        freezers.push(spawn_freezer(&world, &clock, &mut rng, config.lease.ttl));
        let client = Client {
            id,
            world: world.clone(),
            recorder: recorder.clone(),
            clock,
            counter,
            epoch: epoch.clone(),
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            config: config.clone(),
        };
        handles.push(tokio::spawn(client.run()));
    }
    let freezes = finish(handles, freezers, "fenced-resource", config.lease.ttl * 3).await?;
    let final_value = stored_counter(&world).await?;
    let mut history = std::mem::take(&mut lock(&recorder).history);
    history.freezes = freezes;
    Ok(Recorded {
        world,
        history,
        final_value,
    })
}

/// The world of the run, recording every counter write its clients send
/// and its store applies.
fn recorded_world(
    config: &SimConfig,
    rng: &mut ChaCha8Rng,
    ops: u64,
    recorder: &Arc<Mutex<Recorder>>,
) -> Arc<World> {
    let (on_apply, on_send) = (recorder.clone(), recorder.clone());
    World::new(
        config,
        rng,
        CLIENTS,
        ops,
        Arc::new(move |_at, key: &str, body: &Bytes| {
            if key == COUNTER_KEY {
                lock(&on_apply).applied(body);
            }
        }),
        Some(Arc::new(move |client, key: &str, body: &Bytes| {
            if key == COUNTER_KEY {
                lock(&on_send).sent(client, body);
            }
        })),
    )
}

/// The counter as the store holds it (0 if absent or unreadable).
async fn stored_counter(world: &World) -> Result<u64, String> {
    let stored = world
        .truth()
        .get(COUNTER_KEY)
        .await
        .map_err(|e| format!("cannot read the counter: {e}"))?;
    Ok(stored
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.body).ok())
        .and_then(|v| v.get("value").and_then(serde_json::Value::as_u64))
        .unwrap_or(0))
}
