//! Leases, locks, leader election and fenced writes on object storage: the
//! one crate to depend on.
//!
//! casaas turns the conditional writes of object stores (S3 `If-Match` /
//! `If-None-Match`, GCS generation preconditions, Azure ETag conditions)
//! into coordination. This crate is the library to depend on: it opens a
//! store from a URL with [`open_store`] or [`open_store_with`] (options and
//! credentials given beside the URL) and re-exports the lease API. The
//! providers compiled in are chosen with features, and registered on first
//! use; no registration call is ever needed:
//!
//! | feature | opens |
//! |---|---|
//! | (always) | `memory://NAME/prefix`, `file:///abs/dir` |
//! | `s3` | `s3://bucket/prefix?region=…` (Amazon S3 and S3-compatible stores) |
//! | `gcs` | `gs://bucket/prefix` |
//! | `azure` | `az://account/container/prefix` |
//! | `object-store` | `object_store+URL`, through the `object_store` client |
//! | `opendal` | `opendal+URL`, through an OpenDAL operator |
//!
//! A URL whose provider is not compiled in is refused with an error that
//! names the feature to turn on.
//!
//! ```toml
//! [dependencies]
//! casaas = { version = "0.1", default-features = false, features = ["s3"] }
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use casaas::{Lease, LeaseConfig, WaitOptions};
//!
//! let store = casaas::open_store("memory://crate-doc/locks").await?;
//! let lease = Lease::new(store, "nightly", "worker-1", LeaseConfig::from_ttl(Duration::from_secs(10)))?;
//! let held = lease.acquire(WaitOptions::default().with_deadline(Duration::from_secs(5))).await?;
//! // ... work, passing held.token() to every fenced write ...
//! held.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! A dropped guard is refused at compile time under
//! `deny(unused_must_use)`: the guard is the lease, and dropping it gives
//! the lease up at once. The guard type's own `#[must_use]` decides here,
//! after `?` or `unwrap()` have taken the `Result` apart:
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! # async fn f(lease: casaas::Lease) {
//! lease.acquire(casaas::WaitOptions::default()).await.unwrap();
//! # }
//! # fn main() {}
//! ```
//!
//! while the same call, bound to a name, compiles:
//!
//! ```no_run
//! #![deny(unused_must_use)]
//! # async fn f(lease: casaas::Lease) {
//! let held = lease.acquire(casaas::WaitOptions::default()).await.unwrap();
//! held.release().await.unwrap();
//! # }
//! # fn main() {}
//! ```
//!
//! One example per task, each runnable against the embedded stores
//! (`cargo run -p casaas --example NAME`): `hold_lock`, `elect_leader`,
//! `fence_writes`, `fenced_log`, `open_with_credentials`, and `leader` (a
//! leader committing through a fenced pointer). The provider crates
//! (`casaas-s3`, `casaas-gcs`, `casaas-azure`, `casaas-object-store`,
//! `casaas-opendal`) remain for a user who picks one by hand; their
//! builders are re-exported here under the provider's feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

use std::sync::{Arc, Once};

pub use casaas_core::lease::{
    AcquireOutcome, Election, ElectionRunner, ExpiryMode, Fenced, FencedLog, FencedResource,
    Health, HealthCheck, HeldBy, Leader, Leadership, Lease, LeaseConfig, LeaseError, LeaseGuard,
    LeaseStatus, LockEntry, LockListing, LockState, LogEntry, LostReason, RetryPolicy, WaitOptions,
    default_owner_id, list_locks,
};
pub use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, FileStore, ListEntry, MemoryStore, StoreUrl,
    StoredObject, Version, guard, lease, profile,
};

/// Cancels a waiting acquisition or a campaign (from `tokio-util`).
pub use tokio_util::sync::CancellationToken;

/// The S3 provider (`s3://`), for its builder and options.
#[cfg(feature = "s3")]
pub use casaas_s3 as s3;

/// The Google Cloud Storage provider (`gs://`).
#[cfg(feature = "gcs")]
pub use casaas_gcs as gcs;

/// The Azure Blob Storage provider (`az://`).
#[cfg(feature = "azure")]
pub use casaas_azure as azure;

/// The adapter over an `object_store` client (`object_store+URL`).
#[cfg(feature = "object-store")]
pub use casaas_object_store as object_store;

/// The adapter over an OpenDAL operator (`opendal+URL`).
#[cfg(feature = "opendal")]
pub use casaas_opendal as opendal;

/// Opens the store a URL names (see [`open_store_with`]), with no options
/// beside it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas::CasError> {
/// let store = casaas::open_store("memory://open-doc/app").await?;
/// assert_eq!(store.describe(), "memory://open-doc/app/");
/// # Ok(())
/// # }
/// ```
pub async fn open_store(url: &str) -> Result<Arc<dyn CasStore>, CasError> {
    open_store_with(url, std::iter::empty::<(&str, &str)>()).await
}

/// Opens the store a URL names, with `options` given beside the URL:
/// credentials (under the lowercase names of the provider's environment
/// variables: `aws_access_key_id`, `aws_secret_access_key`,
/// `aws_session_token`, `azure_storage_key`, `azure_storage_sas_token`,
/// `azure_storage_connection_string`) and any option the URL's query takes.
/// Credentials never go in the URL; one not given is read from the
/// environment.
///
/// The providers this build has features for are registered on the first
/// call. A URL whose provider is not compiled in is refused with
/// [`ErrorKind::Misconfigured`] naming the feature.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas::CasError> {
/// let store = casaas::open_store_with("memory://open-doc/with", [("verify", "true")]).await?;
/// assert_eq!(store.describe(), "memory://open-doc/with/");
/// let err = casaas::open_store_with("memory://open-doc/with", [("regoin", "x")])
///     .await
///     .unwrap_err();
/// assert!(err.to_string().contains("unknown option 'regoin'"), "{err}");
/// # Ok(())
/// # }
/// ```
pub async fn open_store_with<I, K, V>(url: &str, options: I) -> Result<Arc<dyn CasStore>, CasError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    register_providers();
    if let Some(feature) = missing_feature(url, ENABLED) {
        return Err(CasError::misconfigured(format!(
            "{url_kind} needs casaas's `{feature}` feature, which this build lacks: \
             depend on casaas with features = [\"{feature}\"]",
            url_kind = scheme_label(url)
        )));
    }
    casaas_core::open_store_with(url, options).await
}

/// Each provider feature and the URL scheme (or `NAME+` adapter name) it
/// opens.
const PROVIDERS: [(&str, &str); 5] = [
    ("s3", "s3"),
    ("gcs", "gs"),
    ("azure", "az"),
    ("object-store", "object_store+"),
    ("opendal", "opendal+"),
];

/// The provider features this build has.
const ENABLED: &[&str] = &[
    #[cfg(feature = "s3")]
    "s3",
    #[cfg(feature = "gcs")]
    "gcs",
    #[cfg(feature = "azure")]
    "azure",
    #[cfg(feature = "object-store")]
    "object-store",
    #[cfg(feature = "opendal")]
    "opendal",
];

/// Registers every compiled-in provider and adapter with the core's URL
/// registry, once per process. [`open_store`] and [`open_store_with`] call
/// it; only code that opens stores through `casaas_core` directly needs it.
pub fn register_providers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(feature = "s3")]
        casaas_s3::register();
        #[cfg(feature = "gcs")]
        casaas_gcs::register();
        #[cfg(feature = "azure")]
        casaas_azure::register();
        #[cfg(feature = "object-store")]
        casaas_object_store::register();
        #[cfg(feature = "opendal")]
        casaas_opendal::register();
    });
}

/// The scheme of `url` as a person would name it: `s3://` or `opendal+URL`.
fn scheme_label(url: &str) -> String {
    let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
    match scheme.split_once('+') {
        Some((adapter, _)) => format!("{adapter}+URL"),
        None => format!("{scheme}://"),
    }
}

/// The feature that opens `url`, if casaas knows it and it is not among
/// `enabled`.
fn missing_feature(url: &str, enabled: &[&str]) -> Option<&'static str> {
    let scheme = url.split_once(':')?.0.to_ascii_lowercase();
    PROVIDERS
        .iter()
        .find(|(_, opens)| match opens.strip_suffix('+') {
            Some(adapter) => scheme.split_once('+').is_some_and(|(a, _)| a == adapter),
            None => scheme == *opens,
        })
        .map(|(feature, _)| *feature)
        .filter(|feature| !enabled.contains(feature))
}

/// The crate README's code, compiled (and run, unless marked `no_run`) as
/// doctests; the workspace's README and docs are compiled by the unpublished
/// casaas-docs crate, since a published crate cannot reach them.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadme;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheme_without_its_feature_names_the_feature() {
        assert_eq!(missing_feature("s3://b/p", &[]), Some("s3"));
        assert_eq!(missing_feature("S3://b/p", &["gcs"]), Some("s3"));
        assert_eq!(missing_feature("s3://b/p", &["s3"]), None);
        assert_eq!(missing_feature("gs://b/p", &["s3"]), Some("gcs"));
        assert_eq!(missing_feature("az://a/c/p", &[]), Some("azure"));
        assert_eq!(
            missing_feature("object_store+s3://b/p", &["s3"]),
            Some("object-store")
        );
        assert_eq!(missing_feature("opendal+s3://b/p", &[]), Some("opendal"));
        assert_eq!(missing_feature("memory://x/p", &[]), None);
        assert_eq!(missing_feature("file:///tmp/x", &[]), None);
        assert_eq!(missing_feature("ftp://x/p", &[]), None);
        assert_eq!(scheme_label("opendal+s3://b"), "opendal+URL");
        assert_eq!(scheme_label("gs://b"), "gs://");
    }

    #[tokio::test]
    async fn every_enabled_provider_opens_without_a_register_call() {
        // Tests build with every provider (casaas's dev-dependency on
        // itself turns them on). The core registry knows them
        // after the first open, with no register() call here.
        let store = open_store("memory://facade-test/p").await.unwrap();
        assert_eq!(store.describe(), "memory://facade-test/p/");
        let schemes = casaas_core::provider::registered_schemes();
        for (feature, opens) in PROVIDERS {
            if ENABLED.contains(&feature) {
                assert!(schemes.iter().any(|s| s == opens), "{feature}: {schemes:?}");
            }
        }
        // An unknown scheme is still the core's error.
        let err = open_store("ftp://host/x").await.unwrap_err();
        assert!(
            err.to_string().contains("no backend for scheme 'ftp'"),
            "{err}"
        );
    }
}
