//! The `election` primitive: `ElectionRunner`s whose `run` future is
//! dropped inside a `select!`, whose task is aborted, or which are
//! cancelled, at random moments; each term's work is recorded in true time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::layout::EpochStore;
use casaas_core::lease::{Election, Entropy, Leader, Lease, LostReason, WaitOptions};
use casaas_core::testkit::CreateOnlyStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio_util::sync::CancellationToken;

use crate::clock::{SimClock, random_duration};
use crate::config::{Primitive, SimConfig};
use crate::history::election::{History, NoticeAfterStop, WorkRec};
use crate::lock;
use crate::network::World;

/// The election's lock object.
const ELECTION_KEY: &str = "sim/election";
/// Election clients.
const CLIENTS: usize = 4;

/// What one runner's callbacks share.
#[derive(Debug, Default)]
struct RunState {
    /// Works this runner started (indices into `History::works`), latest last.
    works: Vec<usize>,
    /// Terms `on_stopped_leading` was called for, with the true time.
    stopped: Vec<(u64, Duration)>,
}

struct Client {
    id: usize,
    world: Arc<World>,
    history: Arc<Mutex<History>>,
    clock: SimClock,
    lease: Lease,
    /// Shared with the work futures, which draw their durations from it.
    rng: Arc<Mutex<ChaCha8Rng>>,
    config: SimConfig,
}

impl Client {
    fn draw(&self, max: Duration) -> Duration {
        random_duration(&mut lock(&self.rng), max)
    }

    /// Waits `d` on our clock, or until the run stops.
    async fn wait(&self, d: Duration) {
        tokio::select! {
            biased;
            () = self.world.stop.cancelled() => {}
            () = self.clock.pause(d) => {}
        }
    }

    async fn run(self) {
        let ttl = self.config.lease.ttl;
        let stop = self.world.stop.clone();
        while !stop.is_cancelled() {
            self.wait(self.draw(ttl / 2)).await;
            if stop.is_cancelled() {
                break;
            }
            let state = Arc::new(Mutex::new(RunState::default()));
            let runner = self.runner(&state);
            let life = self.draw(ttl * 3);
            let cancel = CancellationToken::new();
            lock(&self.history).runs += 1;
            let how = lock(&self.rng).random_range(0..100);
            let fate = match how {
                0..40 => {
                    // Dropped inside a select! (as by a timeout).
                    tokio::select! {
                        biased;
                        _ = runner.run(WaitOptions::default().with_cancel(cancel.clone())) => "returned",
                        () = self.wait(life) => "dropped",
                    }
                }
                40..70 => {
                    let handle = tokio::spawn(
                        runner.run(WaitOptions::default().with_cancel(cancel.clone())),
                    );
                    self.wait(life).await;
                    let fate = if handle.is_finished() {
                        "returned"
                    } else {
                        handle.abort();
                        "aborted"
                    };
                    let _ = handle.await;
                    fate
                }
                _ => {
                    let handle = tokio::spawn(
                        runner.run(WaitOptions::default().with_cancel(cancel.clone())),
                    );
                    self.wait(life).await;
                    let fate = if handle.is_finished() {
                        "returned"
                    } else {
                        cancel.cancel();
                        "cancelled"
                    };
                    let _ = handle.await;
                    fate
                }
            };
            let mut h = lock(&self.history);
            match fate {
                "dropped" => h.dropped += 1,
                "aborted" => h.aborted += 1,
                "cancelled" => h.cancelled += 1,
                _ => h.returned += 1,
            }
            for &w in &lock(&state).works {
                h.works[w].ended_by = fate;
            }
        }
    }

    /// A runner whose work records its term in true time, loops until
    /// cancelled (or ends on its own now and then), then cleans up for up
    /// to TTL/10 — well within the validity left when the runner cancels it.
    fn runner(&self, state: &Arc<Mutex<RunState>>) -> casaas_core::lease::ElectionRunner {
        let ttl = self.config.lease.ttl;
        let election = Election::new(self.lease.clone());
        let started = {
            let (history, state, rng) = (self.history.clone(), state.clone(), self.rng.clone());
            let (clock, client) = (self.clock.clone(), self.id);
            move |token: u64, cancel: CancellationToken| {
                let id = {
                    let mut h = lock(&history);
                    h.works.push(WorkRec {
                        client,
                        token,
                        start: clock.time.now(),
                        end: None,
                        ended_by: "running",
                    });
                    h.works.len() - 1
                };
                lock(&state).works.push(id);
                let work = TermWork {
                    history: history.clone(),
                    rng: rng.clone(),
                    clock: clock.clone(),
                    id,
                    ttl,
                };
                work.run(cancel)
            }
        };
        election
            .runner()
            .on_started_leading(started)
            .on_stopped_leading(self.on_stopped(state))
            .on_new_leader(self.on_new_leader(state))
    }

    /// Records the stop of the runner's latest term, and its time.
    fn on_stopped(
        &self,
        state: &Arc<Mutex<RunState>>,
    ) -> impl Fn(LostReason) + Send + Sync + 'static {
        let (history, state, time) = (self.history.clone(), state.clone(), self.clock.time);
        move |_reason| {
            let mut s = lock(&state);
            let h = &mut *lock(&history);
            h.stopped_leading += 1;
            if let Some(&w) = s.works.last() {
                s.stopped.push((h.works[w].token, time.now()));
            }
        }
    }

    /// Records a notice that we lead in a term already stopped.
    fn on_new_leader(
        &self,
        state: &Arc<Mutex<RunState>>,
    ) -> impl Fn(Option<Leader>) + Send + Sync + 'static {
        let me = self.lease.owner().to_string();
        let (history, state, time, client) = (
            self.history.clone(),
            state.clone(),
            self.clock.time,
            self.id,
        );
        move |leader: Option<Leader>| {
            let Some(leader) = leader.filter(|l| l.owner == me) else {
                return;
            };
            let stopped_at = lock(&state)
                .stopped
                .iter()
                .find(|(t, _)| *t == leader.token)
                .map(|(_, at)| *at);
            if let Some(stopped_at) = stopped_at {
                lock(&history).notices_after_stop.push(NoticeAfterStop {
                    client,
                    token: leader.token,
                    at: time.now(),
                    stopped_at,
                });
            }
        }
    }
}

/// The work of one term (recorded as `works[id]`).
struct TermWork {
    history: Arc<Mutex<History>>,
    rng: Arc<Mutex<ChaCha8Rng>>,
    clock: SimClock,
    id: usize,
    ttl: Duration,
}

impl TermWork {
    /// Loops in steps until cancelled (or ends on its own now and then),
    /// cleans up, and records when it ended.
    async fn run(self, cancel: CancellationToken) {
        let (rng, clock, ttl) = (&self.rng, &self.clock, self.ttl);
        loop {
            let (step, ends) = {
                let mut rng = lock(rng);
                (random_duration(&mut rng, ttl / 5), rng.random_bool(0.02))
            };
            if ends {
                break;
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                () = clock.pause(step) => {}
            }
        }
        let cleanup = random_duration(&mut lock(rng), ttl / 10);
        clock.pause(cleanup).await;
        lock(&self.history).works[self.id].end = Some(clock.time.now());
    }
}

/// What a run recorded, for its report.
pub struct Recorded {
    /// `election` or `election_create_only`.
    pub primitive: Primitive,
    pub world: Arc<World>,
    pub history: History,
    /// The true time the run ended: work still running counts until then.
    pub end_of_run: Duration,
}

/// Runs the election clients until they have sent `ops` requests and
/// returns what they recorded; `create_only` runs them on a create-only store (the epoch
/// layout, collecting every epoch).
pub async fn simulate(
    config: &SimConfig,
    ops: u64,
    seed: u64,
    create_only: bool,
) -> Result<Recorded, String> {
    let primitive = if create_only {
        Primitive::ElectionCreateOnly
    } else {
        Primitive::Election
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let history = Arc::new(Mutex::new(History::default()));
    let recorded = history.clone();
    let world = World::new(
        config,
        &mut rng,
        CLIENTS,
        ops,
        Arc::new(move |at, key: &str, body: &Bytes| {
            // In the epoch layout the election's writes are its epochs.
            if key == ELECTION_KEY || EpochStore::epoch_of(ELECTION_KEY, key).is_some() {
                lock(&recorded).lock_writes.push((at, body.len()));
            }
        }),
        None,
    );
    let mut handles = Vec::new();
    for id in 0..world.rates.len() {
        let (clock, net) = world.client(id, config, &mut rng);
        let net: Arc<dyn CasStore> = if create_only {
            Arc::new(EpochStore::with_collection(
                Arc::new(CreateOnlyStore(net)),
                1,
                1,
            ))
        } else {
            net
        };
        let lease = Lease::new(
            net,
            ELECTION_KEY,
            format!("client-{id}"),
            world.leases[id].clone(),
        )
        .map_err(|e| format!("invalid lease configuration: {e}"))?
        .with_clock(Arc::new(clock.clone()))
        .with_entropy(Entropy::seeded(rng.random()));
        let client = Client {
            id,
            world: world.clone(),
            history: history.clone(),
            clock,
            lease,
            rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(rng.random()))),
            config: config.clone(),
        };
        handles.push(tokio::spawn(client.run()));
    }
    for handle in handles {
        handle
            .await
            .map_err(|e| format!("an election client failed: {e}"))?;
    }
    // Let detached work finish and dropped leases be released or expire.
    tokio::time::sleep(config.lease.ttl * 3).await;
    let end_of_run = world.time.now();
    let history = std::mem::take(&mut *lock(&history));
    Ok(Recorded {
        primitive,
        world,
        history,
        end_of_run,
    })
}
