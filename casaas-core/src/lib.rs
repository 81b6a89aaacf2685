//! Coordination on object storage.
//!
//! casaas turns the conditional writes that object stores expose (S3
//! `If-Match` / `If-None-Match`, GCS generation preconditions, Azure ETag
//! conditions) into leases, locks, leader election and fenced updates.
//!
//! This crate holds:
//! - the CAS-object contract: [`CasStore`], [`Version`], [`CasError`] and
//!   [`Capabilities`], which every backend implements;
//! - the one way in: [`open_store_with`] (a URL and options given beside
//!   it, credentials among them) and [`open_store`] (a URL alone);
//! - the embedded backends: [`MemoryStore`] (reference semantics) and
//!   [`FileStore`] (a real CAS across processes on one machine);
//! - the protocols built on the contract, in [`lease`]: [`Lease`](lease::Lease),
//!   leader election, the fenced resource and the fenced log.
//!
//! What provider and adapter crates need (URL registration, the error
//! policy, key validation, redaction) is in [`provider`], not here.
//!
//! Test support (the contract suite every backend passes, fault injection,
//! request counting, the lookup of test servers) is behind the `testkit`
//! feature, for dev-dependencies.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), casaas_core::CasError> {
//! use bytes::Bytes;
//!
//! let store = casaas_core::open_store("memory://example/app").await?;
//! let version = store.create("hello", Bytes::from_static(b"world")).await?;
//! let object = store.get("hello").await?.expect("just written");
//! assert_eq!(object.version, version);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod error;
mod failure;
mod file;
pub mod guard;
pub mod layout;
pub mod lease;
mod memory;
pub mod profile;
mod registry;
mod stats;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
mod url;
mod version;

pub use error::{CasError, ErrorKind};
pub use file::FileStore;
pub use memory::MemoryStore;
pub use registry::{open_store, open_store_with};
pub use store::{Capabilities, CasStore, ForwardingStore, ListEntry, StoredObject};
pub use url::StoreUrl;
pub use version::Version;

// Crate-internal shorthands (public under `provider`).
pub(crate) use store::validate_key;
pub(crate) use url::parse_bool;

pub mod provider {
    //! What a provider or adapter crate needs to plug a store into casaas,
    //! and nothing an application needs: the one error policy
    //! ([`classify`] with a provider's [`CodeTable`]), URL registration
    //! ([`register_scheme`], [`register_adapter`]), the parsed URL's options
    //! and redaction helpers, key validation, and the version pair of
    //! stores that name a version two ways.
    //!
    //! ```
    //! use casaas_core::provider::{StoreFuture, register_scheme};
    //! use casaas_core::{StoreUrl, open_store};
    //!
    //! fn open_alias(url: StoreUrl) -> StoreFuture {
    //!     // A scheme that opens the in-memory store under another name.
    //!     Box::pin(async move { open_store(&format!("memory://{}/{}", url.authority(), url.path())).await })
    //! }
    //! register_scheme("doc-alias", open_alias);
    //! assert!(casaas_core::provider::registered_schemes().contains(&"doc-alias".to_string()));
    //! ```

    pub use crate::error::{CodeTable, Delivery, Operation, classify};
    pub use crate::failure::{
        CONDITIONAL_SINGLE_PART_LIMIT, Failure, LARGE_CONDITIONAL_WRITES_OPTION, Stage,
        check_single_part, confirm_refusal,
    };
    pub use crate::registry::{
        AdapterFactory, StoreFactory, StoreFuture, adapter_of, open_store_url, register_adapter,
        register_scheme, registered_schemes, split_adapter,
    };
    // Shared by the conformance probes and the benchmarks so that their
    // figures agree; test support, not API: hidden from the docs and the
    // API listing.
    #[doc(hidden)]
    pub use crate::stats::percentile;
    pub use crate::store::{MAX_KEY_LEN, validate_key, validate_prefix};
    pub use crate::url::{
        REDACTED, UrlOptions, is_secret_name, is_secret_option, parse_bool, parse_duration,
        replace_userinfo, take_bool_option, userinfo,
    };
    pub use crate::version::VersionPair;
}

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
