//! [`AzureBlobStore`]: the CAS-object contract on Azure Blob Storage.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use azure_core::request_options::IfMatchCondition;
use azure_core::{RetryOptions, TransportOptions};
use azure_storage::CloudLocation;
use azure_storage_blobs::prelude::{
    BlobBlockType, BlobClient, BlockList, ClientBuilder, ContainerClient,
};
use bytes::Bytes;
use casaas_core::provider::{validate_key, validate_prefix};
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoreUrl, StoredObject, Version,
};
use futures::StreamExt;

use crate::config::{AzureBlobStoreBuilder, AzureConfig};
use casaas_core::provider::Operation;

use crate::error::{Failure, map_failure};
use crate::transport::Transport;

/// How often a read restarts when the blob changes between its chunks
/// (only blobs larger than one 16 MiB chunk are read in several requests).
const READ_ATTEMPTS: usize = 3;

/// A [`CasStore`] on one container of an Azure storage account (or Azurite),
/// with keys under an optional prefix.
///
/// Versions are the blob ETags, kept verbatim with their quotes. Create is
/// `If-None-Match: *`, replace and delete are `If-Match: <etag>`. The SDK's
/// retries are off: a retried conditional write can turn one's own success
/// into a precondition failure, so retries belong to the protocol layer.
///
/// ```no_run
/// # async fn demo() -> Result<(), casaas_core::CasError> {
/// use casaas_azure::{AzureBlobStore, AzureCredentials};
/// use casaas_core::CasStore;
///
/// let store = AzureBlobStore::builder("devstoreaccount1", "locks")
///     .endpoint("http://127.0.0.1:10000/devstoreaccount1")
///     .credentials(AzureCredentials::SharedKey(casaas_azure::DEV_ACCOUNT_KEY.into()))
///     .create_container(true)
///     .build()
///     .await?;
/// let v1 = store.create("leader", "me".into()).await?;
/// store.replace("leader", &v1, "still me".into()).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AzureBlobStore {
    container: ContainerClient,
    container_name: String,
    account: String,
    /// `""` or `"some/prefix/"`.
    prefix: String,
    /// The endpoint, which never carries credentials (checked at build).
    endpoint: String,
    credential_kind: &'static str,
    config: AzureConfig,
}

impl fmt::Debug for AzureBlobStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureBlobStore")
            .field("account", &self.account)
            .field("container", &self.container_name)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("credentials", &self.credential_kind)
            .finish()
    }
}

impl AzureBlobStore {
    /// A builder for container `container` of storage account `account`.
    pub fn builder(
        account: impl Into<String>,
        container: impl Into<String>,
    ) -> AzureBlobStoreBuilder {
        AzureBlobStoreBuilder::new(account, container)
    }

    /// Opens the store an `az://` URL names, with credentials from the
    /// environment (see [`AzureBlobStoreBuilder::from_url_with_env`]).
    pub async fn from_url(url: &str) -> Result<Self, CasError> {
        AzureBlobStoreBuilder::from_url(url)?.build().await
    }

    /// Opens the store an `az://account/container/prefix?…` URL names, with
    /// credentials from the environment: the same word as
    /// `S3Store::open` and `GcsStore::open`.
    pub async fn open(url: &str) -> Result<Self, CasError> {
        Self::open_url(&StoreUrl::parse(url)?).await
    }

    /// Opens the store an `az://` URL names, with `options` given beside
    /// the URL: credentials under the lowercase names of
    /// [`CREDENTIAL_VARIABLES`](crate::CREDENTIAL_VARIABLES) (the
    /// environment decides when none is given) and any option the URL's
    /// query takes.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), casaas_core::CasError> {
    /// let store = casaas_azure::AzureBlobStore::open_with(
    ///     "az://devstoreaccount1/locks/app1?endpoint=http://127.0.0.1:10000/devstoreaccount1",
    ///     [("azure_storage_key", casaas_azure::DEV_ACCOUNT_KEY)],
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_with<I, K, V>(url: &str, options: I) -> Result<Self, CasError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        Self::open_url(&StoreUrl::parse(url)?.with_given_options(options)?).await
    }

    /// Opens the store a parsed `az://` URL names, with the credentials
    /// given beside it ([`StoreUrl::with_given_options`]: the lowercase
    /// names of [`CREDENTIAL_VARIABLES`](crate::CREDENTIAL_VARIABLES)), else
    /// from the environment.
    pub async fn open_url(url: &StoreUrl) -> Result<Self, CasError> {
        AzureBlobStoreBuilder::from_store_url(url, |name| url.credential(name))?
            .build()
            .await
    }

    pub(crate) fn from_builder(builder: AzureBlobStoreBuilder) -> Result<Self, CasError> {
        builder.check()?;
        let credentials = builder.credentials.as_ref().ok_or_else(|| {
            CasError::misconfigured(
                "no credentials given; use .credentials(...) (shared key, SAS, token) or \
                 AzureCredentials::Anonymous for public containers",
            )
        })?;
        let sdk_credentials = credentials.to_sdk(&builder.config.account)?;
        let endpoint = builder.endpoint_url()?;
        let transport = Transport::new(builder.config.timeout, builder.config.connect_timeout)
            .map_err(|f| map_failure(Operation::Get, &f, &builder.config.container))?;
        let location = CloudLocation::Custom {
            account: builder.config.account.clone(),
            uri: endpoint.as_str().trim_end_matches('/').to_string(),
        };
        let container = ClientBuilder::with_location(location, sdk_credentials)
            .retry(RetryOptions::none())
            .transport(TransportOptions::new(Arc::new(transport)))
            .container_client(builder.config.container.clone());
        let prefix = if builder.config.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", builder.config.prefix.trim_end_matches('/'))
        };
        let config = builder.config.clone();
        Ok(AzureBlobStore {
            config,
            container,
            container_name: builder.config.container,
            account: builder.config.account,
            prefix,
            endpoint: endpoint.as_str().trim_end_matches('/').to_string(),
            credential_kind: credentials.kind(),
        })
    }

    /// Creates the container if it does not exist yet.
    pub async fn ensure_container(&self) -> Result<(), CasError> {
        match self.container.create().await {
            Ok(_) => {
                tracing::info!(container = %self.container_name, "created container");
                Ok(())
            }
            Err(e) => {
                let failure = Failure::from_sdk(&e);
                if failure.code() == Some("ContainerAlreadyExists") {
                    Ok(())
                } else {
                    Err(map_failure(
                        Operation::CreateBucket,
                        &failure,
                        &self.container_name,
                    ))
                }
            }
        }
    }

    /// The settings the store was built with (no secrets).
    pub fn config(&self) -> &AzureConfig {
        &self.config
    }

    /// The storage account.
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The container.
    pub fn container(&self) -> &str {
        &self.container_name
    }

    /// The prefix keys live under (`""` or ending with `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Stages one block of blob `key` (Put Block), uncommitted until a
    /// [`put_block_list`](Self::put_block_list) names it.
    ///
    /// For conformance probes, which check how the service treats
    /// conditions on a blob committed from blocks; casaas itself writes
    /// single Put Blob requests only. Not retried.
    pub async fn put_block(&self, key: &str, block_id: &[u8], body: Bytes) -> Result<(), CasError> {
        validate_key(key)?;
        self.blob(key)
            .put_block(Bytes::copy_from_slice(block_id), body)
            .await
            .map(|_| ())
            .map_err(|e| self.error(Operation::Create, key, &e))
    }

    /// Commits the staged blocks `block_ids`, in order, as the content of
    /// blob `key` (Put Block List): under `If-None-Match: *` when
    /// `expected` is `None`, under `If-Match: <etag>` otherwise, as
    /// [`create`](CasStore::create) and [`replace`](CasStore::replace) do.
    /// Returns the new ETag.
    ///
    /// For conformance probes only (see [`put_block`](Self::put_block)).
    /// Not retried; a refusal maps to the same [`ErrorKind`] as a refused
    /// create or replace.
    pub async fn put_block_list(
        &self,
        key: &str,
        block_ids: &[&[u8]],
        expected: Option<&Version>,
    ) -> Result<Version, CasError> {
        validate_key(key)?;
        let (op, condition) = match expected {
            None => (
                Operation::Create,
                IfMatchCondition::NotMatch("*".to_string()),
            ),
            Some(version) => (
                Operation::Replace,
                IfMatchCondition::Match(self.etag_of(key, version)?.to_string()),
            ),
        };
        let blocks = BlockList {
            blocks: block_ids
                .iter()
                .map(|id| BlobBlockType::new_latest(Bytes::copy_from_slice(id)))
                .collect(),
        };
        match self
            .blob(key)
            .put_block_list(blocks)
            .content_type("application/octet-stream")
            .if_match(condition)
            .await
        {
            Ok(answer) => Ok(Version::etag(normalize_etag(&answer.etag))),
            Err(e) => Err(self.error(op, key, &e)),
        }
    }

    pub(crate) fn blob(&self, key: &str) -> BlobClient {
        self.container.blob_client(format!("{}{key}", self.prefix))
    }

    pub(crate) fn error(&self, op: Operation, key: &str, e: &azure_core::Error) -> CasError {
        let failure = Failure::from_sdk(e);
        tracing::debug!(?op, key, %failure, "azure request failed");
        map_failure(op, &failure, &self.container_name).with_key(key)
    }

    /// One read attempt: `Ok(None)` when absent, `Err(None)` when the blob
    /// changed between chunks (read again).
    async fn read_once(&self, key: &str) -> Result<Option<StoredObject>, Option<CasError>> {
        let blob = self.blob(key);
        let mut stream = blob.get().into_stream();
        let mut body = Vec::new();
        let mut etag: Option<String> = None;
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    let failure = Failure::from_sdk(&e);
                    return match (failure.http_status(), failure.code()) {
                        (Some(404), Some("BlobNotFound") | None) if etag.is_none() => Ok(None),
                        // A ranged read of an empty blob answers 416
                        // InvalidRange: the blob is there and empty.
                        (Some(416), _) if etag.is_none() => self.read_empty(key).await,
                        _ => Err(Some(self.error(Operation::Get, key, &e))),
                    };
                }
            };
            let tag = normalize_etag(chunk.blob.properties.etag.as_ref());
            match &etag {
                None => etag = Some(tag),
                Some(first) if *first != tag => return Err(None),
                Some(_) => {}
            }
            let data = chunk
                .data
                .collect()
                .await
                .map_err(|e| Some(self.error(Operation::Get, key, &e)))?;
            body.extend_from_slice(&data);
        }
        match etag {
            Some(etag) => Ok(Some(StoredObject::new(
                Bytes::from(body),
                Version::etag(etag),
            ))),
            None => Err(Some(
                CasError::new(ErrorKind::Ambiguous, "the service sent no answer to a read")
                    .with_key(key),
            )),
        }
    }

    /// The blob's properties, when a ranged read said it is empty.
    async fn read_empty(&self, key: &str) -> Result<Option<StoredObject>, Option<CasError>> {
        match self.blob(key).get_properties().await {
            Ok(props) if props.blob.properties.content_length == 0 => Ok(Some(StoredObject::new(
                Bytes::new(),
                Version::etag(normalize_etag(props.blob.properties.etag.as_ref())),
            ))),
            // Rewritten with content since: read again.
            Ok(_) => Err(None),
            Err(e) => {
                let failure = Failure::from_sdk(&e);
                if failure.http_status() == Some(404) && failure.code() != Some("ContainerNotFound")
                {
                    Ok(None)
                } else {
                    Err(Some(self.error(Operation::Get, key, &e)))
                }
            }
        }
    }

    fn etag_of<'v>(&self, key: &str, version: &'v Version) -> Result<&'v str, CasError> {
        version.as_etag().ok_or_else(|| {
            CasError::invalid_input(format!(
                "{version:?} is not an Azure version (an ETag); versions come from this store"
            ))
            .with_key(key)
        })
    }

    async fn put(
        &self,
        op: Operation,
        key: &str,
        condition: IfMatchCondition,
        body: Bytes,
    ) -> Result<Version, CasError> {
        validate_key(key)?;
        let result = self
            .blob(key)
            .put_block_blob(body)
            .content_type("application/octet-stream")
            .if_match(condition)
            .await;
        match result {
            Ok(answer) => Ok(Version::etag(normalize_etag(&answer.etag))),
            Err(e) => Err(self.error(op, key, &e)),
        }
    }
}

/// ETags as headers carry them (quoted). Listings carry them bare on Azure.
fn normalize_etag(etag: &str) -> String {
    if etag.starts_with('"') || etag.starts_with("W/") {
        etag.to_string()
    } else {
        format!("\"{etag}\"")
    }
}

#[async_trait]
impl CasStore for AzureBlobStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        validate_key(key)?;
        for _ in 0..READ_ATTEMPTS {
            match self.read_once(key).await {
                Ok(found) => return Ok(found),
                Err(Some(e)) => return Err(e),
                Err(None) => continue,
            }
        }
        Err(CasError::new(
            ErrorKind::ConcurrentRequest,
            "the blob kept changing while it was being read",
        )
        .with_key(key))
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.put(
            Operation::Create,
            key,
            IfMatchCondition::NotMatch("*".to_string()),
            body,
        )
        .await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let etag = self.etag_of(key, expected)?;
        self.put(
            Operation::Replace,
            key,
            IfMatchCondition::Match(etag.to_string()),
            body,
        )
        .await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        validate_key(key)?;
        let etag = self.etag_of(key, expected)?;
        self.blob(key)
            .delete()
            .if_match(IfMatchCondition::Match(etag.to_string()))
            .await
            .map(|_| ())
            .map_err(|e| self.error(Operation::Delete, key, &e))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        let full = format!("{}{prefix}", self.prefix);
        let mut builder = self.container.list_blobs();
        if !full.is_empty() {
            builder = builder.prefix(full.clone());
        }
        let mut pages = builder.into_stream();
        let mut entries = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.error(Operation::List, prefix, &e))?;
            for blob in page.blobs.blobs() {
                if let Some(key) = blob.name.strip_prefix(&self.prefix) {
                    entries.push(ListEntry::new(
                        key,
                        Version::etag(normalize_etag(blob.properties.etag.as_ref())),
                    ));
                }
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full().with_note(
            "a losing create is 412 on Azure and 409 BlobAlreadyExists on Azurite; both map to \
             precondition failed",
        )
    }

    fn describe(&self) -> String {
        format!(
            "az://{}/{}/{} (endpoint {}, {})",
            self.account, self.container_name, self.prefix, self.endpoint, self.credential_kind
        )
    }

    async fn create_bucket(&self) -> Result<(), CasError> {
        self.ensure_container().await
    }
}

impl AzureBlobStoreBuilder {
    /// Builds the store; with [`create_container(true)`](Self::create_container)
    /// also creates the container if missing (one request).
    pub async fn build(self) -> Result<AzureBlobStore, CasError> {
        let create = self.config.create_container;
        let store = AzureBlobStore::from_builder(self)?;
        if create {
            store.ensure_container().await?;
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_quoted() {
        assert_eq!(normalize_etag("0x8D1"), "\"0x8D1\"");
        assert_eq!(normalize_etag("\"0x8D1\""), "\"0x8D1\"");
    }
}
