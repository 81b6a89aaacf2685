//! An Apache Iceberg catalog for iceberg-rust on a bare bucket: no REST
//! server, no database, no metastore. Every commit is one conditional swap
//! of the table's pointer, made exactly once by casaas's
//! [`SwapOnce`](casaas_core::lease::SwapOnce).
//!
//! The objects are those of casaas's PyIceberg catalog
//! (`casaas.iceberg.Catalog`), byte for byte in meaning, so either catalog
//! reads and commits to the other's tables:
//!
//! - `namespaces/<namespace>`: `{"kind": "casaas.iceberg.namespace",
//!   "state": "live"|"dropped", "properties": {...}, "nonce": ...}`;
//! - `tables/<namespace>/<table>`: the pointer, `{"kind":
//!   "casaas.iceberg.table", "state": "live"|"dropped", "metadata-location":
//!   ..., "identifier": [...], "nonce": ...}`.
//!
//! Names are percent-encoded; a multi-level namespace is its parts joined
//! by `.`. Nothing is deleted: a dropped table or namespace is a tombstone
//! that a later create replaces conditionally.
//!
//! ```no_run
//! # async fn run() -> iceberg::Result<()> {
//! use std::collections::HashMap;
//! use iceberg::CatalogBuilder;
//! use casaas_iceberg::CasaasCatalogBuilder;
//!
//! let catalog = CasaasCatalogBuilder::default()
//!     .load("lake", HashMap::from([
//!         ("uri".to_string(), "s3://bucket/warehouse?endpoint=http://127.0.0.1:8333".to_string()),
//!         ("casaas.aws_access_key_id".to_string(), "...".to_string()),
//!         ("casaas.aws_secret_access_key".to_string(), "...".to_string()),
//!         ("s3.endpoint".to_string(), "http://127.0.0.1:8333".to_string()),
//!     ]))
//!     .await?;
//! # let _ = catalog;
//! # Ok(())
//! # }
//! ```
//!
//! See the project's `docs/iceberg.md` for what each operation guarantees.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{LeaseError, SwapOnce, Swapped};
use casaas_core::{CasStore, StoredObject, Version};
use iceberg::io::{FileIO, FileIOBuilder, StorageFactory};
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result,
    Runtime, TableCommit, TableCreation, TableIdent,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde_json::{Map, Value, json};

/// The `kind` of a table pointer.
pub const POINTER_KIND: &str = "casaas.iceberg.table";
/// The `kind` of a namespace object.
pub const NAMESPACE_KIND: &str = "casaas.iceberg.namespace";
const SCHEMA: u64 = 1;
const LIVE: &str = "live";
const DROPPED: &str = "dropped";
/// Rebases of drops, renames and namespace updates (each re-reads and
/// writes again after another writer's change).
const MAX_REBASES: usize = 16;

/// The catalog property naming the casaas store that holds the catalog's
/// objects.
pub const URI: &str = "uri";
/// The catalog property naming where new tables' files go (default: `uri`
/// without its query).
pub const WAREHOUSE: &str = "warehouse";
/// Catalog properties starting with this prefix are options of the store
/// (`casaas.aws_access_key_id`, ...), passed without it.
pub const STORE_OPTION_PREFIX: &str = "casaas.";

/// Python's `urllib.parse.quote(part, safe="")`: everything but letters,
/// digits and `_.-~` is escaped.
const QUOTE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~');

fn quote(part: &str) -> String {
    utf8_percent_encode(part, QUOTE).to_string()
}

fn unquote(part: &str) -> String {
    percent_decode_str(part).decode_utf8_lossy().into_owned()
}

/// Builds a [`CasaasCatalog`] from properties (see [`URI`], [`WAREHOUSE`],
/// [`STORE_OPTION_PREFIX`]); every other property configures the tables'
/// FileIO (`s3.endpoint`, `s3.access-key-id`, ...).
#[derive(Debug, Default)]
pub struct CasaasCatalogBuilder {
    storage_factory: Option<Arc<dyn StorageFactory>>,
    runtime: Option<Runtime>,
}

impl CatalogBuilder for CasaasCatalogBuilder {
    type C = CasaasCatalog;

    fn with_storage_factory(mut self, storage_factory: Arc<dyn StorageFactory>) -> Self {
        self.storage_factory = Some(storage_factory);
        self
    }

    fn with_runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = Some(runtime);
        self
    }

    fn load(
        self,
        name: impl Into<String>,
        props: HashMap<String, String>,
    ) -> impl Future<Output = Result<Self::C>> + Send {
        // Converted before the future: it must be Send, the name need not be.
        let name: String = name.into();
        self.load_named(name, props)
    }
}

impl CasaasCatalogBuilder {
    async fn load_named(
        self,
        name: String,
        props: HashMap<String, String>,
    ) -> Result<CasaasCatalog> {
        let uri = props.get(URI).ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                "the casaas Iceberg catalog needs a `uri`: the store that holds its objects, \
                 for example uri=s3://bucket/warehouse or uri=file:///path/warehouse",
            )
        })?;
        let options: Vec<(String, String)> = props
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(STORE_OPTION_PREFIX)
                    .map(|k| (k.to_string(), v.clone()))
            })
            .collect();
        let store = casaas::open_store_with(uri, options)
            .await
            .map_err(|e| store_error("opening the catalog's store", LeaseError::from(e)))?;
        let warehouse = props.get(WAREHOUSE).cloned().unwrap_or_else(|| {
            uri.split_once('?')
                .map_or(uri.as_str(), |(base, _)| base)
                .trim_end_matches('/')
                .to_string()
        });
        let factory = self.storage_factory.unwrap_or_else(|| {
            Arc::new(iceberg_storage_opendal::OpenDalResolvingStorageFactory::new())
        });
        let file_io = FileIOBuilder::new(factory)
            .with_props(
                props
                    .iter()
                    .filter(|(k, _)| {
                        !k.starts_with(STORE_OPTION_PREFIX) && *k != URI && *k != WAREHOUSE
                    })
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
            .build();
        let mut catalog = CasaasCatalog::new(name, store, file_io, warehouse);
        catalog.runtime = self.runtime;
        Ok(catalog)
    }
}

/// An iceberg-rust [`Catalog`] whose objects live on a casaas store and
/// whose commits are exactly-once conditional swaps of a table's pointer.
#[derive(Debug, Clone)]
pub struct CasaasCatalog {
    name: String,
    swap: SwapOnce,
    store: Arc<dyn CasStore>,
    file_io: FileIO,
    warehouse: String,
    runtime: Option<Runtime>,
}

/// A pointer or namespace object as read: its body when live, and the
/// version to condition the next write on (`None`: absent).
struct Read {
    live: Option<Map<String, Value>>,
    version: Option<Version>,
}

/// What the swap's callbacks can fail with.
#[derive(Debug, thiserror::Error)]
enum SwapError {
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("could not encode the catalog object: {0}")]
    Encode(#[from] serde_json::Error),
    /// The lineage check needs the metadata file at this location, read
    /// after the swap (the callback cannot wait on a read).
    #[error("the lineage check needs the metadata at {0}")]
    NeedsLineage(String),
}

impl CasaasCatalog {
    /// A catalog named `name` whose objects are on `store`, whose tables'
    /// files are read and written through `file_io`, new tables going
    /// under `warehouse` (`<warehouse>/<namespace>.db/<table>`, as
    /// PyIceberg places them) unless their namespace has a `location`.
    pub fn new(
        name: impl Into<String>,
        store: Arc<dyn CasStore>,
        file_io: FileIO,
        warehouse: impl Into<String>,
    ) -> Self {
        CasaasCatalog {
            name: name.into(),
            swap: SwapOnce::new(store.clone()),
            store,
            file_io,
            warehouse: warehouse.into().trim_end_matches('/').to_string(),
            runtime: None,
        }
    }

    /// The catalog's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The FileIO the tables' files go through.
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    fn runtime(&self) -> Result<Runtime> {
        match &self.runtime {
            Some(runtime) => Ok(runtime.clone()),
            None => Runtime::try_current(),
        }
    }

    // -- keys and objects ------------------------------------------------

    fn namespace_name(namespace: &NamespaceIdent) -> Result<String> {
        if let Some(part) = namespace.iter().find(|p| p.contains('.') || p.is_empty()) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "namespace part {part:?} is empty or contains '.': the catalog joins a \
                     namespace's parts with '.' (as PyIceberg does), so rename it"
                ),
            ));
        }
        Ok(namespace.join("."))
    }

    fn namespace_key(namespace: &NamespaceIdent) -> Result<String> {
        Ok(format!(
            "namespaces/{}",
            quote(&Self::namespace_name(namespace)?)
        ))
    }

    fn table_key(table: &TableIdent) -> Result<String> {
        Ok(format!(
            "tables/{}/{}",
            quote(&Self::namespace_name(table.namespace())?),
            quote(table.name())
        ))
    }

    async fn read(&self, key: &str, kind: &str) -> Result<Read> {
        let found = self
            .swap
            .read(key)
            .await
            .map_err(|e| store_error(&format!("reading the catalog object {key}"), e))?;
        let Some(StoredObject { body, version, .. }) = found else {
            return Ok(Read {
                live: None,
                version: None,
            });
        };
        let body = decode(&body, key, kind)?;
        let live = body.get("state").and_then(Value::as_str) == Some(LIVE);
        Ok(Read {
            live: live.then_some(body),
            version: Some(version),
        })
    }

    /// Swaps `key` from `expected` to `body`, without a lineage (tombstones,
    /// namespaces, creates): whether the swap was ours.
    async fn swap_to(
        &self,
        key: &str,
        expected: Option<&Version>,
        body: &Map<String, Value>,
    ) -> Result<bool> {
        let swapped = self
            .swap
            .swap(
                key,
                expected,
                encode(body),
                nonce_in,
                |_: &[u8], _: &str| Ok::<_, SwapError>(false),
            )
            .await
            .map_err(|e| swap_error(key, e))?;
        Ok(swapped.is_ours())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let listed = self
            .store
            .list(prefix)
            .await
            .map_err(|e| store_error(&format!("listing {prefix}"), LeaseError::from(e)))?;
        let mut keys: Vec<String> = listed
            .into_iter()
            .map(|e| e.key)
            .filter(|k| !k.contains(".epochs/") && !k.contains(".collected/"))
            .collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    fn pointer(table: &TableIdent, location: &str) -> Map<String, Value> {
        let mut identifier: Vec<Value> = table.namespace().iter().map(|p| json!(p)).collect();
        identifier.push(json!(table.name()));
        let mut body = Map::new();
        body.insert("kind".into(), json!(POINTER_KIND));
        body.insert("schema".into(), json!(SCHEMA));
        body.insert("state".into(), json!(LIVE));
        body.insert("metadata-location".into(), json!(location));
        body.insert("identifier".into(), Value::Array(identifier));
        body
    }

    fn identifier_list(table: &TableIdent) -> Value {
        let mut parts: Vec<Value> = table.namespace().iter().map(|p| json!(p)).collect();
        parts.push(json!(table.name()));
        Value::Array(parts)
    }

    async fn load_at(&self, table: &TableIdent, location: &str) -> Result<Table> {
        let metadata = TableMetadata::read_from(&self.file_io, location).await?;
        Table::builder()
            .identifier(table.clone())
            .metadata(metadata)
            .metadata_location(location.to_string())
            .file_io(self.file_io.clone())
            .runtime(self.runtime()?)
            .build()
    }

    async fn require_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if self.namespace_exists(namespace).await? {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("namespace {namespace} does not exist: create it first"),
            ))
        }
    }

    /// Deletes a metadata file nobody can ever point at (an orphan is
    /// harmless, so a failure is only logged).
    async fn forget(&self, location: &str) {
        if let Err(err) = self.file_io.delete(location).await {
            tracing::debug!(location, %err, "could not delete an unused metadata file");
        }
    }

    /// The commit's swap, with the lineage check: `ours` is the metadata
    /// file the new pointer names.
    async fn commit_swap(
        &self,
        key: &str,
        expected: &Version,
        body: &Map<String, Value>,
        ours: &str,
    ) -> std::result::Result<Swapped, Error> {
        let asked: Mutex<Option<String>> = Mutex::new(None);
        let descends = |stored: &[u8], _nonce: &str| -> std::result::Result<bool, SwapError> {
            let Some(location) = metadata_location_in(stored) else {
                return Ok(false);
            };
            if location == ours {
                return Ok(true);
            }
            if let Ok(mut slot) = asked.lock() {
                *slot = Some(location.clone());
            }
            Err(SwapError::NeedsLineage(location))
        };
        let result = self
            .swap
            .swap(key, Some(expected), encode(body), nonce_in, descends)
            .await;
        let needed = asked.lock().ok().and_then(|mut slot| slot.take());
        match (result, needed) {
            (Ok(swapped), _) => Ok(swapped),
            // The check is asked only once the pointer has moved past
            // `expected`, which every write of ours was conditioned on:
            // none can land any more, so the metadata log settles it.
            (Err(_), Some(location)) => match self.lineage(&location, ours).await? {
                Some(true) => Ok(Swapped::Ours {
                    version: expected.clone(),
                    replaced: true,
                }),
                Some(false) => Ok(Swapped::Conflict(None)),
                None => Err(unknown(
                    key,
                    ours,
                    &format!("the table's metadata log no longer reaches back to {ours}"),
                )),
            },
            (Err(err), None) => Err(swap_error_commit(key, ours, err)),
        }
    }

    /// Does the metadata at `location` descend from `ours` (its
    /// `metadata-log` lists it)? `None` when the log does not reach back
    /// that far.
    async fn lineage(&self, location: &str, ours: &str) -> Result<Option<bool>> {
        let metadata = TableMetadata::read_from(&self.file_io, location)
            .await
            .map_err(|e| {
                unknown(
                    location,
                    ours,
                    &format!("the lineage check could not read {location}: {e}"),
                )
            })?;
        let logged: Vec<&str> = metadata
            .metadata_log()
            .iter()
            .map(|entry| entry.metadata_file.as_str())
            .collect();
        if logged.contains(&ours) {
            return Ok(Some(true));
        }
        let our_version = metadata_version(ours);
        let oldest = logged.iter().filter_map(|f| metadata_version(f)).min();
        Ok(match (our_version, oldest) {
            (Some(v), Some(oldest)) if oldest <= v => Some(false),
            _ => None,
        })
    }
}

/// The version number of a metadata file named `NNNNN-<uuid>.metadata.json`.
fn metadata_version(location: &str) -> Option<i64> {
    let file = location.rsplit('/').next()?;
    let (number, _) = file.split_once('-')?;
    number.parse().ok()
}

fn metadata_location_in(stored: &[u8]) -> Option<String> {
    let body: Value = serde_json::from_slice(stored).ok()?;
    body.get("metadata-location")?.as_str().map(str::to_string)
}

fn nonce_in(stored: &[u8]) -> Option<String> {
    let body: Value = serde_json::from_slice(stored).ok()?;
    body.get("nonce")?.as_str().map(str::to_string)
}

fn encode(
    body: &Map<String, Value>,
) -> impl Fn(&str) -> std::result::Result<Bytes, SwapError> + '_ {
    move |nonce: &str| {
        let mut with_nonce = body.clone();
        with_nonce.insert("nonce".into(), json!(nonce));
        Ok(Bytes::from(serde_json::to_vec(&Value::Object(with_nonce))?))
    }
}

fn decode(stored: &[u8], key: &str, kind: &str) -> Result<Map<String, Value>> {
    let body: Value = serde_json::from_slice(stored).map_err(|e| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("the catalog object {key} is not JSON: {e}"),
        )
    })?;
    match body {
        Value::Object(map) if map.get("kind").and_then(Value::as_str) == Some(kind) => Ok(map),
        _ => Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "the catalog object {key} is not a {kind} object: another tool wrote it; \
                 move it away or use another uri"
            ),
        )),
    }
}

/// A commit whose outcome is unknown: never reported as a conflict, which
/// would make the writer commit twice.
fn unknown(key: &str, ours: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!(
            "commit state unknown: the commit to {key} may or may not have landed ({why}); \
             look for {ours} in the table's metadata log before committing again"
        ),
    )
    .with_retryable(false)
}

fn store_error(what: &str, err: LeaseError) -> Error {
    if err.may_have_taken_effect() {
        return Error::new(
            ErrorKind::Unexpected,
            format!(
                "{what} may or may not have taken effect ({err}): read it back before trying again"
            ),
        )
        .with_retryable(false);
    }
    match err {
        LeaseError::Contended { .. } => Error::new(
            ErrorKind::CatalogCommitConflicts,
            format!("{what}: too many concurrent writers ({err})"),
        )
        .with_retryable(true),
        LeaseError::Store(ref e) if e.kind() == casaas_core::ErrorKind::Unauthorized => Error::new(
            ErrorKind::Unexpected,
            format!("{what}: the store refused the credentials ({err})"),
        ),
        _ => Error::new(
            ErrorKind::Unexpected,
            format!("{what}: the catalog's store failed ({err})"),
        ),
    }
}

fn swap_error(key: &str, err: SwapError) -> Error {
    match err {
        SwapError::Lease(e) => store_error(&format!("the write of the catalog object {key}"), e),
        other => Error::new(
            ErrorKind::Unexpected,
            format!("the write of the catalog object {key}: {other}"),
        ),
    }
}

fn swap_error_commit(key: &str, ours: &str, err: SwapError) -> Error {
    match err {
        SwapError::Lease(e) if e.may_have_taken_effect() => unknown(key, ours, &e.to_string()),
        other => swap_error(key, other),
    }
}

fn conflict(table: &TableIdent) -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!("table {table} has been updated by another writer: reload and commit again"),
    )
    .with_retryable(true)
}

fn table_not_found(table: &TableIdent) -> Error {
    Error::new(
        ErrorKind::TableNotFound,
        format!("table {table} does not exist"),
    )
}

fn table_exists(table: &TableIdent) -> Error {
    Error::new(
        ErrorKind::TableAlreadyExists,
        format!("table {table} already exists"),
    )
}

fn kept_changing(what: &str) -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!("{what} kept changing: try again"),
    )
    .with_retryable(true)
}

fn string_map(value: Option<&Value>) -> HashMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn location_of(body: &Map<String, Value>, key: &str) -> Result<String> {
    body.get("metadata-location")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("the table pointer {key} has no metadata-location"),
            )
        })
}

#[async_trait]
impl Catalog for CasaasCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        let parent: Vec<String> = match parent {
            Some(parent) => {
                self.require_namespace(parent).await?;
                parent.iter().cloned().collect()
            }
            None => Vec::new(),
        };
        let mut found = Vec::new();
        for key in self.list("namespaces/").await? {
            let Some(name) = key.strip_prefix("namespaces/") else {
                continue;
            };
            let parts: Vec<String> = unquote(name).split('.').map(str::to_string).collect();
            if parts.len() != parent.len() + 1 || parts[..parent.len()] != parent[..] {
                continue;
            }
            if self.read(&key, NAMESPACE_KIND).await?.live.is_some() {
                found.push(NamespaceIdent::from_vec(parts)?);
            }
        }
        Ok(found)
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let key = Self::namespace_key(namespace)?;
        let current = self.read(&key, NAMESPACE_KIND).await?;
        let exists = || {
            Error::new(
                ErrorKind::NamespaceAlreadyExists,
                format!("namespace {namespace} already exists"),
            )
        };
        if current.live.is_some() {
            return Err(exists());
        }
        let mut body = Map::new();
        body.insert("kind".into(), json!(NAMESPACE_KIND));
        body.insert("schema".into(), json!(SCHEMA));
        body.insert("state".into(), json!(LIVE));
        body.insert("properties".into(), json!(properties));
        if !self.swap_to(&key, current.version.as_ref(), &body).await? {
            return Err(exists());
        }
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let key = Self::namespace_key(namespace)?;
        let Some(body) = self.read(&key, NAMESPACE_KIND).await?.live else {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("namespace {namespace} does not exist"),
            ));
        };
        Ok(Namespace::with_properties(
            namespace.clone(),
            string_map(body.get("properties")),
        ))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let key = Self::namespace_key(namespace)?;
        Ok(self.read(&key, NAMESPACE_KIND).await?.live.is_some())
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        let key = Self::namespace_key(namespace)?;
        for _ in 0..MAX_REBASES {
            let current = self.read(&key, NAMESPACE_KIND).await?;
            let Some(mut body) = current.live else {
                return Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("namespace {namespace} does not exist"),
                ));
            };
            body.remove("nonce");
            body.insert("properties".into(), json!(properties));
            if self.swap_to(&key, current.version.as_ref(), &body).await? {
                return Ok(());
            }
        }
        Err(kept_changing(&format!("namespace {namespace}")))
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if !self.list_tables(namespace).await?.is_empty() {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!("namespace {namespace} is not empty: drop its tables first"),
            ));
        }
        let key = Self::namespace_key(namespace)?;
        for _ in 0..MAX_REBASES {
            let current = self.read(&key, NAMESPACE_KIND).await?;
            let Some(mut body) = current.live else {
                return Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("namespace {namespace} does not exist"),
                ));
            };
            body.remove("nonce");
            body.insert("state".into(), json!(DROPPED));
            if self.swap_to(&key, current.version.as_ref(), &body).await? {
                return Ok(());
            }
        }
        Err(kept_changing(&format!("namespace {namespace}")))
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.require_namespace(namespace).await?;
        let prefix = format!("tables/{}/", quote(&Self::namespace_name(namespace)?));
        let mut found = Vec::new();
        for key in self.list(&prefix).await? {
            let Some(rest) = key.strip_prefix(&prefix) else {
                continue;
            };
            if rest.contains('/') {
                continue;
            }
            if self.read(&key, POINTER_KIND).await?.live.is_some() {
                found.push(TableIdent::new(namespace.clone(), unquote(rest)));
            }
        }
        Ok(found)
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        let ns = self.get_namespace(namespace).await?;
        let table = TableIdent::new(namespace.clone(), creation.name.clone());
        let location = match &creation.location {
            Some(location) => location.trim_end_matches('/').to_string(),
            None => match ns.properties().get("location") {
                Some(base) => format!("{}/{}", base.trim_end_matches('/'), table.name()),
                None => format!(
                    "{}/{}.db/{}",
                    self.warehouse,
                    Self::namespace_name(namespace)?,
                    table.name()
                ),
            },
        };
        let creation = TableCreation {
            location: Some(location.clone()),
            ..creation
        };
        let key = Self::table_key(&table)?;
        let current = self.read(&key, POINTER_KIND).await?;
        if current.live.is_some() {
            return Err(table_exists(&table));
        }
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(&location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let written = metadata_location.to_string();
        let body = Self::pointer(&table, &written);
        match self.swap_to(&key, current.version.as_ref(), &body).await {
            Ok(true) => {}
            Ok(false) => {
                self.forget(&written).await;
                return Err(table_exists(&table));
            }
            Err(err) => return Err(err),
        }
        Table::builder()
            .identifier(table)
            .metadata(metadata)
            .metadata_location(written)
            .file_io(self.file_io.clone())
            .runtime(self.runtime()?)
            .build()
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let key = Self::table_key(table)?;
        let Some(body) = self.read(&key, POINTER_KIND).await?.live else {
            return Err(table_not_found(table));
        };
        self.load_at(table, &location_of(&body, &key)?).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        let key = Self::table_key(table)?;
        for _ in 0..MAX_REBASES {
            let current = self.read(&key, POINTER_KIND).await?;
            let Some(mut body) = current.live else {
                return Err(table_not_found(table));
            };
            body.remove("nonce");
            body.insert("state".into(), json!(DROPPED));
            if self.swap_to(&key, current.version.as_ref(), &body).await? {
                return Ok(());
            }
        }
        Err(kept_changing(&format!("table {table}")))
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        let loaded = self.load_table(table).await?;
        self.drop_table(table).await?;
        iceberg::drop_table_data(&loaded).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        let key = Self::table_key(table)?;
        Ok(self.read(&key, POINTER_KIND).await?.live.is_some())
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.require_namespace(dest.namespace()).await?;
        let from_key = Self::table_key(src)?;
        let to_key = Self::table_key(dest)?;
        let source_list = Self::identifier_list(src);
        for _ in 0..MAX_REBASES {
            let current = self.read(&from_key, POINTER_KIND).await?;
            let Some(source) = current.live else {
                return Err(table_not_found(src));
            };
            let location = location_of(&source, &from_key)?;
            // 1. The new name points where the old one does, marked as a
            // rename in flight (a rerun after a crash resumes from here).
            let mut target = self.read(&to_key, POINTER_KIND).await?;
            if let Some(body) = &target.live
                && body.get("renamed-from") != Some(&source_list)
            {
                return Err(table_exists(dest));
            }
            let points_there = target
                .live
                .as_ref()
                .and_then(|b| b.get("metadata-location"))
                .and_then(Value::as_str)
                == Some(location.as_str());
            if !points_there {
                let mut body = Self::pointer(dest, &location);
                body.insert("renamed-from".into(), source_list.clone());
                if !self
                    .swap_to(&to_key, target.version.as_ref(), &body)
                    .await?
                {
                    continue;
                }
                target = self.read(&to_key, POINTER_KIND).await?;
            }
            // 2. The old name ends, if it still points where we copied.
            let mut tombstone = source.clone();
            tombstone.remove("nonce");
            tombstone.insert("state".into(), json!(DROPPED));
            tombstone.insert("renamed-to".into(), Self::identifier_list(dest));
            if !self
                .swap_to(&from_key, current.version.as_ref(), &tombstone)
                .await?
            {
                // A commit landed on the old name: copy it again.
                continue;
            }
            // 3. The rename is complete: the mark goes.
            for _ in 0..MAX_REBASES {
                let Some(mut body) = target.live.take() else {
                    break;
                };
                body.remove("renamed-from");
                body.remove("nonce");
                if self
                    .swap_to(&to_key, target.version.as_ref(), &body)
                    .await?
                {
                    break;
                }
                target = self.read(&to_key, POINTER_KIND).await?;
                if target
                    .live
                    .as_ref()
                    .is_none_or(|b| !b.contains_key("renamed-from"))
                {
                    break;
                }
            }
            return Ok(());
        }
        Err(kept_changing(&format!("table {src}")))
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.require_namespace(table.namespace()).await?;
        let key = Self::table_key(table)?;
        let current = self.read(&key, POINTER_KIND).await?;
        if current.live.is_some() {
            return Err(table_exists(table));
        }
        // Refuse a location that is not a table's metadata before pointing
        // at it.
        let loaded = self.load_at(table, &metadata_location).await?;
        let body = Self::pointer(table, &metadata_location);
        if !self.swap_to(&key, current.version.as_ref(), &body).await? {
            return Err(table_exists(table));
        }
        Ok(loaded)
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let table = commit.identifier().clone();
        let key = Self::table_key(&table)?;
        let current = self.read(&key, POINTER_KIND).await?;
        let (Some(pointer), Some(version)) = (current.live, current.version) else {
            return Err(table_not_found(&table));
        };
        let base = self.load_at(&table, &location_of(&pointer, &key)?).await?;
        let base_metadata = base.metadata_ref();
        let staged = commit.apply(base).map_err(|e| {
            // A requirement that no longer holds: another writer committed
            // since the caller loaded the table; reloading settles it.
            if e.kind() == ErrorKind::CatalogCommitConflicts {
                Error::new(ErrorKind::CatalogCommitConflicts, e.to_string()).with_retryable(true)
            } else {
                e
            }
        })?;
        if *staged.metadata() == *base_metadata {
            return self.load_table(&table).await;
        }
        let ours = staged.metadata_location_result()?.to_string();
        staged
            .metadata()
            .write_to(&self.file_io, &MetadataLocation::from_str(&ours)?)
            .await?;
        let body = Self::pointer(&table, &ours);
        match self.commit_swap(&key, &version, &body, &ours).await? {
            Swapped::Ours { .. } => Ok(staged),
            Swapped::Conflict(_) => {
                // None of our writes can land any more: the file is nobody's.
                self.forget(&ours).await;
                Err(conflict(&table))
            }
        }
    }
}
