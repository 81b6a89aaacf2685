//! casaas backend for Google Cloud Storage.
//!
//! [`GcsStore`] implements [`casaas_core::CasStore`] with the official
//! `google-cloud-storage` client. Versions are object generations
//! ([`Version::Generation`]); create-if-absent is `ifGenerationMatch=0` and
//! replace is `ifGenerationMatch=<generation>`.
//!
//! - Writes are single-shot JSON API uploads with `uploadType=multipart`,
//!   whatever the body size: the path on which both GCS and fake-gcs-server
//!   enforce generation preconditions (resumable uploads are always retried
//!   by the client library, and fake-gcs-server ignores preconditions on
//!   them).
//! - The client library never retries: every call has a no-retry policy and
//!   is marked non-idempotent, because a retried conditional write that had
//!   committed comes back 412 and looks like a lost race. Retries belong to
//!   the protocol layer, which resolves [`ErrorKind::Ambiguous`] by reading.
//! - Every call has a deadline (`timeout`, 30 s by default).
//! - Delete and list use the JSON API through this crate's own small HTTP
//!   client: the library offers them only over gRPC, which emulators lack.
//! - GCS sustains about one write per second to one object name; the
//!   capabilities say so ([`Capabilities::min_write_interval`]).
//!
//! Production uses Application Default Credentials. An emulator is named by
//! `?endpoint=` in the URL or by `STORAGE_EMULATOR_HOST`, and then gets
//! anonymous credentials, so nothing ever asks the metadata server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), casaas_core::CasError> {
//! casaas_gcs::register();
//! let store = casaas_core::open_store("gs://my-bucket/locks").await?;
//! // Or, for an emulator, in tests:
//! let store = casaas_gcs::GcsStore::builder("casaas-test")
//!     .prefix("run-1")
//!     .emulator("http://127.0.0.1:4443")
//!     .build()
//!     .await?;
//! # Ok(()) }
//! ```

mod config;
pub mod error;
mod json;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoreFuture, StoredObject, Version,
    validate_key, validate_prefix,
};
use google_cloud_auth::credentials::Credentials;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_storage::client::Storage;
use google_cloud_storage::read_resume_policy::NeverResume;
use url::Url;

pub use config::{Auth, DEFAULT_ENDPOINT, DEFAULT_TIMEOUT, GcsConfig, URL_OPTIONS};
use error::{Failure, Op, Stage, classify, from_sdk};
use json::JsonApi;

/// GCS sustains about one write per second to one object name.
pub const MIN_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// Registers the `gs` scheme with [`casaas_core::open_store`]:
/// `gs://BUCKET/prefix?endpoint=…&anonymous=…&timeout=…&conditional_delete=…`
/// (see [`GcsConfig::from_url`]).
pub fn register() {
    casaas_core::register_scheme("gs", open_url);
}

fn open_url(url: Url) -> StoreFuture {
    Box::pin(async move {
        let emulator = std::env::var("STORAGE_EMULATOR_HOST").ok();
        let config = GcsConfig::from_url(&url, emulator.as_deref())?;
        let store = GcsStore::from_config(config).await?;
        Ok(Arc::new(store) as Arc<dyn CasStore>)
    })
}

/// A [`CasStore`] on one GCS bucket and prefix.
pub struct GcsStore {
    config: GcsConfig,
    client: Storage,
    json: JsonApi,
}

impl fmt::Debug for GcsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config holds no secrets; the credentials are never printed.
        f.debug_struct("GcsStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Builds a [`GcsStore`] with explicit settings (tests, emulators, or code
/// that does not want URLs).
#[derive(Debug, Clone)]
pub struct GcsStoreBuilder {
    config: GcsConfig,
}

impl GcsStoreBuilder {
    /// The object-name prefix under which keys live.
    pub fn prefix(mut self, prefix: impl AsRef<str>) -> Self {
        self.config.prefix = prefix.as_ref().trim_matches('/').to_string();
        self
    }

    /// The endpoint (default `https://storage.googleapis.com`).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.config.endpoint = endpoint.into();
        self
    }

    /// Send no credentials (emulators).
    pub fn anonymous(mut self) -> Self {
        self.config.auth = Auth::Anonymous;
        self
    }

    /// An emulator at `endpoint`, with anonymous credentials.
    pub fn emulator(self, endpoint: impl Into<String>) -> Self {
        self.endpoint(endpoint).anonymous()
    }

    /// The deadline of one request (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// Whether delete is offered (default true). Turn it off for emulators
    /// that ignore `ifGenerationMatch` on DELETE; delete then answers
    /// [`ErrorKind::Unsupported`].
    pub fn conditional_delete(mut self, enabled: bool) -> Self {
        self.config.conditional_delete = enabled;
        self
    }

    /// Checks the settings and creates the clients. Sends no request.
    pub async fn build(self) -> Result<GcsStore, CasError> {
        GcsStore::from_config(self.config).await
    }
}

impl GcsStore {
    /// A builder for `bucket` with production defaults.
    pub fn builder(bucket: impl Into<String>) -> GcsStoreBuilder {
        GcsStoreBuilder {
            config: GcsConfig::new(bucket),
        }
    }

    /// Opens a store from a `gs://` URL (see [`GcsConfig::from_url`]).
    pub async fn open(url: &str) -> Result<Self, CasError> {
        let parsed = Url::parse(url)
            .map_err(|e| CasError::misconfigured(format!("{url:?} is not a valid URL ({e})")))?;
        let emulator = std::env::var("STORAGE_EMULATOR_HOST").ok();
        Self::from_config(GcsConfig::from_url(&parsed, emulator.as_deref())?).await
    }

    /// Creates the clients for `config`. Sends no request.
    pub async fn from_config(mut config: GcsConfig) -> Result<Self, CasError> {
        config::validate_bucket(&config.bucket)?;
        config.endpoint = config::normalize_endpoint(&config.endpoint)?;
        if !config.prefix.is_empty() {
            validate_prefix(&config.prefix)
                .map_err(|e| CasError::misconfigured(format!("bad prefix: {}", e.message())))?;
        }
        let credentials: Credentials = match config.auth {
            Auth::Anonymous => google_cloud_auth::credentials::anonymous::Builder::new().build(),
            Auth::Default => google_cloud_auth::credentials::Builder::default()
                .build()
                .map_err(|e| {
                    CasError::new(
                        ErrorKind::Unauthorized,
                        format!(
                            "no Application Default Credentials: {e}; set \
                             GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth \
                             application-default login`"
                        ),
                    )
                })?,
        };
        let client = Storage::builder()
            .with_endpoint(config.endpoint.clone())
            .with_credentials(credentials.clone())
            .with_retry_policy(NeverRetry)
            .with_resumable_upload_threshold(usize::MAX)
            .build()
            .await
            .map_err(|e| {
                CasError::misconfigured(format!(
                    "cannot create the GCS client for {}: {e}",
                    config.endpoint
                ))
            })?;
        let json = JsonApi::new(
            &config,
            (config.auth == Auth::Default).then_some(credentials),
        )?;
        Ok(GcsStore {
            config,
            client,
            json,
        })
    }

    /// The settings this store was opened with.
    pub fn config(&self) -> &GcsConfig {
        &self.config
    }

    fn generation(&self, key: &str, version: &Version) -> Result<i64, CasError> {
        version.as_generation().ok_or_else(|| {
            CasError::invalid_input(format!(
                "GCS versions are generations; {version:?} came from another backend"
            ))
            .with_key(key)
        })
    }

    /// One conditional single-shot (multipart) upload.
    async fn write(
        &self,
        op: Op,
        key: &str,
        if_generation_match: i64,
        body: Bytes,
    ) -> Result<Version, CasError> {
        validate_key(key)?;
        // The checksum goes in the metadata part, so GCS verifies the body,
        // and the upload has exactly two parts: the library would otherwise
        // append a third (trailing checksums) part, which fake-gcs-server
        // stores as part of the object's bytes.
        let crc = crc32c::crc32c(&body);
        let request = self
            .client
            .write_object(
                self.config.bucket_resource(),
                self.config.object_name(key),
                body,
            )
            .set_if_generation_match(if_generation_match)
            .set_content_type("application/octet-stream")
            .with_known_crc32c(crc)
            // Never retried by the library: a committed write retried would
            // answer 412. Multipart, never resumable (always retried).
            .with_idempotency(false)
            .with_retry_policy(NeverRetry)
            .with_resumable_upload_threshold(usize::MAX);
        let object =
            match tokio::time::timeout(self.config.timeout, request.send_unbuffered()).await {
                Ok(Ok(object)) => object,
                Ok(Err(e)) => return Err(classify(op, &self.config.bucket, key, from_sdk(&e))),
                Err(_) => return Err(self.timed_out(op, key)),
            };
        tracing::debug!(key, generation = object.generation, ?op, "gcs write");
        Ok(Version::Generation(object.generation))
    }

    fn timed_out(&self, op: Op, key: &str) -> CasError {
        classify(
            op,
            &self.config.bucket,
            key,
            Failure::at(
                Stage::TimedOut,
                format!("deadline of {:?} passed", self.config.timeout),
            ),
        )
    }

    async fn read(&self, key: &str) -> Result<(i64, Bytes), google_cloud_storage::Error> {
        let mut response = self
            .client
            .read_object(self.config.bucket_resource(), self.config.object_name(key))
            .with_retry_policy(NeverRetry)
            .with_read_resume_policy(NeverResume)
            .send()
            .await?;
        let generation = response.object().generation;
        let mut body = Vec::new();
        while let Some(chunk) = response.next().await {
            body.extend_from_slice(&chunk?);
        }
        Ok((generation, Bytes::from(body)))
    }
}

#[async_trait]
impl CasStore for GcsStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        validate_key(key)?;
        match tokio::time::timeout(self.config.timeout, self.read(key)).await {
            Ok(Ok((generation, body))) => Ok(Some(StoredObject {
                body,
                version: Version::Generation(generation),
            })),
            Ok(Err(e)) => {
                let err = classify(Op::Get, &self.config.bucket, key, from_sdk(&e));
                if err.kind() == ErrorKind::NotFound {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
            Err(_) => Err(self.timed_out(Op::Get, key)),
        }
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.write(Op::Create, key, 0, body).await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let generation = self.generation(key, expected)?;
        self.write(Op::Replace, key, generation, body).await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        validate_key(key)?;
        let generation = self.generation(key, expected)?;
        if !self.config.conditional_delete {
            return Err(CasError::unsupported(
                "conditional delete is turned off for this store (conditional_delete=false: \
                 the emulator ignores ifGenerationMatch on DELETE)",
            )
            .with_key(key));
        }
        self.json.delete(&self.config, key, generation).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        self.json.list(&self.config, prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities::full()
            .with_min_write_interval(MIN_WRITE_INTERVAL)
            .with_note(
                "writes are JSON API multipart uploads with ifGenerationMatch; the client \
                 library never retries",
            )
            .with_note("GCS sustains about one write per second to one object name")
            .with_note("delete and list use the JSON API (the library offers them over gRPC only)");
        if self.config.conditional_delete {
            caps
        } else {
            caps.without_conditional_delete().with_note(
                "conditional delete turned off by conditional_delete=false (for emulators that \
                 ignore ifGenerationMatch on DELETE)",
            )
        }
    }

    fn describe(&self) -> String {
        let prefix = if self.config.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.config.prefix)
        };
        let mut text = format!("gs://{}/{prefix}", self.config.bucket);
        if self.config.endpoint != DEFAULT_ENDPOINT {
            text.push_str(&format!(" (endpoint {})", self.config.endpoint));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn builds_without_network_and_describes() {
        let store = GcsStore::builder("casaas-test")
            .prefix("/a/b/")
            .emulator("http://127.0.0.1:9")
            .conditional_delete(false)
            .build()
            .await
            .unwrap();
        assert_eq!(
            store.describe(),
            "gs://casaas-test/a/b/ (endpoint http://127.0.0.1:9)"
        );
        let caps = store.capabilities();
        assert!(!caps.conditional_delete);
        assert_eq!(caps.min_write_interval, Some(MIN_WRITE_INTERVAL));
        let err = store
            .delete("k", &Version::Generation(1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        let err = store
            .replace("k", &Version::etag("\"x\""), Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(format!("{store:?}").contains("casaas-test"));
    }

    #[tokio::test]
    async fn refused_connection_is_transport() {
        // Port 9 (discard) on loopback: nothing listens.
        let store = GcsStore::builder("casaas-test")
            .emulator("http://127.0.0.1:9")
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .unwrap();
        let err = store
            .create("k", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
        let err = store.get("k").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
        let err = store.list("").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transport, "{err}");
    }

    #[tokio::test]
    async fn registers_gs() {
        register();
        let err = casaas_core::open_store("gs://BAD/x").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        let store = casaas_core::open_store("gs://casaas-test/p?endpoint=http://127.0.0.1:9")
            .await
            .unwrap();
        assert!(store.describe().starts_with("gs://casaas-test/p/"));
    }
}

/// The README's example, compiled (and run where it needs no server) as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
