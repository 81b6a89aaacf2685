//! The `session` primitive: each client opens a session (one heartbeat)
//! and takes up to `MAX_HELD` of `LOCKS` locks under it, releases or drops
//! them, and ends the session by closing it, crashing (abandon), dropping
//! it, or losing it to a freeze. Contenders take the locks of ended
//! sessions: at once after a close, after the heartbeat's TTL and a
//! term-ending write after a crash or a freeze. Every lock guard's belief is
//! recorded in true time, per lock, with the lease primitive's recorder.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use casaas_core::lease::{Entropy, Lease, LeaseGuard, LeaseRecord, Session, WaitOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::client::lease::watch_beliefs;
use crate::clock::{SimClock, random_duration};
use crate::config::SimConfig;
use crate::history::lease::{GuardRec, History as LockHistory};
use crate::history::session::{HeartbeatWrite, History};
use crate::lock;
use crate::network::World;

/// Clients, each with one session at a time.
pub const CLIENTS: usize = 3;
/// Lock keys all clients contend for.
pub const LOCKS: usize = 16;
/// Locks one session holds at most.
pub const MAX_HELD: usize = 8;

/// The heartbeat key of `client`'s session.
pub fn session_key(client: usize) -> String {
    format!("sim/sessions/client-{client}")
}

/// The key of lock `index`.
pub fn lock_key(index: usize) -> String {
    format!("sim/locks/{index}")
}

fn lock_index(key: &str) -> Option<usize> {
    key.strip_prefix("sim/locks/")?.parse().ok()
}

fn session_client(key: &str) -> Option<usize> {
    key.strip_prefix("sim/sessions/client-")?.parse().ok()
}

/// The recorders a run writes to: one lease history per lock (so the lease
/// checkers apply to each lock as they are) and the session history.
#[derive(Clone)]
struct Recorders {
    locks: Arc<Vec<Arc<Mutex<LockHistory>>>>,
    sessions: Arc<Mutex<History>>,
}

impl Recorders {
    fn new() -> Self {
        Recorders {
            locks: Arc::new(
                (0..LOCKS)
                    .map(|_| Arc::new(Mutex::new(LockHistory::default())))
                    .collect(),
            ),
            sessions: Arc::new(Mutex::new(History::default())),
        }
    }

    /// Records a write the store applied at `at` to a lock or a heartbeat.
    fn applied(&self, at: std::time::Duration, key: &str, body: &Bytes) {
        let Ok(record) = LeaseRecord::decode(key, body) else {
            return;
        };
        if let Some(index) = lock_index(key) {
            let term = record.session.as_ref().map(|s| {
                // The heartbeat it names, as a key of the store (an
                // unresolvable name is kept as written: never a client's).
                let heartbeat = s.heartbeat_key(key).unwrap_or_else(|| s.heartbeat.clone());
                (heartbeat, s.term)
            });
            lock(&self.locks[index]).lock_writes.push((
                at,
                record.owner,
                record.token,
                record.released,
            ));
            lock(&self.sessions).lock_terms[index].push(term);
        } else if let Some(client) = session_client(key) {
            lock(&self.sessions).heartbeat_writes.push(HeartbeatWrite {
                at,
                client,
                term: record.token,
                released: record.released,
            });
        }
    }
}

/// One client: sessions one after the other, locks under each.
struct Client {
    client: usize,
    world: Arc<World>,
    recorders: Recorders,
    clock: SimClock,
    heartbeat: Lease,
    rng: ChaCha8Rng,
    config: SimConfig,
}

/// A lock held under the current session.
struct Held {
    index: usize,
    guard: LeaseGuard,
}

impl Client {
    async fn run(mut self) {
        let ttl = self.config.lease.ttl;
        while !self.world.stop.is_cancelled() {
            let idle = random_duration(&mut self.rng, ttl / 2);
            self.clock.pause(idle).await;
            let options = WaitOptions::default()
                .with_deadline(ttl * 3)
                .with_cancel(self.world.stop.clone());
            let Ok(session) = Session::open(self.heartbeat.clone(), options).await else {
                continue;
            };
            lock(&self.recorders.sessions).opened += 1;
            let held = self.hold_locks(&session).await;
            self.end(session, held).await;
        }
    }

    /// Takes, releases and drops locks under `session` for a while, amid
    /// work and freezes; returns the locks still held.
    async fn hold_locks(&mut self, session: &Session) -> Vec<Held> {
        let ttl = self.config.lease.ttl;
        // One `Lease` per key for the whole session, so that a contender's
        // observation of a running session carries over between attempts.
        let mut leases: BTreeMap<usize, Lease> = BTreeMap::new();
        let mut held: Vec<Held> = Vec::new();
        let rounds = self.rng.random_range(1..=24);
        for _ in 0..rounds {
            if self.world.stop.is_cancelled() || session.lost_reason().is_some() {
                break;
            }
            let work = random_duration(&mut self.rng, ttl / 4);
            self.clock.pause(work).await;
            if self.rng.random_bool(self.config.freeze) {
                lock(&self.recorders.sessions).freezes += 1;
                let d = random_duration(&mut self.rng, self.config.max_pause);
                self.clock.freeze_for(d).await;
            }
            if held.len() < MAX_HELD && (held.is_empty() || self.rng.random_bool(0.6)) {
                if let Some(h) = self.take_one(session, &mut leases, &held).await {
                    held.push(h);
                }
            } else if !held.is_empty() {
                let h = held.swap_remove(self.rng.random_range(0..held.len()));
                self.let_go(h).await;
            }
        }
        held
    }

    /// One attempt at a lock this session does not hold: one read (and a
    /// write) or, sometimes, a wait of up to two TTLs.
    async fn take_one(
        &mut self,
        session: &Session,
        leases: &mut BTreeMap<usize, Lease>,
        held: &[Held],
    ) -> Option<Held> {
        let free: Vec<usize> = (0..LOCKS)
            .filter(|i| !held.iter().any(|h| h.index == *i))
            .collect();
        if free.is_empty() {
            return None;
        }
        let index = free[self.rng.random_range(0..free.len())];
        let lease = match leases.get(&index) {
            Some(lease) => lease.clone(),
            None => {
                let lease = session.lease(lock_key(index)).ok()?;
                leases.insert(index, lease.clone());
                lease
            }
        };
        let guard = if self.rng.random_bool(0.3) {
            let options = WaitOptions::default()
                .with_deadline(self.config.lease.ttl * 2)
                .with_cancel(self.world.stop.clone());
            lease.acquire(options).await.ok()?
        } else {
            lease.try_acquire().await.ok()?.into_result().ok()?
        };
        self.record_guard(index, session.term(), &guard);
        Some(Held { index, guard })
    }

    /// Records the acquisition and starts recording the guard's beliefs.
    fn record_guard(&self, index: usize, term: u64, guard: &LeaseGuard) {
        let history = self.recorders.locks[index].clone();
        let guard_id = {
            let mut h = lock(&history);
            h.guards.push(GuardRec {
                client: self.client,
                task: 0,
                token: guard.token(),
                acquired_at: self.world.time.now(),
                beliefs: Vec::new(),
            });
            h.guards.len() - 1
        };
        {
            let mut s = lock(&self.recorders.sessions);
            s.guard_terms[index].push(term);
            s.acquisitions += 1;
        }
        tokio::spawn(watch_beliefs(
            history,
            guard_id,
            self.clock.clone(),
            guard.subscribe(),
        ));
    }

    /// Gives up one lock: mostly a release, else a drop.
    async fn let_go(&mut self, held: Held) {
        if self.rng.random_bool(0.7) {
            lock(&self.recorders.sessions).lock_releases += 1;
            let _ = held.guard.release().await;
        } else {
            lock(&self.recorders.sessions).lock_drops += 1;
            drop(held.guard);
        }
    }

    /// Ends the session: a close (one write ends every lock), a crash (the
    /// locks wait out the heartbeat's TTL) or a drop. Some locks are
    /// released first.
    async fn end(&mut self, session: Session, held: Vec<Held>) {
        let mut remaining = Vec::new();
        for h in held {
            if self.rng.random_bool(0.2) {
                self.let_go(h).await;
            } else {
                remaining.push(h);
            }
        }
        // The rest end with the session, as its end says; dropped after it
        // (dropping a guard that still holds would release its lock).
        self.end_session(session).await;
        drop(remaining);
    }

    async fn end_session(&mut self, session: Session) {
        /// How a session ends.
        enum End {
            Close,
            Crash,
            Drop,
        }
        let end = match self.rng.random_range(0..100) {
            0..60 => End::Close,
            60..85 => End::Crash,
            _ => End::Drop,
        };
        {
            let mut s = lock(&self.recorders.sessions);
            if session.lost_reason().is_some() {
                s.lost += 1;
            }
            match end {
                End::Close => s.closes += 1,
                End::Crash => s.abandons += 1,
                End::Drop => s.drops += 1,
            }
            if !matches!(end, End::Crash) {
                s.closed_terms.insert((self.client, session.term()));
            }
        }
        match end {
            End::Close => {
                let _ = session.close().await;
            }
            End::Crash => session.abandon(),
            End::Drop => drop(session),
        }
    }
}

/// The world's configuration: delayed writes are held for up to two TTLs,
/// three times as often as in the standard run, so that heartbeat renewals
/// land after a contender observed the heartbeat unchanged for its TTL (the
/// case the term-ending write exists for: without it, such a renewal
/// extends the holder's belief after its lock was taken).
fn world_config(config: &SimConfig) -> SimConfig {
    let mut world_config = config.clone();
    world_config.faults.max_delay = world_config.faults.max_delay.max(config.lease.ttl * 2);
    world_config.faults.delay = (world_config.faults.delay * 3.0).min(0.2);
    world_config
}

/// What a run recorded, for its report.
pub struct Recorded {
    pub world: Arc<World>,
    /// Per lock: its guards, their beliefs and the writes applied to it.
    pub locks: Vec<LockHistory>,
    pub history: History,
}

/// Runs `CLIENTS` clients until they have sent `ops` requests, and returns
/// what they recorded.
pub async fn simulate(config: &SimConfig, ops: u64, seed: u64) -> Result<Recorded, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let recorders = Recorders::new();
    {
        let mut s = lock(&recorders.sessions);
        s.lock_terms = vec![Vec::new(); LOCKS];
        s.guard_terms = vec![Vec::new(); LOCKS];
    }
    let on_apply = recorders.clone();
    let world = World::new(
        &world_config(config),
        &mut rng,
        CLIENTS,
        ops,
        Arc::new(move |at, key: &str, body: &Bytes| on_apply.applied(at, key, body)),
        None,
    );
    let mut handles = Vec::new();
    for client in 0..world.rates.len() {
        let (clock, net) = world.client(client, config, &mut rng);
        let heartbeat = Lease::new(
            net,
            session_key(client),
            format!("client-{client}"),
            world.leases[client].clone(),
        )
        .map_err(|e| format!("invalid lease configuration: {e}"))?
        .with_clock(Arc::new(clock.clone()))
        .with_entropy(Entropy::seeded(rng.random()));
        let client = Client {
            client,
            world: world.clone(),
            recorders: recorders.clone(),
            clock,
            heartbeat,
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
    // Let abandoned sessions expire, late writes land and every belief
    // watcher finish.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let locks = recorders
        .locks
        .iter()
        .map(|h| std::mem::take(&mut *lock(h)))
        .collect();
    let history = std::mem::take(&mut *lock(&recorders.sessions));
    Ok(Recorded {
        world,
        locks,
        history,
    })
}
