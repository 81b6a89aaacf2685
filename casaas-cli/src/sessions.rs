//! Locks held under a session: finding the session's heartbeat and judging
//! the lock's term from it, for `status`, `ls` and `release`.
//!
//! A lock held under a session is never rewritten by its holder while held,
//! so its own version and times say nothing about whether it is still held:
//! its session's heartbeat does. The lock record names the heartbeat
//! relative to the lock's directory (`../sessions/worker-1` for a lock
//! `shards/7` held under `sessions/worker-1`), so it is found exactly from
//! whatever prefix the command opened: `casaas status
//! file:///srv/locks/shards/7` opens `file:///srv/locks/shards`, and the
//! heartbeat is one directory above it, which is opened read-only for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use casaas_core::lease::{Lease, LeaseConfig, LeaseError, LeaseRecord, SessionRef};
use casaas_core::provider::split_adapter;
use casaas_core::{CasStore, Version};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use crate::exit::Failure;
use crate::target;

/// Characters escaped in a path segment of a heartbeat URL (the inverse of
/// the decoding `target::parse` applies to the lock name).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// What the heartbeat says of the lock's session term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionState {
    /// The heartbeat is in the lock's term and not released: the session
    /// holds the lock as long as its holder renews the heartbeat.
    Alive,
    /// The heartbeat is in the lock's term and released: the session was
    /// closed, and the lock is free.
    Released,
    /// The heartbeat is in a later term: the lock's term is over.
    Superseded,
    /// No heartbeat in the lock's term (no object, or a lower token): its
    /// holder's next renewal fails; a contender takes the lock after
    /// watching this for the lock's TTL.
    Missing,
    /// The object at the heartbeat key is not a lease record this build
    /// reads (what was found), or the heartbeat cannot be reached from here
    /// (why): nobody can judge the lock.
    Unreadable(String),
}

impl SessionState {
    /// The name used in tables and JSON.
    pub fn name(&self) -> &'static str {
        match self {
            SessionState::Alive => "alive",
            SessionState::Released => "released",
            SessionState::Superseded => "superseded",
            SessionState::Missing => "missing",
            SessionState::Unreadable(_) => "unreadable",
        }
    }
}

/// One read of a lock's heartbeat.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    /// The heartbeat's URL (without user-info).
    pub url: String,
    /// The record read and its version (none when missing or unreadable).
    pub read: Option<(LeaseRecord, Version)>,
    /// The judgement of the lock's term.
    pub state: SessionState,
}

/// Judges the term `session` names from the heartbeat record read after the
/// lock (`None`: no object).
pub fn judge(session: &SessionRef, beat: Option<&LeaseRecord>) -> SessionState {
    match beat {
        Some(beat) if beat.token > session.term => SessionState::Superseded,
        Some(beat) if beat.token == session.term && beat.released => SessionState::Released,
        Some(beat) if beat.token == session.term => SessionState::Alive,
        _ => SessionState::Missing,
    }
}

/// A directory a heartbeat may be in: the first one given, and those above
/// it, opened read-only when first needed.
#[derive(Debug)]
struct Dir {
    /// Its store URL (with whatever secrets the user gave: never shown).
    url: String,
    /// Its URL without user-info, for output.
    display: String,
    store: Option<Arc<dyn CasStore>>,
}

/// One read of a heartbeat key: nothing there, a lease record and its
/// version, or what was found instead of a lease record.
type Read = Option<Result<(LeaseRecord, Version), String>>;

/// A place to look: a directory (index into [`Places::dirs`]) and a key
/// prefix within its store (`shards/` for a lock listed as `shards/7`).
pub type Place = (usize, String);

/// The directories heartbeats are looked for in, and every heartbeat read
/// so far (each distinct heartbeat is read once per command run).
#[derive(Debug)]
pub struct Places {
    dirs: Vec<Dir>,
    /// Whether the directory above the last one is known not to exist.
    at_top: bool,
    reads: HashMap<(usize, String), Read>,
}

impl Places {
    /// Starts from the store `store` at `url` (shown as `display`).
    pub fn new(url: &str, display: &str, store: Arc<dyn CasStore>) -> Self {
        Places {
            dirs: vec![Dir {
                url: url.to_string(),
                display: display.to_string(),
                store: Some(store),
            }],
            at_top: false,
            reads: HashMap::new(),
        }
    }

    /// Forgets every read (for a command that reads again, `--observe-for`).
    pub fn forget_reads(&mut self) {
        self.reads.clear();
    }

    /// Where the heartbeat `session` names for a lock at `lock_key` in the
    /// first directory is: a place and the key under it. `None` when the
    /// name is not one this library writes.
    pub fn locate(lock_key: &str, session: &SessionRef) -> Option<(Place, String)> {
        if let Some(key) = session.heartbeat_key(lock_key) {
            return Some(((0, String::new()), key));
        }
        // Above the first directory: one level per `..` beyond the lock's
        // own directories.
        let ups = session
            .heartbeat
            .split('/')
            .take_while(|s| *s == "..")
            .count();
        let depth = lock_key.split('/').count() - 1;
        let rest = session
            .heartbeat
            .split('/')
            .skip(ups)
            .collect::<Vec<_>>()
            .join("/");
        let well_formed = rest
            .split('/')
            .all(|segment| !matches!(segment, "" | "." | ".."));
        if ups <= depth || !well_formed {
            return None;
        }
        Some(((ups - depth, String::new()), rest))
    }

    /// Whether directory `level` exists above the first, working out its
    /// URL when first asked.
    fn reach(&mut self, level: usize) -> bool {
        while self.dirs.len() <= level && !self.at_top {
            let Some(last) = self.dirs.last() else {
                return false;
            };
            // A directory's parent is what a lock URL naming it would be in.
            match target::parse(&last.url) {
                Ok(lock) => {
                    let display = target::parse_prefix(&lock.store_url)
                        .map_or_else(|_| lock.store_url.clone(), |p| p.display);
                    self.dirs.push(Dir {
                        url: lock.store_url,
                        display,
                        store: None,
                    });
                }
                Err(_) => self.at_top = true,
            }
        }
        self.dirs.len() > level
    }

    /// The URL (without user-info) of `key` under `place`.
    fn url_of(&self, place: &Place, key: &str) -> String {
        let dir = self.dirs.get(place.0).map_or("", |d| d.display.as_str());
        join(dir, &format!("{}{key}", place.1))
    }

    async fn store(&mut self, level: usize) -> Result<Arc<dyn CasStore>, Failure> {
        let dir = self
            .dirs
            .get_mut(level)
            .ok_or_else(|| {
                Failure::usage(format!(
                    "looking for a session heartbeat {level} directories above the lock's, which does not exist"
                ))
            })?;
        if let Some(store) = &dir.store {
            return Ok(store.clone());
        }
        let opened = target::open_read_only(&target::LockTarget {
            store_url: dir.url.clone(),
            key: String::new(),
            display: dir.display.clone(),
        })
        .await?;
        dir.store = Some(opened.clone());
        Ok(opened)
    }

    /// Reads `key` under `place` (once per command run).
    async fn read(&mut self, place: &Place, key: &str) -> Result<Read, Failure> {
        let full = format!("{}{key}", place.1);
        let slot = (place.0, full.clone());
        if let Some(done) = self.reads.get(&slot) {
            return Ok(done.clone());
        }
        let store = self.store(place.0).await?;
        let url = self.url_of(place, key);
        let reader = Lease::new(
            store,
            full,
            "casaas-status",
            LeaseConfig::from_ttl(Duration::from_secs(15)),
        )
        .map_err(|e| Failure::usage(format!("{url}: {e}")))?;
        let read = match reader.read().await {
            Ok(Some(read)) => Some(Ok(read)),
            Ok(None) => None,
            Err(LeaseError::ForeignObject { found, .. }) => {
                Some(Err(format!("not a casaas lease (found {found})")))
            }
            Err(e @ LeaseError::UnsupportedSchema { .. }) => Some(Err(e.to_string())),
            Err(e) => {
                return Err(Failure::lease(
                    &e,
                    format!("reading the session heartbeat {url}: {e}"),
                ));
            }
        };
        self.reads.insert(slot, read.clone());
        Ok(read)
    }

    /// Reads the heartbeat of `session` for a lock at `lock_key` in the
    /// first directory. Call it after reading the lock: the term to judge is
    /// the one the lock names.
    pub async fn heartbeat(
        &mut self,
        lock_key: &str,
        session: &SessionRef,
    ) -> Result<Heartbeat, Failure> {
        let unreachable = |why: String| Heartbeat {
            url: session.heartbeat.clone(),
            read: None,
            state: SessionState::Unreadable(why),
        };
        let Some((place, key)) = Self::locate(lock_key, session) else {
            return Ok(unreachable(format!(
                "the lock names its heartbeat as {:?}, which is not a path this library writes",
                session.heartbeat
            )));
        };
        if !self.reach(place.0) {
            return Ok(unreachable(format!(
                "the heartbeat {:?} (from the lock's directory) lies above the store's root",
                session.heartbeat
            )));
        }
        let url = self.url_of(&place, &key);
        Ok(match self.read(&place, &key).await? {
            None => Heartbeat {
                url,
                read: None,
                state: SessionState::Missing,
            },
            Some(Ok((record, version))) => Heartbeat {
                url,
                state: judge(session, Some(&record)),
                read: Some((record, version)),
            },
            Some(Err(found)) => Heartbeat {
                url,
                read: None,
                state: SessionState::Unreadable(found),
            },
        })
    }
}

/// How output names the session of a lock at `lock_key`: its heartbeat's
/// key in this store, or, when that lies above the store's root, the
/// record's own name for it (relative to the lock's directory).
pub fn name(lock_key: &str, session: &SessionRef) -> String {
    session
        .heartbeat_key(lock_key)
        .unwrap_or_else(|| session.heartbeat.clone())
}

/// The URL of `key` (slashes separate directories) in the store at `dir`.
pub fn join(dir: &str, key: &str) -> String {
    if let Some((adapter, inner)) = split_adapter(dir) {
        return format!("{adapter}+{}", join(inner, key));
    }
    let cut = dir.find(['?', '#']).unwrap_or(dir.len());
    let (path, rest) = dir.split_at(cut);
    let encoded: Vec<String> = key
        .split('/')
        .map(|segment| utf8_percent_encode(segment, SEGMENT).to_string())
        .collect();
    // A root (`file:///`, `s3://bucket/`) already ends with the separator.
    let separator = if path.ends_with('/') { "" } else { "/" };
    format!("{path}{separator}{}{rest}", encoded.join("/"))
}

/// How long until a contender could take over a lock whose heartbeat it
/// saw unchanged for `unchanged`: the takeover wait for `ttl` minus that.
pub fn takeover_in(config: &LeaseConfig, ttl: Duration, unchanged: Duration) -> Duration {
    config.takeover_wait(ttl).saturating_sub(unchanged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_is_located_from_the_lock_directory() {
        let named = SessionRef::new("shards/7", "sessions/w", 1);
        // Opened at the holder's root: the same key.
        assert_eq!(
            Places::locate("shards/7", &named),
            Some(((0, String::new()), "sessions/w".to_string()))
        );
        // Opened at `shards/` (as `casaas status …/shards/7` does): one
        // directory above.
        assert_eq!(
            Places::locate("7", &named),
            Some(((1, String::new()), "sessions/w".to_string()))
        );
        let deep = SessionRef::new("a/b/k", "s", 1);
        assert_eq!(
            Places::locate("k", &deep),
            Some(((2, String::new()), "s".to_string()))
        );
        let mut bad = named.clone();
        bad.heartbeat = "../../x/../y".to_string();
        assert_eq!(Places::locate("7", &bad), None);
    }

    #[test]
    fn a_joined_url_names_the_heartbeat() {
        let url = join("s3://b/locks?region=x", "sessions/my worker");
        assert_eq!(url, "s3://b/locks/sessions/my%20worker?region=x");
        let lock = target::parse(&url).unwrap();
        assert_eq!(
            (lock.store_url.as_str(), lock.key.as_str()),
            ("s3://b/locks/sessions?region=x", "my worker")
        );
        assert_eq!(join("file:///", "s/w"), "file:///s/w");
        assert_eq!(
            join("opendal+fs:///srv/locks", "s/w"),
            "opendal+fs:///srv/locks/s/w"
        );
    }

    #[tokio::test]
    async fn each_distinct_heartbeat_is_read_once() {
        use casaas_core::MemoryStore;
        use casaas_core::testkit::CountingStore;

        let counting = Arc::new(CountingStore::new(MemoryStore::new()));
        let beat = LeaseRecord::new("w", "n0", 3, 1_000, 0);
        counting.create("sessions/w", beat.encode()).await.unwrap();
        let store: Arc<dyn CasStore> = counting.clone();
        let mut places = Places::new("memory://t/", "memory://t/", store);
        let session = SessionRef::new("shards/1", "sessions/w", 3);
        let before = counting.counts().get;
        for lock in ["shards/1", "shards/2", "shards/3"] {
            let found = places.heartbeat(lock, &session).await.unwrap();
            assert_eq!(found.state, SessionState::Alive);
            assert_eq!(found.url, "memory://t/sessions/w");
        }
        assert_eq!(counting.counts().get - before, 1);
    }

    #[test]
    fn the_term_is_judged_by_the_heartbeat_token() {
        let session = SessionRef::new("k", "s", 5);
        let beat = |token, released| {
            let mut r = LeaseRecord::new("o", "n", token, 1_000, 0);
            r.released = released;
            r
        };
        assert_eq!(judge(&session, None), SessionState::Missing);
        assert_eq!(
            judge(&session, Some(&beat(4, false))),
            SessionState::Missing
        );
        assert_eq!(judge(&session, Some(&beat(5, false))), SessionState::Alive);
        assert_eq!(
            judge(&session, Some(&beat(5, true))),
            SessionState::Released
        );
        assert_eq!(
            judge(&session, Some(&beat(6, false))),
            SessionState::Superseded
        );
    }
}
