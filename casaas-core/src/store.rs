//! The CAS-object contract: one small, object-safe async trait.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::layout::LeaseLayout;
use crate::{CasError, Version};

/// The largest key, in bytes, that the contract accepts (S3's and GCS's limit).
pub const MAX_KEY_LEN: usize = 1024;

/// An object read from a store: its body and the version naming that write.
///
/// It may gain fields, so a backend outside this crate builds one with
/// [`StoredObject::new`]:
///
/// ```
/// use bytes::Bytes;
/// use casaas_core::{ListEntry, StoredObject, Version};
///
/// let object = StoredObject::new(Bytes::from_static(b"x"), Version::Generation(7));
/// assert_eq!(object.version, Version::Generation(7));
/// let entry = ListEntry::new("a/b", Version::Generation(7));
/// assert_eq!((entry.key.as_str(), entry.version), ("a/b", object.version));
/// ```
///
/// and not with a struct expression:
///
/// ```compile_fail,E0639
/// let _ = casaas_core::StoredObject {
///     body: bytes::Bytes::new(),
///     version: casaas_core::Version::Generation(1),
/// };
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredObject {
    /// The object's bytes.
    pub body: Bytes,
    /// The version of the write that produced these bytes.
    pub version: Version,
}

impl StoredObject {
    /// An object read with its body and the version of the write that
    /// produced it (for backends outside this crate).
    pub fn new(body: Bytes, version: Version) -> Self {
        StoredObject { body, version }
    }
}

impl fmt::Debug for StoredObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredObject")
            .field("version", &self.version)
            .field("len", &self.body.len())
            .finish()
    }
}

/// One entry of a [`CasStore::list`] answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListEntry {
    /// The key, relative to the store's prefix (as passed to the other methods).
    pub key: String,
    /// The version of the object's current write.
    pub version: Version,
}

impl ListEntry {
    /// An entry of a list answer: the key relative to the store's prefix
    /// and its current version.
    pub fn new(key: impl Into<String>, version: Version) -> Self {
        ListEntry {
            key: key.into(),
            version,
        }
    }
}

/// What a backend truly honours. Probes verify these claims; protocols
/// consult them (for example, a fenced log never relies on conditional
/// delete when `conditional_delete` is false).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Create-if-absent (`If-None-Match: *`, `ifGenerationMatch=0`).
    pub create_if_absent: bool,
    /// Replace-if-version-matches (`If-Match`, `ifGenerationMatch=N`).
    pub replace_if_match: bool,
    /// Delete-if-version-matches.
    pub conditional_delete: bool,
    /// Listing a prefix.
    pub list: bool,
    /// The smallest sustained interval between writes to one key that the
    /// store tolerates without throttling (GCS: about one per second).
    pub min_write_interval: Option<Duration>,
    /// Notes on quirks the backend works around, for people.
    pub notes: Vec<String>,
}

impl Capabilities {
    /// Everything honoured, no rate limit: the reference semantics.
    pub fn full() -> Self {
        Capabilities {
            create_if_absent: true,
            replace_if_match: true,
            conditional_delete: true,
            list: true,
            min_write_interval: None,
            notes: Vec::new(),
        }
    }

    /// Marks conditional delete as unavailable.
    pub fn without_conditional_delete(mut self) -> Self {
        self.conditional_delete = false;
        self
    }

    /// Sets the minimum interval between writes to one key.
    #[must_use]
    pub fn with_min_write_interval(mut self, interval: Duration) -> Self {
        self.min_write_interval = Some(interval);
        self
    }

    /// Adds a note for people.
    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Every field in one line, for [`CasStore::identity`]: equal for two
    /// stores that honour the same conditions with the same workarounds.
    fn fingerprint(&self) -> String {
        let flag = |on: bool, name: &str| {
            if on {
                name.to_string()
            } else {
                format!("!{name}")
            }
        };
        let mut parts = vec![
            flag(self.create_if_absent, "create"),
            flag(self.replace_if_match, "replace"),
            flag(self.conditional_delete, "delete"),
            flag(self.list, "list"),
            format!("{:?}", self.min_write_interval),
        ];
        parts.extend(self.notes.iter().cloned());
        parts.join(";")
    }
}

/// A store of versioned objects with conditional writes: the one contract
/// every backend implements and every protocol is written against.
///
/// Keys are relative to the prefix the store was opened with and must pass
/// [`validate_key`]. Implementations never retry a conditional write
/// themselves: a transport-level retry can turn one's own success into a
/// precondition failure, so retries live in the protocol layer, where an
/// [`ErrorKind::Ambiguous`](crate::ErrorKind::Ambiguous) outcome can be
/// resolved by reading.
///
/// The trait is object safe, so a backend can be chosen at run time
/// (see [`open_store`](crate::open_store)):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use casaas_core::{CasStore, ErrorKind, MemoryStore};
///
/// let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
/// let v1 = store.create("config", Bytes::from_static(b"a")).await?;
/// // A second create loses: the object is there.
/// let err = store.create("config", Bytes::from_static(b"b")).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
/// // Replace succeeds only from the current version.
/// let v2 = store.replace("config", &v1, Bytes::from_static(b"c")).await?;
/// assert!(store.replace("config", &v1, Bytes::from_static(b"d")).await.is_err());
/// assert_eq!(store.get("config").await?.unwrap().version, v2);
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait CasStore: std::any::Any + Send + Sync + fmt::Debug + 'static {
    /// Reads `key`: its body and version, or `None` if absent.
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError>;

    /// Writes `body` to `key` only if no object is there
    /// (fails with `PreconditionFailed` otherwise). Returns the new version.
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError>;

    /// Writes `body` to `key` only if its current version is `expected`
    /// (fails with `PreconditionFailed` if another write is there, `NotFound`
    /// or `PreconditionFailed` if the object is gone). Returns the new version.
    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError>;

    /// Deletes `key` only if its current version is `expected`. Fails with
    /// `Unsupported` where the store cannot make the delete conditional.
    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError>;

    /// Lists the keys under `prefix` (relative to the store's prefix), with
    /// their versions, sorted by key.
    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError>;

    /// What this backend truly honours.
    fn capabilities(&self) -> Capabilities;

    /// A one-line description for people: backend, location, prefix. Never
    /// contains credentials.
    fn describe(&self) -> String;

    /// Names the place this store writes to and how it writes there, for
    /// work done once per store per process (the [store guard](crate::guard)
    /// and its `verify=false` trust): two handles with equal identities
    /// write the same objects with the same requests. Defaults to the type,
    /// [`describe`] and the [`capabilities`] (so two openings of one bucket
    /// with options that change the requests, such as S3's
    /// `etag_unquoted`, which the capabilities' notes name, get verdicts of
    /// their own); a wrapper that changes what a store does (fault
    /// injection, a test store that lies) must return an identity of its
    /// own, and a backend whose description does not tell instances apart
    /// (the private [`MemoryStore`](crate::MemoryStore)) must make one that
    /// does.
    ///
    /// [`describe`]: CasStore::describe
    /// [`capabilities`]: CasStore::capabilities
    fn identity(&self) -> String {
        format!(
            "{}#{}#{}",
            std::any::type_name_of_val(self),
            self.describe(),
            self.capabilities().fingerprint()
        )
    }

    /// Creates the bucket or container the store lives in, if it is absent;
    /// one that exists and is the caller's counts as success. Backends that
    /// cannot create one answer `Unsupported` (the default) and say how.
    async fn create_bucket(&self) -> Result<(), CasError> {
        Err(CasError::unsupported(format!(
            "{} cannot create its bucket or container; create it with the provider's own \
             tools",
            self.describe()
        )))
    }

    /// Deletes `key` whatever it holds. Only for objects that no protocol
    /// decision can depend on any more: the epoch layout's collected epochs
    /// (see [`crate::layout`]), on stores that cannot make a delete
    /// conditional. Backends that cannot answer `Unsupported` (the default).
    async fn delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        Err(CasError::unsupported(format!(
            "{} cannot delete '{key}' without a condition",
            self.describe()
        )))
    }

    /// The layout leases, elections and fenced resources must use on this
    /// store, if it was chosen (the URL option `layout=record|epochs`, see
    /// [`crate::layout::with_layout`]). `None`, the default, leaves it to
    /// what the store honours ([`crate::layout::layout_of`]).
    fn lease_layout(&self) -> Option<LeaseLayout> {
        None
    }
}

/// A store that wraps another and changes only some of its methods.
///
/// Implement [`inner`](ForwardingStore::inner) and override the `wrap_*`
/// methods that differ; every other method of [`CasStore`] reaches the
/// inner store, through the blanket `impl CasStore`. A wrapper written this
/// way cannot forget a method (`create_bucket`, `identity`, one added
/// later): the default is to forward it.
///
/// The default [`wrap_identity`](ForwardingStore::wrap_identity) is the
/// wrapper's type name around the inner identity, since a wrapper that
/// changes what the store does is a store of its own for the
/// [store guard](crate::guard).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use casaas_core::{CasStore, ForwardingStore, MemoryStore};
///
/// /// A memory store that describes itself differently.
/// #[derive(Debug, Default)]
/// struct Named(MemoryStore);
///
/// impl ForwardingStore for Named {
///     type Inner = MemoryStore;
///     fn inner(&self) -> &MemoryStore {
///         &self.0
///     }
///     fn wrap_describe(&self) -> String {
///         "named".into()
///     }
/// }
///
/// let store = Named::default();
/// store.create("k", "v".into()).await?;
/// assert_eq!(store.describe(), "named");
/// assert!(store.get("k").await?.is_some());
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait ForwardingStore: std::any::Any + Send + Sync + fmt::Debug + 'static {
    /// The wrapped store's type.
    type Inner: CasStore + ?Sized;

    /// The wrapped store.
    fn inner(&self) -> &Self::Inner;

    /// [`CasStore::get`]; forwards by default.
    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.inner().get(key).await
    }

    /// [`CasStore::create`]; forwards by default.
    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.inner().create(key, body).await
    }

    /// [`CasStore::replace`]; forwards by default.
    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.inner().replace(key, expected, body).await
    }

    /// [`CasStore::delete`]; forwards by default.
    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.inner().delete(key, expected).await
    }

    /// [`CasStore::list`]; forwards by default.
    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.inner().list(prefix).await
    }

    /// [`CasStore::capabilities`]; forwards by default.
    fn wrap_capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// [`CasStore::describe`]; forwards by default.
    fn wrap_describe(&self) -> String {
        self.inner().describe()
    }

    /// [`CasStore::identity`]; by default the wrapper's type name around
    /// the inner store's identity.
    fn wrap_identity(&self) -> String {
        format!(
            "{}({})",
            std::any::type_name::<Self>(),
            self.inner().identity()
        )
    }

    /// [`CasStore::create_bucket`]; forwards by default.
    async fn wrap_create_bucket(&self) -> Result<(), CasError> {
        self.inner().create_bucket().await
    }

    /// [`CasStore::delete_unconditionally`]; forwards by default.
    async fn wrap_delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        self.inner().delete_unconditionally(key).await
    }

    /// [`CasStore::lease_layout`]; forwards by default.
    fn wrap_lease_layout(&self) -> Option<LeaseLayout> {
        self.inner().lease_layout()
    }
}

#[async_trait]
impl<W: ForwardingStore> CasStore for W {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.wrap_get(key).await
    }
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.wrap_create(key, body).await
    }
    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.wrap_replace(key, expected, body).await
    }
    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.wrap_delete(key, expected).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.wrap_list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.wrap_capabilities()
    }
    fn describe(&self) -> String {
        self.wrap_describe()
    }
    fn identity(&self) -> String {
        self.wrap_identity()
    }
    async fn create_bucket(&self) -> Result<(), CasError> {
        self.wrap_create_bucket().await
    }
    async fn delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        self.wrap_delete_unconditionally(key).await
    }
    fn lease_layout(&self) -> Option<LeaseLayout> {
        self.wrap_lease_layout()
    }
}

/// A shared store (`Arc<dyn CasStore>`, `Arc<S3Store>`, a `Box`) is itself
/// the store it points to, identity included: wrappers generic over
/// `S: CasStore` take it as it is.
macro_rules! pointer_is_its_store {
    ($($pointer:ident),*) => {$(
        impl<T: CasStore + ?Sized> ForwardingStore for $pointer<T> {
            type Inner = T;
            fn inner(&self) -> &T {
                self
            }
            fn wrap_identity(&self) -> String {
                (**self).identity()
            }
        }
    )*};
}

use std::sync::Arc;
pointer_is_its_store!(Arc, Box);

/// Checks that `key` is acceptable to every backend: non-empty, at most
/// [`MAX_KEY_LEN`] bytes, no leading `/`, no empty, `.` or `..` segment, and
/// no control characters.
///
/// ```
/// use casaas_core::provider::validate_key;
/// assert!(validate_key("locks/leader").is_ok());
/// assert!(validate_key("../etc/passwd").is_err());
/// ```
pub fn validate_key(key: &str) -> Result<(), CasError> {
    let fail = |why: &str| {
        Err(CasError::invalid_input(format!(
            "key {key:?} is not allowed: {why}"
        )))
    };
    if key.is_empty() {
        return fail("it is empty");
    }
    if key.len() > MAX_KEY_LEN {
        return fail("it is longer than 1024 bytes");
    }
    if key.chars().any(char::is_control) {
        return fail("it contains a control character");
    }
    if key.starts_with('/') {
        return fail("it starts with '/'; keys are relative to the store's prefix");
    }
    if key
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return fail("it has an empty, '.' or '..' path segment");
    }
    Ok(())
}

/// Checks a list prefix: empty (everything) or a valid key, optionally
/// ending with `/`.
pub fn validate_prefix(prefix: &str) -> Result<(), CasError> {
    match prefix.strip_suffix('/') {
        _ if prefix.is_empty() => Ok(()),
        Some(stem) => validate_key(stem),
        None => validate_key(prefix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for ok in ["a", "a/b", "locks/leader.json", "x y", "é"] {
            assert!(validate_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/a", "a//b", "a/", "./a", "a/../b", "a\nb"] {
            let err = validate_key(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{bad}");
        }
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate_prefix("").is_ok());
        assert!(validate_prefix("a/").is_ok());
        assert!(validate_prefix("/").is_err());
    }
}
