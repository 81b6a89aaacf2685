#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Exhaustive model check (stateright) of the lease protocol's abstract state
//! machine.
//!
//! Three clients share one lease record in a store that holds
//! `(version, record{owner, nonce, token, released, advisory wall expiry})`.
//! True time advances in discrete ticks. Each client measures time on its own
//! monotonic clock, which runs at a fixed rate within the declared drift
//! bound (client 0 at 0.75, client 1 at 1.25, client 2 at 1.0); its holder
//! validity and takeover wait, defined on that clock as in `LeaseConfig`,
//! are converted to true ticks once (`Clocks::timing`). Wall clocks have fixed
//! offsets (0, +2, +1) and only matter to the wall-clock expiry rule.
//!
//! A write is sent (its send tick starts the holder's validity), reaches the
//! store at any later step (`Apply`), and its answer arrives at any later
//! step (`Deliver`) or is lost (`LoseResponse`: applied, ambiguous); or the
//! store answers 5xx without applying (`ServerError`: ambiguous). An
//! ambiguous write is resolved by reading at once (how long the read takes
//! does not matter: validity counts from the send). Any client may take no
//! step for any number of ticks: that is a pause, and a holder that never
//! comes back is a crash. Reads are atomic (the earliest moment a contender
//! can start observing a version, the worst case for safety).
//!
//! Properties:
//! - mutual exclusion: at no state do two clients believe they hold the lease
//!   validly (belief = the client's own clock is before its validity deadline);
//! - fencing tokens increase: every acquisition grants a token higher than all
//!   earlier ones.
//!
//! The correct protocol has no counterexample within the bounds; each test
//! that removes one rule asserts that the checker finds one.
//!
//! The file holds five models: the lease on the record layout (above), the
//! write-and-resolve model (how a primitive turns writes of unknown outcome
//! into exactly-once updates), the lease on the epoch layout, and the
//! session model: locks that hang from one heartbeat (a session lease),
//! taken over by a contender that reads the lock, then the session object,
//! waits out the session's TTL, ends the term with a conditional write on
//! the session object and replaces the lock from the version it read first.
//! Its mutants take a session lock without checking the session, read the
//! session before the lock, or skip the term-ending write; each finds two
//! holders.
//! The fifth, the create-once model, is a Delta Lake log committed by
//! create-if-absent (`CreateOnce`): two writers, lost answers, our own
//! duplicate's 412 and writes that land late; no transaction at two
//! versions, `Ours` where told, `Taken` never for our own commit. Its
//! mutants take a 412 or a lost answer as `Taken` without reading, claim a
//! body without the nonce check, or remember only the last write's nonce.
//! The sixth, the swap-once model, is a table pointer committed the Iceberg
//! way (`SwapOnce`): two writers rebasing on conflicts, lost answers, our
//! own duplicate's 412 and writes built upon before their writer reads; no
//! transaction lands twice, `Ours` only when landed. Its mutants take a 412
//! as a conflict without reading, or look at the head only (no lineage).
//! See docs/simulation.md.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Property};

// ---------------------------------------------------------------------------
// Shared by the record-layout and the epoch-layout lease models (the lease
// protocol is the same on both; only the store and how a write and a read
// reach it differ):
// - the three clients and their clocks: `Clocks`, the holder validity and
//   takeover wait of each client converted to true ticks (`Clocks::timing`);
// - a client's lease phase and its write in flight (`Phase`, `Req`), and the
//   lease state both models keep (`Lease`: true time, writes sent, phases,
//   tokens granted), with the protocol's rules on it: belief, granting a
//   won write, settling an ambiguous write by its read-back, and which lease
//   actions a client may take (`Action`);
// - the properties (mutual exclusion, increasing fencing tokens, a takeover
//   happens) and the checker helpers (`check`, `expect_counterexample`,
//   which the write-and-resolve model uses too).
// ---------------------------------------------------------------------------

const CLIENTS: usize = 3;

/// The clock rates of the three clients: slow, fast and exact, at the
/// declared drift bound of 25%.
const RATES: [f64; CLIENTS] = [0.75, 1.25, 1.0];
const TTL: u8 = 2;
const DRIFT: f64 = 0.25;

/// A bound, overridable from the environment to explore further (release
/// builds recommended).
fn bound(name: &str, default: u8) -> u8 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Each client's lease timing, in true ticks.
#[derive(Clone, Copy, Debug)]
struct Clocks {
    /// Per client: how many ticks after sending its last successful write the
    /// holder still believes it holds.
    hold: [u8; CLIENTS],
    /// Per client: how many ticks a contender observes one version unchanged
    /// before taking over.
    wait: [u8; CLIENTS],
}

impl Clocks {
    /// Converts the protocol's timing, measured on each client's own clock,
    /// to true ticks. A client whose clock runs at `rate` believes while
    /// `(t - sent) * rate < ttl * (1 - drift) - safety` (the holder validity
    /// of `LeaseConfig`), and may take over once
    /// `(t - since) * rate >= ttl * (1 + drift)` (its takeover wait).
    fn timing(ttl: f64, drift: f64, safety: f64, rates: [f64; CLIENTS]) -> Self {
        let validity = ttl * (1.0 - drift) - safety;
        let wait = ttl * (1.0 + drift);
        Clocks {
            hold: rates.map(|r| (validity / r).ceil() as u8),
            wait: rates.map(|r| (wait / r).ceil() as u8),
        }
    }

    /// The protocol's timing at the tests' bounds: TTL 2 ticks, drift bound
    /// 25% (holders believe 2 ticks, contenders wait 2 to 4), no safety
    /// margin (the models have no scheduling delay for it to cover).
    fn correct() -> Self {
        Self::timing(f64::from(TTL), DRIFT, 0.0, RATES)
    }
}

/// A store's answer to a write; `PENDING` until the write reaches the store.
trait Answer: Copy + PartialEq {
    const PENDING: Self;
}

/// A write in flight: `op`, sent at true tick `sent` (the holder's validity
/// counts from it), and what the store answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Req<W, A> {
    op: W,
    sent: u8,
    outcome: A,
}

/// A client's lease phase; `R` is its write in flight. `version` is the
/// lease version: the record's version in the record layout, the head epoch
/// in the epoch layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase<R> {
    Idle,
    /// Saw a held lease; waiting to take it over.
    Watching {
        version: u8,
        token: u8,
        since: u8,
        /// The record's advisory wall expiry: read by the record model's
        /// wall-clock rule only (0 otherwise).
        expires_wall: u8,
    },
    /// A write to acquire is in flight.
    Acquiring(R),
    /// Holds the lease (version 0 = unknown, after assuming a write won).
    Holding {
        version: u8,
        token: u8,
        valid_until: u8,
        renew: Option<R>,
    },
}

impl<R> Phase<R> {
    fn in_flight(&mut self) -> Option<&mut R> {
        match self {
            Phase::Acquiring(req) => Some(req),
            Phase::Holding {
                renew: Some(req), ..
            } => Some(req),
            _ => None,
        }
    }
}

/// The lease side of a model's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Lease<W, A> {
    now: u8,
    sends: u8,
    clients: [Phase<Req<W, A>>; CLIENTS],
    /// The version and token each client's own release wrote, remembered
    /// so that its next attempt can replace that version without reading.
    released: [Option<(u8, u8)>; CLIENTS],
    max_granted: u8,
    token_regressed: bool,
}

/// What the read that settles an ambiguous write shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadBack {
    /// The write (as the resolution rule recognises it) at this version.
    Ours { version: u8 },
    /// Another write at this version.
    Other { version: u8 },
    /// No lease (or the read gave up).
    Nothing,
}

impl<W: Copy, A: Answer> Lease<W, A> {
    fn new() -> Self {
        Lease {
            now: 0,
            sends: 0,
            clients: [Phase::Idle; CLIENTS],
            released: [None; CLIENTS],
            max_granted: 0,
            token_regressed: false,
        }
    }

    /// Does `c` believe it holds (its clock before its validity deadline)?
    fn believes(&self, c: usize) -> bool {
        match self.clients[c] {
            Phase::Holding { valid_until, .. } => self.now < valid_until,
            _ => false,
        }
    }

    fn send(&mut self, op: W) -> Req<W, A> {
        self.sends += 1;
        Req {
            op,
            sent: self.now,
            outcome: A::PENDING,
        }
    }

    /// The client learns it won `token` at `version` with a write sent at
    /// `sent`.
    fn grant(&mut self, clocks: &Clocks, c: usize, version: u8, token: u8, sent: u8) {
        let acquiring = matches!(self.clients[c], Phase::Acquiring(_));
        let valid_until = sent + clocks.hold[c];
        if self.now >= valid_until {
            // Learned too late: the lease is already invalid on our clock.
            self.clients[c] = Phase::Idle;
            return;
        }
        if acquiring {
            if token <= self.max_granted {
                self.token_regressed = true;
            }
            self.max_granted = self.max_granted.max(token);
        }
        self.clients[c] = Phase::Holding {
            version,
            token,
            valid_until,
            renew: None,
        };
    }

    /// An ambiguous write of `c` (for `token`, sent at `sent`, replacing
    /// `expected` if a replace) is settled by what its read-back shows.
    /// How long the read takes does not matter: validity counts from the
    /// write's send time.
    fn settle(
        &mut self,
        clocks: &Clocks,
        c: usize,
        read: ReadBack,
        expected: Option<u8>,
        token: u8,
        sent: u8,
    ) {
        let acquiring = matches!(self.clients[c], Phase::Acquiring(_));
        match read {
            ReadBack::Ours { version } => self.grant(clocks, c, version, token, sent),
            // A renewal that did not land, our version still current: keep
            // the lease (validity from the earlier write) and retry.
            ReadBack::Other { version } if !acquiring && expected == Some(version) => {
                if let Phase::Holding { renew, .. } = &mut self.clients[c] {
                    *renew = None;
                }
            }
            _ => self.clients[c] = Phase::Idle,
        }
    }

    /// The lease actions client `c` may take.
    fn actions(&self, c: usize, can_send: bool, actions: &mut Vec<Action>) {
        match self.clients[c] {
            Phase::Idle | Phase::Watching { .. } => {
                actions.push(Action::Read(c));
                if self.released[c].is_some() && can_send {
                    actions.push(Action::Reacquire(c));
                }
                if matches!(self.clients[c], Phase::Watching { .. }) && can_send {
                    actions.push(Action::Takeover(c));
                }
            }
            Phase::Acquiring(_) => {}
            Phase::Holding { renew, .. } => {
                if renew.is_none() && can_send {
                    if self.believes(c) {
                        actions.push(Action::Renew(c));
                    }
                    actions.push(Action::Release(c));
                }
                if renew.is_none() && !self.believes(c) {
                    actions.push(Action::StepDown(c));
                }
            }
        }
        let mut phase = self.clients[c];
        if let Some(req) = phase.in_flight() {
            if req.outcome == A::PENDING {
                actions.push(Action::Apply(c));
                actions.push(Action::ServerError(c));
            } else {
                actions.push(Action::Deliver(c));
                actions.push(Action::LoseResponse(c));
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Tick,
    /// Read the lease and decide: create, take a released lease, or watch.
    Read(usize),
    Takeover(usize),
    /// Replace the version our own release wrote, without reading.
    Reacquire(usize),
    Renew(usize),
    Release(usize),
    StepDown(usize),
    /// The client's in-flight write reaches the store.
    Apply(usize),
    /// The applied write's answer arrives.
    Deliver(usize),
    /// The applied write's answer is lost: ambiguous.
    LoseResponse(usize),
    /// 5xx or timeout before applying: ambiguous, nothing written.
    ServerError(usize),
    /// Epoch layout only: the client view's background collection takes its
    /// next step.
    Collect(usize),
}

/// A model state that holds a lease.
trait HasLease {
    type Write;
    type Answer;
    fn lease(&self) -> &Lease<Self::Write, Self::Answer>;
}

/// The lease properties both layouts check.
fn lease_properties<M: Model>() -> Vec<Property<M>>
where
    M::State: HasLease,
    <M::State as HasLease>::Write: Copy,
    <M::State as HasLease>::Answer: Answer,
{
    vec![
        Property::always("mutual exclusion", |_, s: &M::State| {
            (0..CLIENTS).filter(|&c| s.lease().believes(c)).count() <= 1
        }),
        Property::always("fencing tokens increase", |_, s: &M::State| {
            !s.lease().token_regressed
        }),
        // Not vacuous: a lease is taken over from a holder that stopped.
        Property::sometimes("takeover", |_, s: &M::State| s.lease().max_granted >= 2),
    ]
}

/// Runs the exhaustive BFS check (stopping at the first counterexample if
/// `stop_at_failure`) and reports counts and time.
fn check<M>(label: &str, model: M, stop_at_failure: bool) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Debug + Clone + PartialEq,
{
    let started = Instant::now();
    let mut builder = model.checker();
    if stop_at_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "{label}: {} states ({} unique), max depth {}, {:.2?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// Asserts a counterexample to `property` is found, and prints it.
fn expect_counterexample<M>(label: &str, model: M, property: &'static str)
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Debug + Clone + PartialEq,
{
    let checker = check(label, model, true);
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{label}: no counterexample to {property:?} found"));
    eprintln!("{label}: counterexample to {property:?}: {path}");
}

/// Asserts the exhaustive check completes with every property as expected.
fn expect_no_counterexample<M>(label: &str, model: M)
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Debug + Clone + PartialEq,
{
    let checker = check(label, model, false);
    assert!(checker.is_done());
    checker.assert_properties();
}

// ---------------------------------------------------------------------------
// The record layout.
// ---------------------------------------------------------------------------

/// How a client settles an ambiguous write (the answer was lost or was a 5xx).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resolution {
    /// The protocol: re-read; the write won iff the stored nonce is ours.
    Nonce,
    /// Mutation: assume the write took effect.
    AssumeWon,
    /// Mutation: assume the write did not take effect.
    AssumeLost,
    /// Mutation: re-read, but recognise "our" record by owner and token
    /// instead of the write's nonce.
    OwnerAndToken,
}

/// What release writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReleaseRule {
    /// The protocol: replace-if-match with `released = true`, keeping the token.
    MarkReleased,
    /// Mutation: conditional delete of the lock object.
    Delete,
}

/// When a contender may take over a held record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExpiryRule {
    /// The default rule: after observing the same version unchanged for the
    /// takeover wait on the contender's own monotonic clock.
    Observed,
    /// The opt-in rule: also when the contender's wall clock passes the
    /// record's advisory expiry plus the declared maximum skew.
    WallClock { declared_skew: u8 },
}

#[derive(Clone, Debug)]
struct LeaseModel {
    /// Lease TTL in ticks (written in the record's advisory expiry).
    ttl: u8,
    clocks: Clocks,
    /// Wall-clock offset of each client (wall = true time + offset).
    wall_offsets: [u8; CLIENTS],
    max_ticks: u8,
    max_sends: u8,
    resolution: Resolution,
    release: ReleaseRule,
    expiry: ExpiryRule,
    /// Mutation: clients 0 and 1 are two tasks sharing one `Lease` whose
    /// memory of unresolved writes has no owner: a task that reads a record
    /// carrying the other task's nonce (landed, its answer still in flight)
    /// takes it as its own and renews it. The protocol keeps that memory per
    /// task, and the rule never fires.
    shared_task_memory: bool,
    /// The token a reacquisition from our remembered release asks for, as
    /// an increment of the released token: 1 as designed, 0 a mutation.
    reacquire_increment: u8,
}

impl LeaseModel {
    /// The protocol as designed, with the bounds the tests use: the
    /// timing of `Clocks::correct`, 6 ticks and 3 writes unless
    /// `MODEL_TICKS` / `MODEL_SENDS` say more.
    fn correct() -> Self {
        Self::with_clocks(Clocks::correct())
    }

    fn with_clocks(clocks: Clocks) -> Self {
        LeaseModel {
            ttl: TTL,
            clocks,
            wall_offsets: [0, 2, 1],
            max_ticks: bound("MODEL_TICKS", 6),
            max_sends: bound("MODEL_SENDS", 3),
            resolution: Resolution::Nonce,
            release: ReleaseRule::MarkReleased,
            expiry: ExpiryRule::Observed,
            shared_task_memory: false,
            reacquire_increment: 1,
        }
    }

    fn wall(&self, c: usize, now: u8) -> u8 {
        now + self.wall_offsets[c]
    }

    /// Is `nonce` one of the unresolved writes `c` remembers as its own?
    /// Only the acquisitions in flight of the tasks sharing its memory can
    /// be: its own is not in flight while it reads.
    fn remembers(&self, s: &State, c: usize, nonce: u8) -> bool {
        let sharing: &[usize] = if self.shared_task_memory && c < 2 {
            &[0, 1]
        } else {
            &[]
        };
        sharing.iter().any(|&o| {
            matches!(s.lease.clients[o], Phase::Acquiring(req)
                if req.op.body().is_some_and(|b| b.nonce == nonce))
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Body {
    owner: u8,
    nonce: u8,
    token: u8,
    released: bool,
    expires_wall: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Record {
    version: u8,
    body: Body,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    Create(Body),
    Replace { expected: u8, body: Body },
    Delete { expected: u8 },
}

impl Op {
    fn body(&self) -> Option<Body> {
        match *self {
            Op::Create(body) | Op::Replace { body, .. } => Some(body),
            Op::Delete { .. } => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Outcome {
    Pending,
    /// Applied; the new version.
    Ok(u8),
    /// Refused (precondition failed).
    Failed,
}

impl Answer for Outcome {
    const PENDING: Self = Outcome::Pending;
}

type RecordReq = Req<Op, Outcome>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    lease: Lease<Op, Outcome>,
    next_version: u8,
    store: Option<Record>,
}

impl HasLease for State {
    type Write = Op;
    type Answer = Outcome;
    fn lease(&self) -> &Lease<Op, Outcome> {
        &self.lease
    }
}

/// Applies `op` to the store atomically; the outcome the store answers.
fn apply(s: &mut State, op: Op) -> Outcome {
    let matches =
        |expected: u8, store: &Option<Record>| store.is_some_and(|r| r.version == expected);
    match op {
        Op::Create(body) if s.store.is_none() => {
            let version = s.next_version;
            s.next_version += 1;
            s.store = Some(Record { version, body });
            Outcome::Ok(version)
        }
        Op::Replace { expected, body } if matches(expected, &s.store) => {
            let version = s.next_version;
            s.next_version += 1;
            s.store = Some(Record { version, body });
            Outcome::Ok(version)
        }
        Op::Delete { expected } if matches(expected, &s.store) => {
            s.store = None;
            Outcome::Ok(0)
        }
        _ => Outcome::Failed,
    }
}

impl LeaseModel {
    fn body(&self, s: &State, c: usize, token: u8, released: bool) -> Body {
        Body {
            owner: c as u8,
            nonce: s.lease.sends + 1,
            token,
            released,
            // Only the wall-clock rule reads it; a constant otherwise keeps
            // states that differ in nothing else merged.
            expires_wall: match self.expiry {
                ExpiryRule::Observed => 0,
                ExpiryRule::WallClock { .. } => self.wall(c, s.lease.now) + self.ttl,
            },
        }
    }

    /// The write `req` came back ambiguous (lost answer, 5xx, timeout):
    /// resolved by reading the record at once.
    fn ambiguous(&self, s: &mut State, c: usize, req: RecordReq) {
        let Some(body) = req.op.body() else {
            s.lease.clients[c] = Phase::Idle;
            return;
        };
        let ours = |rec: &Record| match self.resolution {
            Resolution::Nonce => rec.body.nonce == body.nonce,
            Resolution::OwnerAndToken => {
                rec.body.owner == c as u8 && rec.body.token == body.token && !rec.body.released
            }
            Resolution::AssumeWon => true,
            Resolution::AssumeLost => false,
        };
        let read = match (self.resolution, s.store) {
            (Resolution::AssumeWon, _) => ReadBack::Ours { version: 0 },
            (_, Some(rec)) if ours(&rec) => ReadBack::Ours {
                version: rec.version,
            },
            (_, Some(rec)) => ReadBack::Other {
                version: rec.version,
            },
            (_, None) => ReadBack::Nothing,
        };
        let expected = match req.op {
            Op::Replace { expected, .. } => Some(expected),
            Op::Create(_) | Op::Delete { .. } => None,
        };
        s.lease
            .settle(&self.clocks, c, read, expected, body.token, req.sent);
    }

    /// The answer to `req` arrived.
    fn deliver(&self, s: &mut State, c: usize, req: RecordReq) {
        match (req.outcome, req.op.body()) {
            (Outcome::Ok(version), Some(body)) => {
                s.lease
                    .grant(&self.clocks, c, version, body.token, req.sent)
            }
            // Precondition failed: not acquired, or (renewal) lost at once.
            _ => s.lease.clients[c] = Phase::Idle,
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            lease: Lease::new(),
            next_version: 1,
            store: None,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.lease.now < self.max_ticks {
            actions.push(Action::Tick);
        }
        for c in 0..CLIENTS {
            s.lease.actions(c, s.lease.sends < self.max_sends, actions);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => s.lease.now += 1,
            Action::Read(c) => match (s.store, s.lease.clients[c]) {
                (None, _) => {
                    if s.lease.sends >= self.max_sends {
                        return None;
                    }
                    let op = Op::Create(self.body(&s, c, 1, false));
                    s.lease.clients[c] = Phase::Acquiring(s.lease.send(op));
                }
                // A landed write of ours (as the shared memory claims):
                // renew it, keeping its token, as `try_acquire` does.
                (Some(rec), _) if !rec.body.released && self.remembers(&s, c, rec.body.nonce) => {
                    if s.lease.sends >= self.max_sends {
                        return None;
                    }
                    let body = self.body(&s, c, rec.body.token, false);
                    let op = Op::Replace {
                        expected: rec.version,
                        body,
                    };
                    s.lease.clients[c] = Phase::Acquiring(s.lease.send(op));
                }
                (Some(rec), _) if rec.body.released => {
                    if s.lease.sends >= self.max_sends {
                        return None;
                    }
                    let body = self.body(&s, c, rec.body.token + 1, false);
                    let op = Op::Replace {
                        expected: rec.version,
                        body,
                    };
                    s.lease.clients[c] = Phase::Acquiring(s.lease.send(op));
                }
                // Same version again: keep observing from the first sighting.
                (Some(rec), Phase::Watching { version, .. }) if version == rec.version => {
                    return None;
                }
                (Some(rec), _) => {
                    s.lease.clients[c] = Phase::Watching {
                        version: rec.version,
                        token: rec.body.token,
                        since: s.lease.now,
                        expires_wall: rec.body.expires_wall,
                    }
                }
            },
            Action::Takeover(c) => {
                let Phase::Watching {
                    version,
                    token,
                    since,
                    expires_wall,
                } = s.lease.clients[c]
                else {
                    return None;
                };
                let allowed = match self.expiry {
                    ExpiryRule::Observed => s.lease.now >= since + self.clocks.wait[c],
                    ExpiryRule::WallClock { declared_skew } => {
                        s.lease.now >= since + self.clocks.wait[c]
                            || self.wall(c, s.lease.now) >= expires_wall + declared_skew
                    }
                };
                if !allowed {
                    return None;
                }
                let body = self.body(&s, c, token + 1, false);
                let op = Op::Replace {
                    expected: version,
                    body,
                };
                s.lease.clients[c] = Phase::Acquiring(s.lease.send(op));
            }
            Action::Reacquire(c) => {
                let (version, token) = s.lease.released[c].take()?;
                let body = self.body(&s, c, token + self.reacquire_increment, false);
                let op = Op::Replace {
                    expected: version,
                    body,
                };
                s.lease.clients[c] = Phase::Acquiring(s.lease.send(op));
            }
            Action::Renew(c) => {
                let Phase::Holding {
                    version,
                    token,
                    valid_until,
                    renew: None,
                } = s.lease.clients[c]
                else {
                    return None;
                };
                if version == 0 {
                    return None;
                }
                let body = self.body(&s, c, token, false);
                let req = s.lease.send(Op::Replace {
                    expected: version,
                    body,
                });
                s.lease.clients[c] = Phase::Holding {
                    version,
                    token,
                    valid_until,
                    renew: Some(req),
                };
            }
            Action::Release(c) => {
                let Phase::Holding { version, token, .. } = s.lease.clients[c] else {
                    return None;
                };
                if version == 0 {
                    return None;
                }
                let op = match self.release {
                    ReleaseRule::MarkReleased => Op::Replace {
                        expected: version,
                        body: self.body(&s, c, token, true),
                    },
                    ReleaseRule::Delete => Op::Delete { expected: version },
                };
                // The handle is gone: no more belief, whatever the answer
                // (a release that never arrives is a holder that stopped).
                s.lease.sends += 1;
                let outcome = apply(&mut s, op);
                s.lease.clients[c] = Phase::Idle;
                if let (ReleaseRule::MarkReleased, Outcome::Ok(released)) = (self.release, outcome)
                {
                    s.lease.released[c] = Some((released, token));
                }
            }
            Action::StepDown(c) => {
                s.lease.clients[c] = Phase::Idle;
            }
            Action::Apply(c) => {
                let mut phase = s.lease.clients[c];
                let req = phase.in_flight()?;
                req.outcome = apply(&mut s, req.op);
                s.lease.clients[c] = phase;
            }
            Action::Deliver(c) => {
                let req = *s.lease.clients[c].in_flight()?;
                self.deliver(&mut s, c, req);
            }
            Action::LoseResponse(c) | Action::ServerError(c) => {
                let req = *s.lease.clients[c].in_flight()?;
                self.ambiguous(&mut s, c, req);
            }
            // The record layout has no collection (never offered).
            Action::Collect(_) => return None,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        lease_properties()
    }
}

#[test]
fn correct_protocol_has_no_counterexample() {
    expect_no_counterexample("model correct", LeaseModel::correct());
}

#[test]
fn wall_clock_rule_within_declared_skew_has_no_counterexample() {
    let model = LeaseModel {
        expiry: ExpiryRule::WallClock { declared_skew: 2 },
        ..LeaseModel::correct()
    };
    expect_no_counterexample("model wall clock, declared skew 2", model);
}

#[test]
fn ambiguous_write_assumed_won_breaks_mutual_exclusion() {
    let model = LeaseModel {
        resolution: Resolution::AssumeWon,
        ..LeaseModel::correct()
    };
    expect_counterexample("model assume won", model, "mutual exclusion");
}

#[test]
fn ambiguous_write_resolved_by_owner_breaks_mutual_exclusion() {
    let model = LeaseModel {
        resolution: Resolution::OwnerAndToken,
        ..LeaseModel::correct()
    };
    expect_counterexample("model owner instead of nonce", model, "mutual exclusion");
}

#[test]
fn ambiguous_write_assumed_lost_is_safe_but_wasteful() {
    // Assuming loss never makes two holders: the cost is a lease nobody
    // uses until a contender waits it out. The model confirms it.
    let model = LeaseModel {
        resolution: Resolution::AssumeLost,
        ..LeaseModel::correct()
    };
    expect_no_counterexample("model assume lost", model);
}

#[test]
fn delete_on_release_resets_the_token() {
    let model = LeaseModel {
        release: ReleaseRule::Delete,
        ..LeaseModel::correct()
    };
    expect_counterexample("model delete on release", model, "fencing tokens increase");
}

#[test]
fn wall_clock_expiry_under_skew_breaks_mutual_exclusion() {
    // Contender 1's wall clock runs 2 ahead of client 0's; nothing allows
    // for it.
    let model = LeaseModel {
        expiry: ExpiryRule::WallClock { declared_skew: 0 },
        ..LeaseModel::correct()
    };
    expect_counterexample(
        "model wall clock, skew undeclared",
        model,
        "mutual exclusion",
    );
}

#[test]
fn drift_beyond_the_bound_breaks_mutual_exclusion() {
    // Client 0's clock runs at half speed: beyond the 25% the margins cover.
    let model =
        LeaseModel::with_clocks(Clocks::timing(f64::from(TTL), DRIFT, 0.0, [0.5, 1.25, 1.0]));
    expect_counterexample("model drift beyond bound", model, "mutual exclusion");
}

#[test]
fn nonce_memory_shared_by_two_tasks_breaks_mutual_exclusion() {
    // Task 0's create lands, its answer still in flight; task 1 reads the
    // record, finds task 0's nonce among "ours" and renews it; then task 0's
    // answer arrives. Both hold.
    let model = LeaseModel {
        shared_task_memory: true,
        ..LeaseModel::correct()
    };
    expect_counterexample("model shared task memory", model, "mutual exclusion");
}

#[test]
fn reacquiring_from_our_release_with_its_token_repeats_the_token() {
    // Client 0 releases at token 1 and replaces its release's version with
    // token 1 again: a second holding with the same token.
    let model = LeaseModel {
        reacquire_increment: 0,
        ..LeaseModel::correct()
    };
    expect_counterexample(
        "model reacquire with the released token",
        model,
        "fencing tokens increase",
    );
}

#[test]
fn no_holder_margin_breaks_mutual_exclusion() {
    // Holders and contenders both count a bare TTL: no drift margin.
    let model = LeaseModel::with_clocks(Clocks::timing(f64::from(TTL), 0.0, 0.0, RATES));
    expect_counterexample("model no holder margin", model, "mutual exclusion");
}

// ---------------------------------------------------------------------------
// Write-and-resolve: exactly-once updates through ambiguous answers.
//
// The lease model above settles each ambiguous write at once. This model
// checks the write-and-resolve rules every primitive relies on, on the case
// that needs them most: a non-idempotent update (`FencedResource::update`
// with an increment), by two tasks of one participant, against a store that
// keeps any write once sent. A write is sent with a fresh nonce and lands
// (or is refused by its precondition) at any later step — also after its
// sender gave up on it. Its answer may arrive, be lost (ambiguous), come
// back 412 although it landed (a transport duplicate of our own write), or
// never come (a timeout: ambiguous, the write still in flight). After an
// ambiguous or 412 answer the task reads back, and the read may fail.
//
// The rules (each removed by one mutation below):
// - every nonce a task sent is remembered until the update returns, and an
//   attempt first checks whether the stored nonce is one of them
//   (`Memory::AllAttempts`);
// - that memory is per task: one task never claims another's write
//   (`Memory::PerTask`);
// - a 412 is resolved by reading, like an ambiguous answer: a write of an
//   earlier attempt may have landed;
// - a failed read-back ends the update as ambiguous (never a blind retry);
// - a new attempt, and a read-back that shows another writer's record (the
//   version changed; a lost race), go on only if no write of this update
//   may have landed: every earlier write was refused outright, or the
//   record is still at the version they all expect. Otherwise it ends the
//   update as ambiguous: ours may have landed and been overwritten since.
//   Where a 412 can be our own write's transport duplicate, a 412 resolves
//   nothing, and it is never taken as "not applied";
// - an update that gives up reports "not applied" only if every write it
//   sent was refused outright; otherwise ambiguous.
//
// Properties: no update is applied twice; an update reported applied was
// applied (once); an update reported as not applied never lands.
// ---------------------------------------------------------------------------

const TASKS: usize = 2;

/// Which of its nonces a task recognises as its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Memory {
    /// The rule: every nonce this task sent during this update.
    AllAttempts,
    /// Mutation: only the current attempt's nonce.
    CurrentAttempt,
    /// Mutation: every nonce any task of the participant sent (a memory
    /// shared by clones without ownership).
    Shared,
}

#[derive(Clone, Debug)]
struct UpdateModel {
    memory: Memory,
    /// A landed write may be answered 412 by its own transport duplicate.
    duplicates: bool,
    /// Mutation: a new attempt (or a lost race) goes on although an
    /// unresolved write of ours may have landed and been overwritten.
    retry_any_lost_race: bool,
    /// Mutation: a 412 means "not applied": forget the nonce and retry.
    precondition_is_definite: bool,
    /// Mutation: a failed read-back is swallowed and the write taken as not
    /// landed.
    retry_after_failed_read: bool,
    /// Mutation: after an ambiguous answer, a read-back showing another
    /// writer's record is taken as "ours did not land".
    retry_after_overwritten: bool,
    max_sends: u8,
    max_attempts: u8,
}

impl UpdateModel {
    fn correct() -> Self {
        UpdateModel {
            memory: Memory::AllAttempts,
            duplicates: false,
            retry_any_lost_race: false,
            precondition_is_definite: false,
            retry_after_failed_read: false,
            retry_after_overwritten: false,
            max_sends: bound("MODEL_UPDATE_SENDS", 4),
            max_attempts: 3,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Counter {
    version: u8,
    value: u8,
    nonce: u8,
}

/// A write on the network: it lands (or is refused) at any later step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Sent {
    task: u8,
    nonce: u8,
    /// `None`: create-if-absent.
    expected: Option<u8>,
    value: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Told {
    Ok,
    Ambiguous,
    /// Reported as not applied (gave up).
    NotApplied,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    /// About to start an attempt (read, then write).
    Ready,
    /// Waiting for the answer to the write with `nonce`; `landed` once the
    /// store handled it (`Some(true)`: applied).
    Waiting {
        nonce: u8,
        expected: Option<u8>,
        landed: Option<bool>,
    },
    /// An ambiguous (`refused: false`) or 412 answer to the write with
    /// `nonce`: read back.
    Resolving {
        nonce: u8,
        expected: Option<u8>,
        refused: bool,
    },
    Done(Told),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct TaskState {
    step: Step,
    attempts: u8,
    /// Nonces this task recognises as its own (bit n = nonce n).
    mine: u16,
    /// Nonces of its writes whose fate it does not know.
    unknown: u16,
    /// The version its last write expected (`None`: absent). Every write of
    /// `unknown` expects it: a new attempt is made only while it is current.
    expected: Option<u8>,
    /// How many of this task's writes the store applied.
    applied: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct UpdateState {
    store: Option<Counter>,
    next_version: u8,
    sends: u8,
    net: Vec<Sent>,
    tasks: [TaskState; TASKS],
    /// A write landed after its sender stopped waiting for it.
    landed_late: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpdateAction {
    /// Task reads and, unless the stored nonce is its own, sends a write.
    Attempt(usize),
    /// The write at this index of `net` reaches the store.
    Land(usize),
    /// The task's answer arrives as the store gave it.
    Answer(usize),
    /// The answer is lost, or never comes in time: ambiguous.
    Ambiguous(usize),
    /// The write landed but a duplicate of it answers 412.
    Duplicate(usize),
    /// The read-back succeeds.
    ReadBack(usize),
    /// The read-back fails.
    ReadBackFails(usize),
}

impl UpdateModel {
    fn recognises(&self, s: &UpdateState, task: usize, nonce: u8) -> bool {
        let bit = 1u16 << nonce;
        match self.memory {
            Memory::Shared => s.tasks.iter().any(|t| t.mine & bit != 0),
            Memory::AllAttempts | Memory::CurrentAttempt => s.tasks[task].mine & bit != 0,
        }
    }

    fn stored_is_mine(&self, s: &UpdateState, task: usize) -> bool {
        s.store.is_some_and(|r| self.recognises(s, task, r.nonce))
    }

    /// Another attempt, or give up once the attempts are spent (ambiguous
    /// if a write of ours may still land, which the task cannot rule out
    /// once it sent one).
    fn retry(&self, s: &mut UpdateState, task: usize) {
        let t = &mut s.tasks[task];
        t.step = if t.attempts < self.max_attempts {
            Step::Ready
        } else if t.unknown != 0 {
            Step::Done(Told::Ambiguous)
        } else {
            Step::Done(Told::NotApplied)
        };
    }
}

impl Model for UpdateModel {
    type State = UpdateState;
    type Action = UpdateAction;

    fn init_states(&self) -> Vec<UpdateState> {
        vec![UpdateState {
            store: None,
            next_version: 1,
            sends: 0,
            net: Vec::new(),
            tasks: [TaskState {
                step: Step::Ready,
                attempts: 0,
                mine: 0,
                unknown: 0,
                expected: None,
                applied: 0,
            }; TASKS],
            landed_late: false,
        }]
    }

    fn actions(&self, s: &UpdateState, actions: &mut Vec<UpdateAction>) {
        for i in 0..s.net.len() {
            actions.push(UpdateAction::Land(i));
        }
        for t in 0..TASKS {
            match s.tasks[t].step {
                Step::Ready => actions.push(UpdateAction::Attempt(t)),
                Step::Waiting { landed, .. } => {
                    actions.push(UpdateAction::Ambiguous(t));
                    if landed.is_some() {
                        actions.push(UpdateAction::Answer(t));
                    }
                    if landed == Some(true) && self.duplicates {
                        actions.push(UpdateAction::Duplicate(t));
                    }
                }
                Step::Resolving { .. } => {
                    actions.push(UpdateAction::ReadBack(t));
                    actions.push(UpdateAction::ReadBackFails(t));
                }
                Step::Done(_) => {}
            }
        }
    }

    fn next_state(&self, last: &UpdateState, action: UpdateAction) -> Option<UpdateState> {
        let mut s = last.clone();
        match action {
            UpdateAction::Attempt(t) => {
                if self.stored_is_mine(&s, t) {
                    // An earlier write of ours landed after all.
                    s.tasks[t].step = Step::Done(Told::Ok);
                    return Some(s);
                }
                let current = s.store.map(|r| r.version);
                if s.tasks[t].unknown != 0
                    && current != s.tasks[t].expected
                    && !self.retry_any_lost_race
                {
                    // Moved on, not to ours: an unresolved write of ours may
                    // have landed and been overwritten.
                    s.tasks[t].step = Step::Done(Told::Ambiguous);
                    return Some(s);
                }
                if s.sends >= self.max_sends {
                    return None;
                }
                s.sends += 1;
                let nonce = s.sends;
                let (expected, value) = match s.store {
                    None => (None, 1),
                    Some(r) => (Some(r.version), r.value + 1),
                };
                s.net.push(Sent {
                    task: t as u8,
                    nonce,
                    expected,
                    value,
                });
                let task = &mut s.tasks[t];
                task.attempts += 1;
                task.expected = expected;
                (task.mine, task.unknown) = match self.memory {
                    Memory::CurrentAttempt => (1 << nonce, 1 << nonce),
                    Memory::AllAttempts | Memory::Shared => {
                        (task.mine | 1 << nonce, task.unknown | 1 << nonce)
                    }
                };
                task.step = Step::Waiting {
                    nonce,
                    expected,
                    landed: None,
                };
            }
            UpdateAction::Land(i) => {
                let w = s.net.remove(i);
                let applies = match (w.expected, s.store) {
                    (None, None) => true,
                    (Some(v), Some(r)) => r.version == v,
                    _ => false,
                };
                if applies {
                    s.store = Some(Counter {
                        version: s.next_version,
                        value: w.value,
                        nonce: w.nonce,
                    });
                    s.next_version += 1;
                    s.tasks[w.task as usize].applied += 1;
                }
                let task = &mut s.tasks[w.task as usize];
                match &mut task.step {
                    Step::Waiting { nonce, landed, .. } if *nonce == w.nonce => {
                        *landed = Some(applies);
                    }
                    _ => s.landed_late |= applies,
                }
            }
            UpdateAction::Answer(t) => {
                let Step::Waiting {
                    nonce,
                    expected,
                    landed: Some(applied),
                } = s.tasks[t].step
                else {
                    return None;
                };
                if applied {
                    s.tasks[t].step = Step::Done(Told::Ok);
                    return Some(s);
                }
                if !self.duplicates {
                    // The only copy was refused: it never lands.
                    s.tasks[t].unknown &= !(1 << nonce);
                }
                if self.precondition_is_definite {
                    s.tasks[t].mine &= !(1 << nonce);
                    s.tasks[t].unknown &= !(1 << nonce);
                    self.retry(&mut s, t);
                } else {
                    s.tasks[t].step = Step::Resolving {
                        nonce,
                        expected,
                        refused: true,
                    };
                }
            }
            UpdateAction::Duplicate(t) => {
                let Step::Waiting {
                    nonce, expected, ..
                } = s.tasks[t].step
                else {
                    return None;
                };
                if self.precondition_is_definite {
                    s.tasks[t].mine &= !(1 << nonce);
                    s.tasks[t].unknown &= !(1 << nonce);
                    self.retry(&mut s, t);
                } else {
                    s.tasks[t].step = Step::Resolving {
                        nonce,
                        expected,
                        refused: true,
                    };
                }
            }
            UpdateAction::Ambiguous(t) => {
                let Step::Waiting {
                    nonce, expected, ..
                } = s.tasks[t].step
                else {
                    return None;
                };
                // The write, if still on the network, stays there.
                s.tasks[t].step = Step::Resolving {
                    nonce,
                    expected,
                    refused: false,
                };
            }
            UpdateAction::ReadBack(t) => {
                let Step::Resolving {
                    nonce,
                    expected,
                    refused,
                } = s.tasks[t].step
                else {
                    return None;
                };
                let unchanged = s.store.map(|r| r.version) == expected;
                if self.stored_is_mine(&s, t) {
                    s.tasks[t].step = Step::Done(Told::Ok);
                } else if !refused && !unchanged && self.retry_after_overwritten {
                    // Mutation: taken as "ours did not land".
                    s.tasks[t].unknown &= !(1 << nonce);
                    self.retry(&mut s, t);
                } else if unchanged
                    || (refused && (s.tasks[t].unknown == 0 || self.retry_any_lost_race))
                {
                    // Unchanged: ours has not landed; if it still does, the
                    // next attempt (same expected version) finds it. Or a
                    // lost race with nothing of ours unresolved: retried.
                    self.retry(&mut s, t);
                } else {
                    s.tasks[t].step = Step::Done(Told::Ambiguous);
                }
            }
            UpdateAction::ReadBackFails(t) => {
                if self.retry_after_failed_read {
                    // Mutation: the failure swallowed, the write taken as
                    // not landed.
                    if let Step::Resolving { nonce, .. } = s.tasks[t].step {
                        s.tasks[t].unknown &= !(1 << nonce);
                    }
                    self.retry(&mut s, t);
                } else {
                    s.tasks[t].step = Step::Done(Told::Ambiguous);
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("never applied twice", |_, s: &UpdateState| {
                s.tasks.iter().all(|t| t.applied <= 1)
            }),
            Property::always("reported applied was applied", |_, s: &UpdateState| {
                s.tasks.iter().enumerate().all(|(i, t)| {
                    t.step != Step::Done(Told::Ok)
                        || t.applied == 1
                        || s.net.iter().any(|w| w.task as usize == i)
                })
            }),
            Property::always("reported not applied never lands", |_, s: &UpdateState| {
                s.tasks
                    .iter()
                    .all(|t| t.step != Step::Done(Told::NotApplied) || t.applied == 0)
            }),
            // Not vacuous: a write lands after its sender gave up on it, and
            // both tasks can finish with their increment applied.
            Property::sometimes("a write lands late", |_, s: &UpdateState| s.landed_late),
            Property::sometimes("both applied", |_, s: &UpdateState| {
                s.tasks
                    .iter()
                    .all(|t| t.step == Step::Done(Told::Ok) && t.applied == 1)
            }),
        ]
    }
}

#[test]
fn write_and_resolve_applies_each_update_at_most_once() {
    expect_no_counterexample("update model correct", UpdateModel::correct());
}

#[test]
fn remembering_only_the_current_attempt_applies_twice() {
    let model = UpdateModel {
        memory: Memory::CurrentAttempt,
        ..UpdateModel::correct()
    };
    expect_counterexample(
        "update model current attempt only",
        model,
        "never applied twice",
    );
}

#[test]
fn nonce_memory_shared_between_tasks_claims_anothers_write() {
    let model = UpdateModel {
        memory: Memory::Shared,
        ..UpdateModel::correct()
    };
    expect_counterexample(
        "update model shared memory",
        model,
        "reported applied was applied",
    );
}

#[test]
fn write_and_resolve_is_exactly_once_when_412_can_be_our_duplicate() {
    let model = UpdateModel {
        duplicates: true,
        ..UpdateModel::correct()
    };
    expect_no_counterexample("update model correct, duplicates", model);
}

#[test]
fn retrying_a_lost_race_with_a_write_unresolved_applies_twice() {
    // An earlier attempt's write lands late, the other task overwrites it,
    // and the current attempt's 412 looks like a plain lost race.
    let model = UpdateModel {
        retry_any_lost_race: true,
        ..UpdateModel::correct()
    };
    expect_counterexample(
        "update model retry any lost race",
        model,
        "never applied twice",
    );
}

#[test]
fn a_412_taken_as_not_applied_applies_twice() {
    let model = UpdateModel {
        duplicates: true,
        precondition_is_definite: true,
        ..UpdateModel::correct()
    };
    expect_counterexample("update model 412 is definite", model, "never applied twice");
}

#[test]
fn retrying_after_a_failed_read_back_applies_twice() {
    let model = UpdateModel {
        retry_after_failed_read: true,
        ..UpdateModel::correct()
    };
    expect_counterexample(
        "update model retry after failed read",
        model,
        "never applied twice",
    );
}

#[test]
fn retrying_after_an_overwritten_read_back_applies_twice() {
    let model = UpdateModel {
        retry_after_overwritten: true,
        ..UpdateModel::correct()
    };
    expect_counterexample(
        "update model retry after overwrite",
        model,
        "never applied twice",
    );
}

// ---------------------------------------------------------------------------
// The epoch layout (`casaas_core::layout`): the lease protocol on a store
// that only creates if absent.
//
// Every write of the lease creates the next epoch object; the lease's
// version is the head epoch, and "replace from version e" is "create epoch
// e + 1 if absent". The lease rules above (nonce resolution, validity from
// the send, takeover after observing one version for the wait) run on it
// unchanged, with the same clocks and timing. What this model adds is the
// chain itself and its garbage collection:
//
// - **Store**: epoch slots 1..=N, each absent or `{writer, nonce, token,
//   released}`, and one collection marker per block. Block size 1 (each
//   epoch is its own block) and keep 1, as `EpochStore::with_collection(_,
//   1, 1)`: a writer whose confirmed head is `h` collects the epochs below
//   `h - 1` (an epoch `e` once `h >= e + 2`), marker first, then the epoch.
//   Collection is a background task of the writer's view: each marker and
//   each delete is a step of its own, interleaved with everything else.
// - **Writes**: "create epoch e + 1 if absent", sent at a tick, applied at
//   any later step — also after its slot was collected, landing in
//   collected history — then answered, or the answer lost (ambiguous), or
//   a 5xx without applying (ambiguous). A successful create counts only if
//   its block's marker then reads absent (the write-side rule); otherwise
//   it is a lost race. Every refused, unconfirmed or ambiguous write is
//   resolved by reading the head for its nonce, as the lease does.
// - **Reads**: each client's view remembers the last head it confirmed
//   (with the record it read there), and a head search starts from it,
//   else from a listing (the highest epoch present). The candidate `e`
//   is taken as the head only if `e` exists, `e + 1` does not, and the
//   markers of both blocks read absent (the read-side rule); otherwise the
//   search lists again, at most three times, then gives up (the read is
//   ambiguous; the client does nothing). A contender keeps the head it
//   read, and what its view remembers, across any pause.
//
// A head search is evaluated at one instant. That loses no behaviour of the
// real search, which reads epochs first and markers last: markers are never
// deleted, so markers read absent at the end were absent throughout, no
// epoch the search read was deleted meanwhile, and what it saw is what an
// instantaneous read at its `e + 1` probe would have seen. (Churn that sends
// a real search back to a listing more often only makes it give up sooner,
// which changes nothing.)
//
// Properties: mutual exclusion and increasing fencing tokens, as in the
// record model; plus `sometimes` properties (a takeover; a create landing in
// collected history) so that the model is not vacuous.
//
// Bounds: two clients (the slow and the fast clock), 5 writes and 6 ticks —
// a create landing in collected history takes 4 writes, the fifth lets a
// contender act on a head its view remembers from before a collection —
// and three clients with 3 writes, for two contenders racing for a stopped
// holder's lease.
//
// The rules, each removed by a mutation test that asserts a counterexample:
// the store creates only if absent; every write takes a fresh epoch number;
// collection marks a block before it deletes the block's epochs (removed
// alone, and together with the keep margin so that the live term itself is
// collected); a create counts only if its block's marker reads absent
// after it. Without the read-side rule the protocol stays safe (a test
// checks it): that rule keeps reads true, the write-side rule keeps two
// holders apart.
// ---------------------------------------------------------------------------

/// Epoch slots; slot 0 is never written (the chain starts at epoch 1).
const EPOCH_SLOTS: usize = 8;
/// Listings a head search makes before it gives up (`MAX_LISTINGS`).
const MAX_LISTINGS: u8 = 3;

/// What the store does with a create of an epoch that exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreCreate {
    /// The store's promise: create-if-absent refuses it.
    IfAbsent,
    /// Mutation: the store ignores the condition and overwrites.
    Overwrites,
}

/// Which epoch a renewal writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RenewEpoch {
    /// The rule: every write takes a fresh number, `head + 1`.
    Next,
    /// Mutation: the holder rewrites its head epoch with a plain write, a
    /// number it has seen exist, and believes the write won.
    Reuse,
}

/// Which epochs a collection deletes, for a confirmed head `h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Collection {
    /// The rule: the blocks below `(h - keep) / block`, keep 1, block 1:
    /// epochs below `h - 1`.
    KeepOne,
    /// Mutation: no keep margin, the epoch right below the head too.
    BelowHead,
    /// Mutation: the live term, the head itself, too.
    ThroughHead,
}

#[derive(Clone, Debug)]
struct EpochModel {
    /// Clients that take steps (the others stay idle).
    clients: usize,
    clocks: Clocks,
    max_ticks: u8,
    max_sends: u8,
    create: StoreCreate,
    renew: RenewEpoch,
    collection: Collection,
    /// The rule: a block's marker is created before its epochs are deleted.
    markers: bool,
    /// The write-side rule: a create counts only if its block's marker
    /// reads absent after it.
    write_check: bool,
    /// The read-side rule: a head candidate counts only if the markers of
    /// its block and its successor's read absent.
    read_check: bool,
}

impl EpochModel {
    /// The epoch layout as designed, on the record model's clocks and
    /// timing: clients 0 and 1, 6 ticks and 5 writes unless
    /// `MODEL_CLIENTS` / `MODEL_EPOCH_TICKS` / `MODEL_EPOCH_SENDS`
    /// say otherwise. Four writes is the fewest for a create to land in
    /// collected history (a create, a second create delayed, two renewals
    /// that move the head to 3 and collect epoch 1).
    fn correct() -> Self {
        EpochModel {
            clients: usize::from(bound("MODEL_CLIENTS", 2)).min(CLIENTS),
            clocks: Clocks::correct(),
            max_ticks: bound("MODEL_EPOCH_TICKS", 6),
            max_sends: bound("MODEL_EPOCH_SENDS", 5).min(EPOCH_SLOTS as u8 - 2),
            create: StoreCreate::IfAbsent,
            renew: RenewEpoch::Next,
            collection: Collection::KeepOne,
            markers: true,
            write_check: true,
            read_check: true,
        }
    }

    /// Races between two contenders and a holder: three clients, 3 writes
    /// (`MODEL_EPOCH_RACE_SENDS`), too few for a collection to meet a late
    /// create.
    fn three_clients() -> Self {
        EpochModel {
            clients: 3,
            max_sends: bound("MODEL_EPOCH_RACE_SENDS", 3).min(EPOCH_SLOTS as u8 - 2),
            ..Self::correct()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Epoch {
    writer: u8,
    nonce: u8,
    token: u8,
    released: bool,
}

/// One write: epoch `epoch` with `body`, made from the head `from` (the
/// lease version the write replaces; 0 for the first create).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct EpochWrite {
    epoch: u8,
    from: u8,
    body: Epoch,
    /// A plain write (overwrites), not create-if-absent.
    plain: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Created {
    Pending,
    Ok,
    /// Refused: the epoch exists.
    Exists,
}

impl Answer for Created {
    const PENDING: Self = Created::Pending;
}

type EpochReq = Req<EpochWrite, Created>;

/// What one client's epoch view remembers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct View {
    /// The last head it confirmed, with the record it read there (a
    /// search from it does not read that epoch again).
    known: Option<(u8, Epoch)>,
    /// A collection is running for the epochs below this one (0: none).
    collecting_below: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EpochState {
    lease: Lease<EpochWrite, Created>,
    slots: [Option<Epoch>; EPOCH_SLOTS],
    /// Bit `e`: block (= epoch) `e` is marked collected.
    markers: u8,
    views: [View; CLIENTS],
    /// A create landed in a collected slot.
    landed_in_history: bool,
}

impl HasLease for EpochState {
    type Write = EpochWrite;
    type Answer = Created;
    fn lease(&self) -> &Lease<EpochWrite, Created> {
        &self.lease
    }
}

impl EpochState {
    fn marked(&self, epoch: u8) -> bool {
        self.markers & (1 << epoch) != 0
    }

    fn slot(&self, epoch: u8) -> Option<Epoch> {
        self.slots.get(usize::from(epoch)).copied().flatten()
    }

    /// The highest epoch a listing shows (0 if none).
    fn listed_head(&self) -> u8 {
        (1..EPOCH_SLOTS as u8)
            .rev()
            .find(|&e| self.slot(e).is_some())
            .unwrap_or(0)
    }
}

impl EpochModel {
    fn body(&self, s: &EpochState, c: usize, token: u8, released: bool) -> Epoch {
        Epoch {
            writer: c as u8,
            nonce: s.lease.sends + 1,
            token,
            released,
        }
    }

    /// The create of the next epoch after `from`.
    fn next(&self, s: &EpochState, c: usize, from: u8, token: u8, released: bool) -> EpochWrite {
        EpochWrite {
            epoch: from + 1,
            from,
            body: self.body(s, c, token, released),
            plain: false,
        }
    }

    /// `find_head` of `c`'s view: `Ok(None)` for no chain, `Err` when the
    /// search gives up.
    fn find_head(&self, s: &EpochState, c: usize) -> Result<Option<(u8, Epoch)>, ()> {
        let mut listings = 0;
        let (mut epoch, mut body) = match s.views[c].known {
            Some((e, b)) => (e, Some(b)),
            None => {
                listings += 1;
                (s.listed_head(), None)
            }
        };
        loop {
            let relist = |listings: &mut u8| {
                *listings += 1;
                if *listings > MAX_LISTINGS {
                    Err(())
                } else {
                    Ok((s.listed_head(), None))
                }
            };
            if body.is_none() && epoch > 0 {
                match s.slot(epoch) {
                    Some(b) => body = Some(b),
                    None => {
                        (epoch, body) = relist(&mut listings)?;
                        continue;
                    }
                }
            }
            if let Some(b) = s.slot(epoch + 1) {
                epoch += 1;
                body = Some(b);
                continue;
            }
            let collected = s.marked(epoch + 1) || (epoch > 0 && s.marked(epoch));
            if self.read_check && collected {
                (epoch, body) = relist(&mut listings)?;
                continue;
            }
            return Ok(body.filter(|_| epoch > 0).map(|b| (epoch, b)));
        }
    }

    fn learn(s: &mut EpochState, c: usize, epoch: u8, body: Epoch) {
        let view = &mut s.views[c];
        if view.known.is_none_or(|(e, _)| e <= epoch) {
            view.known = Some((epoch, body));
        }
    }

    /// Applies `write` to the store atomically; what the store answers.
    fn apply(&self, s: &mut EpochState, write: EpochWrite) -> Created {
        let i = usize::from(write.epoch);
        if s.slots[i].is_some() && !write.plain && self.create == StoreCreate::IfAbsent {
            return Created::Exists;
        }
        if s.slots[i].is_none() && s.marked(write.epoch) {
            s.landed_in_history = true;
        }
        s.slots[i] = Some(write.body);
        Created::Ok
    }

    /// The first epoch collection leaves alone, for a confirmed head.
    fn collect_end(&self, head: u8) -> u8 {
        match self.collection {
            Collection::KeepOne => head.saturating_sub(1),
            Collection::BelowHead => head,
            Collection::ThroughHead => head + 1,
        }
    }

    /// The next step of a collection of the epochs below `end`: every
    /// marker first, then the deletes.
    fn collect_step(&self, s: &EpochState, end: u8) -> Option<(u8, bool)> {
        (1..end)
            .find(|&e| self.markers && !s.marked(e))
            .map(|e| (e, true))
            .or_else(|| (1..end).find(|&e| s.slot(e).is_some()).map(|e| (e, false)))
    }

    /// A write of `c` was confirmed at `head`: the view learns it and
    /// starts collecting, unless a collection is running or there is
    /// nothing to do.
    fn confirmed(&self, s: &mut EpochState, c: usize, head: u8, body: Epoch) {
        Self::learn(s, c, head, body);
        let end = self.collect_end(head);
        if s.views[c].collecting_below == 0 && self.collect_step(s, end).is_some() {
            s.views[c].collecting_below = end;
        }
    }

    /// A write whose answer was not a confirmed win (refused, landed in
    /// collected history, lost, 5xx): the view forgets its head, and the
    /// lease reads for the write's nonce.
    fn resolve(&self, s: &mut EpochState, c: usize, req: EpochReq) {
        s.views[c].known = None;
        let read = match self.find_head(s, c) {
            Ok(Some((epoch, body))) => {
                Self::learn(s, c, epoch, body);
                if body.nonce == req.op.body.nonce {
                    ReadBack::Ours { version: epoch }
                } else {
                    ReadBack::Other { version: epoch }
                }
            }
            Ok(None) | Err(()) => ReadBack::Nothing,
        };
        let (from, token) = (req.op.from, req.op.body.token);
        s.lease
            .settle(&self.clocks, c, read, Some(from), token, req.sent);
    }

    /// Merges states that differ only in times that no longer matter: a
    /// wait already served, a validity already over, a write sent too long
    /// ago to grant anything.
    fn forget_expired(&self, s: &mut EpochState) {
        let now = s.lease.now;
        for c in 0..CLIENTS {
            let stale = now.saturating_sub(self.clocks.hold[c]);
            let served = now.saturating_sub(self.clocks.wait[c]);
            match &mut s.lease.clients[c] {
                Phase::Watching { since, .. } => *since = (*since).max(served),
                Phase::Acquiring(req) => req.sent = req.sent.max(stale),
                Phase::Holding {
                    valid_until, renew, ..
                } => {
                    if *valid_until <= now {
                        *valid_until = 0;
                    }
                    if let Some(req) = renew {
                        req.sent = req.sent.max(stale);
                    }
                }
                Phase::Idle => {}
            }
        }
    }

    /// The answer to `req` arrived.
    fn deliver(&self, s: &mut EpochState, c: usize, req: EpochReq) {
        let epoch = req.op.epoch;
        let won = req.outcome == Created::Ok && !(self.write_check && s.marked(epoch));
        if won {
            self.confirmed(s, c, epoch, req.op.body);
            s.lease
                .grant(&self.clocks, c, epoch, req.op.body.token, req.sent);
        } else {
            self.resolve(s, c, req);
        }
    }
}

impl Model for EpochModel {
    type State = EpochState;
    type Action = Action;

    fn init_states(&self) -> Vec<EpochState> {
        vec![EpochState {
            lease: Lease::new(),
            slots: [None; EPOCH_SLOTS],
            markers: 0,
            views: [View {
                known: None,
                collecting_below: 0,
            }; CLIENTS],
            landed_in_history: false,
        }]
    }

    fn actions(&self, s: &EpochState, actions: &mut Vec<Action>) {
        if s.lease.now < self.max_ticks {
            actions.push(Action::Tick);
        }
        for c in 0..self.clients {
            s.lease.actions(c, s.lease.sends < self.max_sends, actions);
            if s.views[c].collecting_below != 0 {
                actions.push(Action::Collect(c));
            }
        }
    }

    fn next_state(&self, last: &EpochState, action: Action) -> Option<EpochState> {
        let mut s = last.clone();
        let can_send = s.lease.sends < self.max_sends;
        match action {
            Action::Tick => {
                s.lease.now += 1;
                self.forget_expired(&mut s);
            }
            Action::Read(c) => {
                let Ok(head) = self.find_head(&s, c) else {
                    // The search gave up (ambiguous): the view forgets its
                    // head, and the client stays as it was.
                    s.views[c].known.take()?;
                    return Some(s);
                };
                if let Some((epoch, body)) = head {
                    Self::learn(&mut s, c, epoch, body);
                }
                match (head, s.lease.clients[c]) {
                    (None, _) => {
                        if !can_send {
                            return None;
                        }
                        let write = self.next(&s, c, 0, 1, false);
                        s.lease.clients[c] = Phase::Acquiring(s.lease.send(write));
                    }
                    (Some((epoch, body)), _) if body.released => {
                        if !can_send {
                            return None;
                        }
                        let write = self.next(&s, c, epoch, body.token + 1, false);
                        s.lease.clients[c] = Phase::Acquiring(s.lease.send(write));
                    }
                    // Same head again: keep observing from the first sighting.
                    (Some((epoch, _)), Phase::Watching { version: seen, .. }) if seen == epoch => {
                        return None;
                    }
                    (Some((epoch, body)), _) => {
                        s.lease.clients[c] = Phase::Watching {
                            version: epoch,
                            token: body.token,
                            since: s.lease.now,
                            expires_wall: 0,
                        };
                    }
                }
            }
            Action::Takeover(c) => {
                let Phase::Watching {
                    version: epoch,
                    token,
                    since,
                    ..
                } = s.lease.clients[c]
                else {
                    return None;
                };
                if s.lease.now < since + self.clocks.wait[c] {
                    return None;
                }
                let write = self.next(&s, c, epoch, token + 1, false);
                s.lease.clients[c] = Phase::Acquiring(s.lease.send(write));
            }
            Action::Renew(c) => {
                let Phase::Holding {
                    version: epoch,
                    token,
                    valid_until,
                    renew: None,
                } = s.lease.clients[c]
                else {
                    return None;
                };
                let mut write = self.next(&s, c, epoch, token, false);
                if self.renew == RenewEpoch::Reuse {
                    write.epoch = epoch;
                    write.plain = true;
                }
                let req = s.lease.send(write);
                s.lease.clients[c] = Phase::Holding {
                    version: epoch,
                    token,
                    valid_until,
                    renew: Some(req),
                };
            }
            Action::Release(c) => {
                let Phase::Holding {
                    version: epoch,
                    token,
                    ..
                } = s.lease.clients[c]
                else {
                    return None;
                };
                // As in the record model, applied at once, and the handle is
                // gone whatever the answer.
                let write = self.next(&s, c, epoch, token, true);
                s.lease.sends += 1;
                if self.apply(&mut s, write) == Created::Ok
                    && !(self.write_check && s.marked(write.epoch))
                {
                    self.confirmed(&mut s, c, write.epoch, write.body);
                }
                s.lease.clients[c] = Phase::Idle;
            }
            Action::StepDown(c) => s.lease.clients[c] = Phase::Idle,
            Action::Apply(c) => {
                let mut phase = s.lease.clients[c];
                let req = phase.in_flight()?;
                req.outcome = self.apply(&mut s, req.op);
                s.lease.clients[c] = phase;
            }
            Action::Deliver(c) => {
                let req = *s.lease.clients[c].in_flight()?;
                self.deliver(&mut s, c, req);
            }
            Action::LoseResponse(c) | Action::ServerError(c) => {
                let req = *s.lease.clients[c].in_flight()?;
                self.resolve(&mut s, c, req);
            }
            // The epoch layout's model does not remember releases.
            Action::Reacquire(_) => return None,
            Action::Collect(c) => {
                let end = s.views[c].collecting_below;
                match self.collect_step(&s, end)? {
                    (e, true) => s.markers |= 1 << e,
                    (e, false) => s.slots[usize::from(e)] = None,
                }
                if self.collect_step(&s, end).is_none() {
                    s.views[c].collecting_below = 0;
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = lease_properties();
        if self.max_sends >= 4 {
            properties.push(Property::sometimes(
                "a create lands in collected history",
                |_, s: &EpochState| s.landed_in_history,
            ));
        }
        properties
    }
}

#[test]
fn epoch_layout_has_no_counterexample() {
    expect_no_counterexample("epoch model correct", EpochModel::correct());
}

#[test]
fn epoch_layout_with_three_clients_has_no_counterexample() {
    expect_no_counterexample(
        "epoch model correct, three clients",
        EpochModel::three_clients(),
    );
}

#[test]
fn epoch_store_that_overwrites_breaks_mutual_exclusion() {
    let model = EpochModel {
        create: StoreCreate::Overwrites,
        ..EpochModel::correct()
    };
    expect_counterexample("epoch model create overwrites", model, "mutual exclusion");
}

#[test]
fn epoch_number_reused_breaks_mutual_exclusion() {
    let model = EpochModel {
        renew: RenewEpoch::Reuse,
        ..EpochModel::correct()
    };
    expect_counterexample("epoch model epoch reused", model, "mutual exclusion");
}

#[test]
fn collecting_the_live_term_without_markers_breaks_mutual_exclusion() {
    let model = EpochModel {
        collection: Collection::ThroughHead,
        markers: false,
        ..EpochModel::correct()
    };
    expect_counterexample("epoch model live term collected", model, "mutual exclusion");
}

#[test]
fn collecting_without_keep_or_markers_regresses_the_token() {
    let model = EpochModel {
        collection: Collection::BelowHead,
        markers: false,
        ..EpochModel::correct()
    };
    expect_counterexample(
        "epoch model no keep, no markers",
        model,
        "fencing tokens increase",
    );
}

#[test]
fn collecting_without_markers_breaks_mutual_exclusion() {
    let model = EpochModel {
        markers: false,
        ..EpochModel::correct()
    };
    expect_counterexample("epoch model no markers", model, "mutual exclusion");
}

#[test]
fn a_late_create_in_collected_history_counted_breaks_mutual_exclusion() {
    let model = EpochModel {
        write_check: false,
        ..EpochModel::correct()
    };
    expect_counterexample("epoch model no write-side check", model, "mutual exclusion");
}

#[test]
fn epoch_reads_without_the_marker_check_are_safe() {
    // A contender whose view remembers a head since collected takes it for
    // the head, waits, and takes over with a create that lands in
    // collected history: the write-side rule refuses it. The read-side
    // rule keeps reads true (who holds, when a takeover may come), not two
    // holders apart.
    let model = EpochModel {
        read_check: false,
        max_ticks: bound("MODEL_EPOCH_TICKS", 5),
        ..EpochModel::correct()
    };
    expect_no_counterexample("epoch model no read-side check", model);
}

// ---------------------------------------------------------------------------
// The session model: locks that hang from one heartbeat.
//
// One store holds a session object S (`(version, {term, released, nonce})`)
// and one lock object L (`(version, {token, session term or none,
// released})`). Client 0 is the session holder (the slow clock): it opens
// S (create, or replace a released S with the term + 1), renews it with
// writes that stay in flight, land at any later step and whose answers are
// delivered or lost (resolved by reading for the nonce), steps down at its
// validity end (also with a renewal in flight, as the implementation does
// at its renew deadline: a later answer is not waited for), closes S (marking its lock lost, then releasing S), opens it
// again under a new term, and takes L under its current term: L absent,
// released, or naming a term that is dead. It never rewrites L while
// holding it; its belief in L is its session's validity. Client 1 is a
// contender without a session (the fast clock): it takes an absent or
// released L, a plain L after observing it unchanged for its takeover wait,
// and an L naming a session term by the session rule — read L, then S; the
// term is dead if S's term differs or S is released; otherwise observe S's
// version unchanged for the takeover wait, end the term with a conditional
// write on S, then replace L from the version read first with token + 1.
// The contender's re-reads of S are answered at a later step than the store
// served them: a renewal can land in between, which is why the term is
// ended by a write and not by the read alone.
//
// The holder's lock writes, its open and close, and all the contender's
// writes are atomic (sent, applied and answered in one step): the lease
// model covers writes of unknown outcome on one object; what is new here is
// that the heartbeat lives on another object than the lock, so only the
// heartbeat's renewals are left in flight.
// ---------------------------------------------------------------------------

const HOLDER: usize = 0;
const CONTENDER: usize = 1;

/// How a contender judges a lock record that names a session term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionCheck {
    /// The protocol: read the lock, then the session object.
    LockThenSession,
    /// Mutation (a): ignore the session; take the lock over after observing
    /// the lock object unchanged, as for a plain lease.
    LockOnly,
    /// Mutation (b): read the session object before the lock.
    SessionFirst,
}

#[derive(Clone, Debug)]
struct SessionModel {
    clocks: Clocks,
    max_ticks: u8,
    max_sends: u8,
    check: SessionCheck,
    /// The protocol ends the observed term with a conditional write on the
    /// session object before taking the lock over; `false` is mutation (c).
    end_term: bool,
}

impl SessionModel {
    /// The protocol with the tests' bounds: 6 ticks and 6 writes unless
    /// `MODEL_SESSION_TICKS` / `MODEL_SESSION_SENDS` say more (the longest
    /// counterexample needs 5 writes: open, close, open again, lock,
    /// takeover).
    fn correct() -> Self {
        SessionModel {
            clocks: Clocks::correct(),
            max_ticks: bound("MODEL_SESSION_TICKS", 6),
            max_sends: bound("MODEL_SESSION_SENDS", 6),
            check: SessionCheck::LockThenSession,
            end_term: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SessionBody {
    term: u8,
    released: bool,
    nonce: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SessionRecord {
    version: u8,
    body: SessionBody,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct LockBody {
    token: u8,
    /// The session term the lock hangs from; `None` for a plain lease.
    term: Option<u8>,
    released: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct LockRecord {
    version: u8,
    body: LockBody,
}

/// A conditional write on the session object: replace `expected` (create
/// if absent when `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SessionWrite {
    expected: Option<u8>,
    body: SessionBody,
}

/// The holder's heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Heartbeat {
    Closed,
    Held {
        version: u8,
        term: u8,
        valid_until: u8,
        renew: Option<Req<SessionWrite, Outcome>>,
    },
}

/// The contender's progress towards the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Contender {
    Idle,
    /// Mutation (b): the session object as read before the lock.
    SessionRead(Option<SessionRecord>),
    /// Read a lock naming `term`; the session object comes next.
    LockRead {
        version: u8,
        token: u8,
        term: u8,
    },
    /// Observing the lock object unchanged (a plain lease).
    WatchingLock {
        version: u8,
        token: u8,
        since: u8,
    },
    /// Observing the session object unchanged (`None`: absent).
    WatchingSession {
        lock_version: u8,
        lock_token: u8,
        session_version: Option<u8>,
        term: u8,
        since: u8,
    },
    /// Read the session object again: the store answered `seen` at an
    /// earlier step; the answer reaches the contender at a later one (a
    /// renewal can land in between).
    SessionReread {
        lock_version: u8,
        lock_token: u8,
        session_version: Option<u8>,
        term: u8,
        since: u8,
        seen: Option<u8>,
    },
    /// The lock's term is over (dead, or ended by our write): take the lock
    /// over from the version read first.
    TermOver {
        lock_version: u8,
        lock_token: u8,
        ended_by_us: bool,
    },
    Holding {
        version: u8,
        valid_until: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SessionState {
    now: u8,
    sends: u8,
    next_version: u8,
    session: Option<SessionRecord>,
    lock: Option<LockRecord>,
    heartbeat: Heartbeat,
    /// The lock version the holder holds under its current term.
    holder_lock: Option<u8>,
    contender: Contender,
    max_granted: u8,
    token_regressed: bool,
    /// Not vacuous: the contender took the lock after ending a live term.
    took_after_ending_term: bool,
    /// Not vacuous: the holder, under a later term, took the lock its
    /// earlier term held.
    relocked_under_new_term: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionAction {
    Tick,
    Open,
    Renew,
    /// The renewal in flight reaches the store.
    ApplyRenewal,
    DeliverRenewal,
    /// The applied renewal's answer is lost: resolved by reading.
    LoseRenewalAnswer,
    /// 5xx before applying: resolved by reading.
    RenewalServerError,
    StepDown,
    Close,
    AcquireLock,
    ReleaseLock,
    ContenderReadLock,
    ContenderReadSession,
    /// Send the re-read of the session object (the store answers at once).
    RereadSession,
    /// The re-read's answer arrives: observe on, start over, or end the
    /// term (mutation (c): take it as over).
    EndTerm,
    TakeOver,
    ContenderRelease,
    ContenderStepDown,
}

impl SessionState {
    fn holder_believes(&self) -> bool {
        matches!(self.heartbeat, Heartbeat::Held { valid_until, .. } if self.now < valid_until)
    }

    fn holder_believes_lock(&self) -> bool {
        self.holder_lock.is_some() && self.holder_believes()
    }

    fn contender_believes(&self) -> bool {
        matches!(self.contender, Contender::Holding { valid_until, .. } if self.now < valid_until)
    }

    fn new_version(&mut self) -> u8 {
        let version = self.next_version;
        self.next_version += 1;
        version
    }

    /// Applies a conditional write to the session object.
    fn write_session(&mut self, write: SessionWrite) -> Outcome {
        if self.session.map(|r| r.version) != write.expected {
            return Outcome::Failed;
        }
        let version = self.new_version();
        self.session = Some(SessionRecord {
            version,
            body: write.body,
        });
        Outcome::Ok(version)
    }

    /// Applies a conditional write to the lock object (`expected`: `None`
    /// creates if absent); the new version if it landed.
    fn write_lock(&mut self, expected: Option<u8>, body: LockBody) -> Option<u8> {
        if self.lock.map(|r| r.version) != expected {
            return None;
        }
        let version = self.new_version();
        self.lock = Some(LockRecord { version, body });
        Some(version)
    }

    /// Records a lock acquisition's token.
    fn granted(&mut self, token: u8) {
        if token <= self.max_granted {
            self.token_regressed = true;
        }
        self.max_granted = self.max_granted.max(token);
    }

    /// The session is lost, and with it the lock held under it.
    fn lose_session(&mut self) {
        self.heartbeat = Heartbeat::Closed;
        self.holder_lock = None;
    }

    /// Is the lock's `term` over, as the session object `session` shows?
    /// `None`: still to be observed.
    fn term_dead(session: Option<SessionRecord>, term: u8) -> Option<bool> {
        let record = session?;
        Some(record.body.term != term || record.body.released)
    }
}

impl SessionModel {
    fn holder_actions(&self, s: &SessionState, can_send: bool, actions: &mut Vec<SessionAction>) {
        match s.heartbeat {
            Heartbeat::Closed => {
                if can_send {
                    actions.push(SessionAction::Open);
                }
            }
            Heartbeat::Held { renew, .. } => {
                let believes = s.holder_believes();
                match renew {
                    None if can_send => {
                        if believes {
                            actions.push(SessionAction::Renew);
                            if s.holder_lock.is_none() {
                                actions.push(SessionAction::AcquireLock);
                            }
                        }
                        if s.holder_lock.is_some() {
                            actions.push(SessionAction::ReleaseLock);
                        }
                        actions.push(SessionAction::Close);
                    }
                    None => {}
                    Some(req) if req.outcome == Outcome::Pending => {
                        actions.push(SessionAction::ApplyRenewal);
                        actions.push(SessionAction::RenewalServerError);
                    }
                    Some(_) => {
                        actions.push(SessionAction::DeliverRenewal);
                        actions.push(SessionAction::LoseRenewalAnswer);
                    }
                }
                // At its deadline, even with a renewal in flight: an answer
                // that comes later is not waited for.
                if !believes {
                    actions.push(SessionAction::StepDown);
                }
            }
        }
    }

    fn contender_actions(
        &self,
        s: &SessionState,
        can_send: bool,
        actions: &mut Vec<SessionAction>,
    ) {
        match s.contender {
            Contender::Idle if self.check == SessionCheck::SessionFirst => {
                actions.push(SessionAction::ContenderReadSession);
            }
            Contender::Idle | Contender::SessionRead(_) | Contender::WatchingLock { .. } => {
                actions.push(SessionAction::ContenderReadLock);
                if matches!(s.contender, Contender::WatchingLock { .. }) && can_send {
                    actions.push(SessionAction::TakeOver);
                }
            }
            Contender::LockRead { .. } => actions.push(SessionAction::ContenderReadSession),
            Contender::WatchingSession { .. } => actions.push(SessionAction::RereadSession),
            Contender::SessionReread { .. } => {
                if can_send || !self.end_term {
                    actions.push(SessionAction::EndTerm);
                }
            }
            Contender::TermOver { .. } => {
                if can_send {
                    actions.push(SessionAction::TakeOver);
                }
            }
            Contender::Holding { .. } => {
                if can_send {
                    actions.push(SessionAction::ContenderRelease);
                }
                if !s.contender_believes() {
                    actions.push(SessionAction::ContenderStepDown);
                }
            }
        }
    }

    /// The holder's renewal `req` is settled: it landed at `landed`, or
    /// not.
    fn settle_renewal(&self, s: &mut SessionState, landed: Option<u8>) {
        let Heartbeat::Held {
            version,
            term,
            valid_until,
            renew: Some(req),
        } = s.heartbeat
        else {
            return;
        };
        match landed {
            // Past the deadline, the holder has stepped down already.
            _ if s.now >= valid_until => s.lose_session(),
            Some(new_version) if s.now < req.sent + self.clocks.hold[HOLDER] => {
                s.heartbeat = Heartbeat::Held {
                    version: new_version,
                    term,
                    valid_until: req.sent + self.clocks.hold[HOLDER],
                    renew: None,
                };
            }
            Some(_) => s.lose_session(),
            // Not landed, our version still current: keep the earlier
            // validity and renew again.
            None if s.session.is_some_and(|r| r.version == version) => {
                s.heartbeat = Heartbeat::Held {
                    version,
                    term,
                    valid_until,
                    renew: None,
                };
            }
            None => s.lose_session(),
        }
    }

    /// An ambiguous renewal, resolved by reading the session object for
    /// its nonce.
    fn resolve_renewal(&self, s: &mut SessionState) {
        let Heartbeat::Held {
            renew: Some(req), ..
        } = s.heartbeat
        else {
            return;
        };
        let landed = s
            .session
            .filter(|r| r.body.nonce == req.op.body.nonce)
            .map(|r| r.version);
        self.settle_renewal(s, landed);
    }

    fn open(&self, s: &mut SessionState) -> Option<()> {
        let (expected, term) = match s.session {
            None => (None, 1),
            Some(r) if r.body.released => (Some(r.version), r.body.term + 1),
            // Held by an earlier term of ours that stepped down: the
            // takeover wait would come first; not modelled.
            Some(_) => return None,
        };
        s.sends += 1;
        let body = SessionBody {
            term,
            released: false,
            nonce: s.sends,
        };
        let Outcome::Ok(version) = s.write_session(SessionWrite { expected, body }) else {
            return None;
        };
        s.heartbeat = Heartbeat::Held {
            version,
            term,
            valid_until: s.now + self.clocks.hold[HOLDER],
            renew: None,
        };
        Some(())
    }

    /// The holder, its session held, takes the lock under its term: absent,
    /// released, or naming a term the session object shows over.
    fn acquire_lock(&self, s: &mut SessionState) -> Option<()> {
        let Heartbeat::Held { term, .. } = s.heartbeat else {
            return None;
        };
        let (expected, token, relock) = match s.lock {
            None => (None, 1, false),
            Some(r) if r.body.released => (Some(r.version), r.body.token + 1, false),
            Some(LockRecord {
                version,
                body:
                    LockBody {
                        token,
                        term: Some(old),
                        ..
                    },
            }) if SessionState::term_dead(s.session, old) == Some(true) => {
                (Some(version), token + 1, true)
            }
            // Held by the contender, or by our live term: not ours to take.
            Some(_) => return None,
        };
        s.sends += 1;
        let body = LockBody {
            token,
            term: Some(term),
            released: false,
        };
        let version = s.write_lock(expected, body)?;
        s.granted(token);
        s.holder_lock = Some(version);
        s.relocked_under_new_term |= relock;
        Some(())
    }

    /// Marks the lock at `version` released, keeping its token.
    fn release_lock(s: &mut SessionState, version: u8) {
        s.sends += 1;
        if let Some(r) = s.lock.filter(|r| r.version == version) {
            let body = LockBody {
                released: true,
                ..r.body
            };
            s.write_lock(Some(version), body);
        }
    }

    /// The contender reads the lock object and decides.
    fn contender_read_lock(&self, s: &mut SessionState, can_send: bool) -> Option<()> {
        let record = match s.lock {
            None
            | Some(LockRecord {
                body: LockBody { released: true, .. },
                ..
            }) => {
                if !can_send {
                    return None;
                }
                let expected = s.lock.map(|r| r.version);
                let token = s.lock.map_or(1, |r| r.body.token + 1);
                self.contender_take(s, expected, token, false);
                return Some(());
            }
            Some(record) => record,
        };
        let (version, token) = (record.version, record.body.token);
        let watch_lock = Contender::WatchingLock {
            version,
            token,
            since: s.now,
        };
        s.contender = match (record.body.term, self.check, s.contender) {
            // Same version again: keep observing from the first sighting.
            (_, _, Contender::WatchingLock { version: seen, .. }) if seen == version => {
                return None;
            }
            (None, _, _) | (Some(_), SessionCheck::LockOnly, _) => watch_lock,
            (Some(term), SessionCheck::LockThenSession, _) => Contender::LockRead {
                version,
                token,
                term,
            },
            (Some(term), SessionCheck::SessionFirst, Contender::SessionRead(session)) => {
                self.judge(s, version, token, term, session)
            }
            (Some(_), SessionCheck::SessionFirst, _) => return None,
        };
        Some(())
    }

    /// The contender's verdict on a lock at `version` naming `term`, given
    /// what it read of the session object.
    fn judge(
        &self,
        s: &SessionState,
        lock_version: u8,
        lock_token: u8,
        term: u8,
        session: Option<SessionRecord>,
    ) -> Contender {
        match SessionState::term_dead(session, term) {
            Some(true) => Contender::TermOver {
                lock_version,
                lock_token,
                ended_by_us: false,
            },
            _ => Contender::WatchingSession {
                lock_version,
                lock_token,
                session_version: session.map(|r| r.version),
                term,
                since: s.now,
            },
        }
    }

    /// The answer to the contender's re-read of the session arrives. If it
    /// shows the version observed for the takeover wait, end the term with
    /// a conditional write (or, mutation (c), take it as over).
    fn end_term(&self, s: &mut SessionState) -> Option<()> {
        let Contender::SessionReread {
            lock_version,
            lock_token,
            session_version,
            term,
            since,
            seen,
        } = s.contender
        else {
            return None;
        };
        if seen != session_version {
            // The session renewed: start again from the lock.
            s.contender = Contender::Idle;
            return Some(());
        }
        if s.now < since + self.clocks.wait[CONTENDER] {
            s.contender = Contender::WatchingSession {
                lock_version,
                lock_token,
                session_version,
                term,
                since,
            };
            return Some(());
        }
        let unchanged = if self.end_term {
            s.sends += 1;
            let write = SessionWrite {
                expected: session_version,
                body: SessionBody {
                    term,
                    released: true,
                    nonce: s.sends,
                },
            };
            s.write_session(write) != Outcome::Failed
        } else {
            true
        };
        s.contender = if unchanged {
            Contender::TermOver {
                lock_version,
                lock_token,
                ended_by_us: true,
            }
        } else {
            // The session renewed: start again from the lock.
            Contender::Idle
        };
        Some(())
    }

    /// The contender replaces the lock at `expected` with `token`.
    fn contender_take(&self, s: &mut SessionState, expected: Option<u8>, token: u8, ended: bool) {
        s.sends += 1;
        let body = LockBody {
            token,
            term: None,
            released: false,
        };
        s.contender = match s.write_lock(expected, body) {
            Some(version) => {
                s.granted(token);
                s.took_after_ending_term |= ended;
                Contender::Holding {
                    version,
                    valid_until: s.now + self.clocks.hold[CONTENDER],
                }
            }
            None => Contender::Idle,
        };
    }
}

impl Model for SessionModel {
    type State = SessionState;
    type Action = SessionAction;

    fn init_states(&self) -> Vec<SessionState> {
        vec![SessionState {
            now: 0,
            sends: 0,
            next_version: 1,
            session: None,
            lock: None,
            heartbeat: Heartbeat::Closed,
            holder_lock: None,
            contender: Contender::Idle,
            max_granted: 0,
            token_regressed: false,
            took_after_ending_term: false,
            relocked_under_new_term: false,
        }]
    }

    fn actions(&self, s: &SessionState, actions: &mut Vec<SessionAction>) {
        if s.now < self.max_ticks {
            actions.push(SessionAction::Tick);
        }
        let can_send = s.sends < self.max_sends;
        self.holder_actions(s, can_send, actions);
        self.contender_actions(s, can_send, actions);
    }

    fn next_state(&self, last: &SessionState, action: SessionAction) -> Option<SessionState> {
        let mut s = last.clone();
        let can_send = s.sends < self.max_sends;
        match action {
            SessionAction::Tick => s.now += 1,
            SessionAction::Open => self.open(&mut s)?,
            SessionAction::Renew => {
                let Heartbeat::Held {
                    version,
                    term,
                    valid_until,
                    renew: None,
                } = s.heartbeat
                else {
                    return None;
                };
                s.sends += 1;
                let op = SessionWrite {
                    expected: Some(version),
                    body: SessionBody {
                        term,
                        released: false,
                        nonce: s.sends,
                    },
                };
                let req = Req {
                    op,
                    sent: s.now,
                    outcome: Outcome::Pending,
                };
                s.heartbeat = Heartbeat::Held {
                    version,
                    term,
                    valid_until,
                    renew: Some(req),
                };
            }
            SessionAction::ApplyRenewal => {
                let Heartbeat::Held {
                    renew: Some(mut req),
                    version,
                    term,
                    valid_until,
                } = s.heartbeat
                else {
                    return None;
                };
                req.outcome = s.write_session(req.op);
                s.heartbeat = Heartbeat::Held {
                    version,
                    term,
                    valid_until,
                    renew: Some(req),
                };
            }
            SessionAction::DeliverRenewal => {
                let Heartbeat::Held {
                    renew: Some(req), ..
                } = s.heartbeat
                else {
                    return None;
                };
                let landed = match req.outcome {
                    Outcome::Ok(version) => Some(version),
                    _ => None,
                };
                if landed.is_some() {
                    self.settle_renewal(&mut s, landed);
                } else {
                    // Refused: the term was ended (or taken); lost at once.
                    s.lose_session();
                }
            }
            SessionAction::LoseRenewalAnswer | SessionAction::RenewalServerError => {
                self.resolve_renewal(&mut s)
            }
            SessionAction::StepDown => s.lose_session(),
            SessionAction::Close => {
                let Heartbeat::Held { version, term, .. } = s.heartbeat else {
                    return None;
                };
                // Every lock is marked lost before the one write.
                s.holder_lock = None;
                s.sends += 1;
                let body = SessionBody {
                    term,
                    released: true,
                    nonce: s.sends,
                };
                s.write_session(SessionWrite {
                    expected: Some(version),
                    body,
                });
                s.heartbeat = Heartbeat::Closed;
            }
            SessionAction::AcquireLock => self.acquire_lock(&mut s)?,
            SessionAction::ReleaseLock => {
                let version = s.holder_lock.take()?;
                Self::release_lock(&mut s, version);
            }
            SessionAction::ContenderReadLock => self.contender_read_lock(&mut s, can_send)?,
            SessionAction::ContenderReadSession => {
                s.contender = match s.contender {
                    Contender::Idle => Contender::SessionRead(s.session),
                    Contender::LockRead {
                        version,
                        token,
                        term,
                    } => self.judge(&s, version, token, term, s.session),
                    _ => return None,
                };
            }
            SessionAction::RereadSession => {
                let Contender::WatchingSession {
                    lock_version,
                    lock_token,
                    session_version,
                    term,
                    since,
                } = s.contender
                else {
                    return None;
                };
                s.contender = Contender::SessionReread {
                    lock_version,
                    lock_token,
                    session_version,
                    term,
                    since,
                    seen: s.session.map(|r| r.version),
                };
            }
            SessionAction::EndTerm => self.end_term(&mut s)?,
            SessionAction::TakeOver => match s.contender {
                Contender::WatchingLock {
                    version,
                    token,
                    since,
                } => {
                    if s.now < since + self.clocks.wait[CONTENDER] {
                        return None;
                    }
                    self.contender_take(&mut s, Some(version), token + 1, false);
                }
                Contender::TermOver {
                    lock_version,
                    lock_token,
                    ended_by_us,
                } => self.contender_take(&mut s, Some(lock_version), lock_token + 1, ended_by_us),
                _ => return None,
            },
            SessionAction::ContenderRelease => {
                let Contender::Holding { version, .. } = s.contender else {
                    return None;
                };
                s.contender = Contender::Idle;
                Self::release_lock(&mut s, version);
            }
            SessionAction::ContenderStepDown => s.contender = Contender::Idle,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, s: &SessionState| {
                !(s.holder_believes_lock() && s.contender_believes())
            }),
            Property::always("fencing tokens increase", |_, s: &SessionState| {
                !s.token_regressed
            }),
            Property::sometimes("takeover after ending a term", |_, s: &SessionState| {
                s.took_after_ending_term
            }),
            Property::sometimes("a new term takes the lock again", |_, s: &SessionState| {
                s.relocked_under_new_term
            }),
        ]
    }
}

#[test]
fn session_locks_have_no_counterexample() {
    expect_no_counterexample("session model correct", SessionModel::correct());
}

#[test]
fn session_lock_taken_without_checking_its_session_breaks_mutual_exclusion() {
    let model = SessionModel {
        check: SessionCheck::LockOnly,
        ..SessionModel::correct()
    };
    expect_counterexample("session model lock only", model, "mutual exclusion");
}

#[test]
fn session_read_before_the_lock_breaks_mutual_exclusion() {
    let model = SessionModel {
        check: SessionCheck::SessionFirst,
        ..SessionModel::correct()
    };
    expect_counterexample("session model session first", model, "mutual exclusion");
}

#[test]
fn session_lock_taken_without_ending_the_term_breaks_mutual_exclusion() {
    let model = SessionModel {
        end_term: false,
        ..SessionModel::correct()
    };
    expect_counterexample("session model no end-term write", model, "mutual exclusion");
}

// ---------------------------------------------------------------------------
// Create-once: a Delta Lake log committed by create-if-absent
// (`casaas_core::lease::CreateOnce`).
//
// Two writers each commit one transaction to a log of `CO_VERSIONS`
// versions: create version `v` if absent; told `Taken`, the writer moves to
// `v + 1` and commits the same transaction again, as a Delta writer does.
// Every write carries a fresh nonce and is conditioned on the key being
// absent. It reaches the store at any later step — also after its writer
// stopped waiting for it or moved on to the next version — where it is
// applied if the key is absent and refused (412) otherwise. Its answer
// arrives as the store gave it, or is lost (ambiguous; the write may still
// be on the network), or, for a write that was applied, comes back 412
// because a transport duplicate of it was answered (the write is ours, the
// answer says "taken").
//
// The rules (each removed by one mutation below):
// - an ambiguous answer and a 412 resolve nothing: the writer reads the key
//   back;
// - the read settles by nonce: a body carrying one of the nonces of this
//   call's writes (every write of the call, not only the last) is ours; a
//   body of another writer means `Taken`, and none of our writes can land
//   any more (each was conditioned on absence); an absent key sends another
//   write, conditioned on the same absence, so at most one of them lands;
// - the call ends ambiguous (never `Taken`) while the key stayed absent and
//   a write of it may still land.
//
// Properties: no transaction at two versions; a writer told `Ours(v)` has
// its transaction at `v`; `Taken(v)` is never told for a version that holds
// the writer's own transaction. `sometimes`: a 412 of our own duplicate is
// settled as ours, a write lands after its writer stopped waiting for it, a
// write reaches the store after its writer moved to the next version, both
// transactions commit.
// ---------------------------------------------------------------------------

const CO_WRITERS: usize = 2;
const CO_VERSIONS: usize = 3;

#[derive(Clone, Debug)]
struct CreateOnceModel {
    /// A write that was applied may be answered 412 by its own duplicate.
    duplicates: bool,
    /// Mutation: a 412 is taken as `Taken` without reading the key back.
    precondition_is_taken: bool,
    /// Mutation: an ambiguous answer is taken as a lost race (`Taken`)
    /// without reading the key back.
    ambiguous_is_taken: bool,
    /// Mutation: the read takes any stored body as ours (no nonce check).
    no_nonce_check: bool,
    /// Mutation: only the last write's nonce is remembered (earlier writes
    /// of the call are forgotten when the read finds the key absent).
    last_nonce_only: bool,
    max_sends: u8,
}

impl CreateOnceModel {
    fn correct() -> Self {
        CreateOnceModel {
            duplicates: true,
            precondition_is_taken: false,
            ambiguous_is_taken: false,
            no_nonce_check: false,
            last_nonce_only: false,
            max_sends: bound("MODEL_CREATE_ONCE_SENDS", 4),
        }
    }
}

/// A stored commit: whose transaction, written with which nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CoEntry {
    txn: u8,
    nonce: u8,
}

/// A create on the network, for `version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CoSent {
    writer: u8,
    nonce: u8,
    version: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum CoTold {
    /// `Created::Ours` at this version.
    Ours(u8),
    /// Ambiguous at this version: a write of ours may still land there.
    Ambiguous(u8),
    /// Every version was taken.
    OutOfVersions,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum CoStep {
    /// About to send a create of the current version.
    Ready,
    /// Waiting for the answer to the write with `nonce`; `landed` once the
    /// store handled it (`Some(true)`: applied).
    Waiting {
        nonce: u8,
        landed: Option<bool>,
    },
    /// An ambiguous answer or a 412 (`after_412`): read the key back.
    Reading {
        after_412: bool,
    },
    Done(CoTold),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CoWriter {
    step: CoStep,
    /// The version this writer is committing to.
    version: u8,
    /// Nonces of the current call's writes that may still land (bit n =
    /// nonce n).
    pending: u16,
    /// Versions told `Taken` (bit v).
    taken: u8,
    /// Told `Ours` by reading after a 412.
    ours_after_412: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CoState {
    log: [Option<CoEntry>; CO_VERSIONS],
    net: Vec<CoSent>,
    sends: u8,
    writers: [CoWriter; CO_WRITERS],
    /// A write was applied after its writer stopped waiting for it.
    landed_late: bool,
    /// A write reached the store after its writer moved to another version.
    arrived_after_move: bool,
}

impl CoState {
    /// Version `version` holds transaction `txn`.
    fn holds(&self, txn: usize, version: u8) -> bool {
        self.log[version as usize].is_some_and(|e| e.txn as usize == txn)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CoAction {
    /// The writer sends a create of its current version.
    Send(usize),
    /// The write at this index of `net` reaches the store.
    Land(usize),
    /// The writer's answer arrives as the store gave it.
    Answer(usize),
    /// The answer is lost or never comes in time: ambiguous.
    LoseAnswer(usize),
    /// The write was applied, but its duplicate's 412 is the answer.
    Duplicate(usize),
    /// The writer reads its version back.
    Read(usize),
    /// The store keeps failing and the call gives up (attempts spent, a
    /// read that fails for good): ambiguous, as a write may still land.
    GiveUp(usize),
}

impl CreateOnceModel {
    /// The call at the writer's version is settled `Taken`: the writer
    /// moves to the next version (a new call), or runs out of versions.
    fn taken(w: &mut CoWriter) {
        w.taken |= 1 << w.version;
        w.pending = 0;
        w.version += 1;
        w.step = if (w.version as usize) < CO_VERSIONS {
            CoStep::Ready
        } else {
            CoStep::Done(CoTold::OutOfVersions)
        };
    }

    /// A 412 (refused, or our own duplicate's answer).
    fn precondition_failed(&self, w: &mut CoWriter) {
        if self.precondition_is_taken {
            Self::taken(w);
        } else {
            w.step = CoStep::Reading { after_412: true };
        }
    }
}

impl Model for CreateOnceModel {
    type State = CoState;
    type Action = CoAction;

    fn init_states(&self) -> Vec<CoState> {
        vec![CoState {
            log: [None; CO_VERSIONS],
            net: Vec::new(),
            sends: 0,
            writers: [CoWriter {
                step: CoStep::Ready,
                version: 0,
                pending: 0,
                taken: 0,
                ours_after_412: false,
            }; CO_WRITERS],
            landed_late: false,
            arrived_after_move: false,
        }]
    }

    fn actions(&self, s: &CoState, actions: &mut Vec<CoAction>) {
        for i in 0..s.net.len() {
            actions.push(CoAction::Land(i));
        }
        for (i, w) in s.writers.iter().enumerate() {
            match w.step {
                CoStep::Ready => {
                    if s.sends < self.max_sends {
                        actions.push(CoAction::Send(i));
                    }
                    if w.pending != 0 {
                        actions.push(CoAction::GiveUp(i));
                    }
                }
                CoStep::Waiting { landed, .. } => {
                    actions.push(CoAction::LoseAnswer(i));
                    if landed.is_some() {
                        actions.push(CoAction::Answer(i));
                    }
                    if landed == Some(true) && self.duplicates {
                        actions.push(CoAction::Duplicate(i));
                    }
                }
                CoStep::Reading { .. } => {
                    actions.push(CoAction::Read(i));
                    actions.push(CoAction::GiveUp(i));
                }
                CoStep::Done(_) => {}
            }
        }
    }

    fn next_state(&self, last: &CoState, action: CoAction) -> Option<CoState> {
        let mut s = last.clone();
        match action {
            CoAction::Send(i) => {
                s.sends += 1;
                let nonce = s.sends;
                let w = &mut s.writers[i];
                s.net.push(CoSent {
                    writer: i as u8,
                    nonce,
                    version: w.version,
                });
                w.pending |= 1 << nonce;
                w.step = CoStep::Waiting {
                    nonce,
                    landed: None,
                };
            }
            CoAction::Land(n) => {
                let sent = s.net.remove(n);
                let slot = &mut s.log[sent.version as usize];
                let applied = slot.is_none();
                if applied {
                    *slot = Some(CoEntry {
                        txn: sent.writer,
                        nonce: sent.nonce,
                    });
                }
                let w = &mut s.writers[sent.writer as usize];
                if w.version != sent.version {
                    s.arrived_after_move = true;
                }
                match &mut w.step {
                    CoStep::Waiting { nonce, landed } if *nonce == sent.nonce => {
                        *landed = Some(applied);
                    }
                    _ => s.landed_late |= applied,
                }
            }
            CoAction::Answer(i) => {
                let w = &mut s.writers[i];
                let CoStep::Waiting {
                    landed: Some(applied),
                    ..
                } = w.step
                else {
                    return None;
                };
                if applied {
                    w.pending = 0;
                    w.step = CoStep::Done(CoTold::Ours(w.version));
                } else {
                    self.precondition_failed(w);
                }
            }
            CoAction::Duplicate(i) => {
                let w = &mut s.writers[i];
                if !matches!(
                    w.step,
                    CoStep::Waiting {
                        landed: Some(true),
                        ..
                    }
                ) {
                    return None;
                }
                self.precondition_failed(w);
            }
            CoAction::LoseAnswer(i) => {
                let w = &mut s.writers[i];
                if !matches!(w.step, CoStep::Waiting { .. }) {
                    return None;
                }
                // The write, if still on the network, stays there.
                if self.ambiguous_is_taken {
                    Self::taken(w);
                } else {
                    w.step = CoStep::Reading { after_412: false };
                }
            }
            CoAction::Read(i) => {
                let w = &mut s.writers[i];
                let CoStep::Reading { after_412 } = w.step else {
                    return None;
                };
                match s.log[w.version as usize] {
                    Some(e) if self.no_nonce_check || w.pending & (1 << e.nonce) != 0 => {
                        w.pending = 0;
                        w.ours_after_412 |= after_412;
                        w.step = CoStep::Done(CoTold::Ours(w.version));
                    }
                    Some(_) => Self::taken(w),
                    None => {
                        if self.last_nonce_only {
                            w.pending = 0;
                        }
                        w.step = CoStep::Ready;
                    }
                }
            }
            CoAction::GiveUp(i) => {
                let w = &mut s.writers[i];
                w.step = CoStep::Done(CoTold::Ambiguous(w.version));
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no transaction at two versions", |_, s: &CoState| {
                (0..CO_WRITERS).all(|t| {
                    s.log
                        .iter()
                        .filter(|e| e.is_some_and(|e| e.txn as usize == t))
                        .count()
                        <= 1
                })
            }),
            Property::always("ours is at its version", |_, s: &CoState| {
                s.writers.iter().enumerate().all(|(t, w)| match w.step {
                    CoStep::Done(CoTold::Ours(v)) => s.holds(t, v),
                    _ => true,
                })
            }),
            Property::always("taken never holds our own", |_, s: &CoState| {
                s.writers.iter().enumerate().all(|(t, w)| {
                    (0..CO_VERSIONS as u8).all(|v| w.taken & (1 << v) == 0 || !s.holds(t, v))
                })
            }),
            // Not vacuous: our own duplicate's 412 is settled as ours, writes
            // land after their writer stopped waiting or moved on, and both
            // transactions commit.
            Property::sometimes("a 412 of our own settled as ours", |_, s: &CoState| {
                s.writers.iter().any(|w| w.ours_after_412)
            }),
            Property::sometimes("a write lands late", |_, s: &CoState| s.landed_late),
            Property::sometimes(
                "a write arrives after its writer moved on",
                |_, s: &CoState| s.arrived_after_move,
            ),
            Property::sometimes("both committed", |_, s: &CoState| {
                s.writers
                    .iter()
                    .all(|w| matches!(w.step, CoStep::Done(CoTold::Ours(_))))
            }),
        ]
    }
}

#[test]
fn create_once_commits_each_transaction_once() {
    expect_no_counterexample("create-once model correct", CreateOnceModel::correct());
}

#[test]
fn create_once_taking_a_412_as_taken_without_reading_commits_twice() {
    let model = CreateOnceModel {
        precondition_is_taken: true,
        ..CreateOnceModel::correct()
    };
    expect_counterexample(
        "create-once model 412 is taken",
        model,
        "no transaction at two versions",
    );
}

#[test]
fn create_once_taking_an_ambiguous_answer_as_taken_commits_twice() {
    let model = CreateOnceModel {
        ambiguous_is_taken: true,
        ..CreateOnceModel::correct()
    };
    expect_counterexample(
        "create-once model ambiguous is taken",
        model,
        "no transaction at two versions",
    );
}

#[test]
fn create_once_without_the_nonce_check_claims_anothers_commit() {
    let model = CreateOnceModel {
        no_nonce_check: true,
        ..CreateOnceModel::correct()
    };
    expect_counterexample(
        "create-once model no nonce check",
        model,
        "ours is at its version",
    );
}

#[test]
fn create_once_remembering_only_the_last_write_reports_taken_for_its_own() {
    let model = CreateOnceModel {
        last_nonce_only: true,
        ..CreateOnceModel::correct()
    };
    expect_counterexample(
        "create-once model last nonce only",
        model,
        "taken never holds our own",
    );
}

// ---------------------------------------------------------------------------
// Swap-once: a table pointer committed the Iceberg way
// (`casaas_core::lease::SwapOnce`).
//
// Two writers each commit one transaction: read the pointer's version,
// then replace it if it is still at that version; told `Conflict`, the
// writer reads again and commits the same transaction on top (a rebase, as
// PyIceberg's retry does). Every write carries a fresh nonce and is
// conditioned on the version read. It reaches the store at any later step,
// applied if the pointer is still at that version and refused otherwise;
// its answer arrives as given, is lost, or (for an applied write) is the
// 412 of its own duplicate. The stored history is the pointer's lineage
// (each body lists the writes before it, as Iceberg's `metadata-log` does).
//
// The rules (each removed by one mutation below):
// - a lost answer and a 412 resolve nothing: the writer reads the pointer;
// - the read settles by nonce and lineage: the write on top of the version
//   read is ours if it carries one of this call's nonces, whether it is
//   still the head or later writes descend from it; another writer's write
//   there is a conflict, and none of ours can land any more; the pointer
//   still at the version read sends another write on the same condition.
//
// Properties: no transaction lands twice; a writer told `Ours` has its
// transaction in the history. `sometimes`: a write of ours found only in
// the lineage (built upon before we read), both commit.
// ---------------------------------------------------------------------------

const SW_WRITERS: usize = 2;

#[derive(Clone, Debug)]
struct SwapOnceModel {
    /// Mutation: a 412 is taken as a conflict without reading.
    precondition_is_conflict: bool,
    /// Mutation: the read looks at the head only (no lineage check).
    no_lineage: bool,
    max_sends: u8,
}

impl SwapOnceModel {
    fn correct() -> Self {
        SwapOnceModel {
            precondition_is_conflict: false,
            no_lineage: false,
            max_sends: bound("MODEL_SWAP_ONCE_SENDS", 4),
        }
    }
}

/// A write on the network: its writer, nonce and the version it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SwSent {
    writer: u8,
    nonce: u8,
    cond: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SwStep {
    /// About to read the pointer (a new call).
    Start,
    /// About to send a write conditioned on `cond`.
    Ready,
    Waiting {
        nonce: u8,
        landed: Option<bool>,
    },
    Reading,
    Ours,
    Ambiguous,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SwWriter {
    step: SwStep,
    cond: u8,
    /// Nonces of this call's writes that may still land (bit n).
    pending: u16,
    found_in_lineage: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SwState {
    /// Applied writes, oldest first: (transaction, nonce). The pointer's
    /// version is the length.
    history: Vec<(u8, u8)>,
    net: Vec<SwSent>,
    sends: u8,
    writers: [SwWriter; SW_WRITERS],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SwAction {
    ReadPointer(usize),
    Send(usize),
    Land(usize),
    Answer(usize),
    LoseAnswer(usize),
    Duplicate(usize),
    Settle(usize),
    GiveUp(usize),
}

impl SwapOnceModel {
    fn conflict(w: &mut SwWriter) {
        w.pending = 0;
        w.step = SwStep::Start;
    }

    fn precondition_failed(&self, w: &mut SwWriter) {
        if self.precondition_is_conflict {
            Self::conflict(w);
        } else {
            w.step = SwStep::Reading;
        }
    }
}

impl Model for SwapOnceModel {
    type State = SwState;
    type Action = SwAction;

    fn init_states(&self) -> Vec<SwState> {
        vec![SwState {
            history: Vec::new(),
            net: Vec::new(),
            sends: 0,
            writers: [SwWriter {
                step: SwStep::Start,
                cond: 0,
                pending: 0,
                found_in_lineage: false,
            }; SW_WRITERS],
        }]
    }

    fn actions(&self, s: &SwState, actions: &mut Vec<SwAction>) {
        for i in 0..s.net.len() {
            actions.push(SwAction::Land(i));
        }
        for (i, w) in s.writers.iter().enumerate() {
            match w.step {
                SwStep::Start if s.sends < self.max_sends => actions.push(SwAction::ReadPointer(i)),
                SwStep::Ready => {
                    if s.sends < self.max_sends {
                        actions.push(SwAction::Send(i));
                    }
                    if w.pending != 0 {
                        actions.push(SwAction::GiveUp(i));
                    }
                }
                SwStep::Waiting { landed, .. } => {
                    actions.push(SwAction::LoseAnswer(i));
                    if landed.is_some() {
                        actions.push(SwAction::Answer(i));
                    }
                    if landed == Some(true) {
                        actions.push(SwAction::Duplicate(i));
                    }
                }
                SwStep::Reading => {
                    actions.push(SwAction::Settle(i));
                    actions.push(SwAction::GiveUp(i));
                }
                _ => {}
            }
        }
    }

    fn next_state(&self, last: &SwState, action: SwAction) -> Option<SwState> {
        let mut s = last.clone();
        let version = s.history.len() as u8;
        match action {
            SwAction::ReadPointer(i) => {
                let w = &mut s.writers[i];
                w.cond = version;
                w.step = SwStep::Ready;
            }
            SwAction::Send(i) => {
                s.sends += 1;
                let nonce = s.sends;
                let w = &mut s.writers[i];
                s.net.push(SwSent {
                    writer: i as u8,
                    nonce,
                    cond: w.cond,
                });
                w.pending |= 1 << nonce;
                w.step = SwStep::Waiting {
                    nonce,
                    landed: None,
                };
            }
            SwAction::Land(n) => {
                let sent = s.net.remove(n);
                let applied = sent.cond == version;
                if applied {
                    s.history.push((sent.writer, sent.nonce));
                }
                if let SwStep::Waiting { nonce, landed } = &mut s.writers[sent.writer as usize].step
                    && *nonce == sent.nonce
                {
                    *landed = Some(applied);
                }
            }
            SwAction::Answer(i) => {
                let w = &mut s.writers[i];
                let SwStep::Waiting {
                    landed: Some(applied),
                    ..
                } = w.step
                else {
                    return None;
                };
                if applied {
                    w.pending = 0;
                    w.step = SwStep::Ours;
                } else {
                    self.precondition_failed(w);
                }
            }
            SwAction::Duplicate(i) => {
                let w = &mut s.writers[i];
                if !matches!(
                    w.step,
                    SwStep::Waiting {
                        landed: Some(true),
                        ..
                    }
                ) {
                    return None;
                }
                self.precondition_failed(w);
            }
            SwAction::LoseAnswer(i) => {
                let w = &mut s.writers[i];
                if !matches!(w.step, SwStep::Waiting { .. }) {
                    return None;
                }
                w.step = SwStep::Reading;
            }
            SwAction::Settle(i) => {
                let head = s.history.last().copied();
                let on_top = s.history.get(s.writers[i].cond as usize).copied();
                let w = &mut s.writers[i];
                let ours = |e: Option<(u8, u8)>| e.is_some_and(|(_, n)| w.pending & (1 << n) != 0);
                if ours(head) && version == w.cond + 1 {
                    w.pending = 0;
                    w.step = SwStep::Ours;
                } else if ours(on_top) && !self.no_lineage {
                    w.pending = 0;
                    w.found_in_lineage = true;
                    w.step = SwStep::Ours;
                } else if version == w.cond {
                    w.step = SwStep::Ready;
                } else {
                    Self::conflict(w);
                }
            }
            SwAction::GiveUp(i) => s.writers[i].step = SwStep::Ambiguous,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no transaction lands twice", |_, s: &SwState| {
                (0..SW_WRITERS as u8).all(|t| s.history.iter().filter(|e| e.0 == t).count() <= 1)
            }),
            Property::always("ours has landed", |_, s: &SwState| {
                s.writers.iter().enumerate().all(|(t, w)| {
                    w.step != SwStep::Ours || s.history.iter().any(|e| e.0 as usize == t)
                })
            }),
            Property::sometimes("ours found in the lineage", |_, s: &SwState| {
                s.writers.iter().any(|w| w.found_in_lineage)
            }),
            Property::sometimes("both committed", |_, s: &SwState| {
                s.writers.iter().all(|w| w.step == SwStep::Ours)
            }),
        ]
    }
}

#[test]
fn swap_once_commits_each_transaction_once() {
    expect_no_counterexample("swap-once model correct", SwapOnceModel::correct());
}

#[test]
fn swap_once_taking_a_412_as_a_conflict_without_reading_commits_twice() {
    let model = SwapOnceModel {
        precondition_is_conflict: true,
        ..SwapOnceModel::correct()
    };
    expect_counterexample(
        "swap-once model 412 is a conflict",
        model,
        "no transaction lands twice",
    );
}

#[test]
fn swap_once_without_the_lineage_check_commits_twice() {
    let model = SwapOnceModel {
        no_lineage: true,
        ..SwapOnceModel::correct()
    };
    expect_counterexample(
        "swap-once model no lineage",
        model,
        "no transaction lands twice",
    );
}
