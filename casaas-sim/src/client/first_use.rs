//! The `first_use` primitive: in rounds a few seconds apart, every client
//! races for a lock nobody used yet, within a few milliseconds of the
//! others, alternately in the record layout and in the create-only layout
//! (on a create-only store); half `try_acquire` once, half wait with
//! `acquire`. Winners hold briefly (often not at all, so that a loser's
//! read finds the winner's holding already over) and release, drop or
//! crash. Every guard's belief is recorded per lock in true time, and what
//! every call was told.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::layout::EpochStore;
use casaas_core::lease::{
    AcquireOutcome, Entropy, Lease, LeaseError, LeaseGuard, LeaseRecord, WaitOptions,
};
use casaas_core::testkit::CreateOnlyStore;
use casaas_core::{CasStore, ErrorKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::client::lease::watch_beliefs;
use crate::clock::{SimClock, random_duration};
use crate::config::SimConfig;
use crate::history::first_use::{Call, History, Layout, Round, Told};
use crate::history::lease::{GuardRec, History as LockHistory};
use crate::lock;
use crate::network::World;

/// Clients racing each round.
pub const CLIENTS: usize = 4;
/// Every round's lock lives under this prefix.
const PREFIX: &str = "sim/fresh/";
/// A losing create within this long of the winner answers S3's 409 (the
/// race unsettled), as S3 does for conditional writes in flight together.
const RACE_WINDOW: Duration = Duration::from_millis(2);

/// The lock of round `round`.
fn lock_key(round: usize) -> String {
    format!("{PREFIX}{round:06}")
}

/// The round a key belongs to (the lock object, or in the epoch layout one
/// of its epochs or markers).
fn round_of(key: &str) -> Option<usize> {
    key.strip_prefix(PREFIX)?.get(..6)?.parse().ok()
}

/// The layout of round `round`: both, in turn.
fn layout(round: usize) -> Layout {
    if round.is_multiple_of(2) {
        Layout::Record
    } else {
        Layout::Epochs
    }
}

/// Each round's lock history, shared with the belief watchers of its
/// guards; made on first use.
#[derive(Clone, Default)]
struct Locks(Arc<Mutex<Vec<Arc<Mutex<LockHistory>>>>>);

impl Locks {
    fn round(&self, round: usize) -> Arc<Mutex<LockHistory>> {
        let mut rounds = lock(&self.0);
        if rounds.len() <= round {
            rounds.resize_with(round + 1, Arc::default);
        }
        rounds[round].clone()
    }

    /// Records a lock write the store applied: the record itself, or the
    /// first write of an epoch (a second write of one epoch is a late
    /// create into collected history, which no reader takes for the lock).
    fn applied(&self, at: Duration, key: &str, body: &Bytes) {
        let Some(round) = round_of(key) else {
            return;
        };
        let object = lock_key(round);
        let history = self.round(round);
        let mut h = lock(&history);
        if key != object {
            let Some(epoch) = EpochStore::epoch_of(&object, key) else {
                return; // a marker
            };
            if !h.epochs_seen.insert(("fresh", epoch)) {
                h.late_epoch_writes += 1;
                return;
            }
        }
        if let Ok(r) = LeaseRecord::decode(&object, body) {
            h.lock_writes.push((at, r.owner, r.token, r.released));
        }
    }
}

struct Client {
    id: usize,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    locks: Locks,
    clock: SimClock,
    /// The store as seen in each layout: directly, and through this
    /// process's view of the epoch layout on a create-only store.
    record: Arc<dyn CasStore>,
    epochs: Arc<dyn CasStore>,
    entropy: Entropy,
    round_every: Duration,
    rng: ChaCha8Rng,
}

impl Client {
    async fn run(mut self) -> Result<(), String> {
        loop {
            // The next round starts at the next multiple of `round_every`
            // in true time, for every client alike.
            let now = self.world.time.now();
            let round = (now.as_nanos() / self.round_every.as_nanos()) as usize + 1;
            let start = self.round_every * u32::try_from(round).unwrap_or(u32::MAX);
            let jitter = Duration::from_micros(self.rng.random_range(0..4_000));
            tokio::time::sleep_until(self.world.time.at(start + jitter)).await;
            if self.world.stop.is_cancelled() {
                return Ok(());
            }
            self.race(round).await?;
        }
    }

    /// One race for round `round`'s fresh lock, and the holding if won.
    async fn race(&mut self, round: usize) -> Result<(), String> {
        let store = match layout(round) {
            Layout::Record => self.record.clone(),
            Layout::Epochs => self.epochs.clone(),
        };
        let config = self.world.leases[self.id].clone();
        let ttl = config.ttl;
        // A new `Lease` every round: no memory of the key, as for a
        // process that uses the lock for the first time.
        let lease = Lease::new(
            store,
            lock_key(round),
            format!("client-{}", self.id),
            config,
        )
        .map_err(|e| format!("invalid lease configuration: {e}"))?
        .with_clock(Arc::new(self.clock.clone()))
        .with_entropy(self.entropy.clone());
        let blocking = self.rng.random_bool(0.5);
        let result = if blocking {
            let options = WaitOptions::default()
                .with_deadline(ttl * 2)
                .with_cancel(self.world.stop.clone());
            lease.acquire(options).await.map(Ok)
        } else {
            lease.try_acquire().await.map(AcquireOutcome::into_result)
        };
        let (told, error, guard) = match result {
            Ok(Ok(guard)) => (Told::Acquired, String::new(), Some(guard)),
            Ok(Err(_held)) => (Told::Held, String::new(), None),
            Err(err) => (classify(&err, blocking), err.to_string(), None),
        };
        {
            let mut h = lock(&self.history);
            h.calls.push(Call {
                client: self.id,
                round,
                layout: layout(round),
                blocking,
                told,
                error,
            });
        }
        if let Some(guard) = guard {
            self.hold(round, guard, ttl).await;
        }
        Ok(())
    }

    /// Records the guard, holds it briefly (often not at all) and lets go.
    async fn hold(&mut self, round: usize, guard: LeaseGuard, ttl: Duration) {
        let history = self.locks.round(round);
        let guard_id = {
            let mut h = lock(&history);
            h.guards.push(GuardRec {
                client: self.id,
                task: 0,
                token: guard.token(),
                acquired_at: self.world.time.now(),
                beliefs: Vec::new(),
            });
            h.guards.len() - 1
        };
        tokio::spawn(watch_beliefs(
            history,
            guard_id,
            self.clock.clone(),
            guard.subscribe(),
        ));
        if self.rng.random_bool(0.6) {
            let held = random_duration(&mut self.rng, ttl / 10);
            self.clock.pause(held).await;
        }
        let roll = self.rng.random_range(0..100);
        if roll < 80 {
            lock(&self.history).releases += 1;
            let _ = guard.release().await;
        } else if roll < 90 {
            lock(&self.history).drops += 1;
            drop(guard);
        } else {
            lock(&self.history).abandons += 1;
            guard.abandon();
        }
    }
}

/// What a failed call was told, as the checker sees it: losing the race
/// (precondition failed, not found), running out of time, giving up after
/// races lost to holdings that ended, or another failure. A waiting
/// `acquire` told S3's "another conditional write is in flight" also lost a
/// race it should have waited out.
fn classify(err: &LeaseError, blocking: bool) -> Told {
    match err {
        LeaseError::Store(e)
            if matches!(
                e.kind(),
                ErrorKind::PreconditionFailed | ErrorKind::NotFound
            ) || (blocking && e.kind() == ErrorKind::ConcurrentRequest) =>
        {
            Told::LostRace
        }
        LeaseError::DeadlineExceeded(_) | LeaseError::Cancelled => Told::TimedOut,
        LeaseError::Contended { .. } => Told::Contended,
        _ => Told::Failed,
    }
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
}

/// Runs the races until the clients have sent `ops` requests, lets late
/// writes land, and returns the history.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History::default()));
    let locks = Locks::default();
    let recorded = locks.clone();
    let world = World::new(
        config,
        &mut rng,
        CLIENTS,
        ops,
        Arc::new(move |at, key: &str, body: &Bytes| recorded.applied(at, key, body)),
        None,
    );
    world.answer_racing_creates_with_conflicts(RACE_WINDOW);
    let mut handles = Vec::new();
    for id in 0..world.rates.len() {
        let (clock, net) = world.client(id, config, &mut rng);
        let epochs: Arc<dyn CasStore> = Arc::new(EpochStore::with_collection(
            Arc::new(CreateOnlyStore(net.clone())),
            1,
            1,
        ));
        let client = Client {
            id,
            world: world.clone(),
            history: history.clone(),
            locks: locks.clone(),
            clock,
            record: net,
            epochs,
            entropy: Entropy::seeded(rng.random()),
            round_every: config.lease.ttl / 2,
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
        };
        handles.push(tokio::spawn(client.run()));
    }
    for handle in handles {
        handle
            .await
            .map_err(|e| format!("a first-use client failed: {e}"))??;
    }
    // Let crashed holders expire, late writes land and belief watchers end.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let mut history = std::mem::take(&mut *lock(&history));
    let rounds = std::mem::take(&mut *lock(&locks.0));
    history.rounds = rounds
        .into_iter()
        .enumerate()
        .map(|(round, lock_history)| Round {
            layout: Some(layout(round)),
            lock: std::mem::take(&mut *lock(&lock_history)),
        })
        .collect();
    Ok(Recorded { world, history })
}
