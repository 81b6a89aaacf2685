//! What the `fenced_resource`, `fenced_log` and `group_commit` clients
//! share: how a result is classified, the pace of their operations and the
//! token they write with, the freezer that stops them mid-operation, the
//! end of the run, and the logs as the store holds them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use casaas_core::CasStore;
use casaas_core::lease::LeaseError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::task::JoinHandle;

use crate::clock::{SimClock, random_duration};
use crate::history::Outcome;
use crate::network::World;

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

/// The token a client writes with: the highest handed out when it joined,
/// a new one when it becomes the holder, and the latest after it was
/// fenced out.
pub struct Holder {
    /// The highest token handed out so far (by any client).
    epoch: Arc<AtomicU64>,
    token: u64,
}

impl Holder {
    /// Starts with the highest token handed out so far.
    pub fn join(epoch: Arc<AtomicU64>) -> Self {
        let token = epoch.load(Ordering::Relaxed);
        Holder { epoch, token }
    }

    pub fn token(&self) -> u64 {
        self.token
    }

    /// Waits before the next operation — mostly briefly; now and then
    /// quietly, so that a write whose sender gave up can still find its
    /// expected version and land — and now and then becomes a new holder,
    /// fencing out the previous token's writers. Returns whether it did.
    pub async fn next_turn(
        &mut self,
        clock: &SimClock,
        rng: &mut ChaCha8Rng,
        ttl: Duration,
    ) -> bool {
        let quiet = rng.random_bool(0.2);
        let idle = random_duration(rng, if quiet { ttl } else { ttl / 20 });
        clock.pause(idle).await;
        if rng.random_bool(0.05) {
            self.token = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
            return true;
        }
        false
    }

    /// After an operation: fenced out, it takes the latest token.
    pub fn told(&mut self, outcome: Outcome) {
        if outcome == Outcome::FencedOut {
            self.token = self.epoch.load(Ordering::Relaxed);
        }
    }
}

/// Freezes the client now and then, wherever it is (mid-operation
/// included), until the run stops; returns how many times.
async fn freezer(world: Arc<World>, clock: SimClock, mut rng: ChaCha8Rng, ttl: Duration) -> u64 {
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

/// Spawns the freezer of the client with `clock`, seeded from `rng`.
pub fn spawn_freezer(
    world: &Arc<World>,
    clock: &SimClock,
    rng: &mut ChaCha8Rng,
    ttl: Duration,
) -> JoinHandle<u64> {
    tokio::spawn(freezer(
        world.clone(),
        clock.clone(),
        ChaCha8Rng::seed_from_u64(rng.random()),
        ttl,
    ))
}

/// Waits for the clients (`what` names them in the error) and their
/// freezers to end, then `settle` longer so that every write still in
/// flight lands; returns the freezes.
pub async fn finish(
    clients: Vec<JoinHandle<Result<(), String>>>,
    freezers: Vec<JoinHandle<u64>>,
    what: &str,
    settle: Duration,
) -> Result<u64, String> {
    for handle in clients {
        handle
            .await
            .map_err(|e| format!("a {what} client failed: {e}"))??;
    }
    let mut freezes = 0;
    for f in freezers {
        freezes += f.await.unwrap_or(0);
    }
    tokio::time::sleep(settle).await;
    Ok(freezes)
}

/// One entry object of a fenced log, read straight from the store.
pub struct StoredLogObject {
    /// The log's number (the first key segment after the prefix).
    pub log: u64,
    /// The sequence number in the entry's key.
    pub key_seq: u64,
    /// The object's key, for messages.
    pub key: String,
    /// The object's body.
    pub body: serde_json::Value,
}

impl StoredLogObject {
    /// The body's unsigned field `name`.
    pub fn field(&self, name: &str) -> Option<u64> {
        self.body.get(name).and_then(serde_json::Value::as_u64)
    }
}

/// Every entry object of the logs under `prefix/` (`prefix/LOG/SEQ`), read
/// from the store without faults; each log's head hint is left out.
pub async fn stored_log_objects(
    world: &World,
    prefix: &str,
) -> Result<Vec<StoredLogObject>, String> {
    let truth = world.truth();
    let listed = truth
        .list(&format!("{prefix}/"))
        .await
        .map_err(|e| format!("cannot list the logs: {e}"))?;
    let mut objects = Vec::with_capacity(listed.len());
    for entry in listed {
        let mut parts = entry.key[prefix.len() + 1..].split('/');
        let (Some(log), Some(seq)) = (parts.next(), parts.next()) else {
            return Err(format!("unexpected key {}", entry.key));
        };
        // The log's head hint: an advisory pointer, not an entry.
        if seq == "_head" {
            continue;
        }
        let (Ok(log), Ok(key_seq)) = (log.parse::<u64>(), seq.parse::<u64>()) else {
            return Err(format!("unexpected key {}", entry.key));
        };
        let object = truth
            .get(&entry.key)
            .await
            .map_err(|e| format!("cannot read {}: {e}", entry.key))?
            .ok_or_else(|| format!("{} vanished", entry.key))?;
        let body = serde_json::from_slice(&object.body)
            .map_err(|e| format!("{} is not JSON: {e}", entry.key))?;
        objects.push(StoredLogObject {
            log,
            key_seq,
            key: entry.key,
            body,
        });
    }
    Ok(objects)
}
