//! The `rwlock` primitive: clients take one read-write lock shared
//! (`RwLock::read`: a slot lease each) or exclusive (`RwLock::write`: the
//! lock object, then waiting for the readers), check their guard before
//! each step, and release, crash or drop; writers write through a fenced
//! resource with their token. Every guard's belief is recorded in true
//! time with the lease's recorder; which guards are writers' is recorded
//! beside it.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use casaas_core::lease::{
    Entropy, FencedResource, Lease, LeaseGuard, RetryPolicy, RwLock, WaitOptions,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::lease::{FENCED_KEY, LOCK_KEY, LetGo, fenced_write, record_applied, record_guard};
use crate::clock::{SimClock, random_duration};
use crate::config::SimConfig;
use crate::history::lease::{History as LeaseHistory, SimValue};
use crate::history::rwlock::History;
use crate::lock;
use crate::network::World;

/// The share of acquisitions that are exclusive, in percent.
const WRITE_PERCENT: u32 = 30;

/// What the run recorded.
pub struct Recorded {
    pub world: Arc<World>,
    pub history: History,
}

/// Whether each guard of the history is a writer's, and the acquisitions
/// given up.
#[derive(Default)]
struct Roles {
    writer: Vec<bool>,
    reads_given_up: u64,
    writes_given_up: u64,
}

struct Client {
    client: usize,
    world: Arc<World>,
    history: Arc<Mutex<LeaseHistory>>,
    roles: Arc<Mutex<Roles>>,
    clock: SimClock,
    rwlock: RwLock,
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
            let write = self.rng.random_range(0..100) < WRITE_PERCENT;
            let Some(guard) = self.take(write).await else {
                continue;
            };
            let guard_id = {
                // The guard and its role go in under one lock, so that the
                // two lists stay parallel.
                let mut roles = lock(&self.roles);
                let id = record_guard(
                    &self.history,
                    &self.world,
                    &self.clock,
                    (self.client, 0),
                    &guard,
                );
                if roles.writer.len() <= id {
                    roles.writer.resize(id + 1, false);
                }
                roles.writer[id] = write;
                id
            };
            self.act(&guard, guard_id, write).await;
            LetGo {
                released: 75,
                abandoned: 10,
            }
            .end(&self.history, &mut self.rng, guard)
            .await;
        }
    }

    /// One shared or exclusive acquisition within a deadline; the whole
    /// client may freeze while it waits.
    async fn take(&mut self, write: bool) -> Option<LeaseGuard> {
        let ttl = self.config.lease.ttl;
        let options = WaitOptions::default()
            .with_deadline(ttl * 6)
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
        let taken = if write {
            self.rwlock.write(options).await
        } else {
            self.rwlock.read(options).await
        };
        if taken.is_err() {
            let mut roles = lock(&self.roles);
            if write {
                roles.writes_given_up += 1;
            } else {
                roles.reads_given_up += 1;
            }
        }
        taken.ok()
    }

    /// A few steps, each after a check with a safety margin, amid work,
    /// stalls and freezes; a writer's steps are fenced writes.
    async fn act(&mut self, guard: &LeaseGuard, guard_id: usize, write: bool) {
        let ttl = self.config.lease.ttl;
        let steps = self.rng.random_range(1..=4);
        for _ in 0..steps {
            let work = random_duration(&mut self.rng, ttl / 4);
            self.clock.pause(work).await;
            if self.rng.random_bool(self.config.stall) {
                lock(&self.history).stalls += 1;
                let d = random_duration(&mut self.rng, self.config.max_pause);
                tokio::time::sleep(d).await;
            }
            if self.rng.random_bool(self.config.freeze) {
                lock(&self.history).freezes += 1;
                let d = random_duration(&mut self.rng, self.config.max_pause);
                self.clock.freeze_for(d).await;
            }
            if guard.ensure_held_for(ttl / 10).is_err() {
                break;
            }
            let at = self.world.time.now();
            lock(&self.history).held_checks.push((guard_id, at));
            if write {
                fenced_write(
                    &self.history,
                    &self.resource,
                    self.client,
                    guard.token(),
                    at,
                )
                .await;
            }
            if self.world.stop.is_cancelled() {
                break;
            }
        }
    }
}

/// Runs the clients of the `rwlock` primitive until they have sent `ops`
/// requests, and returns what they recorded.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(LeaseHistory::default()));
    let roles = Arc::new(Mutex::new(Roles::default()));
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
        let rwlock = RwLock::new(lease)
            .map_err(|e| format!("read-write lock refused: {e}"))?
            .with_entropy(Entropy::seeded(rng.random()));
        let resource = FencedResource::<SimValue>::new(net, FENCED_KEY)
            .map_err(|e| e.to_string())?
            .with_clock(Arc::new(clock.clone()))
            .with_entropy(Entropy::seeded(rng.random()))
            .with_retry_policy(
                RetryPolicy::default()
                    .with_request_timeout(world.leases[client].request_timeout)
                    .with_retry_period(world.leases[client].retry_period)
                    .with_max_attempts(8),
            );
        let client = Client {
            client,
            world: world.clone(),
            history: history.clone(),
            roles: roles.clone(),
            clock,
            rwlock,
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
    // Let abandoned holdings expire, late writes land and every belief
    // watcher finish.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let lease = std::mem::take(&mut *lock(&history));
    let roles = std::mem::take(&mut *lock(&roles));
    let mut writer = roles.writer;
    writer.resize(lease.guards.len(), false);
    Ok(Recorded {
        world,
        history: History {
            lease,
            writer,
            reads_given_up: roles.reads_given_up,
            writes_given_up: roles.writes_given_up,
        },
    })
}
