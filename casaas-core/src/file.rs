//! The local-filesystem backend: a real CAS across processes on one machine.
//!
//! # Layout
//!
//! A key `a/b` is stored as the file `ROOT/a/b~obj`; directories come from
//! the key's segments, with `~` and other unsafe bytes percent-encoded so a
//! directory name can never end like an object file. Each object file holds
//! one header line, `casaas-file 1 "VERSION"`, then the body.
//!
//! # Guarantees
//!
//! - Conditional writes are atomic across threads, store instances and
//!   processes: a writer holds an exclusive `flock` on the key's lock file
//!   `NAME~lock` while it compares the version and installs the new file.
//!   `flock` locks belong to the open file description, so two descriptors
//!   in one process exclude each other like two processes do.
//! - A writer waits for the lock at most five seconds, polling with
//!   non-blocking attempts and sleeping on the async runtime in between: a
//!   stopped or hung holder never ties up a blocking thread, and the writer
//!   gets [`ErrorKind::ConcurrentRequest`] (nothing written, retry later).
//! - Acknowledged writes survive power loss: the new content goes to a
//!   temporary file that is fsynced, then renamed over the object (the commit
//!   point), then the directory is fsynced before the write is answered.
//!   Before the first create in a directory, every directory from the store
//!   root down to it is fsynced, so the new object's path is durable too.
//! - A failure at or after the commit point is reported
//!   [`ErrorKind::Ambiguous`]: the new object may be visible, and its
//!   durability is unconfirmed. A failure before it changes nothing.
//! - A read returns only durable state: while a commit is visible but not
//!   yet known durable, the key's lock file carries a mark (non-zero length)
//!   and a reader fsyncs the directory before answering (`read_durable`).
//! - Versions never repeat, also across restarts and after a delete: each
//!   write gets 128 random bits, not a value derived from mtime, inode or size
//!   (those collide when a file is rewritten within the timestamp granularity).
//!
//! # Limits
//!
//! Local filesystems only; on Linux, [`FileStore::open`] refuses NFS, SMB/CIFS,
//! FUSE and cluster filesystems (see `unsupported_filesystem`). Lock files are
//! never removed (removing one while another process waits on it would break
//! mutual exclusion).

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rand::{Rng, RngCore};

use crate::store::{validate_key, validate_prefix};
use crate::{Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoredObject, Version};

const OBJECT_SUFFIX: &str = "~obj";
const LOCK_SUFFIX: &str = "~lock";
const TEMP_SUFFIX: &str = "~tmp";
const HEADER_MAGIC: &str = "casaas-file 1 ";
/// File names may be at most 255 bytes on common Linux filesystems.
const MAX_FILE_NAME: usize = 255;

/// How long a conditional write waits for another writer's lock on the same
/// key before it gives up with [`ErrorKind::ConcurrentRequest`].
///
/// A healthy holder keeps the lock for one read, one write and two fsyncs
/// (milliseconds); waiting this long means the holder is stopped or hung.
const LOCK_WAIT_LIMIT: Duration = Duration::from_secs(5);
/// The first pause between two attempts to take a busy lock; it doubles up
/// to [`LOCK_RETRY_MAX`].
const LOCK_RETRY_MIN: Duration = Duration::from_millis(1);
const LOCK_RETRY_MAX: Duration = Duration::from_millis(25);

/// Bytes kept literal in file names; everything else (including `~` and `%`)
/// is percent-encoded.
const SEGMENT_ESCAPES: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

/// The local-filesystem store: a real CAS across processes on one machine.
///
/// Conditional writes hold an exclusive `flock` on the key's lock file,
/// waiting for it at most five seconds (then [`ErrorKind::ConcurrentRequest`]:
/// nothing written, retry); new content is fsynced to a
/// temporary file, renamed into place and the directory fsynced before the
/// write is answered, so an acknowledged write survives a crash or power
/// loss; versions are 128 random bits and never repeat. Local filesystems
/// only: on Linux, opening a store on NFS, SMB/CIFS, FUSE or a cluster
/// filesystem is refused (see `docs/embedded.md`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use bytes::Bytes;
/// use casaas_core::{CasStore, FileStore};
///
/// let dir = std::env::temp_dir().join(format!("casaas-doc-{}", std::process::id()));
/// let store = FileStore::open(&dir).await?;
/// let v1 = store.create("locks/a", Bytes::from_static(b"x")).await?;
/// let v2 = store.replace("locks/a", &v1, Bytes::from_static(b"x")).await?;
/// assert_ne!(v1, v2, "an identical rewrite still gets a new version");
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FileStore {
    root: PathBuf,
    lock_wait_limit: Duration,
    /// Directories whose path from the root this instance has made durable;
    /// directories are never removed, so this only grows.
    durable_dirs: Arc<Mutex<HashSet<PathBuf>>>,
    io: Io,
}

impl fmt::Debug for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileStore")
            .field("root", &self.root)
            .field("lock_wait_limit", &self.lock_wait_limit)
            .finish_non_exhaustive()
    }
}

impl FileStore {
    /// Opens (creating if needed) the store rooted at the absolute directory `root`.
    ///
    /// Directories it creates are made durable (their parents are fsynced).
    /// On Linux, a root on a network, FUSE or cluster filesystem is refused
    /// with [`ErrorKind::Misconfigured`]: locks, renames and fsync there do
    /// not give the guarantees this store promises.
    pub async fn open(root: impl AsRef<Path>) -> Result<Self, CasError> {
        Self::open_with_io(root.as_ref(), Io::default()).await
    }

    /// Opens the store rooted at the absolute directory `root`, which must
    /// exist: a missing one is refused with [`ErrorKind::Misconfigured`]
    /// and nothing is created, so a misspelt path is an error rather than
    /// a different, empty store (`file://` URLs open this way unless they
    /// say `create_dirs=true`).
    pub async fn open_existing(root: impl AsRef<Path>) -> Result<Self, CasError> {
        let root = root.as_ref().to_path_buf();
        let checked = root.clone();
        let exists = blocking(move || checked.try_exists())
            .await
            .and_then(|r| r)
            .map_err(|e| {
                CasError::misconfigured(format!("cannot inspect {}: {e}", root.display()))
            })?;
        if root.is_absolute() && !exists {
            return Err(CasError::misconfigured(format!(
                "directory {} does not exist; create it or add ?create_dirs=true",
                root.display()
            )));
        }
        Self::open_with_io(&root, Io::default()).await
    }

    async fn open_with_io(root: &Path, io: Io) -> Result<Self, CasError> {
        let root = root.to_path_buf();
        if !root.is_absolute() {
            return Err(CasError::misconfigured(format!(
                "file store root {} must be an absolute path",
                root.display()
            )));
        }
        let (created, open_io) = (root.clone(), io.clone());
        blocking(move || create_root(&open_io, &created))
            .await
            .and_then(|r| r)
            .map_err(|e| {
                CasError::misconfigured(format!(
                    "cannot create the file store directory {}: {e}",
                    root.display()
                ))
            })?;
        let checked = root.clone();
        blocking(move || check_filesystem(&checked))
            .await
            .and_then(|checked| checked)
            .map_err(|e| {
                CasError::misconfigured(format!(
                    "cannot inspect the filesystem of {}: {e}",
                    root.display()
                ))
            })??;
        Ok(FileStore {
            root,
            lock_wait_limit: LOCK_WAIT_LIMIT,
            durable_dirs: Arc::default(),
            io,
        })
    }

    /// The directory this store keeps its objects in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory and base file name (without suffix) for `key`.
    fn locate(&self, key: &str) -> Result<(PathBuf, String), CasError> {
        validate_key(key)?;
        let mut dir = self.root.clone();
        let mut segments = key.split('/').peekable();
        while let Some(segment) = segments.next() {
            let encoded = utf8_percent_encode(segment, SEGMENT_ESCAPES).to_string();
            if encoded.len() + OBJECT_SUFFIX.len().max(LOCK_SUFFIX.len()) + 40 > MAX_FILE_NAME {
                return Err(CasError::invalid_input(format!(
                    "key {key:?} has a segment too long for a file name; \
                     keep each '/'-separated segment under about 60 characters"
                )));
            }
            if segments.peek().is_none() {
                return Ok((dir, encoded));
            }
            dir.push(encoded);
        }
        Err(CasError::invalid_input("empty key"))
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("file store task failed: {e}")))
}

fn io_error(key: &str, what: &str, e: io::Error) -> CasError {
    let kind = match e.kind() {
        io::ErrorKind::PermissionDenied => ErrorKind::Unauthorized,
        io::ErrorKind::InvalidData => ErrorKind::Misconfigured,
        // Reads, and writes that failed before the commit point (see
        // `WriteFailure`): nothing was changed.
        _ => ErrorKind::NotSent,
    };
    CasError::new(kind, format!("{what}: {e}"))
        .with_key(key)
        .with_source(e)
}

// ---- Filesystem check ----------------------------------------------------

/// The name of the filesystem whose `statfs` magic number is `magic`, if this
/// store refuses to run on it.
///
/// Refused: network filesystems (NFS emulates `flock` with per-process
/// byte-range locks, so two descriptors in one process both get the lock,
/// and client caches can serve stale reads to other machines), FUSE (locks,
/// rename atomicity and fsync are whatever the userspace server implements,
/// and many are network-backed) and cluster filesystems.
fn unsupported_filesystem(magic: u32) -> Option<&'static str> {
    Some(match magic {
        0x0000_6969 => "NFS",
        0x0000_517b => "SMB",
        0xff53_4d42 => "CIFS",
        0xfe53_4d42 => "SMB2",
        0x0000_564c => "NCP",
        0x00c3_6400 => "CephFS",
        0x0102_1997 => "9p",
        0x5346_414f | 0x6b41_4653 => "AFS",
        0x7375_7245 => "Coda",
        0x0bd0_0bd0 => "Lustre",
        0x0116_1970 => "GFS2",
        0x7461_636f => "OCFS2",
        0x6573_5546 => "FUSE",
        _ => return None,
    })
}

fn filesystem_refused(root: &Path, filesystem: &str) -> CasError {
    CasError::misconfigured(format!(
        "file store root {} is on {filesystem}, where locks, renames and fsync do not give \
         the file store's guarantees (one writer at a time, durable acknowledged writes); \
         use a directory on a local filesystem (ext4, xfs, btrfs, tmpfs, ...) or an \
         object store URL (s3://, gs://, az://)",
        root.display()
    ))
}

#[cfg(target_os = "linux")]
fn check_filesystem(root: &Path) -> io::Result<Result<(), CasError>> {
    let stat = rustix::fs::statfs(root)?;
    // The magic numbers are 32-bit; `f_type` is wider on some targets.
    #[allow(clippy::unnecessary_cast)]
    let magic = stat.f_type as u32;
    Ok(match unsupported_filesystem(magic) {
        Some(name) => Err(filesystem_refused(root, name)),
        None => Ok(()),
    })
}

#[cfg(not(target_os = "linux"))]
fn check_filesystem(_root: &Path) -> io::Result<Result<(), CasError>> {
    Ok(Ok(()))
}

// ---- Filesystem calls, with a seam for injected failures ----------------

/// The filesystem calls whose failure decides what an error means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// fsync of a directory so that an entry in it (a new directory) is durable.
    SyncAncestor,
    /// Writing the header and body to the temporary file.
    WriteTemp,
    /// fsync of the temporary file, before it is renamed.
    SyncTemp,
    /// The rename over the object file: the commit point of a write.
    Rename,
    /// Removing the object file: the commit point of a delete.
    Remove,
    /// fsync of the object's directory after the commit point.
    SyncDir,
}

/// Runs the filesystem calls listed in [`Step`]. In unit tests it records
/// them and can fail chosen ones; in the library it only runs them.
#[derive(Clone, Debug, Default)]
struct Io {
    #[cfg(test)]
    script: Arc<Mutex<tests::IoScript>>,
}

impl Io {
    fn run<T>(&self, step: Step, path: &Path, op: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        #[cfg(test)]
        return tests::IoScript::run(&self.script, step, path, op);
        #[cfg(not(test))]
        {
            let _ = (step, path);
            op()
        }
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `root` and any missing parents; each directory created is made
/// durable by fsyncing its parent.
fn create_root(io: &Io, root: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = root;
    while !current.try_exists()? {
        missing.push(current);
        match current.parent() {
            Some(parent) => current = parent,
            None => break,
        }
    }
    for dir in missing.into_iter().rev() {
        create_dir_durably(io, dir)?;
    }
    if !root.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "the path exists and is not a directory",
        ));
    }
    Ok(())
}

/// Creates the directory `dir` if it is missing and, if this call created
/// it, fsyncs its parent so that the new entry survives power loss.
fn create_dir_durably(io: &Io, dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => match dir.parent() {
            Some(parent) => io.run(Step::SyncAncestor, parent, || sync_dir(parent)),
            None => Ok(()),
        },
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

// ---- Objects ---------------------------------------------------------------

fn fresh_version() -> Version {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    Version::ETag(format!("\"{}\"", hex::encode(bytes)))
}

/// Reads and parses an object file; `Ok(None)` if it does not exist.
fn read_object(path: &Path) -> io::Result<Option<StoredObject>> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut content = Vec::new();
    file.read_to_end(&mut content)?;
    let newline = content.iter().position(|b| *b == b'\n');
    let header = newline
        .and_then(|n| std::str::from_utf8(&content[..n]).ok())
        .and_then(|h| h.strip_prefix(HEADER_MAGIC))
        .filter(|v| v.len() >= 2 && v.starts_with('"') && v.ends_with('"'));
    match (header, newline) {
        (Some(version), Some(n)) => Ok(Some(StoredObject {
            version: Version::ETag(version.to_string()),
            body: Bytes::copy_from_slice(&content[n + 1..]),
        })),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a casaas object file (bad header); move it out of the store directory",
                path.display()
            ),
        )),
    }
}

/// Reads the object at `path` and makes sure what it returns is durable.
///
/// A writer marks the key's lock file while its commit may be visible but
/// not yet durable (between its rename and its directory fsync, and after
/// a failure or crash there); a reader that then sees the mark fsyncs the
/// directory itself before answering. The object is read first: a mark
/// seen clear afterwards means every commit it could show was fsynced.
fn read_durable(io: &Io, path: &Path) -> io::Result<Option<StoredObject>> {
    let object = read_object(path)?;
    let lock_path = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(OBJECT_SUFFIX))
        .map(|stem| path.with_file_name(format!("{stem}{LOCK_SUFFIX}")));
    let pending = match lock_path.map(fs::metadata) {
        Some(Ok(meta)) => meta.len() > 0,
        Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => false,
        Some(Err(e)) => return Err(e),
        None => false,
    };
    if pending && let Some(dir) = path.parent() {
        io.run(Step::SyncDir, dir, || sync_dir(dir))?;
    }
    Ok(object)
}

/// Holds the exclusive lock for one key; unlocks on drop (and the kernel
/// unlocks if the process dies).
///
/// The lock file's length is the commit mark: non-zero while a commit may
/// be visible without being durable (see [`read_durable`]).
struct KeyLock(File);

impl KeyLock {
    /// Takes the lock if it is free; `Ok(None)` if another holder has it.
    /// Fails with `NotFound` if `dir` does not exist.
    fn try_acquire(lock_path: &Path) -> io::Result<Option<Self>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(KeyLock(file))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
}

impl KeyLock {
    fn commit_pending(&self) -> io::Result<bool> {
        Ok(self.0.metadata()?.len() > 0)
    }

    fn mark_commit_pending(&self, pending: bool) -> io::Result<()> {
        self.0.set_len(u64::from(pending))
    }
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock anyway; unlock explicitly
        // so the release does not wait for the close.
        let _ = self.0.unlock();
    }
}

/// A write that failed, and whether it got as far as the commit point.
struct WriteFailure {
    error: io::Error,
    /// The rename or unlink happened, or may have: other readers may see the
    /// new state, and it may not be durable.
    maybe_visible: bool,
}

impl WriteFailure {
    fn before_commit(error: io::Error) -> Self {
        WriteFailure {
            error,
            maybe_visible: false,
        }
    }

    fn after_commit(error: io::Error) -> Self {
        WriteFailure {
            error,
            maybe_visible: true,
        }
    }

    fn into_cas_error(self, key: &str) -> CasError {
        if self.maybe_visible {
            CasError::new(
                ErrorKind::Ambiguous,
                format!(
                    "file store write may have taken effect: it reached the commit point, \
                     then {}; read the key to see whether it is there (its durability \
                     across a power loss is not confirmed)",
                    self.error
                ),
            )
            .with_key(key)
            .with_source(self.error)
        } else {
            io_error(key, "file store write failed", self.error)
        }
    }
}

impl From<io::Error> for WriteFailure {
    fn from(error: io::Error) -> Self {
        WriteFailure::before_commit(error)
    }
}

/// Installs `body` as the new content of `dir/name~obj` under `version`.
fn install(
    io: &Io,
    dir: &Path,
    name: &str,
    version: &Version,
    body: &[u8],
) -> Result<(), WriteFailure> {
    let mut nonce = [0u8; 8];
    rand::rng().fill_bytes(&mut nonce);
    let temp = dir.join(format!(".{}{TEMP_SUFFIX}", hex::encode(nonce)));
    let target = dir.join(format!("{name}{OBJECT_SUFFIX}"));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    let written = io
        .run(Step::WriteTemp, &temp, || {
            file.write_all(format!("{HEADER_MAGIC}{version}\n").as_bytes())?;
            file.write_all(body)
        })
        .and_then(|()| io.run(Step::SyncTemp, &temp, || file.sync_all()));
    drop(file);
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(WriteFailure::before_commit(e));
    }
    if let Err(e) = io.run(Step::Rename, &target, || fs::rename(&temp, &target)) {
        // A rename is atomic: while the temporary file is still there, the
        // object was not replaced.
        return match temp.try_exists() {
            Ok(true) => {
                let _ = fs::remove_file(&temp);
                Err(WriteFailure::before_commit(e))
            }
            _ => Err(WriteFailure::after_commit(e)),
        };
    }
    io.run(Step::SyncDir, dir, || sync_dir(dir))
        .map_err(WriteFailure::after_commit)
}

/// Removes `path` (the object file in `dir`) durably.
fn remove(io: &Io, dir: &Path, path: &Path) -> Result<(), WriteFailure> {
    if let Err(e) = io.run(Step::Remove, path, || fs::remove_file(path)) {
        return match path.try_exists() {
            Ok(true) => Err(WriteFailure::before_commit(e)),
            _ => Err(WriteFailure::after_commit(e)),
        };
    }
    io.run(Step::SyncDir, dir, || sync_dir(dir))
        .map_err(WriteFailure::after_commit)
}

#[derive(Clone)]
enum Condition {
    Absent,
    Matches(Version),
}

/// The outcome of a locked compare-and-write, decided under the key's lock.
enum Decision {
    Written(Version),
    Mismatch(String),
    Missing,
}

/// One attempt at a conditional write, run on the blocking pool.
struct WriteAttempt {
    root: PathBuf,
    dir: PathBuf,
    name: String,
    condition: Condition,
    body: Option<Bytes>,
    durable_dirs: Arc<Mutex<HashSet<PathBuf>>>,
    io: Io,
}

impl WriteAttempt {
    /// `Ok(None)` if another writer holds the key's lock.
    fn run(self) -> Result<Option<Decision>, WriteFailure> {
        if matches!(self.condition, Condition::Absent) {
            self.prepare_directory()?;
        }
        let lock_path = self.dir.join(format!("{}{LOCK_SUFFIX}", self.name));
        let lock = match KeyLock::try_acquire(&lock_path) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Ok(None),
            // No directory, so no object: a replace or delete has nothing
            // to act on (and creates no directories for it).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return match self.condition {
                    Condition::Matches(_) => Ok(Some(Decision::Missing)),
                    Condition::Absent => Err(e.into()),
                };
            }
            Err(e) => return Err(e.into()),
        };
        if lock.commit_pending()? {
            // An earlier writer failed or died after its commit point: make
            // what it left durable before building on it.
            self.io
                .run(Step::SyncDir, &self.dir, || sync_dir(&self.dir))?;
            lock.mark_commit_pending(false)?;
        }
        let path = self.dir.join(format!("{}{OBJECT_SUFFIX}", self.name));
        let current = read_object(&path)?;
        match (&self.condition, &current) {
            (Condition::Absent, Some(_)) => {
                return Ok(Some(Decision::Mismatch(
                    "an object already exists at this key".into(),
                )));
            }
            (Condition::Matches(_), None) => return Ok(Some(Decision::Missing)),
            (Condition::Matches(expected), Some(current)) if &current.version != expected => {
                return Ok(Some(Decision::Mismatch(format!(
                    "current version is {}, not {expected}",
                    current.version
                ))));
            }
            _ => {}
        }
        lock.mark_commit_pending(true)?;
        let written = match &self.body {
            Some(body) => {
                let version = fresh_version();
                install(&self.io, &self.dir, &self.name, &version, body)?;
                version
            }
            None => {
                remove(&self.io, &self.dir, &path)?;
                Version::Generation(0)
            }
        };
        // Durable now; should clearing the mark fail, readers only fsync
        // once more than needed.
        let _ = lock.mark_commit_pending(false);
        Ok(Some(Decision::Written(written)))
    }

    /// Creates the key's directory and makes its path from the root durable,
    /// so that an object created in it cannot vanish with its directory.
    /// Done before the first create in a directory by this store instance:
    /// an object that exists was created after its path was made durable.
    fn prepare_directory(&self) -> io::Result<()> {
        let known = self
            .durable_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&self.dir);
        if known {
            return Ok(());
        }
        let relative = self
            .dir
            .strip_prefix(&self.root)
            .map_err(io::Error::other)?;
        let mut dir = self.root.clone();
        for component in relative.components() {
            dir.push(component);
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        // Every directory on the path, also those another writer created
        // and may not have made durable yet.
        let mut below = self.dir.as_path();
        while below != self.root {
            let Some(parent) = below.parent() else {
                break;
            };
            self.io
                .run(Step::SyncAncestor, parent, || sync_dir(parent))?;
            below = parent;
        }
        self.durable_dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.dir.clone());
        Ok(())
    }
}

impl FileStore {
    async fn conditional_write(
        &self,
        key: &str,
        condition: Condition,
        body: Option<Bytes>,
    ) -> Result<Decision, CasError> {
        let (dir, name) = self.locate(key)?;
        let deadline = tokio::time::Instant::now() + self.lock_wait_limit;
        let mut pause = LOCK_RETRY_MIN;
        loop {
            let attempt = WriteAttempt {
                root: self.root.clone(),
                dir: dir.clone(),
                name: name.clone(),
                condition: condition.clone(),
                body: body.clone(),
                durable_dirs: self.durable_dirs.clone(),
                io: self.io.clone(),
            };
            let outcome = blocking(move || attempt.run())
                .await
                .map_err(|e| io_error(key, "file store write failed", e))?
                .map_err(|failure| failure.into_cas_error(key))?;
            if let Some(decision) = outcome {
                return Ok(decision);
            }
            // Wait on the runtime, not on a blocking thread: a stopped
            // holder then costs no thread, and dropping the future stops
            // the wait at once.
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(lock_wait_exceeded(
                    key,
                    &dir.join(format!("{name}{LOCK_SUFFIX}")),
                    self.lock_wait_limit,
                ));
            }
            let jittered = rand::rng().random_range(pause / 2..=pause);
            tokio::time::sleep(jittered.min(deadline - now)).await;
            pause = (pause * 2).min(LOCK_RETRY_MAX);
        }
    }
}

fn lock_wait_exceeded(key: &str, lock_path: &Path, limit: Duration) -> CasError {
    CasError::new(
        ErrorKind::ConcurrentRequest,
        format!(
            "another writer held the lock file {} for the whole {limit:?} this write waits; \
             nothing was written. Its process may be stopped (SIGSTOP, a debugger) or hung: \
             retry later, or find it with `fuser {}`",
            lock_path.display(),
            lock_path.display()
        ),
    )
    .with_key(key)
}

fn decided(key: &str, decision: Decision) -> Result<Version, CasError> {
    match decision {
        Decision::Written(v) => Ok(v),
        Decision::Mismatch(why) => {
            Err(CasError::new(ErrorKind::PreconditionFailed, why).with_key(key))
        }
        Decision::Missing => {
            Err(CasError::new(ErrorKind::NotFound, "no object at this key").with_key(key))
        }
    }
}

fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &format!("{rel}{}/", decode(file_name)), out)?;
        } else if let Some(stem) = file_name.strip_suffix(OBJECT_SUFFIX) {
            out.push((format!("{rel}{}", decode(stem)), entry.path()));
        }
    }
    Ok(())
}

#[async_trait]
impl CasStore for FileStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let (dir, name) = self.locate(key)?;
        let io = self.io.clone();
        blocking(move || read_durable(&io, &dir.join(format!("{name}{OBJECT_SUFFIX}"))))
            .await
            .and_then(|read| read)
            .map_err(|e| io_error(key, "file store read failed", e))
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let decision = self
            .conditional_write(key, Condition::Absent, Some(body))
            .await?;
        decided(key, decision)
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let decision = self
            .conditional_write(key, Condition::Matches(expected.clone()), Some(body))
            .await?;
        decided(key, decision)
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let decision = self
            .conditional_write(key, Condition::Matches(expected.clone()), None)
            .await?;
        decided(key, decision).map(|_| ())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        let root = self.root.clone();
        let found = blocking(move || {
            let mut found = Vec::new();
            walk(&root, "", &mut found)?;
            Ok(found)
        })
        .await
        .and_then(|walked| walked)
        .map_err(|e| io_error(prefix, "file store list failed", e))?;
        let mut entries = Vec::new();
        for (key, path) in found.into_iter().filter(|(k, _)| k.starts_with(prefix)) {
            // An object deleted between the walk and the read is simply gone.
            let io = self.io.clone();
            let object = blocking(move || read_durable(&io, &path))
                .await
                .and_then(|read| read)
                .map_err(|e| io_error(&key, "file store list failed", e))?;
            if let Some(object) = object {
                entries.push(ListEntry {
                    key,
                    version: object.version,
                });
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full()
            .with_note("local filesystems only: NFS, SMB/CIFS and FUSE are refused at open")
    }

    async fn create_bucket(&self) -> Result<(), CasError> {
        // The embedded backends have no bucket to create.
        Ok(())
    }

    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_root_is_refused_unless_creation_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("lokcs").join("x");
        let err = FileStore::open_existing(&missing).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        assert!(
            err.to_string()
                .contains("does not exist; create it or add ?create_dirs=true"),
            "{err}"
        );
        let url = format!("file://{}", missing.display());
        let err = crate::open_store(&url).await.unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!dir.path().join("lokcs").exists(), "something was created");
        crate::open_store(&format!("{url}?create_dirs=true"))
            .await
            .unwrap();
        assert!(missing.is_dir());
        // An existing directory opens as before.
        crate::open_store(&url).await.unwrap();
    }

    /// What [`Io`] does in unit tests: records every step and fails the
    /// first scripted one.
    #[derive(Debug, Default)]
    pub(super) struct IoScript {
        faults: Vec<(Step, Fault)>,
        log: Vec<(Step, PathBuf)>,
    }

    #[derive(Clone, Copy, Debug)]
    enum Fault {
        /// Fail without performing the call.
        Before,
        /// Perform the call, then report a failure (an EIO after the fact).
        After,
    }

    impl IoScript {
        pub(super) fn run<T>(
            script: &Mutex<IoScript>,
            step: Step,
            path: &Path,
            op: impl FnOnce() -> io::Result<T>,
        ) -> io::Result<T> {
            let fault = {
                let mut script = script.lock().unwrap();
                script.log.push((step, path.to_path_buf()));
                let at = script.faults.iter().position(|(s, _)| *s == step);
                at.map(|i| script.faults.remove(i).1)
            };
            let injected = || io::Error::other(format!("injected failure at {step:?}"));
            match fault {
                None => op(),
                Some(Fault::Before) => Err(injected()),
                Some(Fault::After) => {
                    op()?;
                    Err(injected())
                }
            }
        }
    }

    async fn scripted(root: &Path) -> (FileStore, Arc<Mutex<IoScript>>) {
        let io = Io::default();
        let script = io.script.clone();
        (FileStore::open_with_io(root, io).await.unwrap(), script)
    }

    fn fail(script: &Mutex<IoScript>, step: Step, fault: Fault) {
        script.lock().unwrap().faults.push((step, fault));
    }

    fn take_log(script: &Mutex<IoScript>) -> Vec<(Step, PathBuf)> {
        std::mem::take(&mut script.lock().unwrap().log)
    }

    fn temp_files(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(TEMP_SUFFIX))
            .collect()
    }

    async fn body(store: &FileStore, key: &str) -> Option<Bytes> {
        store.get(key).await.unwrap().map(|o| o.body)
    }

    #[tokio::test]
    async fn a_write_that_may_be_visible_is_reported_ambiguous() {
        let dir = tempfile::tempdir().unwrap();
        let (store, script) = scripted(dir.path()).await;
        let v1 = store.create("k", Bytes::from_static(b"1")).await.unwrap();

        // The directory fsync after the rename fails: the new object is
        // visible, so the answer must not say "nothing was written".
        fail(&script, Step::SyncDir, Fault::Before);
        let err = store
            .replace("k", &v1, Bytes::from_static(b"2"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
        assert!(err.may_have_taken_effect());
        assert_eq!(body(&store, "k").await.unwrap(), "2");

        fail(&script, Step::SyncDir, Fault::Before);
        let err = store
            .create("fresh", Bytes::from_static(b"new"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
        assert_eq!(body(&store, "fresh").await.unwrap(), "new");

        // The rename itself reports an error although it happened.
        let v2 = store.get("k").await.unwrap().unwrap().version;
        fail(&script, Step::Rename, Fault::After);
        let err = store
            .replace("k", &v2, Bytes::from_static(b"3"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
        assert_eq!(body(&store, "k").await.unwrap(), "3");

        // Deletes: the unlink happened, then its fsync (or the unlink's own
        // answer) failed.
        let v3 = store.get("k").await.unwrap().unwrap().version;
        let v4 = store
            .replace("k", &v3, Bytes::from_static(b"4"))
            .await
            .unwrap();
        fail(&script, Step::SyncDir, Fault::Before);
        let err = store.delete("k", &v4).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
        assert!(store.get("k").await.unwrap().is_none());
        let v = store.get("fresh").await.unwrap().unwrap().version;
        fail(&script, Step::Remove, Fault::After);
        let err = store.delete("fresh", &v).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
        assert!(store.get("fresh").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_read_returns_only_durable_state() {
        let dir = tempfile::tempdir().unwrap();
        let (store, script) = scripted(dir.path()).await;
        let v1 = store.create("k", Bytes::from_static(b"1")).await.unwrap();
        store
            .create("other", Bytes::from_static(b"o"))
            .await
            .unwrap();
        take_log(&script);
        store.get("k").await.unwrap();
        store.list("").await.unwrap();
        assert_eq!(take_log(&script), [], "reads of settled keys fsync nothing");

        // A write whose directory fsync failed is visible, durability
        // unknown: a read makes it durable before returning it, or fails.
        fail(&script, Step::SyncDir, Fault::Before);
        let err = store
            .replace("k", &v1, Bytes::from_static(b"2"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
        take_log(&script);
        assert_eq!(body(&store, "k").await.unwrap(), "2");
        assert_eq!(
            take_log(&script),
            [(Step::SyncDir, dir.path().to_path_buf())]
        );
        fail(&script, Step::SyncDir, Fault::Before);
        let err = store.get("k").await.unwrap_err();
        assert!(!err.may_have_taken_effect(), "{err}");
        fail(&script, Step::SyncDir, Fault::Before);
        store.list("").await.unwrap_err();
        assert!(
            store.get("other").await.is_ok(),
            "other keys are unaffected"
        );

        // The next writer on the key settles it, even when it writes nothing.
        let err = store
            .create("k", Bytes::from_static(b"3"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
        take_log(&script);
        assert_eq!(body(&store, "k").await.unwrap(), "2");
        store.list("").await.unwrap();
        assert_eq!(take_log(&script), []);
    }

    #[tokio::test]
    async fn a_write_that_fails_before_its_commit_point_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (store, script) = scripted(dir.path()).await;
        let v1 = store.create("k", Bytes::from_static(b"1")).await.unwrap();
        for step in [Step::WriteTemp, Step::SyncTemp, Step::Rename] {
            fail(&script, step, Fault::Before);
            let err = store
                .replace("k", &v1, Bytes::from_static(b"2"))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::NotSent, "{step:?}: {err}");
            assert!(!err.may_have_taken_effect(), "{step:?}");
            let object = store.get("k").await.unwrap().unwrap();
            assert_eq!((object.version, object.body), (v1.clone(), "1".into()));
            assert_eq!(temp_files(dir.path()), Vec::<String>::new(), "{step:?}");
        }
        fail(&script, Step::SyncAncestor, Fault::Before);
        let err = store
            .create("d/e", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotSent, "{err}");
        assert!(store.get("d/e").await.unwrap().is_none());
        fail(&script, Step::Remove, Fault::Before);
        let err = store.delete("k", &v1).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotSent, "{err}");
        assert_eq!(body(&store, "k").await.unwrap(), "1");
        // A later attempt goes through.
        store.create("d/e", Bytes::from_static(b"x")).await.unwrap();
        store.delete("k", &v1).await.unwrap();
    }

    /// The positions of `step` in `log`.
    fn positions(log: &[(Step, PathBuf)], step: Step) -> Vec<usize> {
        log.iter()
            .enumerate()
            .filter(|(_, (s, _))| *s == step)
            .map(|(i, _)| i)
            .collect()
    }

    #[tokio::test]
    async fn a_write_is_durable_before_it_is_acknowledged() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("x").join("store");
        let (store, script) = scripted(&root).await;
        // Opening created two directories: both parents were fsynced.
        let log = take_log(&script);
        let synced: HashSet<_> = log.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(
            synced,
            HashSet::from([parent.path().to_path_buf(), parent.path().join("x")]),
            "{log:?}"
        );

        store
            .create("a/b/c", Bytes::from_static(b"1"))
            .await
            .unwrap();
        let log = take_log(&script);
        let ancestors: HashSet<_> = log
            .iter()
            .filter(|(s, _)| *s == Step::SyncAncestor)
            .map(|(_, p)| p.clone())
            .collect();
        assert_eq!(ancestors, HashSet::from([root.clone(), root.join("a")]));
        let rename = positions(&log, Step::Rename);
        assert_eq!(rename.len(), 1, "{log:?}");
        assert!(
            positions(&log, Step::SyncAncestor)
                .iter()
                .chain(&positions(&log, Step::SyncTemp))
                .all(|i| *i < rename[0]),
            "the path and the content are durable before the commit point: {log:?}"
        );
        assert_eq!(
            log.last(),
            Some(&(Step::SyncDir, root.join("a").join("b"))),
            "the directory is fsynced last, after the rename: {log:?}"
        );

        let v = store.get("a/b/c").await.unwrap().unwrap().version;
        store
            .replace("a/b/c", &v, Bytes::from_static(b"2"))
            .await
            .unwrap();
        store
            .create("a/b/d", Bytes::from_static(b"1"))
            .await
            .unwrap();
        let log = take_log(&script);
        let steps: Vec<_> = log.iter().map(|(s, _)| *s).collect();
        let write = [Step::WriteTemp, Step::SyncTemp, Step::Rename, Step::SyncDir];
        assert_eq!(steps, [write, write].concat(), "{log:?}");

        let v = store.get("a/b/d").await.unwrap().unwrap().version;
        store.delete("a/b/d", &v).await.unwrap();
        let steps: Vec<_> = take_log(&script).into_iter().map(|(s, _)| s).collect();
        assert_eq!(steps, [Step::Remove, Step::SyncDir]);
    }

    #[tokio::test]
    async fn a_replace_or_delete_of_a_missing_key_creates_no_directories() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).await.unwrap();
        let v = Version::etag("\"x\"");
        let err = store
            .replace("no/such/key", &v, Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(
            store.delete("no/such/key", &v).await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
        assert!(!dir.path().join("no").exists());
    }

    /// Holds `key`'s lock through a descriptor of its own, as a stopped
    /// process would.
    fn hold_lock(store: &FileStore, key: &str) -> File {
        let (dir, name) = store.locate(key).unwrap();
        let holder = File::create(dir.join(format!("{name}{LOCK_SUFFIX}"))).unwrap();
        holder.lock().unwrap();
        holder
    }

    #[tokio::test]
    async fn a_stopped_lock_holder_gets_writers_a_retryable_error_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FileStore::open(dir.path()).await.unwrap();
        store.lock_wait_limit = Duration::from_millis(300);
        let v1 = store
            .create("held", Bytes::from_static(b"1"))
            .await
            .unwrap();
        let holder = hold_lock(&store, "held");
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(10), async {
            let replaced = store.replace("held", &v1, Bytes::from_static(b"2")).await;
            let created = store.create("held", Bytes::from_static(b"2")).await;
            (replaced, created)
        })
        .await;
        let waited = started.elapsed();
        // Let a writer stuck on the lock finish, so that a failure below
        // does not hang the test.
        drop(holder);
        let (replaced, created) = outcome.expect("a writer waited on the lock without bound");
        for err in [replaced.unwrap_err(), created.unwrap_err()] {
            assert_eq!(err.kind(), ErrorKind::ConcurrentRequest, "{err}");
            assert!(err.is_retryable() && !err.may_have_taken_effect());
            let message = err.to_string();
            assert!(message.contains("held~lock"), "{message}");
            assert!(message.contains("stopped"), "{message}");
        }
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
        assert_eq!(body(&store, "held").await.unwrap(), "1");
        // Once the holder is gone, writes go through.
        store
            .replace("held", &v1, Bytes::from_static(b"2"))
            .await
            .unwrap();
    }

    #[test]
    fn a_stopped_lock_holder_neither_starves_other_keys_nor_delays_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut store = runtime.block_on(FileStore::open(dir.path())).unwrap();
        // Far longer than the test: shutdown must not depend on the bound.
        store.lock_wait_limit = Duration::from_secs(600);
        let v1 = runtime
            .block_on(store.create("held", Bytes::from_static(b"1")))
            .unwrap();
        let holder = hold_lock(&store, "held");
        for _ in 0..16 {
            let (store, v1) = (store.clone(), v1.clone());
            runtime.spawn(async move { store.replace("held", &v1, Bytes::new()).await });
        }
        let other = runtime.block_on(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            tokio::time::timeout(
                Duration::from_secs(3),
                store.create("other", Bytes::from_static(b"x")),
            )
            .await
        });
        let (shut_down, shutdown_done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(runtime);
            let _ = shut_down.send(());
        });
        let prompt = shutdown_done.recv_timeout(Duration::from_secs(3));
        drop(holder);
        assert!(
            matches!(other, Ok(Ok(_))),
            "a write to another key was starved: {other:?}"
        );
        assert!(
            prompt.is_ok(),
            "runtime shutdown waited for the lock holder"
        );
    }

    #[test]
    fn network_fuse_and_cluster_filesystems_are_refused() {
        for (magic, name) in [
            (0x6969, "NFS"),
            (0xff53_4d42, "CIFS"),
            (0xfe53_4d42, "SMB2"),
            (0x517b, "SMB"),
            (0x6573_5546, "FUSE"),
            (0x00c3_6400, "CephFS"),
            (0x0102_1997, "9p"),
        ] {
            assert_eq!(unsupported_filesystem(magic), Some(name), "{magic:#x}");
        }
        // ext4, xfs, btrfs, tmpfs, overlayfs, zfs
        for magic in [
            0xef53,
            0x5846_5342,
            0x9123_683e,
            0x0102_1994,
            0x794c_7630,
            0x2fc1_2fc1,
        ] {
            assert_eq!(unsupported_filesystem(magic), None, "{magic:#x}");
        }
        let err = filesystem_refused(Path::new("/mnt/share/locks"), "NFS");
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        let message = err.to_string();
        assert!(
            message.contains("/mnt/share/locks is on NFS") && message.contains("local filesystem"),
            "{message}"
        );
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_local_root_passes_the_filesystem_check() {
        let dir = tempfile::tempdir().unwrap();
        check_filesystem(dir.path()).unwrap().unwrap();
    }

    #[tokio::test]
    async fn layout_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).await.unwrap();
        store.create("a", Bytes::from_static(b"1")).await.unwrap();
        store
            .create("a/b~obj", Bytes::from_static(b"2"))
            .await
            .unwrap();
        assert!(dir.path().join("a~obj").is_file());
        assert!(dir.path().join("a").join("b%7Eobj~obj").is_file());
        let keys: Vec<_> = store
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(keys, vec!["a", "a/b~obj"]);

        fs::write(dir.path().join("foreign~obj"), b"not ours").unwrap();
        let err = store.get("foreign").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        assert!(
            err.to_string().contains("not a casaas object file"),
            "{err}"
        );
        let err = store
            .replace("foreign", &Version::etag("\"x\""), Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        assert_eq!(
            fs::read(dir.path().join("foreign~obj")).unwrap(),
            b"not ours"
        );
    }

    #[tokio::test]
    async fn versions_survive_reopen_without_repeating() {
        let dir = tempfile::tempdir().unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 {
            let store = FileStore::open(dir.path()).await.unwrap();
            let mut v = match store.get("k").await.unwrap() {
                Some(o) => o.version,
                None => store
                    .create("k", Bytes::from_static(b"same"))
                    .await
                    .unwrap(),
            };
            assert!(seen.insert(v.clone()) || seen.len() > 1);
            for _ in 0..20 {
                v = store
                    .replace("k", &v, Bytes::from_static(b"same"))
                    .await
                    .unwrap();
                assert!(seen.insert(v.clone()), "version {v} repeated");
            }
            store.delete("k", &v).await.unwrap();
        }
    }

    #[tokio::test]
    async fn relative_root_is_rejected() {
        let err = FileStore::open("relative/dir").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
    }
}
