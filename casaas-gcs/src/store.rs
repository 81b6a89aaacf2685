//! [`GcsStore`]: the CAS-object contract on GCS generation preconditions.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::provider::{Operation, validate_key, validate_prefix};
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoreUrl, StoredObject, Version,
};
use google_cloud_auth::credentials::Credentials;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_storage::client::Storage;
use google_cloud_storage::read_resume_policy::NeverResume;

use crate::config::{self, Auth, DEFAULT_ENDPOINT, GcsConfig, GcsStoreBuilder};
use crate::error::{Failure, Stage, from_sdk, map_failure};
use crate::json::JsonApi;

/// GCS sustains about one write per second to one object name.
pub const MIN_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// A [`CasStore`] on one GCS bucket and prefix. Clones share the clients.
#[derive(Clone)]
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

impl GcsStore {
    /// A builder for `bucket` with production defaults.
    pub fn builder(bucket: impl Into<String>) -> GcsStoreBuilder {
        GcsStoreBuilder::new(bucket)
    }

    /// Opens a store from a `gs://` URL (see [`GcsConfig::from_url`]).
    pub async fn open(url: &str) -> Result<Self, CasError> {
        Self::open_url(&StoreUrl::parse(url)?).await
    }

    /// Opens a store from a `gs://` URL with `options` given beside it (any
    /// option the URL's query takes; credentials are Application Default
    /// Credentials, or none with `anonymous=true`).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), casaas_core::CasError> {
    /// let store = casaas_gcs::GcsStore::open_with(
    ///     "gs://locks/app1",
    ///     [("endpoint", "http://127.0.0.1:4443"), ("anonymous", "true")],
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

    /// Opens a store from a parsed `gs://` URL; `STORAGE_EMULATOR_HOST`
    /// names the endpoint when the URL gives none.
    pub async fn open_url(url: &StoreUrl) -> Result<Self, CasError> {
        let emulator = std::env::var("STORAGE_EMULATOR_HOST").ok();
        Self::from_config(GcsConfig::from_url(url, emulator.as_deref())?).await
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

    /// Composes the objects `sources` (keys of this store), in order, into
    /// `destination` (JSON API `compose`): under `ifGenerationMatch=0` when
    /// `expected` is `None`, under `ifGenerationMatch=<generation>`
    /// otherwise, as [`create`](CasStore::create) and
    /// [`replace`](CasStore::replace) do. Returns the new generation.
    ///
    /// For conformance probes, which check how the service treats
    /// preconditions on a composed object; casaas itself uploads single
    /// objects only. Not retried; a refusal maps to the same [`ErrorKind`]
    /// as a refused create or replace.
    pub async fn compose(
        &self,
        sources: &[&str],
        destination: &str,
        expected: Option<&Version>,
    ) -> Result<Version, CasError> {
        validate_key(destination)?;
        for source in sources {
            validate_key(source)?;
        }
        let generation = match expected {
            None => 0,
            Some(version) => self.generation(destination, version)?,
        };
        self.json
            .compose(&self.config, sources, destination, generation)
            .await
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
        op: Operation,
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
                Ok(Err(e)) => return Err(map_failure(op, &self.config.bucket, key, from_sdk(&e))),
                Err(_) => return Err(self.timed_out(op, key)),
            };
        tracing::debug!(key, generation = object.generation, ?op, "gcs write");
        Ok(Version::Generation(object.generation))
    }

    fn timed_out(&self, op: Operation, key: &str) -> CasError {
        map_failure(
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
            Ok(Ok((generation, body))) => Ok(Some(StoredObject::new(
                body,
                Version::Generation(generation),
            ))),
            Ok(Err(e)) => {
                let err = map_failure(Operation::Get, &self.config.bucket, key, from_sdk(&e));
                if err.kind() == ErrorKind::NotFound {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
            Err(_) => Err(self.timed_out(Operation::Get, key)),
        }
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.write(Operation::Create, key, 0, body).await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let generation = self.generation(key, expected)?;
        self.write(Operation::Replace, key, generation, body).await
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
    async fn open_with_takes_options_beside_the_url() {
        let store = GcsStore::open_with(
            "gs://casaas-test/app",
            [("endpoint", "http://127.0.0.1:9"), ("anonymous", "true")],
        )
        .await
        .unwrap();
        assert_eq!(store.config().endpoint, "http://127.0.0.1:9");
        assert_eq!(store.config().auth, Auth::Anonymous);
        assert_eq!(store.config().prefix, "app");
        let err = GcsStore::open_with("gs://casaas-test/app", [("endpoitn", "x")])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unknown option"), "{err}");
    }

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
    async fn refused_connection_is_not_sent() {
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
        assert_eq!(err.kind(), ErrorKind::NotSent, "{err}");
        let err = store.get("k").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotSent, "{err}");
        let err = store.list("").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotSent, "{err}");
    }

    #[tokio::test]
    async fn registers_gs() {
        crate::register();
        let err = casaas_core::open_store("gs://BAD/x").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured);
        let store = casaas_core::open_store("gs://casaas-test/p?endpoint=http://127.0.0.1:9")
            .await
            .unwrap();
        assert!(store.describe().starts_with("gs://casaas-test/p/"));
    }
}
