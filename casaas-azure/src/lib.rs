//! Azure Blob Storage backend for casaas.
//!
//! [`AzureBlobStore`] implements the CAS-object contract
//! ([`casaas_core::CasStore`]) on one container, with blob ETags as
//! versions: create is `If-None-Match: *`, replace and delete are
//! `If-Match: <etag>`. SDK retries are off.
//!
//! - Open by URL: call [`register`] once, then
//!   `casaas_core::open_store("az://ACCOUNT/CONTAINER/PREFIX?endpoint=…")`.
//!   Credentials come from the environment, never from the URL:
//!   `AZURE_STORAGE_CONNECTION_STRING` (including
//!   `UseDevelopmentStorage=true`), `AZURE_STORAGE_KEY` or
//!   `AZURE_STORAGE_SAS_TOKEN`.
//! - Or build with explicit credentials: [`AzureBlobStore::builder`]
//!   with [`AzureCredentials`] (shared key, SAS, Entra ID token).
//! - Errors map to [`casaas_core::ErrorKind`] by the pure function
//!   [`map_failure`]; the HTTP status and Azure error code stay in the error.
//! - [`NativeBlobLease`]: Azure's own blob leases, as an optional second
//!   mechanism. A lease id is not a fencing token.
//! - [`AzureBlobStore::put_block`] and [`AzureBlobStore::put_block_list`]
//!   commit a blob from blocks under a condition: for conformance probes
//!   only, casaas itself writes single Put Blob requests.
//!
//! This crate keeps the Azure SDK (`azure_storage_blobs` 0.21) behind its
//! own small surface; only [`TokenCredential`] is the SDK's.
//!
//! ```no_run
//! # async fn demo() -> Result<(), casaas_core::CasError> {
//! casaas_azure::register();
//! let store = casaas_core::open_store(
//!     "az://devstoreaccount1/locks/app1?endpoint=http://127.0.0.1:10000/devstoreaccount1",
//! )
//! .await?;
//! let version = store.create("leader", "node-1".into()).await?;
//! # Ok(())
//! # }
//! ```

mod config;
pub mod error;
mod lease;
mod store;
mod transport;

use std::sync::Arc;

use casaas_core::provider::StoreFuture;
use casaas_core::{CasStore, StoreUrl};

pub use config::{
    AzureBlobStoreBuilder, AzureConfig, AzureCredentials, CREDENTIAL_VARIABLES,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, DEV_ACCOUNT, DEV_ACCOUNT_KEY, DEV_BLOB_ENDPOINT,
    TokenCredential, URL_OPTIONS,
};
pub use error::{Failure, code_table, map_failure};
pub use lease::{
    NativeBlobLease, NativeLeaseDuration, NativeLeaseError, NativeLeaseId, map_lease_failure,
};
pub use store::AzureBlobStore;

/// The URL scheme this crate registers.
pub const SCHEME: &str = "az";

/// `tracing` filter directives that keep the Azure SDK's request dumps off.
///
/// Its debug and trace events print each signed request whole, with its
/// `Authorization: SharedKey ACCOUNT:SIGNATURE` header. A program that lets
/// its users raise the log level (`RUST_LOG=trace`) adds these directives
/// to its filter after the user's, so they win:
///
/// ```
/// let mut filter = String::from("trace");
/// for cap in casaas_azure::SDK_LOG_CAPS {
///     filter.push(',');
///     filter.push_str(cap);
/// }
/// assert!(filter.ends_with("azure_storage_blobs=info"));
/// ```
pub const SDK_LOG_CAPS: [&str; 3] = [
    "azure_storage=info",
    "azure_core=info",
    "azure_storage_blobs=info",
];

/// Registers the `az://` scheme with [`casaas_core::open_store`].
/// Idempotent.
pub fn register() {
    casaas_core::provider::register_scheme(SCHEME, open);
}

fn open(url: StoreUrl) -> StoreFuture {
    Box::pin(async move {
        // Credentials given beside the URL first, then the environment.
        let store = AzureBlobStore::open_url(&url).await?;
        Ok(Arc::new(store) as Arc<dyn CasStore>)
    })
}

/// The README's example, compiled (and run where it needs no server) as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
