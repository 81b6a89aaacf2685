//! The store guard's verdict, kept between processes: a command run from
//! cron (`casaas lock` every minute) pays the guard's requests once per
//! [`DEFAULT_MAX_AGE`], not once per run.
//!
//! Opt in with [`GuardCache::attach`] on a store once it is open: a passing
//! verdict younger than the cache's maximum age, recorded for the same store
//! opened the same way, stands in for the guard in this process; otherwise
//! the guard runs at first use as always and, when the store passes, the
//! verdict is written for the next process. Only a passing verdict is kept:
//! a store that failed is checked again every time, and a failing verdict
//! withdraws every pass recorded for that store, however it was opened
//! ([`withdraw`](GuardCache::withdraw)); [`clear`](GuardCache::clear)
//! removes them all.
//!
//! An entry is keyed by the store's [`identity`](crate::CasStore::identity)
//! (its type, its description with bucket, prefix and endpoint, and its
//! capabilities, so the lease layout and the options that change them are
//! in it) and the redacted URL it was opened from (with the options a
//! capability profile applied). Neither holds a secret. A store opened
//! another way, or another version of casaas, finds no entry.
//!
//! The cache is the user's own: `$XDG_CACHE_HOME/casaas/guard`, else
//! `$HOME/.cache/casaas/guard`, created with mode 0700, entries 0600. A
//! directory or entry owned by another user, or that others may write, is
//! refused: a verdict someone else could write would let them turn the
//! guard off. So is a cache directory below a directory others may write
//! (unless it is sticky, as `/tmp` is), and an entry that is not a plain
//! file (a FIFO there must not hang the caller: entries are opened without
//! blocking and without following links, and checked before they are
//! read). A corrupt entry is reported at warn and replaced; the cache
//! never stops the caller, it only saves requests.
//!
//! Why the expiry is safe: see "The store guard" in the protocol document.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), casaas_core::CasError> {
//! use casaas_core::guard::cache::GuardCache;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let cache = GuardCache::open(&dir.path().join("guard"))?;
//! let store = casaas_core::open_store("memory://docs-cache/app").await?;
//! // No verdict yet: the guard runs at first use and records its pass.
//! assert!(!cache.attach(store.as_ref()));
//! casaas_core::guard::StoreGuard::new().ensure(store.as_ref()).await?;
//! assert!(cache.lookup(store.as_ref()));
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lease::{Clock, SystemClock};
use crate::{CasError, CasStore};

/// How long a passing verdict stands in for the guard, by default.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(3600);

/// The schema of the entries this version writes.
pub const CACHE_SCHEMA_VERSION: u32 = 2;

/// The largest entry read: entries are a few hundred bytes.
const MAX_ENTRY_BYTES: u64 = 64 * 1024;

/// The version of casaas that writes and reads entries; an entry written by
/// another version is not used.
const TOOL_VERSION: &str = crate::profile::TOOL_VERSION;

/// Keeps store-guard verdicts between processes; see the [module
/// docs](self).
#[derive(Debug, Clone)]
pub struct GuardCache {
    dir: PathBuf,
    max_age: Duration,
    clock: Arc<dyn Clock>,
}

/// One entry: a store that passed the guard, and when.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    schema_version: u32,
    /// What the entry is about: identity and redacted URL, no secret.
    key: String,
    /// The store's description (endpoint, bucket, prefix): what a failing
    /// verdict on any opening of the store withdraws.
    #[serde(default)]
    store: String,
    /// Always `passed`: a failing verdict is never written.
    verdict: String,
    /// When the guard passed, RFC 3339 UTC on the cache's clock.
    checked_at: String,
    /// The casaas version that ran the guard.
    tool_version: String,
}

const PASSED: &str = "passed";

impl GuardCache {
    /// The user's cache directory for verdicts: `$XDG_CACHE_HOME/casaas/guard`,
    /// else `$HOME/.cache/casaas/guard`; `None` when neither is set.
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir).join("casaas").join("guard"));
        }
        std::env::var_os("HOME")
            .filter(|d| !d.is_empty())
            .map(|home| PathBuf::from(home).join(".cache/casaas/guard"))
    }

    /// The cache in [`default_dir`](Self::default_dir); see [`open`](Self::open).
    pub fn open_default() -> Result<Self, CasError> {
        let dir = Self::default_dir().ok_or_else(|| {
            CasError::misconfigured(
                "no cache directory for store-guard verdicts: set XDG_CACHE_HOME or HOME",
            )
        })?;
        Self::open(&dir)
    }

    /// The cache in `dir`, created (mode 0700) if missing. A directory
    /// owned by another user, or that group or others may write, is an
    /// error that says how to fix it.
    pub fn open(dir: &Path) -> Result<Self, CasError> {
        create_private_dir(dir)?;
        check_private(dir, true)?;
        check_ancestors(dir)?;
        Ok(GuardCache {
            dir: dir.to_path_buf(),
            max_age: DEFAULT_MAX_AGE,
            clock: Arc::new(SystemClock::new()),
        })
    }

    /// Keeps verdicts for `max_age` instead of [`DEFAULT_MAX_AGE`].
    #[must_use]
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// Reads the time of entries from `clock`'s wall time.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The directory the entries are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long a passing verdict is used.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// Uses the cache for `store` in this process: returns `true` when a
    /// recorded pass stands in for the guard (which then sends nothing);
    /// else arranges for the guard's pass, when it runs, to be recorded.
    /// A store the guard is off for ([`trust_store`](super::trust_store))
    /// is left alone. Never fails: a cache it cannot read or write is
    /// reported at warn.
    pub fn attach(&self, store: &dyn CasStore) -> bool {
        if super::is_trusted(store) {
            return false;
        }
        let identity = guarded_identity(store);
        if self.lookup(store) {
            super::verdict_cell(&identity)
                .set(super::Verdict::Passed)
                .ok();
            tracing::debug!(
                store = %store.describe(),
                cache = %self.dir.display(),
                "store guard verdict taken from the cache"
            );
            return true;
        }
        attached().lock().unwrap_or_else(|p| p.into_inner()).insert(
            identity,
            Attached {
                cache: self.clone(),
                record: true,
            },
        );
        false
    }

    /// Checks `store` whatever is recorded (`--no-cache`): the guard runs
    /// at first use, a failing verdict [withdraws](Self::withdraw) the
    /// passes recorded for the store, and a pass is not recorded.
    pub fn attach_without_lookup(&self, store: &dyn CasStore) {
        if super::is_trusted(store) {
            return;
        }
        attached().lock().unwrap_or_else(|p| p.into_inner()).insert(
            guarded_identity(store),
            Attached {
                cache: self.clone(),
                record: false,
            },
        );
    }

    /// Is a pass recorded for `store`, opened as it was, within the maximum
    /// age? Reads only; a corrupt entry is reported at warn and removed.
    pub fn lookup(&self, store: &dyn CasStore) -> bool {
        let key = key_of(store);
        let path = self.path_of(&key);
        if let Err(e) = check_private(&self.dir, true) {
            tracing::warn!(error = %e, "the store-guard cache is not used; the guard runs");
            return false;
        }
        let Some(entry) = self.read_entry(&path) else {
            return false;
        };
        // Another store whose key hashes alike, another schema or version:
        // not this verdict.
        if entry.key != key
            || entry.schema_version != CACHE_SCHEMA_VERSION
            || entry.tool_version != TOOL_VERSION
            || entry.verdict != PASSED
        {
            return false;
        }
        let Ok(checked_at) = humantime::parse_rfc3339(&entry.checked_at) else {
            tracing::warn!(entry = %path.display(), "a store-guard cache entry with an unreadable date is ignored");
            return false;
        };
        // A date in the future (the clock was set back since, or the entry
        // was not written by this cache) is not trusted.
        match self.clock.wall().duration_since(checked_at) {
            Ok(age) => age <= self.max_age,
            Err(_) => {
                tracing::warn!(entry = %path.display(), "a store-guard cache entry dated in the future is ignored");
                false
            }
        }
    }

    /// The entry at `path`, if it is a private plain file that parses; a
    /// corrupt one is reported at warn and removed.
    fn read_entry(&self, path: &Path) -> Option<Entry> {
        let text = match read_private(path) {
            Ok(Some(text)) => text,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "the store-guard cache entry is not used; the guard runs");
                return None;
            }
        };
        match serde_json::from_str(&text) {
            Ok(entry) => Some(entry),
            Err(e) => {
                tracing::warn!(
                    entry = %path.display(),
                    error = %e,
                    "a corrupt store-guard cache entry is ignored and will be replaced"
                );
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    /// Records that `store` passed the guard now. Failures are reported at
    /// warn and otherwise ignored.
    pub fn record_pass(&self, store: &dyn CasStore) {
        let key = key_of(store);
        let entry = Entry {
            schema_version: CACHE_SCHEMA_VERSION,
            key: key.clone(),
            store: store.describe(),
            verdict: PASSED.to_string(),
            checked_at: humantime::format_rfc3339_seconds(self.clock.wall()).to_string(),
            tool_version: TOOL_VERSION.to_string(),
        };
        let path = self.path_of(&key);
        if let Err(e) = write_private(&path, &entry) {
            tracing::warn!(
                entry = %path.display(),
                error = %e,
                "cannot record the store-guard verdict; the next run checks the store again"
            );
        }
    }

    /// Forgets what is recorded for `store` opened as it was.
    pub fn forget(&self, store: &dyn CasStore) -> Result<(), CasError> {
        remove_entry(&self.path_of(&key_of(store)))
    }

    /// Removes every pass recorded for `store`, however it was opened (the
    /// entries whose store description is `store`'s): what a failing
    /// verdict does. Returns how many entries were removed.
    pub fn withdraw(&self, store: &dyn CasStore) -> Result<usize, CasError> {
        self.forget(store)?;
        let describe = store.describe();
        let mut removed = 0;
        for path in self.entry_files()? {
            // An entry that cannot be read is not used either.
            if self
                .read_entry(&path)
                .is_some_and(|entry| entry.store == describe)
            {
                remove_entry(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Removes every entry (and any temporary file a crashed writer left):
    /// the next process on every store runs the guard. Returns how many
    /// entries were removed.
    pub fn clear(&self) -> Result<usize, CasError> {
        let mut removed = 0;
        for path in self.entry_files()? {
            remove_entry(&path)?;
            removed += 1;
        }
        let leftovers = std::fs::read_dir(&self.dir)
            .map_err(|e| io_error(&self.dir, "list", &e))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "tmp"));
        for path in leftovers {
            remove_entry(&path)?;
        }
        Ok(removed)
    }

    /// The entry files in the cache directory.
    fn entry_files(&self) -> Result<Vec<PathBuf>, CasError> {
        let listed = std::fs::read_dir(&self.dir).map_err(|e| io_error(&self.dir, "list", &e))?;
        Ok(listed
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "json")
                    && !p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with('.'))
            })
            .collect())
    }

    /// The entry file for `key`: a stable hash of it (the entry holds the
    /// key itself, compared on read).
    fn path_of(&self, key: &str) -> PathBuf {
        self.dir
            .join(format!("{:016x}.json", fnv1a(key.as_bytes())))
    }
}

/// What an entry is about: the store's identity and the redacted URL it was
/// opened from (which names the options a capability profile applied).
fn key_of(store: &dyn CasStore) -> String {
    let url = super::url_of(store).unwrap_or_default();
    format!("{}\n{url}", guarded_identity(store))
}

/// The identity of the view the guard checks on `store`: its epoch view in
/// the epoch layout (see [`crate::layout::lease_view`]), else itself.
fn guarded_identity(store: &dyn CasStore) -> String {
    use crate::layout::{LeaseLayout, epoch_identity, inner_identity, layout_of};
    let identity = store.identity();
    if inner_identity(&identity).is_none() && layout_of(store) == LeaseLayout::Epochs {
        return epoch_identity(&identity);
    }
    identity
}

/// 64-bit FNV-1a: stable across builds and versions (unlike std's hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A cache attached to a store in this process.
#[derive(Debug, Clone)]
struct Attached {
    cache: GuardCache,
    /// Record a pass (`false`: only withdraw on a failure).
    record: bool,
}

fn attached() -> &'static Mutex<HashMap<String, Attached>> {
    static ATTACHED: OnceLock<Mutex<HashMap<String, Attached>>> = OnceLock::new();
    ATTACHED.get_or_init(Default::default)
}

fn attached_to(store: &dyn CasStore) -> Option<Attached> {
    attached()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&guarded_identity(store))
        .cloned()
}

/// Called by the guard when `store` passed in this process: records the
/// pass where a cache was attached to it.
pub(super) fn passed(store: &dyn CasStore) {
    if let Some(Attached {
        cache,
        record: true,
    }) = attached_to(store)
    {
        cache.record_pass(store);
    }
}

/// Called by the guard when `store` failed a check in this process: the
/// passes recorded for it are withdrawn where a cache was attached to it.
pub(super) fn failed(store: &dyn CasStore) {
    if let Some(Attached { cache, .. }) = attached_to(store) {
        match cache.withdraw(store) {
            Ok(removed) => tracing::debug!(
                store = %store.describe(),
                removed,
                "the store failed the guard: its recorded passes are withdrawn"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                "cannot withdraw the store's recorded pass; run `casaas cache clear`"
            ),
        }
    }
}

/// Forgets this process's verdict on `store`, as a new process starts
/// without one (for tests of the cache).
#[cfg(feature = "testkit")]
#[doc(hidden)]
pub fn forget_process_verdict(store: &dyn CasStore) {
    for identity in [store.identity(), guarded_identity(store)] {
        super::verdicts()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&identity);
        attached()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&identity);
    }
}

fn remove_entry(path: &Path) -> Result<(), CasError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(path, "remove", &e)),
        _ => Ok(()),
    }
}

fn io_error(path: &Path, what: &str, e: &std::io::Error) -> CasError {
    CasError::misconfigured(format!(
        "cannot {what} the store-guard cache {}: {e}",
        path.display()
    ))
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> Result<(), CasError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io_error(dir, "create", &e))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> Result<(), CasError> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, "create", &e))
}

/// Refuses `path` unless this user owns it and no one else may write it.
#[cfg(unix)]
fn check_private(path: &Path, is_dir: bool) -> Result<(), CasError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| io_error(path, "inspect", &e))?;
    check_private_meta(path, &meta, is_dir)
}

/// [`check_private`] on metadata already read (of an open entry).
#[cfg(unix)]
fn check_private_meta(path: &Path, meta: &std::fs::Metadata, is_dir: bool) -> Result<(), CasError> {
    use std::os::unix::fs::MetadataExt;
    let what = if is_dir { "directory" } else { "entry" };
    let plain = if is_dir {
        meta.is_dir()
    } else {
        meta.is_file()
    };
    if !plain || meta.file_type().is_symlink() {
        return Err(CasError::misconfigured(format!(
            "the store-guard cache {what} {} is not a plain {what}; remove it",
            path.display()
        )));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(CasError::misconfigured(format!(
            "the store-guard cache {what} {} belongs to user {}, not to this user ({me}): \
             verdicts are never shared between users; remove it or set XDG_CACHE_HOME to a \
             directory of your own (or pass --no-cache)",
            path.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(CasError::misconfigured(format!(
            "the store-guard cache {what} {} may be written by others (mode {:o}): run \
             `chmod go-w {}`",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path, _is_dir: bool) -> Result<(), CasError> {
    Ok(())
}

/// Refuses a cache directory below one that someone else could use to
/// swap it: every directory above must belong to this user or to root,
/// and one that group or others may write must be sticky (as `/tmp` is,
/// where no one may rename what is not theirs).
#[cfg(unix)]
fn check_ancestors(dir: &Path) -> Result<(), CasError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let absolute = std::path::absolute(dir).map_err(|e| io_error(dir, "inspect", &e))?;
    for ancestor in absolute.ancestors().skip(1) {
        // Through symbolic links as the system resolves them.
        let meta = std::fs::metadata(ancestor).map_err(|e| io_error(ancestor, "inspect", &e))?;
        let owner_ok = meta.uid() == me || meta.uid() == 0;
        let sticky = meta.mode() & 0o1000 != 0;
        if !owner_ok || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(CasError::misconfigured(format!(
                "the store-guard cache {} is below {}, which another user could change                  (owner {}, mode {:o}): set XDG_CACHE_HOME to a directory of your own                  (or pass --no-cache)",
                dir.display(),
                ancestor.display(),
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_ancestors(_dir: &Path) -> Result<(), CasError> {
    Ok(())
}

/// Reads the entry at `path` (`None` when there is none): opened without
/// following a link and without blocking (a FIFO answers at once), then
/// checked on the open file (a plain file of this user's that no one else
/// may write, of an entry's size) before a byte is read.
#[cfg(unix)]
fn read_private(path: &Path) -> Result<Option<String>, CasError> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io_error(path, "read", &std::io::Error::from(e))),
    };
    let meta = file.metadata().map_err(|e| io_error(path, "inspect", &e))?;
    check_private_meta(path, &meta, false)?;
    if meta.len() > MAX_ENTRY_BYTES {
        return Err(CasError::misconfigured(format!(
            "the store-guard cache entry {} is {} bytes, not an entry; remove it",
            path.display(),
            meta.len()
        )));
    }
    let mut text = String::new();
    file.take(MAX_ENTRY_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| io_error(path, "read", &e))?;
    Ok(Some(text))
}

#[cfg(not(unix))]
fn read_private(path: &Path) -> Result<Option<String>, CasError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, "read", &e)),
    }
}

/// Writes `entry` to `path` through a fresh file of mode 0600 renamed into
/// place, so a reader never sees half an entry.
fn write_private(path: &Path, entry: &Entry) -> Result<(), CasError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let text = serde_json::to_string_pretty(entry)
        .map_err(|e| CasError::misconfigured(format!("cannot encode a cache entry: {e}")))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    // A leftover of a crashed writer of this pid would keep its own mode.
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options
        .open(&tmp)
        .and_then(|mut file| file.write_all((text + "\n").as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(path, "write", &e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable() {
        // Entry names must not change between builds: they are looked up
        // by later processes.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
