//! casaas on Amazon S3 and S3-compatible stores.
//!
//! [`S3Store`] implements [`casaas_core::CasStore`] with `aws-sdk-s3`:
//! create is PutObject with `If-None-Match: *`, replace is PutObject with
//! `If-Match`, delete is DeleteObject with `If-Match`, versions are ETags
//! kept verbatim. SDK retries are off: a transport retry of a conditional
//! write can turn one's own success into a 412, so retries live in the
//! protocol layer, which can tell.
//!
//! Stores are named by URL:
//!
//! ```text
//! s3://bucket/prefix?region=eu-west-1
//! s3://bucket/prefix?endpoint=http://127.0.0.1:9000&path_style=true&region=us-east-1
//! ```
//!
//! Options: `endpoint`, `region`, `profile`, `path_style`, `connect_timeout`
//! and `timeout` (seconds), the vendor quirks `etag_unquoted`,
//! `conditional_delete`, `versioned_bucket`, and the vendor dialects of
//! conditional writes `forbid_overwrite=oss|cos`, `tigris_consistent`,
//! `gcs_interop` (see `docs/providers/s3.md`).
//! Credentials never go in the URL: they come from the AWS chain
//! (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, SSO, roles),
//! or from [`S3StoreBuilder::static_credentials`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), casaas_core::CasError> {
//! casaas_s3::register();
//! let store = casaas_core::open_store("s3://my-bucket/locks?region=eu-west-1").await?;
//! println!("{}", store.describe());
//! # Ok(())
//! # }
//! ```

mod clock;
mod config;
mod dialect;
pub mod error;
mod store;

use std::sync::Arc;

use casaas_core::provider::StoreFuture;
use casaas_core::{CasStore, StoreUrl};

pub use clock::ServerDate;
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, ForbidOverwrite, S3Config, S3Quirks, S3StoreBuilder,
    URL_OPTIONS,
};
pub use store::S3Store;

/// Registers the `s3://` scheme with [`casaas_core::open_store`]. Stores
/// opened this way take credentials from the AWS chain. Idempotent.
pub fn register() {
    casaas_core::provider::register_scheme("s3", open_url);
}

fn open_url(url: StoreUrl) -> StoreFuture {
    Box::pin(async move {
        let store = S3Store::open_url(&url).await?;
        Ok(Arc::new(store) as Arc<dyn CasStore>)
    })
}

/// The README's example, compiled (and run where it needs no server) as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
