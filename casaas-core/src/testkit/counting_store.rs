//! [`CountingStore`]: counts the requests of any backend by kind, the
//! cost model of the protocols.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use crate::{CasError, CasStore, ForwardingStore, ListEntry, StoredObject, Version};

/// Requests sent through a [`CountingStore`], by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    /// `get` calls.
    pub get: u64,
    /// `create` calls.
    pub create: u64,
    /// `replace` calls.
    pub replace: u64,
    /// `delete` calls.
    pub delete: u64,
    /// `list` calls.
    pub list: u64,
}

impl RequestCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.get + self.create + self.replace + self.delete + self.list
    }

    /// Writes (create, replace, delete): what object stores bill highest.
    pub fn writes(&self) -> u64 {
        self.create + self.replace + self.delete
    }
}

#[derive(Debug, Default)]
struct Counters {
    get: AtomicU64,
    create: AtomicU64,
    replace: AtomicU64,
    delete: AtomicU64,
    list: AtomicU64,
}

/// Wraps any [`CasStore`] and counts its requests by kind: what a protocol
/// costs in requests is a product property, measured with this.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use bytes::Bytes;
/// use casaas_core::testkit::CountingStore;
/// use casaas_core::{CasStore, MemoryStore};
///
/// let store = CountingStore::new(MemoryStore::new());
/// store.create("k", Bytes::new()).await?;
/// store.get("k").await?;
/// assert_eq!(store.counts().total(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CountingStore<S> {
    inner: S,
    counters: Arc<Counters>,
}

impl<S: CasStore> CountingStore<S> {
    /// Wraps `inner` with all counts at zero.
    pub fn new(inner: S) -> Self {
        CountingStore {
            inner,
            counters: Arc::default(),
        }
    }

    /// The counts so far (shared by clones).
    pub fn counts(&self) -> RequestCounts {
        let c = &self.counters;
        RequestCounts {
            get: c.get.load(Ordering::Relaxed),
            create: c.create.load(Ordering::Relaxed),
            replace: c.replace.load(Ordering::Relaxed),
            delete: c.delete.load(Ordering::Relaxed),
            list: c.list.load(Ordering::Relaxed),
        }
    }

    /// Sets every count back to zero (for every clone).
    pub fn reset(&self) {
        let c = &self.counters;
        for counter in [&c.get, &c.create, &c.replace, &c.delete, &c.list] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: CasStore> ForwardingStore for CountingStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.counters.get.fetch_add(1, Ordering::Relaxed);
        self.inner.get(key).await
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.counters.create.fetch_add(1, Ordering::Relaxed);
        self.inner.create(key, body).await
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.counters.replace.fetch_add(1, Ordering::Relaxed);
        self.inner.replace(key, expected, body).await
    }

    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.counters.delete.fetch_add(1, Ordering::Relaxed);
        self.inner.delete(key, expected).await
    }

    async fn wrap_delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        self.counters.delete.fetch_add(1, Ordering::Relaxed);
        self.inner.delete_unconditionally(key).await
    }

    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.counters.list.fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix).await
    }

    fn wrap_identity(&self) -> String {
        format!("counting({})", self.inner.identity())
    }
}
