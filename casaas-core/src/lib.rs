//! Coordination on object storage.
//!
//! casaas turns the conditional writes that object stores expose (S3
//! `If-Match` / `If-None-Match`, GCS generation preconditions, Azure ETag
//! conditions) into leases, locks, leader election and fenced updates.
//!
//! This crate holds:
//! - the CAS-object contract: [`CasStore`], [`Version`], [`CasError`] and
//!   [`Capabilities`], which every backend implements;
//! - backends chosen by URL at run time: [`open_store`], [`register_scheme`];
//! - the embedded backends: [`MemoryStore`] (reference semantics) and
//!   [`FileStore`] (a real CAS across processes on one machine);
//! - the protocols built on the contract, in [`lease`]: [`Lease`](lease::Lease),
//!   leader election, the fenced resource and the fenced log.
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
pub mod lease;
mod memory;
pub mod profile;
mod registry;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
mod url;
mod version;

pub use error::{CasError, CodeTable, Delivery, ErrorKind, Operation, classify};
pub use failure::{Failure, Stage, confirm_refusal};
pub use file::FileStore;
pub use memory::MemoryStore;
pub use registry::{
    AdapterFactory, StoreFactory, StoreFuture, adapter_of, open_store, open_store_url,
    open_store_with, register_adapter, register_scheme, registered_schemes,
};
pub use store::{
    Capabilities, CasStore, ForwardingStore, ListEntry, MAX_KEY_LEN, StoredObject, validate_key,
    validate_prefix,
};
pub use url::{
    REDACTED, StoreUrl, UrlOptions, is_secret_name, is_secret_option, parse_bool, replace_userinfo,
    userinfo,
};
pub use version::{Version, VersionPair};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
