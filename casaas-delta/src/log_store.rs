//! The log store: delta-rs's commit protocol with each `_delta_log` entry
//! created exactly once through casaas.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::lease::{CreateOnce, Created, LeaseError};
use casaas_core::provider::{REDACTED, is_secret_option};
use casaas_object_store::v0_13::ObjectStoreCas;
use deltalake_core::kernel::Version;
use deltalake_core::kernel::transaction::TransactionError;
use deltalake_core::logstore::object_store::ObjectStoreExt;
use deltalake_core::logstore::{
    CommitOrBytes, LogStore, LogStoreConfig, LogStoreFactory, ObjectStoreRef, StorageConfig,
    commit_uri_from_version, get_latest_version, read_commit_entry,
};
use deltalake_core::{DeltaResult, DeltaTableError, ObjectStore};
use tokio::sync::OnceCell;
use url::Url;
use uuid::Uuid;

use crate::nonce::{nonce_of, with_nonce};

/// The storage option naming the casaas store URL that commits go to
/// (the table's root: `s3://bucket/tables/t1?endpoint=...`,
/// `object_store+gs://...`; not casaas's `file://` or `memory://` stores,
/// refused by [`CommitStore::check`]). Without it, commits go through the
/// object store delta-rs built for the table, adapted.
pub const STORE_URL_OPTION: &str = "casaas_url";

/// The prefix of storage options given to casaas's store beside
/// [`STORE_URL_OPTION`], with the prefix removed: `casaas.etag_unquoted`,
/// `casaas.verify`, `casaas.capability_profile`, `casaas.layout`,
/// `casaas.aws_access_key_id`, ...
pub const OPTION_PREFIX: &str = "casaas.";

/// Credentials shared with casaas's store when given unprefixed (the object
/// store already reads them under these names), by the scheme of
/// [`STORE_URL_OPTION`]; a prefixed one wins.
const SHARED_CREDENTIALS: [(&str, &str); 6] = [
    ("s3", "aws_access_key_id"),
    ("s3", "aws_secret_access_key"),
    ("s3", "aws_session_token"),
    ("az", "azure_storage_key"),
    ("az", "azure_storage_sas_token"),
    ("az", "azure_storage_connection_string"),
];

/// Where a log store's commits go. Its `Debug` shows no credential.
#[derive(Clone)]
#[non_exhaustive]
pub enum CommitStore {
    /// A casaas store URL with its options (opened at the first commit).
    Url {
        /// The store URL, rooted at the table.
        url: String,
        /// Options beside it (credentials among them).
        options: Vec<(String, String)>,
    },
    /// The object store delta-rs built for the table, through casaas's
    /// object_store adapter.
    Adapter,
    /// A store the caller opened, rooted at the table.
    Store(Arc<dyn CasStore>),
}

impl std::fmt::Debug for CommitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitStore::Url { url, options } => {
                let shown: Vec<(&str, &str)> = options
                    .iter()
                    .map(|(name, value)| {
                        let value = if is_secret_option(name, value) {
                            REDACTED
                        } else {
                            value.as_str()
                        };
                        (name.as_str(), value)
                    })
                    .collect();
                f.debug_struct("Url")
                    .field("url", &shown_url(url))
                    .field("options", &shown)
                    .finish()
            }
            CommitStore::Adapter => f.write_str("Adapter"),
            CommitStore::Store(store) => f.debug_tuple("Store").field(&store.describe()).finish(),
        }
    }
}

/// A casaas URL as logs may show it: parsed and redacted, or not at all.
fn shown_url(url: &str) -> String {
    match casaas_core::provider::split_adapter(url) {
        Some((name, _)) => format!("{name}+[a URL for the adapter]"),
        None => casaas_core::StoreUrl::parse(url).map_or_else(
            |_| "[an unparsable casaas URL]".to_string(),
            |u| u.to_string(),
        ),
    }
}

impl CommitStore {
    /// Reads the commit store from a table's storage options: the
    /// [`STORE_URL_OPTION`] and its [`OPTION_PREFIX`]ed options, or the
    /// adapter without one.
    pub fn from_options(options: &HashMap<String, String>) -> Self {
        let Some(url) = options.get(STORE_URL_OPTION) else {
            return CommitStore::Adapter;
        };
        let scheme = url.split_once("://").map_or("", |(s, _)| s);
        let mut given: Vec<(String, String)> = options
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(OPTION_PREFIX)?.to_string(), v.clone())))
            .collect();
        for (for_scheme, name) in SHARED_CREDENTIALS {
            if scheme == for_scheme
                && !given.iter().any(|(k, _)| k == name)
                && let Some(value) = options.get(name)
            {
                given.push((name.to_string(), value.clone()));
            }
        }
        given.sort();
        CommitStore::Url {
            url: url.clone(),
            options: given,
        }
    }
}

impl CommitStore {
    /// Refuses a store URL that delta-rs could not read the commits from:
    /// a misspelt URL, or casaas's own `file://` and `memory://` stores,
    /// which keep objects in their own format or process (on a `file://`
    /// table, leave [`STORE_URL_OPTION`] out: the commits then go through
    /// casaas to the table's own files).
    pub fn check(&self) -> Result<(), casaas_core::CasError> {
        let CommitStore::Url { url, .. } = self else {
            return Ok(());
        };
        // An adapter's URL is its library's to parse.
        if casaas_core::provider::split_adapter(url).is_some() {
            return Ok(());
        }
        let parsed = casaas_core::StoreUrl::parse(url).map_err(|e| {
            casaas_core::CasError::misconfigured(format!("{STORE_URL_OPTION}: {e}"))
        })?;
        if matches!(parsed.scheme(), "file" | "memory") {
            return Err(casaas_core::CasError::misconfigured(format!(
                "{STORE_URL_OPTION}={parsed}: casaas's {scheme}:// store keeps objects in a \
                 format of its own, where delta-rs cannot read the commits; leave \
                 {STORE_URL_OPTION} out, and the commits go through casaas to the table's \
                 own files",
                scheme = parsed.scheme()
            )));
        }
        Ok(())
    }
}

/// A delta-rs [`LogStore`] whose commits are casaas [`CreateOnce`] writes.
///
/// Reads (the log, checkpoints, data) go through the table's object store
/// as with any log store. A commit of version `v` creates
/// `_delta_log/<v>.json` if absent, carrying a nonce in its `commitInfo`;
/// an answer that is lost or that may be the store seeing the request
/// twice is settled by reading the entry back, so that delta-rs hears:
///
/// - `Ok` only when the entry holds this commit;
/// - [`TransactionError::VersionAlreadyExists`] only when another writer's
///   commit holds it (delta-rs then checks conflicts and tries `v + 1`);
/// - [`TransactionError::LogStoreError`] otherwise, whose message says
///   whether the commit may have landed (casaas
///   [`ErrorKind::Ambiguous`](casaas_core::ErrorKind::Ambiguous)). Such a
///   commit may still land later, so
///   committing it again is safe only for a transaction that is idempotent
///   at the table level (an application transaction, whose version the
///   table records); reading the table now cannot rule a late landing out.
pub struct CasaasLogStore {
    prefixed_store: ObjectStoreRef,
    root_store: ObjectStoreRef,
    config: LogStoreConfig,
    source: CommitStore,
    writer: OnceCell<CreateOnce>,
}

impl std::fmt::Debug for CasaasLogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            CommitStore::Url { url, .. } => shown_url(url),
            CommitStore::Adapter => "the table's object store".to_string(),
            CommitStore::Store(store) => store.describe(),
        };
        f.debug_struct("CasaasLogStore")
            .field("location", self.config.location())
            .field("commits", &source)
            .finish()
    }
}

impl CasaasLogStore {
    /// The log store of the table at `location`, whose object stores delta-rs
    /// built (`prefixed_store` rooted at the table, `root_store` at the
    /// bucket), committing through `source`.
    pub fn new(
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
        source: CommitStore,
    ) -> Self {
        CasaasLogStore {
            prefixed_store,
            root_store,
            config: LogStoreConfig::new(location, options.clone()),
            source,
            writer: OnceCell::new(),
        }
    }

    /// Opens the commit store now (it is otherwise opened at the first
    /// commit), so that a wrong URL, option or credential, or a store that
    /// fails the store guard, is an error here.
    pub async fn open(&self) -> Result<&CreateOnce, LeaseError> {
        self.writer
            .get_or_try_init(|| async {
                let store =
                    open_commit_store(&self.source, &self.prefixed_store, self.config.location())
                        .await?;
                Ok(CreateOnce::new(store))
            })
            .await
    }

    /// The store the commits go to (opened if it was not yet), rooted at
    /// the table: for [`Maintenance`](crate::Maintenance), or to inspect.
    pub async fn commit_store(&self) -> Result<Arc<dyn CasStore>, LeaseError> {
        Ok(self.open().await?.store().clone())
    }

    async fn create_commit(&self, version: Version, commit: &[u8]) -> Result<(), TransactionError> {
        let writer = self.open().await.map_err(|e| commit_error(version, e))?;
        let key = commit_uri_from_version(Some(version)).to_string();
        let body = |nonce: &str| {
            with_nonce(commit, nonce).map_err(|e| {
                LeaseError::Store(casaas_core::CasError::invalid_input(format!(
                    "commit of version {version}: {e}"
                )))
            })
        };
        match writer.create(&key, body, nonce_of).await {
            Ok(Created::Ours(_)) => Ok(()),
            Ok(Created::Taken(_)) => Err(TransactionError::VersionAlreadyExists(version)),
            Err(err) => Err(commit_error(version, err)),
        }
    }
}

/// Opens the store `source` names for the table at `location`, whose
/// object store (rooted at the table) is `prefixed_store`.
async fn open_commit_store(
    source: &CommitStore,
    prefixed_store: &ObjectStoreRef,
    location: &Url,
) -> Result<Arc<dyn CasStore>, LeaseError> {
    source.check()?;
    Ok(match source {
        CommitStore::Url { url, options } => {
            casaas::open_store_with(url, options.iter().cloned()).await?
        }
        CommitStore::Adapter => {
            let adapter = ObjectStoreCas::new(prefixed_store.clone(), "")?;
            // delta-rs's prefix wrapper hides the client's kind, by which
            // the adapter knows that a local filesystem has no conditional
            // replace.
            let local = location.scheme() == "file";
            Arc::new(adapter.conditional_replace(!local))
        }
        CommitStore::Store(store) => store.clone(),
    })
}

/// The commit store of `table` as its storage options name it (see
/// [`CommitStore::from_options`]), rooted at the table: where
/// [`Maintenance`](crate::Maintenance) keeps its lease. A table whose log
/// store was built with [`CommitStore::Store`] has that store instead, which
/// its caller holds.
pub async fn commit_store(
    table: &deltalake_core::DeltaTable,
) -> Result<Arc<dyn CasStore>, LeaseError> {
    let log_store = table.log_store();
    let config = log_store.config();
    let source = CommitStore::from_options(&config.options().raw);
    open_commit_store(&source, &log_store.object_store(None), config.location()).await
}

fn commit_error(version: Version, err: LeaseError) -> TransactionError {
    let ambiguous = err.may_have_taken_effect();
    let msg = if ambiguous {
        format!(
            "the commit of version {version} may or may not have landed, and may still land \
             ({err}); commit the transaction again only if it is idempotent at the table \
             level (an application transaction, CommitProperties::with_application_transaction, \
             whose version the table records), since reading the table now cannot prove it \
             will not land later"
        )
    } else {
        format!("the commit of version {version} was not written: {err}")
    };
    TransactionError::LogStoreError {
        msg,
        source: Box::new(err),
    }
}

#[async_trait::async_trait]
impl LogStore for CasaasLogStore {
    /// delta-rs 1.1 hands the commit's bytes only to log stores of this name
    /// (conditional-put stores); any other name costs every commit a
    /// temporary object, written, read back and deleted.
    fn name(&self) -> String {
        "DefaultLogStore".into()
    }

    async fn read_commit_entry(&self, version: Version) -> DeltaResult<Option<Bytes>> {
        read_commit_entry(self.prefixed_store.as_ref(), version).await
    }

    async fn write_commit_entry(
        &self,
        version: Version,
        commit_or_bytes: CommitOrBytes,
        _operation_id: Uuid,
    ) -> Result<(), TransactionError> {
        match commit_or_bytes {
            CommitOrBytes::LogBytes(bytes) => self.create_commit(version, &bytes).await,
            CommitOrBytes::TmpCommit(path) => {
                let bytes = self
                    .prefixed_store
                    .get(&path)
                    .await
                    .map_err(TransactionError::from)?
                    .bytes()
                    .await
                    .map_err(TransactionError::from)?;
                self.create_commit(version, &bytes).await?;
                // Best effort: the temporary object is not part of the table.
                if let Err(err) = self.prefixed_store.delete(&path).await {
                    tracing::warn!(%path, %err, "could not delete a temporary commit object");
                }
                Ok(())
            }
        }
    }

    async fn abort_commit_entry(
        &self,
        _version: Version,
        commit_or_bytes: CommitOrBytes,
        _operation_id: Uuid,
    ) -> Result<(), TransactionError> {
        if let CommitOrBytes::TmpCommit(path) = commit_or_bytes {
            self.prefixed_store
                .delete(&path)
                .await
                .map_err(TransactionError::from)?;
        }
        Ok(())
    }

    async fn get_latest_version(&self, current_version: Version) -> DeltaResult<Version> {
        get_latest_version(self, current_version).await
    }

    fn object_store(&self, _operation_id: Option<Uuid>) -> Arc<dyn ObjectStore> {
        self.prefixed_store.clone()
    }

    fn root_object_store(&self, _operation_id: Option<Uuid>) -> Arc<dyn ObjectStore> {
        self.root_store.clone()
    }

    fn config(&self) -> &LogStoreConfig {
        &self.config
    }
}

/// The [`LogStoreFactory`] that [`register`](crate::register) installs:
/// every table of its schemes gets a [`CasaasLogStore`], committing to the
/// store its options name ([`CommitStore::from_options`]).
#[derive(Debug, Clone, Default)]
pub struct CasaasLogStoreFactory;

impl LogStoreFactory for CasaasLogStoreFactory {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        let source = CommitStore::from_options(&options.raw);
        source
            .check()
            .map_err(|e| DeltaTableError::Generic(e.to_string()))?;
        Ok(Arc::new(CasaasLogStore::new(
            prefixed_store,
            root_store,
            location,
            options,
            source,
        )))
    }
}
