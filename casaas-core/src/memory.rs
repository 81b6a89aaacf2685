//! The in-memory backend: the reference semantics of the contract.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{validate_key, validate_prefix};
use crate::{Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoredObject, Version};

#[derive(Debug, Default)]
struct Shared {
    objects: BTreeMap<String, StoredObject>,
    next_generation: i64,
}

/// An in-memory store with exactly the contract's semantics: every write gets
/// a fresh [`Version::Generation`], conditions are checked atomically, and
/// clones share the same objects.
///
/// It is the reference the other backends are compared with and the substrate
/// of the deterministic simulation (wrap it in a
/// `FaultyStore` (in the `testkit` feature) to inject failures).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use bytes::Bytes;
/// use casaas_core::{CasStore, MemoryStore};
///
/// let store = MemoryStore::new();
/// let v = store.create("k", Bytes::from_static(b"v")).await?;
/// store.delete("k", &v).await?;
/// assert!(store.get("k").await?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStore {
    shared: Arc<Mutex<Shared>>,
    prefix: String,
    name: String,
    /// Tells private stores apart (0 for named ones, whose name does).
    instance: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

fn named_stores() -> &'static Mutex<HashMap<String, Arc<Mutex<Shared>>>> {
    static NAMED: OnceLock<Mutex<HashMap<String, Arc<Mutex<Shared>>>>> = OnceLock::new();
    NAMED.get_or_init(Default::default)
}

impl MemoryStore {
    /// A new, empty, private store.
    pub fn new() -> Self {
        MemoryStore {
            shared: Arc::new(Mutex::new(Shared {
                objects: BTreeMap::new(),
                next_generation: 1,
            })),
            prefix: String::new(),
            name: String::from("(private)"),
            instance: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
        }
    }

    /// The process-wide store called `name` (created empty on first use), so
    /// that every `memory://NAME/...` URL in one process sees the same objects.
    pub fn named(name: &str) -> Self {
        let mut named = lock(named_stores());
        let shared = named
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Mutex::new(Shared {
                    objects: BTreeMap::new(),
                    next_generation: 1,
                }))
            })
            .clone();
        MemoryStore {
            shared,
            prefix: String::new(),
            name: name.to_string(),
            instance: 0,
        }
    }

    /// A view of the same objects under `prefix` (joined with `/`).
    pub fn with_prefix(&self, prefix: &str) -> Result<Self, CasError> {
        let prefix = prefix.trim_matches('/');
        if !prefix.is_empty() {
            validate_key(prefix)?;
        }
        let joined = match (self.prefix.is_empty(), prefix.is_empty()) {
            (_, true) => self.prefix.clone(),
            (true, false) => format!("{prefix}/"),
            (false, false) => format!("{}{prefix}/", self.prefix),
        };
        Ok(MemoryStore {
            shared: self.shared.clone(),
            prefix: joined,
            name: self.name.clone(),
            instance: self.instance,
        })
    }

    fn full_key(&self, key: &str) -> Result<String, CasError> {
        validate_key(key)?;
        Ok(format!("{}{key}", self.prefix))
    }

    fn state(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }
}

/// Locks a mutex, recovering from poisoning: the maps stay consistent because
/// every critical section only performs infallible updates.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write(state: &mut Shared, key: String, body: Bytes) -> Version {
    let version = Version::Generation(state.next_generation);
    state.next_generation += 1;
    state.objects.insert(
        key,
        StoredObject {
            body,
            version: version.clone(),
        },
    );
    version
}

#[async_trait]
impl CasStore for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let full = self.full_key(key)?;
        Ok(self.state().objects.get(&full).cloned())
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let full = self.full_key(key)?;
        let mut state = self.state();
        if state.objects.contains_key(&full) {
            return Err(CasError::new(
                ErrorKind::PreconditionFailed,
                "an object already exists at this key",
            )
            .with_key(key));
        }
        Ok(write(&mut state, full, body))
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let full = self.full_key(key)?;
        let mut state = self.state();
        match state.objects.get(&full) {
            None => Err(CasError::new(ErrorKind::NotFound, "no object to replace").with_key(key)),
            Some(current) if &current.version != expected => Err(CasError::new(
                ErrorKind::PreconditionFailed,
                format!("current version is {}, not {expected}", current.version),
            )
            .with_key(key)),
            Some(_) => Ok(write(&mut state, full, body)),
        }
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let full = self.full_key(key)?;
        let mut state = self.state();
        match state.objects.get(&full) {
            None => Err(CasError::new(ErrorKind::NotFound, "no object to delete").with_key(key)),
            Some(current) if &current.version != expected => Err(CasError::new(
                ErrorKind::PreconditionFailed,
                format!("current version is {}, not {expected}", current.version),
            )
            .with_key(key)),
            Some(_) => {
                state.objects.remove(&full);
                Ok(())
            }
        }
    }

    async fn delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        let full = self.full_key(key)?;
        self.state().objects.remove(&full);
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        let full = format!("{}{prefix}", self.prefix);
        let state = self.state();
        Ok(state
            .objects
            .range(full.clone()..)
            .take_while(|(k, _)| k.starts_with(&full))
            .map(|(k, o)| ListEntry {
                key: k[self.prefix.len()..].to_string(),
                version: o.version.clone(),
            })
            .collect())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full()
    }

    async fn create_bucket(&self) -> Result<(), CasError> {
        // The embedded backends have no bucket to create.
        Ok(())
    }

    fn describe(&self) -> String {
        format!("memory://{}/{}", self.name, self.prefix)
    }

    fn identity(&self) -> String {
        // Private stores all describe themselves alike: tell them apart.
        format!("memory#{}://{}/{}", self.instance, self.name, self.prefix)
    }
}
