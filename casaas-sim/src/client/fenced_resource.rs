//! The `fenced_resource` primitive: clients increment one
//! `FencedResource<u64>` (a non-idempotent update) with tokens that a new
//! "holder" raises now and then, through the faulty network, while freezes
//! stop clients mid-update. Each write the store applies is traced back to
//! the update that sent it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::lease::{Entropy, FencedResource, LeaseError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::checker::fenced_resource as check;
use crate::clock::{SimClock, random_duration};
use crate::config::{Findings, Primitive, PrimitiveReport, SimConfig};
use crate::network::World;
use crate::{fnv, lock};

/// The counter every client increments.
const COUNTER_KEY: &str = "sim/counter";
/// Clients.
const CLIENTS: usize = 4;

/// What an update was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Running.
    Pending,
    /// `Ok`: applied.
    Ok,
    /// A store error that may have taken effect.
    Ambiguous,
    /// Refused: a higher token is recorded.
    FencedOut,
    /// Any other error: not applied.
    Failed,
}

/// Classifies an update's or append's result.
pub fn outcome<T>(result: &Result<T, LeaseError>) -> (Outcome, String) {
    match result {
        Ok(_) => (Outcome::Ok, String::new()),
        Err(LeaseError::FencedOut { .. }) => (Outcome::FencedOut, String::new()),
        Err(LeaseError::Store(e)) if e.may_have_taken_effect() => {
            (Outcome::Ambiguous, e.to_string())
        }
        Err(e) => (Outcome::Failed, e.to_string()),
    }
}

/// One `update` call.
#[derive(Debug, Clone)]
pub struct UpdateRec {
    pub client: usize,
    pub op: u64,
    pub token: u64,
    pub outcome: Outcome,
    /// The error, for messages.
    pub error: String,
    /// How many of its writes the store applied.
    pub applied: u32,
}

/// Everything the fenced-resource checkers look at.
#[derive(Debug, Default)]
pub struct History {
    pub updates: Vec<UpdateRec>,
    /// Writes the store applied, and their tokens in order.
    pub applied_writes: u64,
    pub applied_tokens: Vec<u64>,
    /// Nonces of applied writes that no update sent.
    pub unknown_writes: Vec<String>,
    /// Which update sent each nonce.
    sent: HashMap<String, usize>,
    /// Each client's update in progress.
    current: Vec<Option<usize>>,
    pub freezes: u64,
    pub new_tokens: u64,
}

impl History {
    /// Updates told `outcome`.
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.updates.iter().filter(|u| u.outcome == outcome).count() as u64
    }
}

/// The nonce and token of a fenced record (or log entry) body.
pub fn nonce_and_token(body: &Bytes) -> Option<(String, u64)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some((
        v.get("nonce")?.as_str()?.to_string(),
        v.get("token")?.as_u64()?,
    ))
}

/// Freezes the client now and then, wherever it is (mid-update included),
/// until the run stops.
pub async fn freezer(
    world: Arc<World>,
    clock: SimClock,
    mut rng: ChaCha8Rng,
    ttl: Duration,
) -> u64 {
    let mut freezes = 0;
    loop {
        let gap = random_duration(&mut rng, ttl * 4);
        tokio::select! {
            biased;
            () = world.stop.cancelled() => return freezes,
            () = tokio::time::sleep(gap) => {}
        }
        let d = random_duration(&mut rng, ttl / 2);
        clock.freeze.until(world.time.now() + d);
        freezes += 1;
    }
}

struct Client {
    id: usize,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    clock: SimClock,
    counter: FencedResource<u64>,
    /// The highest token handed out so far (by any client).
    epoch: Arc<AtomicU64>,
    rng: ChaCha8Rng,
    config: SimConfig,
}

impl Client {
    async fn run(mut self) {
        let ttl = self.config.lease.ttl;
        let mut token = self.epoch.load(Ordering::Relaxed);
        let mut op = 0u64;
        while !self.world.stop.is_cancelled() {
            // Mostly busy; now and then quiet, so that a write whose sender
            // gave up can still find its expected version and land.
            let quiet = self.rng.random_bool(0.2);
            let idle = random_duration(&mut self.rng, if quiet { ttl } else { ttl / 20 });
            self.clock.pause(idle).await;
            if self.rng.random_bool(0.05) {
                // A new holder: the previous token's writers are fenced out.
                token = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
                lock(&self.history).new_tokens += 1;
            }
            op += 1;
            {
                let mut h = lock(&self.history);
                h.updates.push(UpdateRec {
                    client: self.id,
                    op,
                    token,
                    outcome: Outcome::Pending,
                    error: String::new(),
                    applied: 0,
                });
                let index = h.updates.len() - 1;
                h.current[self.id] = Some(index);
            }
            let result = self
                .counter
                .update(token, |v| v.copied().unwrap_or(0) + 1)
                .await;
            let (told, error) = outcome(&result);
            let mut h = lock(&self.history);
            if let Some(index) = h.current[self.id].take() {
                h.updates[index].outcome = told;
                h.updates[index].error = error;
            }
            drop(h);
            if told == Outcome::FencedOut {
                token = self.epoch.load(Ordering::Relaxed);
            }
        }
    }
}

/// Runs the incrementing clients until they have sent `ops` requests, lets
/// late writes land, and checks the history against the stored counter.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<PrimitiveReport, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History {
        current: vec![None; CLIENTS.max(2)],
        ..History::default()
    }));
    let (on_apply, on_send) = (history.clone(), history.clone());
    let world = World::new(
        config,
        &mut rng,
        CLIENTS,
        ops,
        Arc::new(move |_at, key: &str, body: &Bytes| {
            if key != COUNTER_KEY {
                return;
            }
            let mut h = lock(&on_apply);
            let Some((nonce, token)) = nonce_and_token(body) else {
                h.unknown_writes
                    .push(String::from_utf8_lossy(body).into_owned());
                return;
            };
            h.applied_writes += 1;
            h.applied_tokens.push(token);
            match h.sent.get(&nonce).copied() {
                Some(index) => h.updates[index].applied += 1,
                None => h.unknown_writes.push(nonce),
            }
        }),
        Some(Arc::new(move |client, key: &str, body: &Bytes| {
            if key != COUNTER_KEY {
                return;
            }
            let mut h = lock(&on_send);
            if let (Some((nonce, _)), Some(index)) = (nonce_and_token(body), h.current[client]) {
                h.sent.insert(nonce, index);
            }
        })),
    );
    let epoch = Arc::new(AtomicU64::new(1));
    let mut handles = Vec::new();
    let mut freezers = Vec::new();
    for id in 0..world.rates.len() {
        let (clock, net) = world.client(id, config, &mut rng);
        let counter = FencedResource::<u64>::new(net, COUNTER_KEY)
            .map_err(|e| e.to_string())?
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(Entropy::seeded(rng.random()))
            .with_retries(
                world.leases[id].request_timeout,
                world.leases[id].retry_period,
                8,
            );
        freezers.push(tokio::spawn(freezer(
            world.clone(),
            clock.clone(),
            ChaCha8Rng::seed_from_u64(rng.random()),
            config.lease.ttl,
        )));
        let client = Client {
            id,
            world: world.clone(),
            history: history.clone(),
            clock,
            counter,
            epoch: epoch.clone(),
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            config: config.clone(),
        };
        handles.push(tokio::spawn(client.run()));
    }
    for handle in handles {
        handle
            .await
            .map_err(|e| format!("a fenced-resource client failed: {e}"))?;
    }
    let mut freezes = 0;
    for f in freezers {
        freezes += f.await.unwrap_or(0);
    }
    // Let every write still in flight land.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let stored = world
        .truth()
        .get(COUNTER_KEY)
        .await
        .map_err(|e| format!("cannot read the counter: {e}"))?;
    let final_value = stored
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.body).ok())
        .and_then(|v| v.get("value").and_then(serde_json::Value::as_u64))
        .unwrap_or(0);
    let mut h = lock(&history);
    h.freezes = freezes;
    let context = format!("seed {} fenced_resource", config.seed);
    let mut findings = Findings::default();
    findings.add(
        "ok_applied_exactly_once",
        check::ok_applied_exactly_once(&h, &context),
    );
    findings.add(
        "never_applied_twice",
        check::never_applied_twice(&h, &context),
    );
    findings.add(
        "failed_never_applied",
        check::failed_never_applied(&h, &context),
    );
    findings.add(
        "final_value_counts_updates",
        check::final_value_counts_updates(&h, final_value, &context),
    );
    findings.add(
        "writes_known_and_fenced",
        check::writes_known_and_fenced(&h, &context),
    );

    let ops = world.ops();
    let faults = world.faults();
    let mut text = String::new();
    for u in &h.updates {
        let _ = writeln!(
            text,
            "{} {} {} {:?} {}",
            u.client, u.op, u.token, u.outcome, u.applied
        );
    }
    let _ = writeln!(text, "{:?} final {final_value}", h.applied_tokens);
    let _ = writeln!(text, "ops {ops} faults {faults:?}");
    let digest = fnv(&text);
    let summary = format!(
        "world_seed={seed} clients={} updates={} ok={} ambiguous={} fenced_out={} failed={} applied={} final_value={final_value} \
         new_tokens={} freezes={} {} faults: {faults:?} digest={digest:016x}",
        world.rates.len(),
        h.updates.len(),
        h.count(Outcome::Ok),
        h.count(Outcome::Ambiguous),
        h.count(Outcome::FencedOut),
        h.count(Outcome::Failed),
        h.applied_writes,
        h.new_tokens,
        h.freezes,
        world.late_summary(),
    );
    Ok(PrimitiveReport {
        primitive: Primitive::FencedResource,
        ops,
        violations: findings.violations,
        by_property: findings.by_property,
        digest,
        summary,
    })
}
