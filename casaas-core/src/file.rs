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
//! - Conditional writes are atomic across threads and processes: a writer
//!   holds an exclusive `flock` on the key's lock file `NAME~lock` while it
//!   compares the version and installs the new file.
//! - A crash at any point leaves the old or the new object, never a torn or
//!   missing one: the new content goes to a temporary file that is fsynced,
//!   then renamed over the object, then the directory is fsynced.
//! - Versions never repeat, also across restarts and after a delete: each
//!   write gets 128 random bits, not a value derived from mtime, inode or size
//!   (those collide when a file is rewritten within the timestamp granularity).
//!
//! # Limits
//!
//! Meant for local disks. On NFS, `flock` is emulated with byte-range locks
//! and attribute caching can serve a stale read for a few seconds, so the
//! read-before-write that the lease protocol performs may see an old version;
//! use an object store instead. Lock files are never removed (removing one
//! while another process waits on it would break mutual exclusion).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rand::RngCore;

use crate::store::{validate_key, validate_prefix};
use crate::{Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoredObject, Version};

const OBJECT_SUFFIX: &str = "~obj";
const LOCK_SUFFIX: &str = "~lock";
const TEMP_SUFFIX: &str = "~tmp";
const HEADER_MAGIC: &str = "casaas-file 1 ";
/// File names may be at most 255 bytes on common Linux filesystems.
const MAX_FILE_NAME: usize = 255;

/// Bytes kept literal in file names; everything else (including `~` and `%`)
/// is percent-encoded.
const SEGMENT_ESCAPES: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

/// The local-filesystem store: a real CAS across processes on one machine.
///
/// Conditional writes hold an exclusive `flock` on the key's lock file; new
/// content is fsynced to a temporary file and renamed into place, so a crash
/// leaves the old or the new object; versions are 128 random bits and never
/// repeat. Local disks only (see `docs/embedded.md`).
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
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

impl FileStore {
    /// Opens (creating if needed) the store rooted at the absolute directory `root`.
    pub async fn open(root: impl AsRef<Path>) -> Result<Self, CasError> {
        let root = root.as_ref().to_path_buf();
        if !root.is_absolute() {
            return Err(CasError::misconfigured(format!(
                "file store root {} must be an absolute path",
                root.display()
            )));
        }
        let created = root.clone();
        blocking(move || fs::create_dir_all(&created))
            .await
            .map_err(|e| {
                CasError::misconfigured(format!(
                    "cannot create the file store directory {}: {e}",
                    root.display()
                ))
            })?;
        Ok(FileStore { root })
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

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("file store task failed: {e}")))?
}

fn io_error(key: &str, what: &str, e: io::Error) -> CasError {
    let kind = match e.kind() {
        io::ErrorKind::PermissionDenied => ErrorKind::Unauthorized,
        io::ErrorKind::InvalidData => ErrorKind::Misconfigured,
        // A local write that failed part-way has not replaced the object (the
        // rename is the commit point), so the failure is definite.
        _ => ErrorKind::Transport,
    };
    CasError::new(kind, format!("{what}: {e}"))
        .with_key(key)
        .with_source(e)
}

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

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Holds the exclusive lock for one key; unlocks on drop (and the kernel
/// unlocks if the process dies).
struct KeyLock(File);

impl KeyLock {
    fn acquire(dir: &Path, name: &str) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{name}{LOCK_SUFFIX}")))?;
        file.lock()?;
        Ok(KeyLock(file))
    }
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock anyway; unlock explicitly
        // so the release does not wait for the close.
        let _ = self.0.unlock();
    }
}

/// Installs `body` as the new content of `dir/name~obj` under `version`.
fn install(dir: &Path, name: &str, version: &Version, body: &[u8]) -> io::Result<()> {
    let mut nonce = [0u8; 8];
    rand::rng().fill_bytes(&mut nonce);
    let temp = dir.join(format!(".{}{TEMP_SUFFIX}", hex::encode(nonce)));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(format!("{HEADER_MAGIC}{version}\n").as_bytes())?;
        file.write_all(body)?;
        file.sync_all()?;
        fs::rename(&temp, dir.join(format!("{name}{OBJECT_SUFFIX}")))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

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

impl FileStore {
    async fn conditional_write(
        &self,
        key: &str,
        condition: Condition,
        body: Option<Bytes>,
    ) -> Result<Decision, CasError> {
        let (dir, name) = self.locate(key)?;
        blocking(move || {
            let _lock = KeyLock::acquire(&dir, &name)?;
            let path = dir.join(format!("{name}{OBJECT_SUFFIX}"));
            let current = read_object(&path)?;
            match (&condition, &current) {
                (Condition::Absent, Some(_)) => {
                    return Ok(Decision::Mismatch(
                        "an object already exists at this key".into(),
                    ));
                }
                (Condition::Matches(_), None) => return Ok(Decision::Missing),
                (Condition::Matches(expected), Some(current)) if &current.version != expected => {
                    return Ok(Decision::Mismatch(format!(
                        "current version is {}, not {expected}",
                        current.version
                    )));
                }
                _ => {}
            }
            match body {
                Some(body) => {
                    let version = fresh_version();
                    install(&dir, &name, &version, &body)?;
                    Ok(Decision::Written(version))
                }
                None => {
                    fs::remove_file(&path)?;
                    sync_dir(&dir)?;
                    Ok(Decision::Written(Version::Generation(0)))
                }
            }
        })
        .await
        .map_err(|e| io_error(key, "file store write failed", e))
    }
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
        blocking(move || read_object(&dir.join(format!("{name}{OBJECT_SUFFIX}"))))
            .await
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
        .map_err(|e| io_error(prefix, "file store list failed", e))?;
        let mut entries = Vec::new();
        for (key, path) in found.into_iter().filter(|(k, _)| k.starts_with(prefix)) {
            // An object deleted between the walk and the read is simply gone.
            let object = blocking(move || read_object(&path))
                .await
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
            .with_note("local disks only: not safe on NFS or other network filesystems")
    }

    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
