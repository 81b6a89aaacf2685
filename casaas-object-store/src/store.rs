//! [`ObjectStoreCas`]: the CAS-object contract over `Arc<dyn ObjectStore>`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::provider::{Operation, confirm_refusal, validate_key, validate_prefix};
use casaas_core::{Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoredObject, Version};
use futures::{StreamExt, TryStreamExt};

// The object_store line this copy is compiled against (see `error.rs`).
use super::os;

use os::path::Path;
use os::{GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::error::map_error;
use super::version::{ObjectVersion, PRODUCED_BY, update_version};

/// How many `head` requests [`ObjectStoreCas::list`] runs at once when it
/// completes versions a listing left out.
const HEAD_CONCURRENCY: usize = 8;

/// A [`CasStore`] over an object_store client the application already holds.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use casaas_core::{CasStore, ErrorKind};
#[doc = super::doc_imports!()]
///
/// let client: Arc<dyn os::ObjectStore> = Arc::new(os::memory::InMemory::new());
/// let store = ObjectStoreCas::new(client, "tables/t1/_locks")?;
/// let v1 = store.create("writer", Bytes::from_static(b"a")).await?;
/// let err = store.create("writer", Bytes::from_static(b"b")).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
/// store.replace("writer", &v1, Bytes::from_static(b"c")).await?;
/// # Ok(())
/// # }
/// ```
///
/// # Mapping
///
/// - `get` → `get_opts`, keeping both the ETag and the version of the
///   answer (see [`ObjectVersion`]);
/// - `create` → `put_opts` with `PutMode::Create`;
/// - `replace` → `put_opts` with `PutMode::Update`;
/// - `delete` → [`ErrorKind::Unsupported`]: object_store has no conditional
///   delete, and [`capabilities`](CasStore::capabilities) says so;
/// - `list` → `list`, sorted by key.
///
/// # object_store's own retries
///
/// object_store retries 5xx, 429 and 408 answers, conditional puts included.
/// When the first attempt was applied, the retry answers `AlreadyExists` or
/// `Precondition` although the write is ours. So, unless told that the
/// client does not retry ([`client_retries(false)`](Self::client_retries)),
/// a refused conditional write is followed by one read: if the object holds
/// exactly the bytes this write sent, the error is [`ErrorKind::Ambiguous`]
/// (the protocols then resolve it by their nonce), otherwise
/// [`ErrorKind::PreconditionFailed`]. The protocols write a fresh nonce in
/// every record, so equal bytes mean the same write.
pub struct ObjectStoreCas {
    client: Arc<dyn ObjectStore>,
    prefix: String,
    client_retries: bool,
    replace_if_match: bool,
    create_if_absent: bool,
    /// Set once any answer carried a version id: listings (which some
    /// backends answer without one, e.g. GCS's XML API) must then be
    /// completed with `head` so that listed versions equal read versions.
    reports_versions: AtomicBool,
    /// Set once a response header carried a quoted ETag: listings that
    /// strip the quotes (Azure's XML) get them back, so that listed versions
    /// equal read versions.
    quoted_etags: AtomicBool,
    /// Whether conditional writes above [`CONDITIONAL_SINGLE_PART_LIMIT`](casaas_core::provider::CONDITIONAL_SINGLE_PART_LIMIT)
    /// are sent (the caller's explicit opt-in).
    large_conditional_writes: bool,
    /// Where the client sends its requests (its endpoint), when known.
    location: Option<String>,
    /// This store's number, for an in-process client (see [`in_process_number`]).
    in_process: Option<u64>,
}

impl fmt::Debug for ObjectStoreCas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreCas")
            .field("client", &self.client.to_string())
            .field("prefix", &self.prefix)
            .field("client_retries", &self.client_retries)
            .field("replace_if_match", &self.replace_if_match)
            .finish()
    }
}

/// A number of its own for a store over an in-process client
/// (object_store's `InMemory`, whose `Display` names no place): two such
/// stores hold different objects, and must not share an identity (and with
/// it a guard verdict or a lock's token floor).
fn in_process_number(name: &str) -> Option<u64> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    name.contains("InMemory")
        .then(|| NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// Backends known to lack `PutMode::Update`, by the name their `Display`
/// starts with (wrappers such as `PrefixStore` show the inner name).
const WITHOUT_UPDATE: [&str; 2] = ["LocalFileSystem", "HttpStore"];

impl ObjectStoreCas {
    /// The store of keys under `prefix` (no leading or trailing `/`; empty
    /// for the whole bucket) of `client`.
    ///
    /// Capabilities are derived from the client's kind, by its `Display`
    /// name: `LocalFileSystem` and `HttpStore` cannot replace
    /// conditionally. An S3 client built with `S3ConditionalPut::Disabled`
    /// cannot be recognised from the outside: declare it with
    /// [`conditional_put(false)`](Self::conditional_put) (stores opened by
    /// URL do this themselves), and a wrapper hiding a store without
    /// `PutMode::Update` with
    /// [`conditional_replace(false)`](Self::conditional_replace).
    pub fn new(client: Arc<dyn ObjectStore>, prefix: impl Into<String>) -> Result<Self, CasError> {
        let prefix = prefix.into();
        let prefix = prefix.trim_matches('/').to_string();
        if !prefix.is_empty() {
            validate_key(&prefix).map_err(|e| {
                CasError::invalid_input(format!("store prefix {prefix:?}: {}", e.message()))
            })?;
        }
        let name = client.to_string();
        let replace_if_match = !WITHOUT_UPDATE.iter().any(|n| name.contains(n));
        Ok(ObjectStoreCas {
            client,
            prefix,
            client_retries: true,
            replace_if_match,
            create_if_absent: true,
            reports_versions: AtomicBool::new(false),
            quoted_etags: AtomicBool::new(false),
            large_conditional_writes: false,
            location: None,
            in_process: in_process_number(&name),
        })
    }

    /// Names where the client sends its requests (its endpoint, as the
    /// client resolved it from its configuration and environment): shown
    /// in [`describe`](CasStore::describe), and so part of the store's
    /// identity, which the store guard's verdict is kept by. Stores opened
    /// by URL do this themselves.
    #[must_use]
    pub fn with_location(mut self, location: impl Into<String>) -> Self {
        self.location = Some(location.into());
        self
    }

    /// Allows conditional writes with bodies above
    /// [`CONDITIONAL_SINGLE_PART_LIMIT`](casaas_core::provider::CONDITIONAL_SINGLE_PART_LIMIT). Off by default: a large body may go
    /// multipart or chunked on its way to the store, where the condition can
    /// be silently lost. Turn it on only for a store whose multipart
    /// conditional writes were proven: pass
    /// [`CapabilityProfile::proves_large_conditional_writes`](casaas_core::profile::CapabilityProfile::proves_large_conditional_writes)
    /// of the profile `casaas conformance URL --save-profile` saved for it
    /// (the S3 multipart, Azure block list or GCS compose probes passed).
    /// An adapter URL opened with `capability_profile=PATH` does this itself.
    pub fn allow_large_conditional_writes(mut self, allow: bool) -> Self {
        self.large_conditional_writes = allow;
        self
    }

    /// Declares whether the client retries failed requests (object_store's
    /// default: yes). With `false` (a client built with
    /// `RetryConfig { max_retries: 0, .. }`), a refused conditional write is
    /// reported as precondition failed without the confirming read.
    pub fn client_retries(mut self, retries: bool) -> Self {
        self.client_retries = retries;
        self
    }

    /// Declares whether the client can make puts conditional at all (`false`
    /// for S3 clients built with `S3ConditionalPut::Disabled`): then neither
    /// create-if-absent nor replace-if-match is claimed.
    pub fn conditional_put(mut self, supported: bool) -> Self {
        self.create_if_absent = supported && self.create_if_absent;
        self.replace_if_match = supported && self.replace_if_match;
        self
    }

    /// Declares whether the client can replace conditionally
    /// (`PutMode::Update`). Needed when a wrapper hides the kind of the
    /// store it wraps from its `Display` name (`LocalFileSystem` and
    /// `HttpStore` are recognised by name; a wrapper that does not show the
    /// inner name is assumed to support it).
    pub fn conditional_replace(mut self, supported: bool) -> Self {
        self.replace_if_match = supported;
        self
    }

    /// The client this store sends its requests through.
    pub fn client(&self) -> &Arc<dyn ObjectStore> {
        &self.client
    }

    /// The prefix keys are relative to.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn path(&self, key: &str) -> Path {
        let full = if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        };
        // `Path::from` percent-encodes characters object_store reserves;
        // `key_of` decodes them again.
        Path::from(full.as_str())
    }

    /// The key of a listed location, relative to the prefix.
    fn key_of(&self, location: &Path) -> Option<String> {
        let decoded: Vec<String> = location
            .parts()
            .map(|part| {
                percent_encoding::percent_decode_str(part.as_ref())
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .collect();
        let full = decoded.join("/");
        if self.prefix.is_empty() {
            Some(full)
        } else {
            full.strip_prefix(&format!("{}/", self.prefix))
                .map(str::to_string)
        }
    }

    fn version_of(
        &self,
        e_tag: Option<String>,
        version: Option<String>,
        key: &str,
    ) -> Result<Version, CasError> {
        if version.is_some() {
            self.reports_versions.store(true, Ordering::Relaxed);
        }
        if e_tag.as_deref().is_some_and(|t| t.starts_with('"')) {
            self.quoted_etags.store(true, Ordering::Relaxed);
        }
        ObjectVersion::new(e_tag, version)
            .map(|v| v.to_version())
            .ok_or_else(|| {
                CasError::unsupported(
                    "the object_store backend reported neither an ETag nor a version for the \
                     object, so no write can be made conditional on it",
                )
                .with_key(key)
            })
    }

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        mode: PutMode,
        op: Operation,
    ) -> Result<Version, CasError> {
        casaas_core::provider::check_single_part(key, body.len(), self.large_conditional_writes)?;
        let path = self.path(key);
        let options = PutOptions {
            mode,
            ..Default::default()
        };
        match self
            .client
            .put_opts(&path, PutPayload::from_bytes(body.clone()), options)
            .await
        {
            Ok(result) => self.version_of(result.e_tag, result.version, key),
            Err(err) => {
                let mapped = map_error(err, op, key);
                if mapped.kind() == ErrorKind::PreconditionFailed && self.client_retries {
                    // A refusal may be object_store's retry of our own applied write.
                    Err(confirm_refusal(self, key, &body, mapped, "object_store").await)
                } else {
                    Err(mapped)
                }
            }
        }
    }

    /// A listed ETag in the form response headers carry it.
    fn header_form(&self, tag: String) -> String {
        let bare = !tag.starts_with('"') && !tag.starts_with("W/");
        if bare && self.quoted_etags.load(Ordering::Relaxed) {
            format!("\"{tag}\"")
        } else {
            tag
        }
    }
}

#[async_trait]
impl CasStore for ObjectStoreCas {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        validate_key(key)?;
        let path = self.path(key);
        let result = match self.client.get_opts(&path, GetOptions::default()).await {
            Ok(result) => result,
            Err(os::Error::NotFound { .. }) => return Ok(None),
            Err(err) => return Err(map_error(err, Operation::Get, key)),
        };
        let version =
            self.version_of(result.meta.e_tag.clone(), result.meta.version.clone(), key)?;
        let body = result
            .bytes()
            .await
            .map_err(|err| map_error(err, Operation::Get, key))?;
        Ok(Some(StoredObject::new(body, version)))
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        validate_key(key)?;
        if !self.create_if_absent {
            return Err(CasError::unsupported(format!(
                "{} cannot make a put conditional (conditional put disabled)",
                self.client
            ))
            .with_key(key));
        }
        self.put(key, body, PutMode::Create, Operation::Create)
            .await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        validate_key(key)?;
        let expected =
            ObjectVersion::from_version(expected, PRODUCED_BY).map_err(|e| e.with_key(key))?;
        if !self.replace_if_match {
            return Err(CasError::unsupported(format!(
                "{} cannot replace conditionally (no PutMode::Update); this store cannot hold \
                 leases or fenced resources",
                self.client
            ))
            .with_key(key));
        }
        self.put(
            key,
            body,
            PutMode::Update(update_version(&expected)),
            Operation::Replace,
        )
        .await
    }

    async fn delete(&self, key: &str, _expected: &Version) -> Result<(), CasError> {
        validate_key(key)?;
        Err(CasError::unsupported(
            "object_store has no conditional delete; casaas never deletes unconditionally",
        )
        .with_key(key))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        // object_store lists whole path segments: list the directory that
        // holds the prefix, then keep the keys that start with it.
        let directory = match prefix.rfind('/') {
            Some(at) => &prefix[..at],
            None => "",
        };
        let listed_under = if directory.is_empty() {
            (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()))
        } else {
            Some(self.path(directory))
        };
        let metas: Vec<os::ObjectMeta> = self
            .client
            .list(listed_under.as_ref())
            .try_collect()
            .await
            .map_err(|err| map_error(err, Operation::List, prefix))?;
        let mut entries = Vec::new();
        let mut incomplete = Vec::new();
        let complete_with_head = self.reports_versions.load(Ordering::Relaxed);
        for meta in metas {
            let Some(key) = self.key_of(&meta.location) else {
                continue;
            };
            if !key.starts_with(prefix) {
                continue;
            }
            if complete_with_head && meta.version.is_none() {
                incomplete.push(key);
            } else {
                let e_tag = meta.e_tag.map(|tag| self.header_form(tag));
                let version = self.version_of(e_tag, meta.version, &key)?;
                entries.push(ListEntry::new(key, version));
            }
        }
        let completed: Vec<Option<ListEntry>> = futures::stream::iter(incomplete)
            .map(|key| async move {
                match self.client.head(&self.path(&key)).await {
                    Ok(meta) => self
                        .version_of(meta.e_tag, meta.version, &key)
                        .map(|version| Some(ListEntry::new(key, version))),
                    // Deleted between the listing and the head.
                    Err(os::Error::NotFound { .. }) => Ok(None),
                    Err(err) => Err(map_error(err, Operation::List, &key)),
                }
            })
            .buffer_unordered(HEAD_CONCURRENCY)
            .try_collect()
            .await?;
        entries.extend(completed.into_iter().flatten());
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::full()
            .without_conditional_delete()
            .with_note("object_store has no conditional delete")
            .with_note(format!(
                "through object_store {}",
                super::OBJECT_STORE_VERSION
            ));
        caps.create_if_absent = self.create_if_absent;
        caps.replace_if_match = self.replace_if_match;
        if !self.replace_if_match {
            caps = caps.with_note(format!(
                "{} has no PutMode::Update: no conditional replace",
                self.client
            ));
        }
        if self.client_retries {
            caps = caps.with_note(
                "the client retries conditional puts; refusals are confirmed by one read",
            );
        }
        caps
    }

    fn identity(&self) -> String {
        let own = format!(
            "{}#{}#{:?}",
            std::any::type_name::<Self>(),
            self.describe(),
            self.capabilities()
        );
        match self.in_process {
            Some(number) => format!("{own}#in-process-{number}"),
            None => own,
        }
    }

    fn describe(&self) -> String {
        match &self.location {
            Some(location) => format!("object_store {} /{} ({location})", self.client, self.prefix),
            None => format!("object_store {} /{}", self.client, self.prefix),
        }
    }
}
