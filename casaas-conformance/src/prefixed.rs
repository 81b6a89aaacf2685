//! A view of a store under a key prefix, so a run never touches keys
//! outside its own.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::provider::{validate_key, validate_prefix};
use casaas_core::{CasError, CasStore, ForwardingStore, ListEntry, StoredObject, Version};

/// Prepends a fixed prefix to every key; lists only under it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use casaas_core::{CasStore, MemoryStore};
/// use casaas_conformance::PrefixedStore;
///
/// let base: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
/// let view = PrefixedStore::new(base.clone(), "run-1")?;
/// view.create("k", Bytes::from_static(b"x")).await?;
/// assert!(base.get("run-1/k").await?.is_some());
/// assert_eq!(view.list("").await?[0].key, "k");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PrefixedStore {
    inner: Arc<dyn CasStore>,
    /// Ends with `/`.
    prefix: String,
}

impl PrefixedStore {
    /// A view of `inner` under `prefix` (a valid key; slashes at the ends
    /// are ignored).
    pub fn new(inner: Arc<dyn CasStore>, prefix: &str) -> Result<Self, CasError> {
        let prefix = prefix.trim_matches('/');
        validate_key(prefix)?;
        Ok(PrefixedStore {
            inner,
            prefix: format!("{prefix}/"),
        })
    }

    /// The prefix, ending with `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn full(&self, key: &str) -> Result<String, CasError> {
        validate_key(key)?;
        Ok(format!("{}{key}", self.prefix))
    }

    fn strip(&self, result: Result<Version, CasError>, key: &str) -> Result<Version, CasError> {
        result.map_err(|e| relabel(e, key))
    }
}

/// Names the caller's key in an error instead of the prefixed one.
fn relabel(err: CasError, key: &str) -> CasError {
    err.with_key(key)
}

#[async_trait]
impl ForwardingStore for PrefixedStore {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    /// The same store as the inner one, seen through a view.
    fn wrap_identity(&self) -> String {
        self.inner().identity()
    }

    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let full = self.full(key)?;
        self.inner.get(&full).await.map_err(|e| relabel(e, key))
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let full = self.full(key)?;
        self.strip(self.inner.create(&full, body).await, key)
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let full = self.full(key)?;
        self.strip(self.inner.replace(&full, expected, body).await, key)
    }

    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let full = self.full(key)?;
        self.inner
            .delete(&full, expected)
            .await
            .map_err(|e| relabel(e, key))
    }

    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        let full = format!("{}{prefix}", self.prefix);
        let entries = self.inner.list(&full).await?;
        Ok(entries
            .into_iter()
            .filter_map(|e| {
                e.key
                    .strip_prefix(&self.prefix)
                    .map(|k| ListEntry::new(k, e.version.clone()))
            })
            .collect())
    }

    async fn wrap_delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        let full = self.full(key)?;
        self.inner
            .delete_unconditionally(&full)
            .await
            .map_err(|e| relabel(e, key))
    }

    fn wrap_describe(&self) -> String {
        format!("{} (under {})", self.inner.describe(), self.prefix)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use casaas_core::MemoryStore;
    use casaas_core::lease::{Lease, LeaseConfig};

    /// Two views of one store under different prefixes share the store's
    /// identity but hold different objects: a lock seen in one is no sign
    /// that the same key of the other was deleted (each conformance run has
    /// its prefix, and runs of one process reuse key names).
    #[tokio::test]
    async fn a_lock_in_one_view_is_not_a_deleted_lock_in_another() {
        let base: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
        for run in ["run-1", "run-2"] {
            let view: Arc<dyn CasStore> = Arc::new(PrefixedStore::new(base.clone(), run).unwrap());
            let lease = Lease::new(view, "race/1", "racer", LeaseConfig::default()).unwrap();
            let guard = lease.try_acquire().await.unwrap().into_result().unwrap();
            assert_eq!(guard.token(), 1, "{run}");
            guard.release().await.unwrap();
        }
    }
}
