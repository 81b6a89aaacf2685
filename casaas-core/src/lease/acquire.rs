//! The contender side: [`Lease`], `try_acquire` and `acquire`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tracing::Instrument;

use crate::{CasError, CasStore, ErrorKind, Version, validate_key};

use super::clock::{Clock, Entropy, SystemClock};
use super::config::{ExpiryMode, LeaseConfig};
use super::handle::{HolderStart, LeaseGuard, ReleaseNote, SessionLink};
use super::pending::{PendingWrite, PendingWrites, Settled};
use super::record::{LeaseRecord, SessionRef, unix_ms};
use super::retry::{backoff, count_ambiguous, needs_resolution, read_record, timed};
use super::wait::WaitOptions;
use super::{LeaseError, metric_names};

/// How many unresolved writes a contender remembers. Forgetting one is safe
/// (if it lands, the record looks foreign and expires like any other
/// holder's); the bound only keeps a store that never answers from growing
/// the memory without end.
const MAX_ORPHANS: usize = 64;

/// How many races in a row [`Lease::try_acquire`] may lose to holdings that
/// ended before it could read them, before it gives up: each one is a whole
/// holding by someone else between two of our requests.
const MAX_LOST_RACES: u32 = 8;

/// The highest fencing token this process saw on each lock object (by
/// store identity and key): a lock object found missing after that was
/// deleted from outside the protocol, and is not created again at token 1.
/// Bounded by the number of locks the process uses.
fn token_floors() -> &'static Mutex<std::collections::HashMap<String, u64>> {
    static FLOORS: std::sync::OnceLock<Mutex<std::collections::HashMap<String, u64>>> =
        std::sync::OnceLock::new();
    FLOORS.get_or_init(Default::default)
}

/// Did our write lose to another write between our read and it? The object
/// changed (precondition failed) or vanished (not found): nothing of ours
/// was written, and a new read tells where the lease stands.
fn lost_race(err: &CasError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::PreconditionFailed | ErrorKind::NotFound
    )
}

/// A lease on one key of a store, from one participant's point of view.
///
/// `Lease` is the contender: it reads the lock object, keeps track of how
/// long it has observed a held version unchanged, and acquires when the
/// lease is free, released or expired, yielding a [`LeaseGuard`] that renews
/// in the background.
///
/// # Sharing
///
/// A `Lease` may be cloned and used from any number of tasks at once.
/// Clones share what they observed (how long a held version has been seen
/// unchanged) and the writes whose outcome is still unknown, but never an
/// attempt in flight: each attempt owns the writes it sent until it returns
/// (or its future is dropped), and only then hands the ones that may still
/// land to the shared memory, where exactly one later attempt can claim each.
/// So concurrent attempts behave like separate contenders that share an
/// owner id: at most one of them gets a [`LeaseGuard`] for a given holding,
/// and the others see the lease as held (by the same owner name).
#[derive(Clone, Debug)]
pub struct Lease {
    store: Arc<dyn CasStore>,
    key: String,
    owner: String,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    entropy: Entropy,
    state: Arc<Mutex<ContenderState>>,
    /// The session our holdings hang from (see [`Session`](super::Session)).
    session: Option<SessionLink>,
    /// The value every holding starts with (see [`Lease::with_value`]).
    value: Option<String>,
}

/// What a contender remembers between attempts.
#[derive(Debug, Default)]
struct ContenderState {
    /// What was last seen blocking us and when (on our clock) it was first
    /// seen unchanged.
    observed: Option<(Sighting, Duration)>,
    /// Writes of finished (or dropped) attempts that may still land.
    orphans: PendingWrites<()>,
    /// The version and token of the release of ours that was, when it was
    /// written, the lock's latest write: the next attempt can replace that
    /// version at once instead of reading it first. Used once.
    last_release: Option<(Version, u64)>,
}

/// What a contender watches for expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sighting {
    /// A held lock record at this version.
    Lock(Version),
    /// The heartbeat of a lock's session, in the lock's term, at this version.
    Heartbeat(String, Version),
    /// A lock's session term not in its heartbeat object (the object absent,
    /// or in a lower term after it was deleted and created again).
    TermMissing(SessionRef),
}

/// Whether the session term a lock names is over.
enum TermVerdict {
    /// Over: the lock may be replaced from the version read.
    Ended,
    /// Not yet: try again after this long.
    Running(Duration),
}

/// The contender's side of a [`LeaseGuard`]'s release note: the guard's
/// release is remembered where the next attempt looks for it.
#[derive(Debug)]
struct ContenderNote(Arc<Mutex<ContenderState>>);

impl ReleaseNote for ContenderNote {
    fn released(&self, version: Version, token: u64) {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        state.last_release = Some((version, token));
    }
}

/// The writes one attempt has sent; whatever may still land is handed to
/// the lease's shared memory when the attempt ends, even if its future is
/// dropped mid-request.
struct AttemptWrites {
    state: Arc<Mutex<ContenderState>>,
    writes: PendingWrites<()>,
}

impl Drop for AttemptWrites {
    fn drop(&mut self) {
        if self.writes.is_empty() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.orphans.absorb(std::mem::take(&mut self.writes));
        state.orphans.truncate_oldest(MAX_ORPHANS);
    }
}

/// The result of one attempt to take something someone else may hold:
/// the one "try" shape, for [`Lease::try_acquire`] (a [`LeaseGuard`]) and
/// [`Session::try_open`](super::Session::try_open) (a
/// [`Session`](super::Session)).
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "an acquired lease is released as soon as its guard is dropped; a Held outcome says who holds it"]
pub enum AcquireOutcome<G = LeaseGuard> {
    /// We hold it.
    Acquired(G),
    /// Someone else holds it.
    Held(HeldBy),
}

impl<G> AcquireOutcome<G> {
    /// The guard if acquired, or who holds the lease: for a `match` that
    /// need not name a variant added later.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
    /// use std::sync::Arc;
    /// use casaas_core::MemoryStore;
    /// use casaas_core::lease::{Lease, LeaseConfig};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let a = Lease::new(store.clone(), "locks/x", "a", LeaseConfig::default())?;
    /// let b = Lease::new(store, "locks/x", "b", LeaseConfig::default())?;
    /// let held = a.try_acquire().await?.into_result().expect("free");
    /// let by = b.try_acquire().await?.into_result().expect_err("taken");
    /// assert_eq!((by.owner.as_str(), by.token), ("a", held.token()));
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_result(self) -> Result<G, HeldBy> {
        match self {
            AcquireOutcome::Acquired(guard) => Ok(guard),
            AcquireOutcome::Held(held) => Err(held),
        }
    }

    /// What was acquired, made into something else (`Held` kept as it is).
    pub fn map<H>(self, f: impl FnOnce(G) -> H) -> AcquireOutcome<H> {
        match self {
            AcquireOutcome::Acquired(guard) => AcquireOutcome::Acquired(f(guard)),
            AcquireOutcome::Held(held) => AcquireOutcome::Held(held),
        }
    }
}

/// Who holds a lease we could not acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldBy {
    /// The holder's owner id.
    pub owner: String,
    /// The holder's fencing token.
    pub token: u64,
    /// The earliest time from now at which we could take over if the holder
    /// stops renewing (on our clock).
    pub takeover_in: Duration,
}

impl HeldBy {
    /// `owner` holds the lease with fencing token `token`; a takeover is
    /// possible `takeover_in` from now if it stops renewing.
    pub fn new(owner: impl Into<String>, token: u64, takeover_in: Duration) -> Self {
        HeldBy {
            owner: owner.into(),
            token,
            takeover_in,
        }
    }
}

/// A default owner id: `HOSTNAME/PID`, the host's name as the operating
/// system reports it (`uname`'s node name, which `gethostname` returns, on
/// every Unix; `COMPUTERNAME` on Windows), `localhost` if it has none.
pub fn default_owner_id() -> String {
    format!(
        "{}/{}",
        host_name().unwrap_or_else(|| "localhost".to_string()),
        std::process::id()
    )
}

/// The host's name, from the operating system.
fn host_name() -> Option<String> {
    #[cfg(unix)]
    let name = Some(
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
    );
    #[cfg(not(unix))]
    let name = std::env::var("COMPUTERNAME").ok();
    name.map(|n| n.trim().to_string()).filter(|n| !n.is_empty())
}

/// The write an attempt decided to make.
enum Plan {
    /// Create the object with token 1.
    Create,
    /// Replace `version`, writing `token` (`acquired_at_ms` kept on a reclaim).
    Replace {
        version: Version,
        token: u64,
        acquired_at_ms: Option<u64>,
    },
}

impl Lease {
    /// A lease on `key` for `owner` (see [`default_owner_id`]), checked
    /// against the store's capabilities. Uses [`SystemClock`] and OS entropy.
    pub fn new(
        store: Arc<dyn CasStore>,
        key: impl Into<String>,
        owner: impl Into<String>,
        config: LeaseConfig,
    ) -> Result<Self, LeaseError> {
        let key = key.into();
        let owner = owner.into();
        validate_key(&key)?;
        if owner.is_empty() {
            return Err(LeaseError::InvalidConfig(
                "owner must not be empty: pass a name such as default_owner_id()".to_string(),
            ));
        }
        // On a store that only creates-if-absent, every write is a new epoch.
        let store = crate::layout::lease_view(store);
        let caps = store.capabilities();
        if !caps.create_if_absent || !caps.replace_if_match {
            return Err(LeaseError::Store(CasError::unsupported(format!(
                "{} lacks create-if-absent; leases need at least that",
                store.describe()
            ))));
        }
        // The record keeps whole milliseconds, and contenders wait for what
        // the record says: validate (and hold) exactly that.
        let mut config = config;
        config.ttl =
            Duration::from_millis(u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX));
        config.validate_for(&caps)?;
        if !config.verify_store {
            super::retry::warn_unverified(store.as_ref(), "a lease");
        }
        Ok(Lease {
            store,
            key,
            owner,
            config,
            clock: Arc::new(SystemClock::new()),
            entropy: Entropy::from_os(),
            state: Arc::default(),
            session: None,
            value: None,
        })
    }

    /// A lease on `key` with this lease's store, owner, configuration,
    /// clock and entropy, whose holdings hang from `session`.
    pub(crate) fn under_session(&self, key: String, session: SessionLink) -> Lease {
        Lease {
            store: self.store.clone(),
            key,
            owner: self.owner.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
            state: Arc::default(),
            session: Some(session),
            value: self.value.clone(),
        }
    }

    /// A lease on `key` with everything else of this one (store, owner,
    /// configuration, clock, session), its own memory of what it observed,
    /// and `entropy`: a semaphore's slots.
    pub(crate) fn sibling(&self, key: String, entropy: Entropy) -> Result<Lease, LeaseError> {
        validate_key(&key)?;
        Ok(Lease {
            store: self.store.clone(),
            key,
            owner: self.owner.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            entropy,
            state: Arc::default(),
            session: self.session.clone(),
            value: self.value.clone(),
        })
    }

    /// Whether a release of ours is remembered for the next attempt (which
    /// then tries one write, without reading first).
    pub(crate) fn remembers_release(&self) -> bool {
        self.lock().last_release.is_some()
    }

    /// The session this lease's holdings hang from, if any, as the lock's
    /// record names it.
    pub fn session(&self) -> Option<SessionRef> {
        self.session.as_ref().map(|link| link.named_from(&self.key))
    }

    /// Uses `clock` for all timing (call before the first acquisition).
    #[must_use = "the setter returns the changed lease"]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self.state = Arc::default();
        self
    }

    /// Uses `entropy` for nonces and jitter.
    #[must_use = "the setter returns the changed lease"]
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = entropy;
        self
    }

    /// Publishes `value` with every holding of this lease: written in the
    /// lock's record by the acquisition and kept by each renewal (no
    /// request of its own), read by anyone with [`Lease::read`] or
    /// [`Election::leader`](super::Election::leader); a holder changes it
    /// with [`LeaseGuard::proclaim`](super::LeaseGuard::proclaim). Refused
    /// over [`MAX_VALUE_BYTES`](super::MAX_VALUE_BYTES).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
    /// use std::sync::Arc;
    /// use casaas_core::MemoryStore;
    /// use casaas_core::lease::{Lease, LeaseConfig};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let lease = Lease::new(store, "locks/db", "node-1", LeaseConfig::default())?
    ///     .with_value("10.0.0.7:5432")?;
    /// let guard = lease.acquire(Default::default()).await?;
    /// let (record, _) = lease.read().await?.expect("held");
    /// assert_eq!(record.value.as_deref(), Some("10.0.0.7:5432"));
    /// guard.proclaim("10.0.0.8:5432").await?; // no new election, same token
    /// # guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_value(mut self, value: impl Into<String>) -> Result<Self, LeaseError> {
        let value = value.into();
        super::record::check_value(&self.key, &value)?;
        self.value = Some(value);
        Ok(self)
    }

    /// The value published with each holding, if any.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The lock object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Our owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The timing configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn CasStore> {
        &self.store
    }

    fn lock(&self) -> MutexGuard<'_, ContenderState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the current record (one GET). A foreign object is an error.
    pub async fn read(&self) -> Result<Option<(LeaseRecord, Version)>, LeaseError> {
        let read = read_record(
            self.store.as_ref(),
            self.clock.as_ref(),
            self.config.request_timeout,
            &self.key,
        )
        .await?;
        if let Some((record, _)) = &read {
            self.saw_token(record.token);
        }
        Ok(read)
    }

    /// This process's key for the lock's token floor: the store's identity
    /// and its description, which names the view (a prefix, say) that the
    /// identity of a view shares with the store it looks into, and the key.
    fn floor_key(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.store.identity(),
            self.store.describe(),
            self.key
        )
    }

    /// Remembers, for this process, that the lock object held `token`.
    fn saw_token(&self, token: u64) {
        let mut floors = token_floors().lock().unwrap_or_else(|p| p.into_inner());
        let floor = floors.entry(self.floor_key()).or_default();
        *floor = (*floor).max(token);
    }

    /// The token this process saw the lock object at, if any.
    fn token_floor(&self) -> Option<u64> {
        token_floors()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.floor_key())
            .copied()
    }

    /// Refuses to create the lock object again when this process saw it
    /// before: it was deleted from outside the protocol, and a new object
    /// would restart fencing at token 1, below what fenced resources may
    /// have recorded (see "Limits" in the protocol document). `floor` is
    /// [`token_floor`](Self::token_floor) taken before the read that found
    /// the object absent: another lease of this process may create it
    /// after that read, and its token is no sign of a deletion.
    fn refuse_recreation(&self, floor: Option<u64>) -> Result<(), LeaseError> {
        if self.key.contains(".queue/") || self.key.contains(".readers/") {
            // A fair lock's tickets and a read-write lock's reader slots
            // are deleted by the protocol itself when they end, and their
            // keys reused; neither fences anything.
            return Ok(());
        }
        if crate::layout::inner_identity(&self.store.identity()).is_some() {
            // The create-only layout's view reads a chain of epoch objects
            // that the protocol itself collects: a read that lists an epoch
            // collected before it is fetched finds nothing, with no deletion
            // from outside (seen as false refusals in a race on SeaweedFS).
            return Ok(());
        }
        match floor {
            Some(token) if token > 0 => Err(LeaseError::Store(CasError::new(
                ErrorKind::Misconfigured,
                format!(
                    "the lock object {} on {} is gone, but this process saw it at fencing \
                     token {token}: it was deleted from outside the protocol, and creating it \
                     again would restart fencing at token 1, below what fenced resources may \
                     have recorded. Restore the object (its last record, token {token} or \
                     higher), or, to start the lock over at token 1 knowingly, run a new \
                     process (only this process remembers the token); to break a stale lock, \
                     release it (`casaas release`) instead of deleting it",
                    self.key,
                    self.store.describe()
                ),
            ))),
            _ => Ok(()),
        }
    }

    /// Decides, from a record just read at `now`, whether it is expired,
    /// updating the observation. Returns the remaining wait if held.
    fn observe(&self, record: &LeaseRecord, version: &Version, now: Duration) -> Duration {
        self.observe_unchanged(
            Sighting::Lock(version.clone()),
            Some(record),
            record.ttl(),
            now,
        )
    }

    /// How long until `sighting`, first seen now or earlier and unchanged
    /// since, has lasted the takeover wait for `ttl`. `record` (if any) gives
    /// the advisory wall expiry for [`ExpiryMode::WallClock`].
    fn observe_unchanged(
        &self,
        sighting: Sighting,
        record: Option<&LeaseRecord>,
        ttl: Duration,
        now: Duration,
    ) -> Duration {
        let since = {
            let mut state = self.lock();
            match &state.observed {
                Some((seen, since)) if *seen == sighting => *since,
                _ => {
                    state.observed = Some((sighting, now));
                    now
                }
            }
        };
        let observed_wait = (since + self.config.takeover_wait(ttl)).saturating_sub(now);
        let Some(record) = record else {
            return observed_wait;
        };
        match self.config.expiry {
            ExpiryMode::ObservedUnchanged => observed_wait,
            ExpiryMode::WallClock { max_skew } => {
                let expiry = record.wall_expiry() + max_skew;
                let wall_wait = expiry
                    .duration_since(self.clock.wall())
                    .unwrap_or(Duration::ZERO);
                wall_wait.min(observed_wait)
            }
        }
    }

    /// One acquisition attempt: a read, and a write if the lease is absent,
    /// released, expired, or ours from an earlier unresolved write.
    ///
    /// Losing a race is not an error: when someone else's write lands
    /// between our read and our write (two contenders on a lock that does
    /// not exist yet, in either layout), the answer is
    /// [`AcquireOutcome::Held`] if the winner holds the lease, and if the
    /// lease is free again by then (the winner already released it) the
    /// attempt contends again at once. Only after losing
    /// `8` such races in a row does it give up with
    /// [`LeaseError::Contended`].
    ///
    /// Requests: 1 GET when held; 1 GET + 1 write when acquired; 1 write
    /// when acquiring again after this lease's own release, if nobody wrote
    /// since (else that write is refused and the attempt reads as usual);
    /// +1 GET to resolve an ambiguous or precondition-failed write; the
    /// same again for each race lost to a holding that has already ended.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while its write is in flight may leave the lock
    /// held by this owner with no guard renewing it: the write can still
    /// land. This `Lease` (and its clones) remembers such writes: its next
    /// attempt that finds one holding the lock claims it (a guard with the
    /// same token, at once). Until then other contenders see a holder that
    /// stopped renewing and take over one TTL·(1 + drift) after they first
    /// see it. Dropping it at any other point leaves nothing.
    #[must_use = "an acquired lease is given up as soon as the returned guard is dropped"]
    pub async fn try_acquire(&self) -> Result<AcquireOutcome, LeaseError> {
        for lost in 1..=MAX_LOST_RACES {
            match self.attempt().await {
                Err(LeaseError::Store(err)) if lost_race(&err) => {
                    tracing::debug!(key = %self.key, error = %err, lost, "lost the race for a free lease; contending again");
                }
                outcome => return outcome,
            }
        }
        Err(LeaseError::Contended {
            key: self.key.clone(),
            attempts: MAX_LOST_RACES,
        })
    }

    /// One attempt, where a lost race is an error: for callers that retry
    /// on their own terms (the waiting loop backs off; a fair waiter moves
    /// to the next ticket rather than take one that already ended).
    pub(crate) async fn attempt(&self) -> Result<AcquireOutcome, LeaseError> {
        let span = tracing::debug_span!("lease.try_acquire", key = %self.key, owner = %self.owner);
        self.try_acquire_inner().instrument(span).await
    }

    async fn try_acquire_inner(&self) -> Result<AcquireOutcome, LeaseError> {
        // Before any request of ours: a contender on a store that ignores
        // conditions would "win" the moment the lock looked free.
        if self.config.verify_store {
            super::retry::verify_store(
                self.store.as_ref(),
                &self.clock,
                &self.entropy,
                self.config.request_timeout,
            )
            .await?;
        }
        if let Some(link) = &self.session {
            link.ensure_alive()?;
        }
        if let Some(outcome) = self.reacquire().await? {
            return Ok(outcome);
        }
        let floor = self.token_floor();
        let current = self.read().await?;
        let now = self.clock.now();
        let plan = match &current {
            None => {
                self.refuse_recreation(floor)?;
                self.lock().orphans.settle(None, |_| false);
                Plan::Create
            }
            Some((record, version)) => {
                // Claimed under the lock: no other attempt can claim it too.
                let ours = matches!(
                    self.lock()
                        .orphans
                        .settle(Some(version), |n| n == record.nonce),
                    Settled::Landed(_)
                );
                if ours && !record.released {
                    // An earlier write of ours landed after all: renew it.
                    Plan::Replace {
                        version: version.clone(),
                        token: record.token,
                        acquired_at_ms: Some(record.acquired_at_ms),
                    }
                } else if record.released {
                    Plan::Replace {
                        version: version.clone(),
                        token: self.next_token(record.token)?,
                        acquired_at_ms: None,
                    }
                } else if let Some(session) = &record.session {
                    // Read after the lock: the term it names is the one to judge.
                    match self.judge_term(record, session).await? {
                        TermVerdict::Running(wait) => {
                            tracing::debug!(holder = %record.owner, token = record.token, session = %session.heartbeat, term = session.term, ?wait, "held under a running session");
                            return Ok(AcquireOutcome::Held(HeldBy {
                                owner: record.owner.clone(),
                                token: record.token,
                                takeover_in: wait,
                            }));
                        }
                        TermVerdict::Ended => {
                            tracing::info!(holder = %record.owner, token = record.token, session = %session.heartbeat, term = session.term, "taking over a lock whose session ended");
                            Plan::Replace {
                                version: version.clone(),
                                token: self.next_token(record.token)?,
                                acquired_at_ms: None,
                            }
                        }
                    }
                } else {
                    let wait = self.observe(record, version, now);
                    if !wait.is_zero() {
                        tracing::debug!(holder = %record.owner, token = record.token, ?wait, "held");
                        return Ok(AcquireOutcome::Held(HeldBy {
                            owner: record.owner.clone(),
                            token: record.token,
                            takeover_in: wait,
                        }));
                    }
                    let token = self.next_token(record.token)?;
                    tracing::info!(holder = %record.owner, token = record.token, "taking over an expired lease");
                    Plan::Replace {
                        version: version.clone(),
                        token,
                        acquired_at_ms: None,
                    }
                }
            }
        };
        self.write(plan).await
    }

    /// After a release of ours, one conditional write from the version it
    /// wrote, without reading: if the condition holds, the object is still
    /// our released record, exactly what a read would have shown. `None`
    /// when there is no such release, when writes of ours may still land
    /// (only a read can settle them), or when the write was refused because
    /// the lock moved on: then the caller reads as usual.
    async fn reacquire(&self) -> Result<Option<AcquireOutcome>, LeaseError> {
        let (version, token) = {
            let mut state = self.lock();
            if !state.orphans.is_empty() {
                state.last_release = None;
            }
            match state.last_release.take() {
                Some(release) => release,
                None => return Ok(None),
            }
        };
        let plan = Plan::Replace {
            version,
            token: self.next_token(token)?,
            acquired_at_ms: None,
        };
        match self.write(plan).await {
            Err(LeaseError::Store(err)) if err.kind() == ErrorKind::PreconditionFailed => {
                tracing::debug!("the lock moved on since our release; reading it");
                Ok(None)
            }
            outcome => outcome.map(Some),
        }
    }

    /// The token of the holder after one holding `token`: refused at
    /// `u64::MAX`, where the next holder would get the same token.
    fn next_token(&self, token: u64) -> Result<u64, LeaseError> {
        let next = token.checked_add(1).ok_or_else(|| LeaseError::Exhausted {
            key: self.key.clone(),
            counter: "fencing token",
        })?;
        debug_assert!(next > token, "a fencing token never decreases");
        Ok(next)
    }

    async fn write(&self, plan: Plan) -> Result<AcquireOutcome, LeaseError> {
        let nonce = self.entropy.nonce();
        let wall_ms = unix_ms(self.clock.wall());
        let ttl_ms = match &self.session {
            // Contenders wait for the session's TTL, which the lock records.
            Some(link) => {
                link.ensure_alive()?;
                link.heartbeat.ttl_ms()
            }
            None => u64::try_from(self.config.ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let (token, acquired_at_ms, condition) = match &plan {
            Plan::Create => (1, wall_ms, None),
            Plan::Replace {
                version,
                token,
                acquired_at_ms,
            } => (
                *token,
                acquired_at_ms.unwrap_or(wall_ms),
                Some(version.clone()),
            ),
        };
        let mut record =
            LeaseRecord::new(self.owner.clone(), nonce.clone(), token, ttl_ms, wall_ms);
        record.acquired_at_ms = acquired_at_ms;
        if let Some(link) = &self.session {
            record = record.under_session(link.named_from(&self.key));
        }
        record.value.clone_from(&self.value);
        let body = record.encode();
        let sent_at = self.clock.now();
        let mut mine = AttemptWrites {
            state: self.state.clone(),
            writes: PendingWrites::default(),
        };
        mine.writes.push(PendingWrite {
            nonce: nonce.clone(),
            sent_at,
            condition: condition.clone(),
            payload: (),
        });
        let timeout = self.config.request_timeout;
        let request = match &condition {
            None => {
                timed(
                    self.clock.as_ref(),
                    timeout,
                    &self.key,
                    self.store.create(&self.key, body),
                )
                .await
            }
            Some(version) => {
                timed(
                    self.clock.as_ref(),
                    timeout,
                    &self.key,
                    self.store.replace(&self.key, version, body),
                )
                .await
            }
        };
        match request {
            Ok(version) => {
                mine.writes.clear();
                Ok(AcquireOutcome::Acquired(
                    self.acquired(record, version, sent_at),
                ))
            }
            Err(err) if needs_resolution(&err) => self.resolve(err, mine, condition).await,
            Err(err) => {
                // Nothing was written.
                mine.writes.clear();
                Err(err.into())
            }
        }
    }

    /// After an ambiguous or precondition-failed write: read, and if the
    /// stored nonce is this attempt's, we hold the lease. Writes that may
    /// still land go to the shared memory when `mine` is dropped.
    async fn resolve(
        &self,
        err: CasError,
        mut mine: AttemptWrites,
        expected: Option<Version>,
    ) -> Result<AcquireOutcome, LeaseError> {
        let current = self.read().await?;
        let now = self.clock.now();
        let Some((record, version)) = current else {
            mine.writes.settle(None, |_| false);
            count_ambiguous("absent");
            return Err(err.into());
        };
        if let Settled::Landed(write) = mine.writes.settle(Some(&version), |n| n == record.nonce) {
            count_ambiguous("ours");
            tracing::info!(error = %err, "write outcome resolved by reading: it was ours");
            return Ok(AcquireOutcome::Acquired(self.acquired(
                record,
                version,
                write.sent_at,
            )));
        }
        count_ambiguous("not_ours");
        let orphan_landed = self.lock().orphans.contains(&record.nonce);
        if expected.as_ref() == Some(&version) || record.released || orphan_landed {
            // Our write did not land and the lease is still takeable, or an
            // earlier write of ours landed: let the caller retry at once.
            return Err(err.into());
        }
        let wait = if record.session.is_some() {
            // Its expiry is its session's: the next attempt judges that.
            self.config.retry_period
        } else {
            self.observe(&record, &version, now)
        };
        Ok(AcquireOutcome::Held(HeldBy {
            owner: record.owner,
            token: record.token,
            takeover_in: wait.max(Duration::from_millis(1)),
        }))
    }

    fn acquired(&self, record: LeaseRecord, version: Version, sent_at: Duration) -> LeaseGuard {
        self.saw_token(record.token);
        {
            // Our write now holds the object, so every earlier write of ours
            // was conditioned on a state that is gone: none can land.
            let mut state = self.lock();
            state.orphans.clear();
            state.observed = None;
        }
        metrics::counter!(metric_names::ACQUIRED).increment(1);
        tracing::info!(key = %self.key, owner = %self.owner, token = record.token, %version, "lease acquired");
        LeaseGuard::start(HolderStart {
            store: self.store.clone(),
            key: self.key.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
            record,
            version,
            sent_at,
            release_note: Some(Arc::new(ContenderNote(self.state.clone()))),
            session: self.session.clone(),
        })
    }

    /// Judges the session term a lock record names, reading the session's
    /// heartbeat *after* the lock (so the term is the lock's, never one the
    /// lock moved to since). Over when the heartbeat is in a later term or
    /// released in this one; when it is in this term and was seen unchanged
    /// for its TTL·(1 + drift), over once our conditional write marked it
    /// released; when the term is missing from the object (deleted, or
    /// created again at a lower term), over after that was seen for the
    /// lock's recorded TTL·(1 + drift).
    async fn judge_term(
        &self,
        lock: &LeaseRecord,
        session: &SessionRef,
    ) -> Result<TermVerdict, LeaseError> {
        let Some(beat_key) = session.heartbeat_key(&self.key) else {
            // Never guess: another object (or none) at some key of ours is
            // not the heartbeat, and judging it could take a live lock.
            return Err(LeaseError::HeartbeatOutOfReach {
                key: self.key.clone(),
                heartbeat: session.heartbeat.clone(),
            });
        };
        let heartbeat = read_record(
            self.store.as_ref(),
            self.clock.as_ref(),
            self.config.request_timeout,
            &beat_key,
        )
        .await?;
        let now = self.clock.now();
        match heartbeat {
            Some((beat, _)) if beat.token > session.term => Ok(TermVerdict::Ended),
            Some((beat, _)) if beat.token == session.term && beat.released => {
                Ok(TermVerdict::Ended)
            }
            Some((beat, version)) if beat.token == session.term => {
                let sighting = Sighting::Heartbeat(beat_key.clone(), version.clone());
                let wait = self.observe_unchanged(sighting, Some(&beat), beat.ttl(), now);
                if !wait.is_zero() {
                    return Ok(TermVerdict::Running(wait));
                }
                self.end_term(&beat_key, session.term, beat, version).await
            }
            _ => {
                // A term whose heartbeat object was replaced outside the
                // protocol: its holder's next renewal fails, so it ends at
                // the latest one TTL after its last write, which came before
                // we first saw the object without it.
                let sighting = Sighting::TermMissing(session.clone());
                let wait = self.observe_unchanged(sighting, None, lock.ttl(), now);
                Ok(if wait.is_zero() {
                    TermVerdict::Ended
                } else {
                    TermVerdict::Running(wait)
                })
            }
        }
    }

    /// Ends an expired session term by marking its heartbeat released,
    /// conditioned on the version seen unchanged. Without this write a
    /// renewal sent before the holder's deadline could land after our
    /// takeover of the lock (which is conditioned on the lock, not on the
    /// heartbeat) and extend the holder's belief; with it, either the
    /// renewal lands first (our write is refused: the session is alive) or
    /// ours does (the renewal is refused: the holder learns it lost).
    async fn end_term(
        &self,
        beat_key: &str,
        term: u64,
        beat: LeaseRecord,
        version: Version,
    ) -> Result<TermVerdict, LeaseError> {
        let mut ended = beat;
        ended.nonce = self.entropy.nonce();
        ended.released = true;
        ended.renewed_at_ms = unix_ms(self.clock.wall());
        let result = timed(
            self.clock.as_ref(),
            self.config.request_timeout,
            beat_key,
            self.store.replace(beat_key, &version, ended.encode()),
        )
        .await;
        match result {
            Ok(_) => {
                tracing::info!(session = %beat_key, term, holder = %ended.owner, "ended an expired session term");
                Ok(TermVerdict::Ended)
            }
            Err(err) if needs_resolution(&err) => {
                // Whether ours or the holder's renewal landed, the read says;
                // a write of ours that lands later is still conditioned on
                // the expired version, so it can only end the same term.
                let now = read_record(
                    self.store.as_ref(),
                    self.clock.as_ref(),
                    self.config.request_timeout,
                    beat_key,
                )
                .await?;
                Ok(match now {
                    Some((beat, _))
                        if beat.nonce == ended.nonce
                            || beat.token > term
                            || (beat.token == term && beat.released) =>
                    {
                        TermVerdict::Ended
                    }
                    _ => {
                        tracing::debug!(error = %err, session = %beat_key, "the session renewed before we could end its term");
                        TermVerdict::Running(self.config.retry_period)
                    }
                })
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Acquires, waiting while someone else holds the lease (reading it
    /// every [`poll_period`](LeaseConfig::poll_period), jittered, or sooner
    /// when a takeover falls due), until acquired, the deadline passes or
    /// the token is cancelled. Retryable store errors are retried after
    /// [`retry_period`](LeaseConfig::retry_period) with backoff; others (a
    /// foreign object, auth, configuration) are returned at once.
    ///
    /// # Cancel safety
    ///
    /// Cancelling through [`WaitOptions::cancel`] is the clean stop: an
    /// attempt in flight finishes, and a lease it took is released before
    /// [`LeaseError::Cancelled`] returns (the deadline, likewise, is checked
    /// between attempts). Dropping the future instead is
    /// [`try_acquire`](Lease::try_acquire)'s case: a write in flight may
    /// still land and leave the lock held by this owner, unrenewed, until
    /// this `Lease` (or a clone) claims it at its next attempt or until it
    /// expires for others, one TTL·(1 + drift) after they first see it. A
    /// write whose answer was lost before a cancellation is in the same
    /// state.
    #[must_use = "the lease is given up as soon as the returned guard is dropped; hold it while you work"]
    pub async fn acquire(&self, options: WaitOptions) -> Result<LeaseGuard, LeaseError> {
        let span = tracing::info_span!("lease.acquire", key = %self.key, owner = %self.owner);
        async {
            let start = self.clock.now();
            let cancel = options.cancel.unwrap_or_default();
            loop {
                if cancel.is_cancelled() {
                    return Err(LeaseError::Cancelled);
                }
                let wait = match self.attempt().await {
                    Ok(AcquireOutcome::Acquired(guard)) if cancel.is_cancelled() => {
                        // Cancelled while the write was in flight: the caller
                        // no longer wants the lease, so give it back.
                        if let Err(err) = guard.release().await {
                            tracing::debug!(error = %err, "releasing a lease acquired after cancellation failed; it will expire");
                        }
                        return Err(LeaseError::Cancelled);
                    }
                    Ok(AcquireOutcome::Acquired(guard)) => {
                        let waited = self.clock.now().saturating_sub(start);
                        metrics::histogram!(metric_names::ACQUIRE_WAIT)
                            .record(waited.as_secs_f64());
                        return Ok(guard);
                    }
                    Ok(AcquireOutcome::Held(held)) => {
                        let base = held.takeover_in.min(self.config.poll_period);
                        base.saturating_add(self.entropy.jitter(self.config.poll_jitter()))
                    }
                    // Lost races (the object changed or vanished between our
                    // read and write) are retried like transient failures.
                    Err(LeaseError::Store(err)) if err.is_retryable() || lost_race(&err) => {
                        tracing::debug!(error = %err, "retrying");
                        backoff(&self.entropy, self.config.retry_period, Some(&err))
                    }
                    Err(err) => return Err(err),
                };
                let elapsed = self.clock.now().saturating_sub(start);
                let wait = match options.deadline {
                    Some(deadline) if elapsed >= deadline => {
                        return Err(LeaseError::DeadlineExceeded(elapsed));
                    }
                    Some(deadline) => wait.min(deadline - elapsed),
                    None => wait,
                };
                tokio::select! {
                    // Polled in order, so that a replayed run takes the same branch.
                    biased;
                    () = cancel.cancelled() => return Err(LeaseError::Cancelled),
                    () = self.clock.sleep(wait) => {}
                }
            }
        }
        .instrument(span)
        .await
    }
}
