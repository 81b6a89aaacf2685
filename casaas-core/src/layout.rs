//! How leases lay out their objects: replaced in place, or one new object
//! per write on stores that only create-if-absent.
//!
//! **The record layout** ([`LeaseLayout::Record`]): one object per lock,
//! replaced with replace-if-version-matches. One request per renewal, one
//! object per lock. Needs a trustworthy conditional replace.
//!
//! **The epoch layout** ([`LeaseLayout::Epochs`]): every write of a lock
//! creates the next *epoch* object with create-if-absent, so the store
//! itself decides which writer gets epoch `e + 1`, and nothing is ever
//! overwritten. [`EpochStore`] presents such a chain as one virtual object
//! with replace-if-version-matches: its version is the head epoch, and
//! "replace from version `e`" is "create epoch `e + 1`". Every protocol in
//! [`crate::lease`] runs on it unchanged (so fencing tokens, the expiry
//! rule and the exactly-once resolution by nonce are the record layout's,
//! word for word); the only difference a holder sees is the cost.
//!
//! Objects of a lock `K` in the epoch layout:
//!
//! - `K`: a layout marker, created once, never changed. Whoever creates `K`
//!   first decides the lock's layout, so a record-layout contender and an
//!   epoch-layout contender can never both believe they hold `K`: each
//!   refuses the other's object with a message naming the layout.
//! - `K.epochs/NNNNNNNNNNNNNNNNNNNN`: epoch `N` (20 digits), the record
//!   the write carried. Created only if absent; never changed.
//! - `K.collected/NNNNNNNNNNNNNNNNNNNN`: block `N` of epochs has been (or is
//!   being) garbage-collected. Created before the first epoch of the block
//!   is deleted; never deleted.
//!
//! **Why the collection markers.** Deleting an epoch makes its name free
//! again, and a create-if-absent that was sent long ago (a paused process,
//! a request delayed in the network) can land there after the chain has
//! moved on. Such a write must not count: every successful create is
//! confirmed by reading its block's marker (absent: no epoch of the block
//! was ever deleted, so the name was never used and the create won a fresh
//! epoch; present: the write landed in collected history, and is reported
//! as a lost race). Finding the head follows the same rule: "epoch `e`
//! exists and `e + 1` does not" is believed only after reading that
//! neither block is collected. So a reader never mistakes collected
//! history, or a late write into it, for the current term.
//!
//! **Cost** (default collection settings): a renewal is one create plus
//! one GET of a marker; collection adds, per [`DEFAULT_COLLECT_BLOCK`]
//! epochs, one marker create, one LIST and the deletes. A contender's poll
//! is two GETs. Objects left behind: at most
//! `DEFAULT_KEEP + 2 * DEFAULT_COLLECT_BLOCK` live epochs per lock, plus one
//! marker per collected block (kept forever; a marker is a few bytes).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), casaas_core::lease::LeaseError> {
//! use std::sync::Arc;
//! use casaas_core::layout::{LeaseLayout, with_layout};
//! use casaas_core::lease::{Lease, LeaseConfig};
//! use casaas_core::MemoryStore;
//!
//! let store = with_layout(Arc::new(MemoryStore::new()), LeaseLayout::Epochs);
//! let lease = Lease::new(store.clone(), "locks/leader", "worker-1", LeaseConfig::default())?;
//! let guard = lease.acquire(Default::default()).await?;
//! assert_eq!(guard.token(), 1);
//! guard.release().await?;
//! // Two writes, two epochs: nothing was overwritten.
//! let epochs = store.list("locks/leader.epochs/").await?;
//! assert_eq!(epochs.len(), 2);
//! # Ok(())
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    Capabilities, CasError, CasStore, ErrorKind, ForwardingStore, ListEntry, StoredObject, Version,
    validate_key,
};

/// The URL option that chooses the layout: `layout=record|epochs`.
pub const LAYOUT_OPTION: &str = "layout";

/// Epochs per collection block (see the [module docs](self)).
pub const DEFAULT_COLLECT_BLOCK: u64 = 256;
/// Epochs below the head that are never collected, so that a contender
/// polling a recent head rarely has to list.
pub const DEFAULT_KEEP: u64 = 32;

/// The `kind` of the layout marker at a lock's key.
const MARKER_KIND: &str = "casaas.layout";
/// The `kind` of lease records (the record layout's object at the key).
const RECORD_KIND: &str = "casaas.lease";
/// Digits of the zero-padded numbers in epoch and marker keys.
const DIGITS: usize = 20;
/// Forward probes before a head search falls back to a listing.
const MAX_FORWARD_PROBES: u32 = 8;
/// Listings a head search makes before it gives up as ambiguous.
const MAX_LISTINGS: u32 = 3;

/// How a lock's objects are laid out on a store (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LeaseLayout {
    /// One object per lock, replaced in place (needs conditional replace).
    Record,
    /// One new object per write, created only if absent (needs only
    /// create-if-absent).
    Epochs,
}

impl LeaseLayout {
    /// The layout a store with these capabilities can hold: the record
    /// layout where conditional replace is honoured, else the epoch layout.
    pub fn for_capabilities(capabilities: &Capabilities) -> LeaseLayout {
        if capabilities.replace_if_match {
            LeaseLayout::Record
        } else {
            LeaseLayout::Epochs
        }
    }

    /// The name used in URLs, reports and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseLayout::Record => "record",
            LeaseLayout::Epochs => "epochs",
        }
    }

    /// How people call it in verdicts: "record layout", "create-only layout".
    pub fn describe(self) -> &'static str {
        match self {
            LeaseLayout::Record => "record layout",
            LeaseLayout::Epochs => "create-only layout",
        }
    }
}

impl fmt::Display for LeaseLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LeaseLayout {
    type Err = CasError;

    fn from_str(text: &str) -> Result<Self, CasError> {
        match text.to_ascii_lowercase().as_str() {
            "record" => Ok(LeaseLayout::Record),
            "epochs" | "epoch" => Ok(LeaseLayout::Epochs),
            _ => Err(CasError::misconfigured(format!(
                "option {LAYOUT_OPTION}={text} is not a layout: use {LAYOUT_OPTION}=record (one \
                 lock object replaced in place) or {LAYOUT_OPTION}=epochs (one new object per \
                 write, for stores that only create-if-absent)"
            ))),
        }
    }
}

/// `store`, with leases, elections and fenced resources on it laid out as
/// `layout` whatever its capabilities say (what the URL option
/// `layout=record|epochs` does). Everything else reaches `store` as it is:
/// the protocols put an [`EpochStore`] over it themselves.
pub fn with_layout(store: Arc<dyn CasStore>, layout: LeaseLayout) -> Arc<dyn CasStore> {
    Arc::new(LayoutChoice { store, layout })
}

/// The layout leases use on `store`: the one chosen for it, else the one
/// its capabilities allow ([`LeaseLayout::for_capabilities`]).
///
/// ```
/// use std::sync::Arc;
/// use casaas_core::layout::{LeaseLayout, layout_of, with_layout};
/// use casaas_core::MemoryStore;
///
/// assert_eq!(layout_of(&MemoryStore::new()), LeaseLayout::Record);
/// let forced = with_layout(Arc::new(MemoryStore::new()), LeaseLayout::Epochs);
/// assert_eq!(layout_of(forced.as_ref()), LeaseLayout::Epochs);
/// ```
pub fn layout_of(store: &dyn CasStore) -> LeaseLayout {
    store
        .lease_layout()
        .unwrap_or_else(|| LeaseLayout::for_capabilities(&store.capabilities()))
}

/// The store protocols write through: `store` itself in the record
/// layout, an [`EpochStore`] over it in the epoch layout. The store guard
/// checks this view (what `casaas doctor` checks too).
pub fn lease_view(store: Arc<dyn CasStore>) -> Arc<dyn CasStore> {
    match layout_of(store.as_ref()) {
        LeaseLayout::Epochs => Arc::new(EpochStore::new(store)),
        LeaseLayout::Record => store,
    }
}

/// The identity of the epoch view of a store of identity `inner`.
pub(crate) fn epoch_identity(inner: &str) -> String {
    format!("epochs:{inner}")
}

/// The identity of the store under an epoch view, if `identity` is one.
pub(crate) fn inner_identity(identity: &str) -> Option<&str> {
    identity.strip_prefix("epochs:")
}

/// A store with a layout chosen for it: forwards everything else.
#[derive(Debug)]
struct LayoutChoice {
    store: Arc<dyn CasStore>,
    layout: LeaseLayout,
}

impl ForwardingStore for LayoutChoice {
    type Inner = dyn CasStore;
    fn inner(&self) -> &dyn CasStore {
        self.store.as_ref()
    }
    fn wrap_identity(&self) -> String {
        // The same store: the guard's verdict and trust carry over.
        self.store.identity()
    }
    fn wrap_lease_layout(&self) -> Option<LeaseLayout> {
        Some(self.layout)
    }
}

/// The message of a lock opened in one layout and written in the other.
pub(crate) fn layout_mismatch(key: &str, written: LeaseLayout, opened: LeaseLayout) -> CasError {
    CasError::misconfigured(format!(
        "the lock at '{key}' is written in the {} but was opened in the {}: open the store with \
         {LAYOUT_OPTION}={} (every process that uses this lock must use the same layout), or \
         use another key",
        written.describe(),
        opened.describe(),
        written.as_str()
    ))
    .with_key(key)
}

/// Is `body` the epoch layout's marker? (For readers of the record layout,
/// which refuse it with [`layout_mismatch`].)
pub(crate) fn is_layout_marker(body: &[u8]) -> bool {
    kind_of(body).as_deref() == Some(MARKER_KIND)
}

fn kind_of(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("kind")?.as_str().map(str::to_string)
}

fn marker_body() -> Bytes {
    Bytes::from(format!(
        r#"{{"kind":"{MARKER_KIND}","schema":1,"layout":"epochs"}}"#
    ))
}

/// The head of one lock's chain, as last confirmed: epoch `0` means the
/// marker exists but no epoch was ever written.
#[derive(Debug, Clone)]
struct Head {
    epoch: u64,
    body: Bytes,
}

/// What an [`EpochStore`] remembers per lock key.
#[derive(Debug, Default)]
struct KeyState {
    /// The layout marker at the key was seen.
    marked: bool,
    /// The last confirmed head.
    head: Option<Head>,
    /// Blocks below this are known collected.
    collected_below: u64,
    /// A collection is running for the key.
    collecting: bool,
}

#[derive(Debug)]
struct Shared {
    inner: Arc<dyn CasStore>,
    block: u64,
    keep: u64,
    keys: Mutex<HashMap<String, KeyState>>,
    /// Keys whose collection found no way to delete (said once).
    cannot_delete: Mutex<HashSet<String>>,
}

/// A store whose every object is an epoch chain: the epoch layout (see the
/// [module docs](self)) as a [`CasStore`] with create-if-absent and
/// replace-if-version-matches, on a store that needs only create-if-absent.
///
/// Versions are the head epoch ([`Version::Generation`]). The virtual
/// objects cannot be deleted or listed (a lock object is never deleted,
/// which would reset its fencing token); [`list`](CasStore::list) shows the
/// underlying objects.
#[derive(Debug, Clone)]
pub struct EpochStore {
    shared: Arc<Shared>,
}

impl EpochStore {
    /// The epoch layout over `inner`, with the default collection settings.
    pub fn new(inner: Arc<dyn CasStore>) -> Self {
        Self::with_collection(inner, DEFAULT_COLLECT_BLOCK, DEFAULT_KEEP)
    }

    /// The epoch layout over `inner`, collecting epochs in blocks of
    /// `block` once a whole block is more than `keep` epochs below the head
    /// (both at least 1; small values make tests and simulations collect
    /// often).
    pub fn with_collection(inner: Arc<dyn CasStore>, block: u64, keep: u64) -> Self {
        EpochStore {
            shared: Arc::new(Shared {
                inner,
                block: block.max(1),
                keep: keep.max(1),
                keys: Mutex::new(HashMap::new()),
                cannot_delete: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// The store the epochs are written to.
    pub fn inner(&self) -> &Arc<dyn CasStore> {
        &self.shared.inner
    }

    /// The key of epoch `epoch` of the lock at `key`.
    pub fn epoch_key(key: &str, epoch: u64) -> String {
        format!("{key}.epochs/{epoch:0DIGITS$}")
    }

    /// The prefix under which the epochs of the lock at `key` live.
    pub fn epochs_prefix(key: &str) -> String {
        format!("{key}.epochs/")
    }

    /// The key of the collection marker of block `block` of `key`.
    pub fn collected_key(key: &str, block: u64) -> String {
        format!("{key}.collected/{block:0DIGITS$}")
    }

    /// The epoch an epoch key names, if `entry` is an epoch of `key`.
    pub fn epoch_of(key: &str, entry: &str) -> Option<u64> {
        let digits = entry.strip_prefix(&Self::epochs_prefix(key))?;
        (digits.len() == DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    }

    /// The lock an object of the epoch layout belongs to: `K` for
    /// `K.epochs/…` and `K.collected/…` (for tools that list a store and
    /// show locks, not their parts).
    ///
    /// ```
    /// use casaas_core::layout::EpochStore;
    /// let epoch = EpochStore::epoch_key("locks/a", 7);
    /// assert_eq!(EpochStore::lock_of(&epoch), Some("locks/a"));
    /// assert_eq!(EpochStore::lock_of("locks/a"), None);
    /// ```
    pub fn lock_of(entry: &str) -> Option<&str> {
        [".epochs/", ".collected/"].into_iter().find_map(|part| {
            let at = entry.rfind(part)?;
            let digits = &entry[at + part.len()..];
            (digits.len() == DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| &entry[..at])
        })
    }

    /// Is `body` the layout marker the epoch layout keeps at a lock's key?
    pub fn is_marker(body: &[u8]) -> bool {
        is_layout_marker(body)
    }

    fn block_of(&self, epoch: u64) -> u64 {
        epoch / self.shared.block
    }

    fn keys(&self) -> MutexGuard<'_, HashMap<String, KeyState>> {
        self.shared.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn known_head(&self, key: &str) -> Option<Head> {
        self.keys().get(key).and_then(|k| k.head.clone())
    }

    fn learn_head(&self, key: &str, head: Head) {
        let mut keys = self.keys();
        let state = keys.entry(key.to_string()).or_default();
        state.marked = true;
        if state.head.as_ref().is_none_or(|h| h.epoch <= head.epoch) {
            state.head = Some(head);
        }
    }

    fn forget_head(&self, key: &str) {
        if let Some(state) = self.keys().get_mut(key) {
            state.head = None;
        }
    }

    fn check_keys(&self, key: &str) -> Result<(), CasError> {
        validate_key(key)?;
        // The longest derived key must be valid too.
        validate_key(&Self::collected_key(key, u64::MAX))
            .and_then(|()| validate_key(&Self::epoch_key(key, u64::MAX)))
            .map_err(|e| {
                CasError::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "key '{key}' is too long for the epoch layout, which adds up to 32 \
                         characters to it: {e}"
                    ),
                )
                .with_key(key)
            })
    }

    /// Reads the object at `key` itself. `Ok(Some(None))`: the layout
    /// marker. `Ok(Some(Some(object)))`: a foreign object, handed to the
    /// caller as it is (the protocols refuse it by name). `Ok(None)`:
    /// nothing there. A record-layout lock is a layout mismatch.
    async fn read_marker(&self, key: &str) -> Result<Option<Option<StoredObject>>, CasError> {
        if self.keys().get(key).is_some_and(|k| k.marked) {
            return Ok(Some(None));
        }
        let Some(object) = self.shared.inner.get(key).await? else {
            return Ok(None);
        };
        match kind_of(&object.body).as_deref() {
            Some(MARKER_KIND) => {
                self.keys().entry(key.to_string()).or_default().marked = true;
                Ok(Some(None))
            }
            Some(RECORD_KIND) => Err(layout_mismatch(
                key,
                LeaseLayout::Record,
                LeaseLayout::Epochs,
            )),
            _ => Ok(Some(Some(object))),
        }
    }

    /// Makes sure the layout marker is at `key`. `Err` with the object
    /// there if it is foreign (for `create` to answer as "exists").
    async fn ensure_marker(&self, key: &str) -> Result<Result<(), StoredObject>, CasError> {
        for _ in 0..3 {
            match self.read_marker(key).await? {
                Some(None) => return Ok(Ok(())),
                Some(Some(foreign)) => return Ok(Err(foreign)),
                None => {}
            }
            match self.shared.inner.create(key, marker_body()).await {
                Ok(_) => {
                    self.keys().entry(key.to_string()).or_default().marked = true;
                    return Ok(Ok(()));
                }
                // Someone else's object (or our own duplicate): read again.
                Err(e)
                    if e.kind() == ErrorKind::PreconditionFailed || e.may_have_taken_effect() => {}
                Err(e) => return Err(e),
            }
        }
        Err(CasError::new(
            ErrorKind::Ambiguous,
            "the layout marker could not be written or read back",
        )
        .with_key(key))
    }

    /// Is block `block` of `key` collected? (One GET, unless known.)
    async fn is_collected(&self, key: &str, block: u64) -> Result<bool, CasError> {
        if self
            .keys()
            .get(key)
            .is_some_and(|k| block < k.collected_below)
        {
            return Ok(true);
        }
        Ok(self
            .shared
            .inner
            .get(&Self::collected_key(key, block))
            .await?
            .is_some())
    }

    /// The highest epoch a listing shows (0 if none).
    async fn listed_head(&self, key: &str) -> Result<u64, CasError> {
        let listed = self.shared.inner.list(&Self::epochs_prefix(key)).await?;
        Ok(listed
            .iter()
            .filter_map(|e| Self::epoch_of(key, &e.key))
            .max()
            .unwrap_or(0))
    }

    /// The current head of `key`'s chain, confirmed by the rule in the
    /// [module docs](self): the candidate exists, its successor does not,
    /// and neither one's block is collected.
    async fn find_head(&self, key: &str) -> Result<Head, CasError> {
        let mut listings = 0;
        let (mut epoch, mut body) = match self.known_head(key) {
            Some(head) => (head.epoch, Some(head.body)),
            None => {
                listings += 1;
                (self.listed_head(key).await?, None)
            }
        };
        let mut probes = 0;
        loop {
            if body.is_none() && epoch > 0 {
                match self.shared.inner.get(&Self::epoch_key(key, epoch)).await? {
                    Some(object) => body = Some(object.body),
                    // Collected under us, or a listing that is behind.
                    None => {
                        (epoch, body) = self.relist(key, &mut listings).await?;
                        continue;
                    }
                }
            }
            let next = epoch.checked_add(1).ok_or_else(|| exhausted(key))?;
            if let Some(object) = self.shared.inner.get(&Self::epoch_key(key, next)).await? {
                epoch = next;
                body = Some(object.body);
                probes += 1;
                if probes >= MAX_FORWARD_PROBES {
                    // Far behind: jump with a listing instead of walking.
                    probes = 0;
                    (epoch, body) = self.relist(key, &mut listings).await?;
                }
                continue;
            }
            let mut collected = self.is_collected(key, self.block_of(next)).await?;
            if !collected && epoch > 0 && self.block_of(epoch) != self.block_of(next) {
                collected = self.is_collected(key, self.block_of(epoch)).await?;
            }
            if collected {
                // Our candidate is in collected history: the head is beyond.
                (epoch, body) = self.relist(key, &mut listings).await?;
                continue;
            }
            let head = Head {
                epoch,
                body: body.unwrap_or_default(),
            };
            self.learn_head(key, head.clone());
            return Ok(head);
        }
    }

    /// A fresh candidate from a listing; bounded, since a listing that
    /// keeps pointing into collected history would loop for ever.
    async fn relist(
        &self,
        key: &str,
        listings: &mut u32,
    ) -> Result<(u64, Option<Bytes>), CasError> {
        *listings += 1;
        if *listings > MAX_LISTINGS {
            self.forget_head(key);
            return Err(CasError::new(
                ErrorKind::Ambiguous,
                "the head of the epoch chain could not be confirmed: listings keep showing \
                 collected or vanished epochs (a listing that lags behind writes?)",
            )
            .with_key(key));
        }
        Ok((self.listed_head(key).await?, None))
    }

    /// Creates epoch `epoch` of `key` and confirms it (see the module docs).
    async fn write_epoch(&self, key: &str, epoch: u64, body: Bytes) -> Result<Version, CasError> {
        let written = self
            .shared
            .inner
            .create(&Self::epoch_key(key, epoch), body.clone())
            .await;
        if let Err(err) = written {
            // Lost, or unknown: either way what we knew of the head is old.
            self.forget_head(key);
            return Err(err.with_key(key));
        }
        match self
            .shared
            .inner
            .get(&Self::collected_key(key, self.block_of(epoch)))
            .await
        {
            Ok(None) => {}
            Ok(Some(_)) => {
                self.forget_head(key);
                return Err(CasError::new(
                    ErrorKind::PreconditionFailed,
                    format!(
                        "epoch {epoch} was created in collected history (a late write): the \
                         chain has moved on"
                    ),
                )
                .with_key(key));
            }
            Err(err) => {
                self.forget_head(key);
                return Err(CasError::new(
                    ErrorKind::Ambiguous,
                    format!(
                        "epoch {epoch} was created but could not be confirmed (reading its \
                         block's collection marker failed: {err})"
                    ),
                )
                .with_key(key));
            }
        }
        self.learn_head(key, Head { epoch, body });
        self.collect_in_background(key, epoch);
        Ok(epoch_version(epoch))
    }

    /// Starts collecting the blocks that lie wholly more than `keep` epochs
    /// below `head`, if any and none is running for `key`.
    fn collect_in_background(&self, key: &str, head: u64) {
        let Some(below) = head.checked_sub(self.shared.keep) else {
            return;
        };
        let end = below / self.shared.block;
        {
            let mut keys = self.keys();
            let state = keys.entry(key.to_string()).or_default();
            if state.collecting || end <= state.collected_below {
                return;
            }
            state.collecting = true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.keys().entry(key.to_string()).or_default().collecting = false;
            return;
        };
        let this = self.clone();
        let key = key.to_string();
        runtime.spawn(async move {
            let reached = this.collect(&key, end).await;
            let mut keys = this.keys();
            let state = keys.entry(key).or_default();
            state.collecting = false;
            state.collected_below = state.collected_below.max(reached);
        });
    }

    /// Collects every epoch of `key` in blocks below `end`: each block's
    /// marker first, then the deletes. Returns the block below which all
    /// are marked. Best effort: a failure only leaves objects for the next
    /// collection.
    async fn collect(&self, key: &str, end: u64) -> u64 {
        let known = self.keys().get(key).map_or(0, |k| k.collected_below);
        let listed = match self.shared.inner.list(&Self::epochs_prefix(key)).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::debug!(key, error = %e, "could not list epochs to collect");
                return known;
            }
        };
        // Below the lowest epoch listed, every block is empty: its epochs
        // were deleted, which means marked first. Starting there keeps a new
        // process from re-marking a long lock's whole history.
        let lowest = listed
            .iter()
            .filter_map(|e| Self::epoch_of(key, &e.key))
            .min()
            .map_or(end, |e| self.block_of(e));
        let start = known.max(lowest).min(end);
        let mut marked = start;
        for block in start..end {
            match self
                .shared
                .inner
                .create(&Self::collected_key(key, block), marker_body())
                .await
            {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::PreconditionFailed => {}
                Err(e) => {
                    tracing::debug!(key, block, error = %e, "could not mark a block collected");
                    break;
                }
            }
            marked = block + 1;
        }
        let mut conditional = self.shared.inner.capabilities().conditional_delete;
        for entry in listed {
            let Some(epoch) = Self::epoch_of(key, &entry.key) else {
                continue;
            };
            if self.block_of(epoch) >= marked {
                continue;
            }
            // An epoch in a marked block is history whatever it holds, so
            // the delete needs no condition; a conditional one is used where
            // the store has it, and a changed object is left for next time.
            let mut deleted = if conditional {
                self.shared.inner.delete(&entry.key, &entry.version).await
            } else {
                self.shared.inner.delete_unconditionally(&entry.key).await
            };
            if conditional
                && deleted
                    .as_ref()
                    .is_err_and(|e| e.kind() == ErrorKind::Unsupported)
            {
                // A store that refuses If-Match on DELETE (501) may still delete.
                conditional = false;
                deleted = self.shared.inner.delete_unconditionally(&entry.key).await;
            }
            match deleted {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Unsupported => {
                    let first = self
                        .shared
                        .cannot_delete
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key.to_string());
                    if first {
                        tracing::info!(
                            key,
                            store = %self.shared.inner.describe(),
                            "this store cannot delete collected epochs ({e}); they stay (a \
                             lifecycle rule on the '.epochs/' objects can expire them)"
                        );
                    }
                    break;
                }
                Err(e) => {
                    tracing::debug!(key = %entry.key, error = %e, "could not delete a collected epoch")
                }
            }
        }
        marked
    }
}

fn epoch_version(epoch: u64) -> Version {
    Version::Generation(i64::try_from(epoch).unwrap_or(i64::MAX))
}

fn exhausted(key: &str) -> CasError {
    CasError::new(
        ErrorKind::InvalidInput,
        "the epoch chain has reached its last number; use another key",
    )
    .with_key(key)
}

#[async_trait]
impl CasStore for EpochStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.check_keys(key)?;
        match self.read_marker(key).await? {
            None => Ok(None),
            Some(Some(foreign)) => Ok(Some(foreign)),
            Some(None) => {
                let head = self.find_head(key).await?;
                Ok((head.epoch > 0).then(|| StoredObject {
                    body: head.body,
                    version: epoch_version(head.epoch),
                }))
            }
        }
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.check_keys(key)?;
        if let Err(foreign) = self.ensure_marker(key).await? {
            return Err(CasError::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "an object that is not an epoch chain is there ({})",
                    foreign.version
                ),
            )
            .with_key(key));
        }
        // Sent even when the chain is known to exist: the store, not what
        // this view remembers, decides (so the store guard tests the store).
        self.write_epoch(key, 1, body).await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.check_keys(key)?;
        let Some(epoch) = expected
            .as_generation()
            .and_then(|g| u64::try_from(g).ok())
            .filter(|e| *e > 0)
        else {
            return Err(CasError::new(
                ErrorKind::PreconditionFailed,
                format!("{expected} is not a version of an epoch chain"),
            )
            .with_key(key));
        };
        let head = match self.known_head(key) {
            Some(head) => head.epoch,
            None => match self.read_marker(key).await? {
                None => {
                    return Err(
                        CasError::new(ErrorKind::NotFound, "no object to replace").with_key(key)
                    );
                }
                Some(Some(_)) => {
                    return Err(CasError::new(
                        ErrorKind::PreconditionFailed,
                        "an object that is not an epoch chain is there",
                    )
                    .with_key(key));
                }
                Some(None) => self.find_head(key).await?.epoch,
            },
        };
        // Epoch `epoch` must have been seen, so that no create leaves a gap;
        // whether it is still the head is for the store's create to decide
        // (a stale condition is refused by the store, which the store guard
        // relies on to test it).
        if head < epoch && self.find_head(key).await?.epoch != epoch {
            return Err(CasError::new(
                ErrorKind::PreconditionFailed,
                format!("the current epoch is not {epoch}"),
            )
            .with_key(key));
        }
        let next = epoch.checked_add(1).ok_or_else(|| exhausted(key))?;
        self.write_epoch(key, next, body).await
    }

    async fn delete(&self, key: &str, _expected: &Version) -> Result<(), CasError> {
        Err(CasError::unsupported(
            "an object of the epoch layout is never deleted (a lock object's deletion would \
             reset its fencing token)",
        )
        .with_key(key))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.shared.inner.list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        let inner = self.shared.inner.capabilities();
        Capabilities {
            create_if_absent: inner.create_if_absent,
            replace_if_match: inner.create_if_absent,
            conditional_delete: false,
            list: inner.list,
            // Every write is a new object: no per-object write rate applies.
            min_write_interval: None,
            notes: vec![
                "epoch layout: every write creates the next epoch object with create-if-absent"
                    .to_string(),
            ],
        }
    }

    fn describe(&self) -> String {
        format!("{} (create-only layout)", self.shared.inner.describe())
    }

    fn identity(&self) -> String {
        epoch_identity(&self.shared.inner.identity())
    }

    async fn create_bucket(&self) -> Result<(), CasError> {
        self.shared.inner.create_bucket().await
    }

    fn lease_layout(&self) -> Option<LeaseLayout> {
        // It already is the epoch layout, as a store with replace.
        Some(LeaseLayout::Record)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::MemoryStore;

    fn store(block: u64, keep: u64) -> (Arc<MemoryStore>, EpochStore) {
        let memory = Arc::new(MemoryStore::new());
        let epochs = EpochStore::with_collection(memory.clone(), block, keep);
        (memory, epochs)
    }

    #[tokio::test]
    async fn a_chain_behaves_as_one_object() {
        let (memory, s) = store(4, 2);
        assert!(s.get("k").await.unwrap().is_none());
        let v1 = s.create("k", "a".into()).await.unwrap();
        assert_eq!(v1, Version::Generation(1));
        assert_eq!(
            s.create("k", "b".into()).await.unwrap_err().kind(),
            ErrorKind::PreconditionFailed
        );
        let v2 = s.replace("k", &v1, "c".into()).await.unwrap();
        assert_eq!(
            s.replace("k", &v1, "d".into()).await.unwrap_err().kind(),
            ErrorKind::PreconditionFailed
        );
        let got = s.get("k").await.unwrap().unwrap();
        assert_eq!((got.body, got.version), (Bytes::from("c"), v2.clone()));
        // A fresh view (another process) finds the same head.
        let other = EpochStore::with_collection(memory.clone(), 4, 2);
        assert_eq!(other.get("k").await.unwrap().unwrap().version, v2);
        // Nothing was overwritten: marker + two epochs.
        assert!(is_layout_marker(
            &memory.get("k").await.unwrap().unwrap().body
        ));
        assert_eq!(memory.list("k.epochs/").await.unwrap().len(), 2);
        assert_eq!(
            s.replace("absent", &v1, "x".into())
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
        assert!(memory.get("absent").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn collection_keeps_the_head_and_late_writes_do_not_count() {
        let (memory, s) = store(4, 2);
        let mut v = s.create("k", "0".into()).await.unwrap();
        for i in 1..40 {
            v = s.replace("k", &v, format!("{i}").into()).await.unwrap();
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let live = memory.list("k.epochs/").await.unwrap();
        assert!(live.len() < 20, "old epochs are collected: {live:?}");
        assert!(
            memory
                .get(&EpochStore::epoch_key("k", 40))
                .await
                .unwrap()
                .is_some()
        );
        // A late create into collected history (epoch 2 of a chain at 40)
        // lands, but a view that believed epoch 1 was the head is told no.
        let stale = EpochStore::with_collection(memory.clone(), 4, 2);
        stale.learn_head(
            "k",
            Head {
                epoch: 1,
                body: "old".into(),
            },
        );
        stale.keys().get_mut("k").unwrap().marked = true;
        let err = stale
            .replace("k", &Version::Generation(1), "late".into())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
        // And a reader that walks into it is sent to the real head.
        stale.learn_head(
            "k",
            Head {
                epoch: 1,
                body: "old".into(),
            },
        );
        let head = stale.get("k").await.unwrap().unwrap();
        assert_eq!(head.version, Version::Generation(40));
        assert_eq!(head.body, Bytes::from("39"));
    }

    #[tokio::test]
    async fn a_record_layout_lock_is_refused_by_name_and_the_reverse() {
        let (memory, s) = store(4, 2);
        let record = crate::lease::LeaseRecord::new("o", "n", 1, 1000, 0).encode();
        memory.create("rec", record).await.unwrap();
        let err = s.get("rec").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        assert!(err.to_string().contains("layout=record"), "{err}");
        // A foreign object is handed over as it is (the protocols name it).
        memory.create("foreign", "hello".into()).await.unwrap();
        assert_eq!(
            s.get("foreign").await.unwrap().unwrap().body,
            Bytes::from("hello")
        );
        assert_eq!(
            s.create("foreign", "x".into()).await.unwrap_err().kind(),
            ErrorKind::PreconditionFailed
        );
    }

    #[test]
    fn layout_names() {
        assert_eq!(
            "epochs".parse::<LeaseLayout>().unwrap(),
            LeaseLayout::Epochs
        );
        assert_eq!(
            "Record".parse::<LeaseLayout>().unwrap(),
            LeaseLayout::Record
        );
        let err = "both".parse::<LeaseLayout>().unwrap_err();
        assert!(err.to_string().contains("layout=epochs"), "{err}");
        assert_eq!(
            EpochStore::epoch_of("k", &EpochStore::epoch_key("k", 42)),
            Some(42)
        );
        assert_eq!(EpochStore::epoch_of("k", "k.epochs/42"), None);
    }
}
