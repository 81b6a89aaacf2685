//! The `group_commit` primitive: client processes, each with several
//! tasks sharing one `GroupResource` (a counter) and `GroupLog` handles,
//! through the faulty network, with tokens that a new "holder" raises now
//! and then, freezes, and callers that cancel or stop waiting. Each write
//! the store applies is traced back to the updates it carried; at the end
//! the logs are read straight from the store.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::lease::{
    Cancelled, Entropy, FencedLog, FencedResource, GroupCommitConfig, GroupLog, GroupResource,
    LeaseError, Ticket,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::fenced::{finish, outcome, spawn_freezer, stored_log_objects};
use crate::clock::{SimClock, random_duration};
use crate::config::SimConfig;
use crate::history::group_commit::{
    AppendRec, Application, Caller, History, Outcome, StoredRecord, UpdateRec,
};
use crate::lock;
use crate::network::World;

/// The counter every task increments.
const COUNTER_KEY: &str = "sim/gc-counter";
/// Logs live under this prefix, a new one every `RECORDS_PER_LOG` appends
/// started, so that no log grows long enough for listing it to dominate.
const LOG_PREFIX: &str = "sim/gc-log";
const RECORDS_PER_LOG: u64 = 1000;
/// Client processes, and tasks in each.
const CLIENTS: usize = 4;
const TASKS: usize = 12;
/// How many update ids the counter keeps: more than any batch carries, so
/// that each applied write names every update it applied.
const RECENT_IDS: usize = 256;
/// The share of operations submitted under the process's previous token.
const STALE_SHARE: f64 = 0.03;

/// The counter's value: how many increments, and the last ones' ids.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Counter {
    count: u64,
    ids: Vec<u64>,
}

/// A log record's value: which append wrote it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct LogOp {
    id: u64,
}

fn log_prefix(log: u64) -> String {
    format!("{LOG_PREFIX}/{log:06}")
}

/// The history, and the counter as last applied (to tell which updates a
/// newly applied write added).
#[derive(Debug, Default)]
struct Recorder {
    history: History,
    applied_count: u64,
    /// The highest token of the counter writes applied so far.
    fence: u64,
}

impl Recorder {
    /// A counter write the store applied: the updates it added (the ids
    /// beyond the previous count) are counted as applied, at their place.
    fn applied(&mut self, body: &Bytes) {
        let parsed = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                let token = v.get("token")?.as_u64()?;
                let counter: Counter = serde_json::from_value(v.get("value")?.clone()).ok()?;
                Some((token, counter))
            });
        let h = &mut self.history;
        let Some((token, counter)) = parsed else {
            h.unknown_writes
                .push(String::from_utf8_lossy(body).into_owned());
            return;
        };
        h.counter_tokens.push(token);
        let fence = self.fence;
        self.fence = self.fence.max(token);
        let added = counter.count.saturating_sub(self.applied_count);
        let known = usize::try_from(added).is_ok_and(|n| n <= counter.ids.len());
        if counter.count <= self.applied_count || !known {
            h.unknown_writes.push(format!(
                "a write took the counter from {} to {} carrying ids {:?}",
                self.applied_count, counter.count, counter.ids
            ));
        } else {
            let first = counter.ids.len() - added as usize;
            for (i, id) in counter.ids[first..].iter().enumerate() {
                let at = self.applied_count + i as u64 + 1;
                match h.updates.get_mut(*id as usize) {
                    Some(update) => update.applied.push(Application { at, token, fence }),
                    None => h.unknown_writes.push(format!("update id {id}")),
                }
            }
            h.counter_batches.push(added);
        }
        self.applied_count = counter.count;
    }
}

/// What one process's tasks share.
struct Process {
    id: usize,
    world: Arc<World>,
    recorder: Arc<Mutex<Recorder>>,
    clock: SimClock,
    net: Arc<dyn CasStore>,
    entropy: Entropy,
    counter: GroupResource<Counter>,
    config: GroupCommitConfig,
    /// The log handles in use, by log number.
    logs: Mutex<BTreeMap<u64, GroupLog<LogOp>>>,
    /// The token the process writes with.
    token: AtomicU64,
    /// The token it wrote with before its last new one (what a task that
    /// read the token earlier still holds).
    previous: AtomicU64,
    /// The highest token handed out so far (by any process).
    epoch: Arc<AtomicU64>,
    /// Appends started (by any process): picks the log.
    started: Arc<AtomicU64>,
    sim: SimConfig,
}

/// How a task's operation ends for its caller.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// Waits for the answer.
    Answer,
    /// Cancels the ticket at once.
    Cancel,
    /// Stops waiting after a while (the future is dropped).
    GiveUp(Duration),
}

impl Process {
    /// The handle of log `log` (made on first use; older ones dropped).
    fn log(&self, log: u64) -> Result<GroupLog<LogOp>, String> {
        let mut logs = lock(&self.logs);
        if let Some(handle) = logs.get(&log) {
            return Ok(handle.clone());
        }
        let lease = &self.world.leases[self.id];
        let writer = FencedLog::<LogOp>::new(self.net.clone(), log_prefix(log))
            .map_err(|e| e.to_string())?
            .with_clock(Arc::new(self.clock.clone()))
            .with_entropy(self.entropy.clone())
            .with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(lease.request_timeout)
                    .with_retry_period(lease.retry_period)
                    .with_max_attempts(8),
            );
        let handle = GroupLog::new(writer, self.config);
        logs.insert(log, handle.clone());
        logs.retain(|n, _| n + 2 > log);
        Ok(handle)
    }

    /// After a refusal by the fence: take the latest token.
    fn fenced_out(&self) {
        let latest = self.epoch.load(Ordering::Relaxed);
        let before = self.token.fetch_max(latest, Ordering::Relaxed);
        if before < latest {
            self.previous.fetch_max(before, Ordering::Relaxed);
        }
    }
}

struct Task {
    process: Arc<Process>,
    caller: Caller,
    rng: ChaCha8Rng,
}

impl Task {
    async fn run(mut self) -> Result<(), String> {
        let ttl = self.process.sim.lease.ttl;
        while !self.process.world.stop.is_cancelled() {
            self.next_turn(ttl).await;
            let wait = match self.rng.random_range(0..100) {
                0..4 => Wait::Cancel,
                4..8 => Wait::GiveUp(random_duration(&mut self.rng, ttl / 4)),
                _ => Wait::Answer,
            };
            if self.rng.random_bool(0.5) {
                self.update(wait).await?;
            } else {
                self.append(wait).await?;
            }
        }
        Ok(())
    }

    /// Waits before the next operation (mostly briefly, now and then
    /// quietly) and now and then makes the process a new holder.
    async fn next_turn(&mut self, ttl: Duration) {
        let quiet = self.rng.random_bool(0.1);
        let idle = random_duration(&mut self.rng, if quiet { ttl } else { ttl / 40 });
        self.process.clock.pause(idle).await;
        if self.rng.random_bool(0.01) {
            let p = &self.process;
            let token = p.epoch.fetch_add(1, Ordering::Relaxed) + 1;
            let before = p.token.fetch_max(token, Ordering::Relaxed);
            p.previous.fetch_max(before, Ordering::Relaxed);
            lock(&p.recorder).history.new_tokens += 1;
        }
    }

    /// The token to submit under: the process's, or now and then the one
    /// it held before (a task that read it earlier), which fencing must
    /// refuse once the newer one was written, and which must never land
    /// under the newer one.
    fn token(&mut self) -> (u64, bool) {
        let p = &self.process;
        let current = p.token.load(Ordering::Relaxed);
        let previous = p.previous.load(Ordering::Relaxed);
        if previous > 0 && previous < current && self.rng.random_bool(STALE_SHARE) {
            (previous, true)
        } else {
            (current, false)
        }
    }

    async fn update(&mut self, wait: Wait) -> Result<(), String> {
        let p = self.process.clone();
        let (token, stale) = self.token();
        let id = {
            let mut r = lock(&p.recorder);
            r.history.updates.push(UpdateRec {
                caller: self.caller,
                token,
                stale,
                outcome: Outcome::Pending,
                error: String::new(),
                reported: 0,
                applied: Vec::new(),
            });
            (r.history.updates.len() - 1) as u64
        };
        let increment = move |v: Option<&Counter>| {
            let mut next = v.cloned().unwrap_or_default();
            next.count += 1;
            next.ids.push(id);
            let excess = next.ids.len().saturating_sub(RECENT_IDS);
            next.ids.drain(..excess);
            next
        };
        let told = match p.counter.submit(token, increment).await {
            Ok(ticket) => self.wait_for(ticket, wait).await,
            Err(err) => Told::Answer(Err(err)),
        };
        let mut r = lock(&p.recorder);
        let (outcome, error) = told.classify(&mut r.history);
        let rec = &mut r.history.updates[id as usize];
        rec.outcome = outcome;
        rec.error = error;
        if let Told::Answer(Ok(applied)) = &told {
            rec.reported = applied.value.count;
        }
        drop(r);
        if outcome == Outcome::FencedOut {
            p.fenced_out();
        }
        Ok(())
    }

    async fn append(&mut self, wait: Wait) -> Result<(), String> {
        let p = self.process.clone();
        let (token, stale) = self.token();
        let log = p.started.fetch_add(1, Ordering::Relaxed) / RECORDS_PER_LOG;
        let handle = p.log(log)?;
        let id = {
            let mut r = lock(&p.recorder);
            r.history.appends.push(AppendRec {
                caller: self.caller,
                token,
                stale,
                log,
                outcome: Outcome::Pending,
                error: String::new(),
                place: (0, 0),
            });
            (r.history.appends.len() - 1) as u64
        };
        let told = match handle.submit(token, LogOp { id }).await {
            Ok(ticket) => self.wait_for(ticket, wait).await,
            Err(err) => Told::Answer(Err(err)),
        };
        let mut r = lock(&p.recorder);
        let (outcome, error) = told.classify(&mut r.history);
        let rec = &mut r.history.appends[id as usize];
        rec.outcome = outcome;
        rec.error = error;
        if let Told::Answer(Ok(entry)) = &told {
            rec.place = (entry.seq, entry.offset as u64);
        }
        drop(r);
        if outcome == Outcome::FencedOut {
            p.fenced_out();
        }
        Ok(())
    }

    /// Waits on `ticket` as `wait` says.
    async fn wait_for<D>(&self, ticket: Ticket<D>, wait: Wait) -> Told<D> {
        match wait {
            Wait::Answer => Told::Answer(ticket.wait().await),
            Wait::Cancel => match ticket.cancel() {
                Cancelled::Removed => Told::Removed,
                Cancelled::MayHaveApplied(_) => Told::Abandoned,
            },
            Wait::GiveUp(after) => {
                tokio::select! {
                    biased;
                    result = ticket.wait() => Told::Answer(result),
                    () = self.process.clock.pause(after) => Told::Abandoned,
                }
            }
        }
    }
}

/// What a caller learned of its operation.
enum Told<D> {
    Answer(Result<D, LeaseError>),
    /// Cancelled while queued: never written.
    Removed,
    /// Stopped waiting once it may have been written.
    Abandoned,
}

impl<D> Told<D> {
    /// The outcome to record (counting removals and abandons).
    fn classify(&self, h: &mut History) -> (Outcome, String) {
        match self {
            Told::Answer(result) => outcome(result),
            Told::Removed => {
                h.removed += 1;
                (Outcome::Failed, "removed from its queue".to_string())
            }
            Told::Abandoned => {
                h.abandoned += 1;
                (Outcome::Ambiguous, "abandoned".to_string())
            }
        }
    }
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
}

/// Runs the processes until they have sent `ops` requests, lets late
/// writes land, and returns the history with the stored counter and logs.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let recorder = Arc::new(Mutex::new(Recorder::default()));
    let on_apply = recorder.clone();
    let world = World::new(
        config,
        &mut rng,
        CLIENTS,
        ops,
        Arc::new(move |_at, key: &str, body: &Bytes| {
            if key == COUNTER_KEY {
                lock(&on_apply).applied(body);
            }
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
        let entropy = Entropy::seeded(rng.random());
        let lease = &world.leases[id];
        let counter = FencedResource::<Counter>::new(net.clone(), COUNTER_KEY)
            .map_err(|e| e.to_string())?
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(entropy.clone())
            .with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(lease.request_timeout)
                    .with_retry_period(lease.retry_period)
                    .with_max_attempts(8),
            );
        let group = draw_config(&mut rng);
        let process = Arc::new(Process {
            id,
            world: world.clone(),
            recorder: recorder.clone(),
            clock,
            net,
            entropy,
            counter: GroupResource::new(counter, group),
            config: group,
            logs: Mutex::new(BTreeMap::new()),
            token: AtomicU64::new(epoch.load(Ordering::Relaxed)),
            previous: AtomicU64::new(0),
            epoch: epoch.clone(),
            started: started.clone(),
            sim: config.clone(),
        });
        for task in 0..TASKS {
            let task = Task {
                process: process.clone(),
                caller: Caller { client: id, task },
                rng: ChaCha8Rng::seed_from_u64(rng.random()),
            };
            handles.push(tokio::spawn(task.run()));
        }
    }
    let freezes = finish(handles, freezers, "group-commit", config.lease.ttl * 3).await?;
    let records = stored_records(&world).await?;
    let final_value = stored_counter(&world).await?;
    let mut history = std::mem::take(&mut lock(&recorder).history);
    history.freezes = freezes;
    history.records = records;
    history.final_value = final_value;
    Ok(Recorded { world, history })
}

/// A process's limits: small queues and batches now and then, so that
/// back-pressure and full batches happen.
fn draw_config(rng: &mut ChaCha8Rng) -> GroupCommitConfig {
    let records = [2, 4, 16, 64][rng.random_range(0..4)];
    let queued = [4, 8, 64][rng.random_range(0..3)];
    GroupCommitConfig::default()
        .with_max_batch_records(records)
        .with_max_queued(queued)
}

/// The counter as the store holds it (0 if absent).
async fn stored_counter(world: &World) -> Result<u64, String> {
    let stored = world
        .truth()
        .get(COUNTER_KEY)
        .await
        .map_err(|e| format!("cannot read the counter: {e}"))?;
    let Some(object) = stored else {
        return Ok(0);
    };
    serde_json::from_slice::<serde_json::Value>(&object.body)
        .ok()
        .and_then(|v| v.get("value")?.get("count")?.as_u64())
        .ok_or_else(|| "the counter holds no count".to_string())
}

/// Every record of every log, read straight from the store (no faults, no
/// `FencedLog`), in (log, entry, offset) order.
async fn stored_records(world: &World) -> Result<Vec<StoredRecord>, String> {
    let mut records = Vec::new();
    for object in stored_log_objects(world, LOG_PREFIX).await? {
        // Schema 1 holds one record (`value`), schema 2 a batch (`values`).
        let values = match (object.body.get("value"), object.body.get("values")) {
            (Some(one), None) => vec![one.clone()],
            (None, Some(serde_json::Value::Array(many))) => many.clone(),
            _ => return Err(format!("{} holds no records", object.key)),
        };
        let (Some(seq), Some(token)) = (object.field("seq"), object.field("token")) else {
            return Err(format!("{} is not a log entry of this run", object.key));
        };
        for (offset, value) in values.into_iter().enumerate() {
            let op: LogOp = serde_json::from_value(value)
                .map_err(|e| format!("{} holds a foreign record: {e}", object.key))?;
            records.push(StoredRecord {
                log: object.log,
                key_seq: object.key_seq,
                seq,
                offset: offset as u64,
                token,
                id: op.id,
            });
        }
    }
    records.sort_by_key(|r| (r.log, r.key_seq, r.offset));
    Ok(records)
}
