//! casaas backend for Google Cloud Storage.
//!
//! [`GcsStore`] implements [`casaas_core::CasStore`] with the official
//! `google-cloud-storage` client. Versions are object generations
//! ([`casaas_core::Version::Generation`]); create-if-absent is `ifGenerationMatch=0` and
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
//!   the protocol layer, which resolves [`casaas_core::ErrorKind::Ambiguous`] by reading.
//! - Every call has a deadline (`timeout`, 30 s by default).
//! - Delete and list use the JSON API through this crate's own small HTTP
//!   client: the library offers them only over gRPC, which emulators lack.
//!   So does [`GcsStore::compose`], which only conformance probes use.
//! - GCS sustains about one write per second to one object name; the
//!   capabilities say so ([`casaas_core::Capabilities::min_write_interval`]).
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
mod store;

use std::sync::Arc;

use casaas_core::provider::StoreFuture;
use casaas_core::{CasStore, StoreUrl};

pub use config::{
    Auth, DEFAULT_ENDPOINT, DEFAULT_TIMEOUT, GcsConfig, GcsStoreBuilder, URL_OPTIONS,
};
pub use store::{GcsStore, MIN_WRITE_INTERVAL};

/// Registers the `gs` scheme with [`casaas_core::open_store`]:
/// `gs://BUCKET/prefix?endpoint=…&anonymous=…&timeout=…&conditional_delete=…`
/// (see [`GcsConfig::from_url`]).
pub fn register() {
    casaas_core::provider::register_scheme("gs", open_url);
}

fn open_url(url: StoreUrl) -> StoreFuture {
    Box::pin(async move {
        let store = GcsStore::open_url(&url).await?;
        Ok(Arc::new(store) as Arc<dyn CasStore>)
    })
}

/// The README's example, compiled (and run where it needs no server) as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
