//! `object_store+URL`: a client built by object_store's own rules.

use std::sync::Arc;

pub use casaas_core::provider::LARGE_CONDITIONAL_WRITES_OPTION;
use casaas_core::provider::{StoreFuture, take_bool_option};
use casaas_core::{CasError, CasStore};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreScheme, RetryConfig};
use url::Url;

use crate::ObjectStoreCas;

/// A casaas option in an `object_store+` URL (with
/// [`LARGE_CONDITIONAL_WRITES_OPTION`]); every other query pair is an
/// object_store configuration key (`aws_endpoint`, `google_base_url`, ...).
pub const RETRIES_OPTION: &str = "retries";

fn misconfigured(url: &str, what: impl std::fmt::Display) -> CasError {
    CasError::misconfigured(format!("object_store+{url}: {what}"))
}

/// Applies each query pair as a configuration key of `$builder`, refusing
/// unknown keys (object_store's `parse_url_opts` would ignore a typo).
macro_rules! configure {
    ($builder:expr, $options:expr, $text:expr) => {{
        let mut builder = $builder;
        for (key, value) in $options {
            let config_key = key.to_ascii_lowercase().parse().map_err(|_| {
                misconfigured(
                    $text,
                    format!("'{key}' is not an object_store configuration key for this scheme"),
                )
            })?;
            builder = builder.with_config(config_key, value.clone());
        }
        builder
    }};
}

/// Opens the store that `object_store+<inner>` names.
///
/// `inner` is any URL object_store's `ObjectStoreScheme` knows (`s3://`,
/// `gs://`, `az://`/`abfs://`, `file://`, `memory://`, `http(s)://`). The
/// client starts from the library's environment conventions
/// (`AmazonS3Builder::from_env`, `GoogleCloudStorageBuilder::from_env`,
/// `MicrosoftAzureBuilder::from_env`), then takes the URL and each query
/// pair as a configuration key. `retries=N` sets object_store's maximum
/// retries (`retries=0` turns them off, and with them the confirming read
/// after a refused write); `large_conditional_writes=true` sends conditional
/// writes above the single-part limit (set by a capability profile that
/// proves the store's multipart conditions; see
/// [`allow_large_conditional_writes`](ObjectStoreCas::allow_large_conditional_writes)).
/// The URL path is the casaas prefix.
pub async fn open(inner: &str) -> Result<Arc<dyn CasStore>, CasError> {
    open_with(inner, Vec::new()).await
}

/// [`open`], with configuration keys `given` beside the URL (credentials
/// such as `aws_secret_access_key`, which never go in a URL), applied
/// after the URL's own.
pub async fn open_with(
    inner: &str,
    given: Vec<(String, String)>,
) -> Result<Arc<dyn CasStore>, CasError> {
    let mut url = Url::parse(inner).map_err(|e| {
        misconfigured(
            inner,
            format!("not a URL ({e}); expected e.g. object_store+s3://bucket/prefix"),
        )
    })?;
    let mut options: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    options.extend(given);
    url.set_query(None);
    let large_conditional_writes = take_bool_option(
        &mut options,
        LARGE_CONDITIONAL_WRITES_OPTION,
        &format!("object_store+{inner}"),
    )?;
    let retries = match options.iter().position(|(k, _)| k == RETRIES_OPTION) {
        Some(at) => {
            let (_, value) = options.remove(at);
            Some(value.parse::<usize>().map_err(|_| {
                misconfigured(inner, format!("retries must be a number, not {value:?}"))
            })?)
        }
        None => None,
    };
    let retry_config = retries.map(|max_retries| RetryConfig {
        max_retries,
        ..Default::default()
    });
    let (scheme, path) = ObjectStoreScheme::parse(&url).map_err(|e| misconfigured(inner, e))?;
    let mut conditional_put = true;
    // The endpoint the client resolved (from the URL, its options and the
    // environment `from_env` read): part of the store's identity.
    let mut location = None;
    let local = matches!(scheme, ObjectStoreScheme::Memory | ObjectStoreScheme::Local);
    if local && (!options.is_empty() || retries.is_some()) {
        return Err(misconfigured(
            inner,
            "memory:// and file:// URLs take no options",
        ));
    }
    let client: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::Memory => Arc::new(InMemory::new()),
        ObjectStoreScheme::Local => Arc::new(LocalFileSystem::new()),
        ObjectStoreScheme::AmazonS3 => {
            let mut builder = configure!(
                AmazonS3Builder::from_env().with_url(url.as_str()),
                &options,
                inner
            );
            if let Some(retry) = retry_config {
                builder = builder.with_retry(retry);
            }
            conditional_put = builder
                .get_config_value(&AmazonS3ConfigKey::ConditionalPut)
                .is_none_or(|v| v != S3ConditionalPut::Disabled.to_string());
            let region = builder
                .get_config_value(&AmazonS3ConfigKey::Region)
                .unwrap_or_else(|| "us-east-1".to_string());
            location = Some(
                builder
                    .get_config_value(&AmazonS3ConfigKey::Endpoint)
                    .unwrap_or_else(|| format!("AWS S3 ({region})")),
            );
            Arc::new(builder.build().map_err(|e| misconfigured(inner, e))?)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let mut builder = configure!(
                GoogleCloudStorageBuilder::from_env().with_url(url.as_str()),
                &options,
                inner
            );
            location = builder.get_config_value(&GoogleConfigKey::BaseUrl);
            if let Some(retry) = retry_config {
                builder = builder.with_retry(retry);
            }
            Arc::new(builder.build().map_err(|e| misconfigured(inner, e))?)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let mut builder = configure!(
                MicrosoftAzureBuilder::from_env().with_url(url.as_str()),
                &options,
                inner
            );
            location = match builder.get_config_value(&AzureConfigKey::UseEmulator) {
                // The emulator's address comes from the environment.
                Some(on) if on == "true" => Some(format!(
                    "Azurite at {}",
                    std::env::var("AZURITE_BLOB_STORAGE_URL")
                        .unwrap_or_else(|_| "http://127.0.0.1:10000".to_string())
                )),
                _ => builder.get_config_value(&AzureConfigKey::Endpoint),
            };
            if let Some(retry) = retry_config {
                builder = builder.with_retry(retry);
            }
            Arc::new(builder.build().map_err(|e| misconfigured(inner, e))?)
        }
        ObjectStoreScheme::Http => {
            let base = &url[..url::Position::BeforePath];
            let mut builder = configure!(HttpBuilder::new().with_url(base), &options, inner);
            if let Some(retry) = retry_config {
                builder = builder.with_retry(retry);
            }
            Arc::new(builder.build().map_err(|e| misconfigured(inner, e))?)
        }
        other => {
            return Err(misconfigured(
                inner,
                format!("object_store scheme {other:?} is not supported"),
            ));
        }
    };
    let prefix = path
        .parts()
        .map(|part| {
            percent_encoding::percent_decode_str(part.as_ref())
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect::<Vec<_>>()
        .join("/");
    let mut store = ObjectStoreCas::new(client, prefix)?;
    if let Some(location) = location {
        store = store.with_location(location);
    }
    let store = store
        .conditional_put(conditional_put)
        .client_retries(retries != Some(0))
        .allow_large_conditional_writes(large_conditional_writes.unwrap_or(false));
    Ok(Arc::new(store))
}

pub(crate) fn open_adapter(inner: String, given: Vec<(String, String)>) -> StoreFuture {
    Box::pin(async move { open_with(&inner, given).await })
}
