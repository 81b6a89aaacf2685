//! [`OpendalCas`]: the CAS-object contract over an OpenDAL [`Operator`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::provider::{validate_key, validate_prefix};
use casaas_core::{Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoredObject, Version};
use futures::{StreamExt, TryStreamExt};
use opendal::{Capability, Metadata, Operator};
use sha2::{Digest, Sha256};

use casaas_core::provider::{Operation, confirm_refusal};

use crate::error::map_error;
use crate::version::{ObjectVersion, PRODUCED_BY};

/// How many requests [`OpendalCas::list`] runs at once when it completes
/// versions a listing left out.
const LIST_CONCURRENCY: usize = 8;

/// How often `get` re-reads when the object changes between its `stat` and
/// its conditional read.
const GET_ATTEMPTS: usize = 5;

/// Prefix of the versions this adapter computes for backends that report
/// neither an ETag nor a version (OpenDAL's `memory` and `fs` services).
const CONTENT_HASH_PREFIX: &str = "sha256:";

/// A [`CasStore`] over an OpenDAL [`Operator`] the application already holds.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use bytes::Bytes;
/// use casaas_core::{CasStore, ErrorKind};
/// use casaas_opendal::OpendalCas;
///
/// let op = opendal::Operator::new(opendal::services::Memory::default())?;
/// let store = OpendalCas::new(op, "tables/t1/_commits")?;
/// store.create("00001.json", Bytes::from_static(b"{\"add\":\"a\"}")).await?;
/// // Another writer's commit for the same version loses.
/// let err = store.create("00001.json", Bytes::from_static(b"{\"add\":\"b\"}")).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
/// // OpenDAL's memory service has no compare-and-swap, and says so.
/// assert!(!store.capabilities().replace_if_match);
/// # Ok(())
/// # }
/// ```
///
/// # Mapping
///
/// Capabilities come from `op.info().capability()`:
///
/// - `create` → `write_with(..).if_not_exists(true)`;
/// - `replace` → `write_with(..).if_version_match(v)` where the backend
///   conditions on versions (GCS generations), else `.if_match(etag)`;
/// - `delete` → `delete_with(..).if_version_match(v)` / `.if_match(etag)`
///   where the backend has it, else [`ErrorKind::Unsupported`];
/// - `get` → `stat`, then a read conditional on what `stat` saw, so body and
///   version belong to one write (two requests, where a direct provider
///   needs one);
/// - `list` → `list_with(..).recursive(true)`, files only, sorted.
///
/// Backends that report neither an ETag nor a version (`memory`, `fs`)
/// get versions computed from the content (`sha256:...`). Those backends
/// cannot replace conditionally, so such versions only ever name objects,
/// never guard a write.
///
/// # Retries
///
/// Operators built with OpenDAL's `RetryLayer` retry temporary failures,
/// writes included. As with object_store, a refused conditional write is
/// then confirmed by one read (see
/// [`client_retries`](Self::client_retries)); an error OpenDAL calls
/// temporary, on a write, is [`ErrorKind::Ambiguous`].
pub struct OpendalCas {
    op: Operator,
    prefix: String,
    capability: Capability,
    client_retries: bool,
    conditional_delete: bool,
    /// Set once any answer carried a version: listings without versions are
    /// then completed with `stat`.
    reports_versions: AtomicBool,
    /// Whether conditional writes above [`CONDITIONAL_SINGLE_PART_LIMIT`](casaas_core::provider::CONDITIONAL_SINGLE_PART_LIMIT)
    /// are sent (the caller's explicit opt-in).
    large_conditional_writes: bool,
}

impl fmt::Debug for OpendalCas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.op.info();
        f.debug_struct("OpendalCas")
            .field("scheme", &info.scheme())
            .field("name", &info.name())
            .field("prefix", &self.prefix)
            .field("client_retries", &self.client_retries)
            .finish()
    }
}

impl OpendalCas {
    /// The store of keys under `prefix` (relative to the operator's root; no
    /// leading or trailing `/`; empty for the root itself).
    pub fn new(op: Operator, prefix: impl Into<String>) -> Result<Self, CasError> {
        let prefix = prefix.into().trim_matches('/').to_string();
        if !prefix.is_empty() {
            validate_key(&prefix).map_err(|e| {
                CasError::invalid_input(format!("store prefix {prefix:?}: {}", e.message()))
            })?;
        }
        let capability = op.info().capability();
        Ok(OpendalCas {
            op,
            prefix,
            capability,
            client_retries: true,
            conditional_delete: true,
            reports_versions: AtomicBool::new(false),
            large_conditional_writes: false,
        })
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

    /// Refuses a conditional write above the single-part limit unless
    /// allowed.
    fn check_size(&self, key: &str, body: &Bytes) -> Result<(), CasError> {
        casaas_core::provider::check_single_part(key, body.len(), self.large_conditional_writes)?;
        Ok(())
    }

    /// Declares whether the operator retries failed requests (a
    /// `RetryLayer`). The default, `true`, confirms a refused conditional
    /// write with one read; with `false` a refusal is reported as is.
    pub fn client_retries(mut self, retries: bool) -> Self {
        self.client_retries = retries;
        self
    }

    /// Stops claiming conditional delete where OpenDAL advertises it but the
    /// server does not honour it (some emulators); `delete` then answers
    /// `Unsupported`.
    pub fn conditional_delete(mut self, enabled: bool) -> Self {
        self.conditional_delete = enabled;
        self
    }

    /// The operator this store sends its requests through.
    pub fn operator(&self) -> &Operator {
        &self.op
    }

    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    fn can_replace(&self) -> bool {
        self.capability.write_with_if_version_match || self.capability.write_with_if_match
    }

    fn can_delete(&self) -> bool {
        self.conditional_delete
            && (self.capability.delete_with_if_version_match
                || self.capability.delete_with_if_match)
    }

    /// Versions are content hashes on backends that cannot replace: their
    /// metadata names no write.
    fn content_versions(&self) -> bool {
        !self.can_replace()
    }

    fn content_version(body: &[u8]) -> Version {
        Version::ETag(format!(
            "{CONTENT_HASH_PREFIX}{}",
            hex::encode(Sha256::digest(body))
        ))
    }

    fn version_of(&self, meta: &Metadata, key: &str) -> Result<ObjectVersion, CasError> {
        let version = meta.version().map(str::to_string);
        if version.is_some() {
            self.reports_versions.store(true, Ordering::Relaxed);
        }
        ObjectVersion::new(meta.etag().map(str::to_string), version).ok_or_else(|| {
            CasError::unsupported(format!(
                "OpenDAL's {} service reported neither an ETag nor a version for the object, \
                 so no write can be made conditional on it",
                self.op.info().scheme()
            ))
            .with_key(key)
        })
    }

    /// A refused conditional write after which the object holds exactly our
    /// bytes may be our own write, refused on a retry: core's one check.
    async fn confirm_refusal(&self, key: &str, body: &Bytes, refusal: CasError) -> CasError {
        if !self.client_retries {
            return refusal;
        }
        confirm_refusal(self, key, body, refusal, "OpenDAL").await
    }

    async fn read_current(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        let path = self.path(key);
        if self.content_versions() {
            return match self.op.read(&path).await {
                Ok(buffer) => {
                    let body = buffer.to_bytes();
                    let version = Self::content_version(&body);
                    Ok(Some(StoredObject::new(body, version)))
                }
                Err(e) if e.kind() == opendal::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(map_error(e, Operation::Get, key)),
            };
        }
        for _ in 0..GET_ATTEMPTS {
            let meta = match self.op.stat(&path).await {
                Ok(meta) => meta,
                Err(e) if e.kind() == opendal::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(map_error(e, Operation::Get, key)),
            };
            let seen = self.version_of(&meta, key)?;
            let mut read = self.op.read_with(&path);
            let mut checked = true;
            if let (Some(version), true) =
                (&seen.version, self.capability.read_with_if_version_match)
            {
                read = read.if_version_match(version);
            } else if let (Some(tag), true) = (&seen.e_tag, self.capability.read_with_if_match) {
                read = read.if_match(tag);
            } else {
                checked = false;
            }
            let body = match read.await {
                Ok(buffer) => buffer.to_bytes(),
                // Replaced or deleted since the stat: look again.
                Err(e) if e.kind() == opendal::ErrorKind::ConditionNotMatch => continue,
                Err(e) if e.kind() == opendal::ErrorKind::NotFound => continue,
                Err(e) => return Err(map_error(e, Operation::Get, key)),
            };
            if !checked {
                // No conditional read: accept the body only if a second stat
                // still shows the same write.
                match self.op.stat(&path).await {
                    Ok(after) if self.version_of(&after, key)? == seen => {}
                    Ok(_) => continue,
                    Err(e) if e.kind() == opendal::ErrorKind::NotFound => continue,
                    Err(e) => return Err(map_error(e, Operation::Get, key)),
                }
            }
            return Ok(Some(StoredObject::new(body, seen.to_version())));
        }
        Err(CasError::new(
            ErrorKind::ConcurrentRequest,
            format!("the object changed under every one of {GET_ATTEMPTS} reads; retry later"),
        )
        .with_key(key))
    }

    async fn finish_write(
        &self,
        key: &str,
        body: &Bytes,
        result: opendal::Result<Metadata>,
        op: Operation,
    ) -> Result<Version, CasError> {
        match result {
            Ok(_) if self.content_versions() => Ok(Self::content_version(body)),
            Ok(meta) => Ok(self.version_of(&meta, key)?.to_version()),
            Err(e) => {
                let mapped = map_error(e, op, key);
                Err(self.confirm_refusal(key, body, mapped).await)
            }
        }
    }
}

#[async_trait]
impl CasStore for OpendalCas {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        validate_key(key)?;
        self.read_current(key).await
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        validate_key(key)?;
        if !self.capability.write_with_if_not_exists {
            return Err(CasError::unsupported(format!(
                "OpenDAL's {} service cannot write if-not-exists",
                self.op.info().scheme()
            ))
            .with_key(key));
        }
        self.check_size(key, &body)?;
        let path = self.path(key);
        let write = self.op.write_with(&path, body.clone()).if_not_exists(true);
        let result = write.await;
        self.finish_write(key, &body, result, Operation::Create)
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
        self.check_size(key, &body)?;
        let path = self.path(key);
        let write = self.op.write_with(&path, body.clone());
        let write = match (&expected.version, &expected.e_tag) {
            (Some(version), _) if self.capability.write_with_if_version_match => {
                write.if_version_match(version)
            }
            (_, Some(tag)) if self.capability.write_with_if_match => write.if_match(tag),
            _ => {
                return Err(CasError::unsupported(format!(
                    "OpenDAL's {} service cannot replace conditionally on this version \
                     (no if_match / if_version_match); this store cannot hold leases",
                    self.op.info().scheme()
                ))
                .with_key(key));
            }
        };
        let result = write.await;
        self.finish_write(key, &body, result, Operation::Replace)
            .await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        validate_key(key)?;
        let expected =
            ObjectVersion::from_version(expected, PRODUCED_BY).map_err(|e| e.with_key(key))?;
        if !self.can_delete() {
            return Err(CasError::unsupported(format!(
                "conditional delete is not available on OpenDAL's {} service here",
                self.op.info().scheme()
            ))
            .with_key(key));
        }
        let path = self.path(key);
        let delete = self.op.delete_with(&path);
        let delete = match (&expected.version, &expected.e_tag) {
            (Some(version), _) if self.capability.delete_with_if_version_match => {
                delete.if_version_match(version)
            }
            (_, Some(tag)) if self.capability.delete_with_if_match => delete.if_match(tag),
            _ => {
                return Err(CasError::unsupported(
                    "the version carries no half this service can condition a delete on",
                )
                .with_key(key));
            }
        };
        delete
            .await
            .map_err(|e| map_error(e, Operation::Delete, key))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        let directory = match prefix.rfind('/') {
            Some(at) => &prefix[..=at],
            None => "",
        };
        let listed_under = if self.prefix.is_empty() {
            directory.to_string()
        } else {
            format!("{}/{directory}", self.prefix)
        };
        let entries = match self.op.list_with(&listed_under).recursive(true).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(map_error(e, Operation::List, prefix)),
        };
        let root = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let mut listed = Vec::new();
        let mut incomplete = Vec::new();
        let complete_with_stat = self.reports_versions.load(Ordering::Relaxed);
        for entry in entries {
            let path = entry.path().trim_start_matches('/');
            if path.ends_with('/') || !entry.metadata().mode().is_file() {
                continue;
            }
            let Some(key) = path.strip_prefix(root.as_str()) else {
                continue;
            };
            if !key.starts_with(prefix) {
                continue;
            }
            let meta = entry.metadata();
            let has_identity = meta.etag().is_some() || meta.version().is_some();
            if self.content_versions()
                || !has_identity
                || (complete_with_stat && meta.version().is_none())
            {
                incomplete.push(key.to_string());
            } else {
                let version = self.version_of(meta, key)?.to_version();
                listed.push(ListEntry::new(key, version));
            }
        }
        let completed: Vec<Option<ListEntry>> = futures::stream::iter(incomplete)
            .map(|key| async move {
                Ok::<_, CasError>(
                    self.read_current(&key)
                        .await?
                        .map(|stored| ListEntry::new(key, stored.version)),
                )
            })
            .buffer_unordered(LIST_CONCURRENCY)
            .try_collect()
            .await?;
        listed.extend(completed.into_iter().flatten());
        listed.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(listed)
    }

    fn capabilities(&self) -> Capabilities {
        let info = self.op.info();
        let mut caps =
            Capabilities::full().with_note(format!("through OpenDAL {}", crate::OPENDAL_VERSION));
        caps.create_if_absent = self.capability.write_with_if_not_exists;
        caps.replace_if_match = self.can_replace();
        caps.conditional_delete = self.can_delete();
        // OpenDAL completes recursive listing where a service lacks it.
        caps.list = self.capability.list;
        if self.content_versions() {
            caps = caps.with_note(format!(
                "OpenDAL's {} service has no compare-and-swap; versions are content hashes",
                info.scheme()
            ));
        } else {
            caps = caps.with_note("reads are a stat plus a conditional read");
        }
        if self.client_retries {
            caps = caps.with_note("refused conditional writes are confirmed by one read");
        }
        caps
    }

    fn describe(&self) -> String {
        let info = self.op.info();
        format!(
            "opendal {}://{}{} /{}",
            info.scheme(),
            info.name(),
            info.root(),
            self.prefix
        )
    }
}
