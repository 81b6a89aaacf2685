//! The `semaphore` primitive: clients take one of three slots in turns
//! (`Semaphore::acquire`: a ticket when others wait, the head taking the
//! first slot that frees up), hold it through lease checks amid stalls and
//! freezes, and release, crash or drop; some freeze while queued. One more
//! client counts four slots and must be refused every time. Every slot's
//! writes and every guard's belief are recorded in true time, per slot.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{
    Entropy, Lease, LeaseError, LeaseGuard, LeaseRecord, Semaphore, WaitOptions,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::lease::{LetGo, record_guard};
use crate::clock::{SimClock, random_duration};
use crate::config::SimConfig;
use crate::history::lease::History as SlotHistory;
use crate::history::semaphore::History;
use crate::lock;
use crate::network::World;

/// The semaphore's name.
pub const NAME: &str = "sim/semaphore";
/// Its slots.
pub const SLOTS: usize = 3;
/// Clients that count `SLOTS` (one more counts `SLOTS + 1`).
const COUNTING_CLIENTS: usize = 7;

/// The slot of `key`, if it names one (any number: a slot past the count
/// is recorded too, so that a holder let in there is seen).
fn slot_of(key: &str) -> Option<usize> {
    key.strip_prefix(NAME)?
        .strip_prefix(".slots/")?
        .parse()
        .ok()
}

/// What the clients share while they run.
struct Shared {
    slots: Vec<Arc<Mutex<SlotHistory>>>,
    counts: Mutex<History>,
}

/// One client taking a slot, holding it, and letting go, until the run
/// stops.
struct Client {
    client: usize,
    world: Arc<World>,
    shared: Arc<Shared>,
    clock: SimClock,
    semaphore: Semaphore,
    rng: ChaCha8Rng,
    config: SimConfig,
    /// The client that counts one slot more: refused, or a violation.
    miscounts: bool,
}

impl Client {
    async fn run(mut self) {
        let ttl = self.config.lease.ttl;
        let stop = self.world.stop.clone();
        if self.miscounts {
            // After the others have recorded the count.
            self.clock.pause(ttl * 2).await;
        }
        while !stop.is_cancelled() {
            let idle = random_duration(&mut self.rng, ttl / 2);
            self.clock.pause(idle).await;
            let Some(guard) = self.take_slot().await else {
                continue;
            };
            let Some(slot) = slot_of(guard.key()) else {
                lock(&self.shared.counts)
                    .strays
                    .push(guard.key().to_string());
                guard.abandon();
                continue;
            };
            lock(&self.shared.counts).acquired[self.client] += 1;
            let history = self.shared.slots[slot].clone();
            let guard_id =
                record_guard(&history, &self.world, &self.clock, (self.client, 0), &guard);
            self.hold(&guard, &history, guard_id).await;
            LetGo {
                released: 75,
                abandoned: 10,
            }
            .end(&history, &mut self.rng, guard)
            .await;
        }
    }

    /// One blocking acquisition, within a deadline long enough for the
    /// others to take their turns first; the client may freeze while it
    /// waits, long enough for its ticket to expire.
    async fn take_slot(&mut self) -> Option<LeaseGuard> {
        let ttl = self.config.lease.ttl;
        let turns = u32::try_from(self.world.rates.len()).unwrap_or(u32::MAX);
        let options = WaitOptions::default()
            .with_deadline(ttl.saturating_mul(2).saturating_mul(turns.max(2)))
            .with_cancel(self.world.stop.clone());
        if self.rng.random_bool((self.config.freeze * 4.0).min(1.0)) {
            let (clock, rng) = (self.clock.clone(), &mut self.rng);
            let at = random_duration(rng, ttl);
            let d = random_duration(rng, self.config.max_pause.max(ttl * 2));
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                clock.freeze_for(d).await;
            });
        }
        match self.semaphore.acquire(options).await {
            Ok(guard) => Some(guard),
            Err(LeaseError::InvalidConfig(_)) if self.miscounts => {
                lock(&self.shared.counts).refused += 1;
                self.clock.pause(ttl).await;
                None
            }
            Err(_) => {
                lock(&self.shared.counts).gave_up += 1;
                None
            }
        }
    }

    /// Work under lease checks with a safety margin, amid stalls (the task
    /// stops, its clock runs) and freezes (the whole client stops).
    async fn hold(&mut self, guard: &LeaseGuard, history: &Mutex<SlotHistory>, guard_id: usize) {
        let ttl = self.config.lease.ttl;
        let steps = self.rng.random_range(1..=4);
        for _ in 0..steps {
            let work = random_duration(&mut self.rng, ttl / 4);
            self.clock.pause(work).await;
            if self.rng.random_bool(self.config.stall) {
                lock(history).stalls += 1;
                let d = random_duration(&mut self.rng, self.config.max_pause);
                tokio::time::sleep(d).await;
            }
            if self.rng.random_bool(self.config.freeze) {
                lock(history).freezes += 1;
                let d = random_duration(&mut self.rng, self.config.max_pause);
                self.clock.freeze_for(d).await;
            }
            if guard.ensure_held_for(ttl / 10).is_err() {
                break;
            }
            lock(history)
                .held_checks
                .push((guard_id, self.world.time.now()));
            if self.world.stop.is_cancelled() {
                break;
            }
        }
    }
}

/// Records a slot write the store applied at `at`.
fn record_applied(shared: &Shared, at: Duration, key: &str, body: &Bytes) {
    let Some(slot) = slot_of(key).and_then(|s| shared.slots.get(s)) else {
        return;
    };
    if let Ok(r) = LeaseRecord::decode(key, body) {
        lock(slot)
            .lock_writes
            .push((at, r.owner, r.token, r.released));
    }
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
}

/// Runs the clients of the `semaphore` primitive until they have sent
/// `ops` requests, and returns what they recorded.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let clients = COUNTING_CLIENTS + 1;
    let shared = Arc::new(Shared {
        // One history more than the count: the slot only a miscounting
        // client could take.
        slots: (0..=SLOTS).map(|_| Arc::default()).collect(),
        counts: Mutex::new(History {
            capacity: SLOTS,
            acquired: vec![0; clients],
            ..History::default()
        }),
    });
    let recording = shared.clone();
    let world = World::new(
        config,
        &mut rng,
        clients,
        ops,
        Arc::new(move |at, key: &str, body: &Bytes| record_applied(&recording, at, key, body)),
        None,
    );
    let mut handles = Vec::new();
    for client in 0..world.rates.len() {
        let (clock, net) = world.client(client, config, &mut rng);
        let lease = Lease::new(
            net,
            NAME,
            format!("client-{client}"),
            world.leases[client].clone(),
        )
        .map_err(|e| format!("invalid lease configuration: {e}"))?
        .with_clock(Arc::new(clock.clone()))
        .with_entropy(Entropy::seeded(rng.random()));
        let miscounts = client == clients - 1;
        let slots = if miscounts { SLOTS + 1 } else { SLOTS };
        let semaphore = Semaphore::new(lease, u32::try_from(slots).unwrap_or(u32::MAX))
            .map_err(|e| format!("semaphore refused: {e}"))?
            .with_entropy(Entropy::seeded(rng.random()));
        let client = Client {
            client,
            world: world.clone(),
            shared: shared.clone(),
            clock,
            semaphore,
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            config: config.clone(),
            miscounts,
        };
        handles.push(tokio::spawn(client.run()));
    }
    for handle in handles {
        handle
            .await
            .map_err(|e| format!("a client task failed: {e}"))?;
    }
    // Let abandoned slots and tickets expire, late writes land and every
    // belief watcher finish.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let mut history = std::mem::take(&mut *lock(&shared.counts));
    history.slots = shared
        .slots
        .iter()
        .map(|s| std::mem::take(&mut *lock(s)))
        .collect();
    Ok(Recorded { world, history })
}
