//! The `fair` primitive: clients wait for the lock in turns
//! (`FairLease::acquire`: a ticket each under the lock's queue prefix, each
//! waiter watching the ticket before its own), act through a fenced
//! resource, and release, crash or drop; some freeze while queued, so that
//! their tickets expire and the queue moves on without them. The lock is
//! the same object as the `lease` primitive's, so its checkers apply
//! unchanged: every guard's belief is recorded in true time.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use casaas_core::lease::{Entropy, FairLease, FencedResource, Lease, LeaseGuard, WaitOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::lease::{
    FENCED_KEY, LOCK_KEY, LetGo, Recorded, fenced_write, record_applied, record_guard,
};
use crate::clock::{SimClock, random_duration};
use crate::config::{Primitive, SimConfig};
use crate::history::lease::{History, SimValue};
use crate::lock;
use crate::network::World;

/// One client waiting its turn, holding, and letting go, until the run
/// stops.
struct Client {
    client: usize,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    clock: SimClock,
    fair: FairLease,
    resource: FencedResource<SimValue>,
    rng: ChaCha8Rng,
    config: SimConfig,
}

impl Client {
    async fn run(mut self) {
        let ttl = self.config.lease.ttl;
        let stop = self.world.stop.clone();
        while !stop.is_cancelled() {
            let idle = random_duration(&mut self.rng, ttl / 2);
            self.clock.pause(idle).await;
            let Some(guard) = self.wait_turn().await else {
                continue;
            };
            let guard_id = self.record_guard(&guard);
            self.act(&guard, guard_id).await;
            self.let_go(guard).await;
        }
    }

    /// One fair acquisition, within a deadline long enough for every other
    /// client to take a turn first; the whole client may freeze while it
    /// is queued, long enough for its ticket to expire.
    async fn wait_turn(&mut self) -> Option<LeaseGuard> {
        let ttl = self.config.lease.ttl;
        let turns = u32::try_from(self.world.rates.len()).unwrap_or(u32::MAX);
        let options = WaitOptions::default()
            .with_deadline(ttl.saturating_mul(2).saturating_mul(turns.max(2)))
            .with_cancel(self.world.stop.clone());
        if self.rng.random_bool((self.config.freeze * 4.0).min(1.0)) {
            lock(&self.history).freezes += 1;
            let (clock, rng) = (self.clock.clone(), &mut self.rng);
            let at = random_duration(rng, ttl);
            let d = random_duration(rng, self.config.max_pause.max(ttl * 2));
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                clock.freeze_for(d).await;
            });
        }
        self.fair.acquire(options).await.ok()
    }

    /// Records the acquisition and starts recording the guard's beliefs.
    fn record_guard(&self, guard: &LeaseGuard) -> usize {
        record_guard(
            &self.history,
            &self.world,
            &self.clock,
            (self.client, 0),
            guard,
        )
    }

    /// A few fenced writes, each after a lease check with a safety margin,
    /// amid work and stalls.
    async fn act(&mut self, guard: &LeaseGuard, guard_id: usize) {
        let ttl = self.config.lease.ttl;
        let effects = self.rng.random_range(1..=4);
        for _ in 0..effects {
            let work = random_duration(&mut self.rng, ttl / 4);
            self.clock.pause(work).await;
            if self.rng.random_bool(self.config.stall) {
                lock(&self.history).stalls += 1;
                let d = random_duration(&mut self.rng, self.config.max_pause);
                tokio::time::sleep(d).await;
            }
            if guard.ensure_held_for(ttl / 10).is_err() {
                break;
            }
            let at = self.world.time.now();
            lock(&self.history).held_checks.push((guard_id, at));
            fenced_write(
                &self.history,
                &self.resource,
                self.client,
                guard.token(),
                at,
            )
            .await;
            if self.world.stop.is_cancelled() {
                break;
            }
        }
    }

    /// Mostly a release; else a crash (renewal stops) or a drop.
    async fn let_go(&mut self, guard: LeaseGuard) {
        LetGo {
            released: 80,
            abandoned: 10,
        }
        .end(&self.history, &mut self.rng, guard)
        .await;
    }
}

/// Runs the clients of the `fair` primitive until they have sent `ops`
/// requests, and returns what they recorded (checked as the `lease`
/// primitive's history is).
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History::default()));
    let recorded = history.clone();
    let world = World::new(
        config,
        &mut rng,
        config.clients,
        ops,
        Arc::new(move |at, key: &str, body: &Bytes| {
            record_applied(&mut lock(&recorded), at, key, body)
        }),
        None,
    );
    let mut handles = Vec::new();
    for client in 0..world.rates.len() {
        let (clock, net) = world.client(client, config, &mut rng);
        let lease = Lease::new(
            net.clone(),
            LOCK_KEY,
            format!("client-{client}"),
            world.leases[client].clone(),
        )
        .map_err(|e| format!("invalid lease configuration: {e}"))?
        .with_clock(Arc::new(clock.clone()))
        .with_entropy(Entropy::seeded(rng.random()));
        let fair = FairLease::new(lease)
            .map_err(|e| format!("fair turns refused: {e}"))?
            .with_entropy(Entropy::seeded(rng.random()));
        let resource = FencedResource::<SimValue>::new(net, FENCED_KEY)
            .map_err(|e| e.to_string())?
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(Entropy::seeded(rng.random()))
            .with_retry_policy(
                casaas_core::lease::RetryPolicy::default()
                    .with_request_timeout(world.leases[client].request_timeout)
                    .with_retry_period(world.leases[client].retry_period)
                    .with_max_attempts(8),
            );
        let client = Client {
            client,
            world: world.clone(),
            history: history.clone(),
            clock,
            fair,
            resource,
            rng: ChaCha8Rng::seed_from_u64(rng.random()),
            config: config.clone(),
        };
        handles.push(tokio::spawn(client.run()));
    }
    for handle in handles {
        handle
            .await
            .map_err(|e| format!("a client task failed: {e}"))?;
    }
    // Let abandoned leases and tickets expire, late writes land and every
    // belief watcher finish.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let history = std::mem::take(&mut *lock(&history));
    Ok(Recorded {
        primitive: Primitive::Fair,
        tasks: 1,
        world,
        history,
    })
}
