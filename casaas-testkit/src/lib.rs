//! Test support for casaas, kept out of the shipped libraries.
//!
//! - [`chaos_proxy`]: a fault-injecting HTTP proxy that sits between a
//!   provider crate and a real server on loopback, to test how each provider
//!   classifies real transport faults (may a failed write have taken
//!   effect, or was nothing sent?).
//! - [`chaos`]: the torture run's events and its independent checker (the
//!   `chaos` binary runs workers, kills and freezes them, then checks).

#![deny(missing_docs)]

pub mod chaos;
pub mod chaos_proxy;

use std::collections::BTreeMap;
use std::sync::Arc;

use casaas_core::CasStore;

pub use chaos_proxy::{ChaosProxy, ProxyError, ProxyFault, ProxyRecord, RandomFaults};

/// Opens the store at `url` with the credentials of `env` (a test server's
/// env file, read with `casaas_core::testkit::server_env`) where the
/// provider needs them, instead of the process environment: S3 with the
/// file's static keys, Azure with the file's account key or SAS, anything
/// else through [`casaas_core::open_store`].
pub async fn open_with_env(
    url: &str,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<Arc<dyn CasStore>> {
    if url.starts_with("s3://") {
        let (Some(key), Some(secret)) = (
            env.get("AWS_ACCESS_KEY_ID"),
            env.get("AWS_SECRET_ACCESS_KEY"),
        ) else {
            anyhow::bail!(
                "the env file gives no AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for {url}"
            );
        };
        let store = casaas_s3::S3Store::builder()
            .url(url)?
            .static_credentials(key, secret)
            .build()
            .await?;
        return Ok(Arc::new(store));
    }
    if url.starts_with("az://") {
        let store = casaas_azure::AzureBlobStoreBuilder::from_url_with_env(url, |name| {
            env.get(name).cloned()
        })?
        .build()
        .await?;
        return Ok(Arc::new(store));
    }
    Ok(casaas_core::open_store(url).await?)
}
