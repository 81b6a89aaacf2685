//! casaas over an [`object_store`] client: the CAS-object contract
//! ([`casaas_core::CasStore`]) on the `Arc<dyn ObjectStore>` a table format
//! (delta-rs, SlateDB, Lance, DataFusion) already holds, so leases, fenced
//! logs and elections need no second client for the same bucket.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use casaas_core::lease::FencedLog;
//! use casaas_object_store::ObjectStoreCas;
//!
//! // The client the application already has.
//! let client: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
//! let store = Arc::new(ObjectStoreCas::new(client, "tables/t1")?);
//! let log = FencedLog::<String>::new(store, "_commits")?;
//! assert_eq!(log.append(1, "add part-0001.parquet".into()).await?.seq, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # What the adapter cannot do
//!
//! - No conditional delete (object_store has none): `delete` answers
//!   `Unsupported` and [`Capabilities::conditional_delete`] is false, so
//!   released leases are overwritten rather than removed.
//! - `LocalFileSystem` and `HttpStore` cannot replace conditionally (no
//!   `PutMode::Update`); neither can an S3 client built with
//!   `S3ConditionalPut::Disabled`. [`CasStore::capabilities`] says so, and the
//!   conformance suite reports it; such a store can still create-if-absent
//!   (`LocalFileSystem`), which is enough for Delta-style commit files.
//! - object_store retries conditional puts itself: see
//!   [`ObjectStoreCas`] for how a refusal that may hide our own write is
//!   reported, and build the client with `RetryConfig { max_retries: 0, .. }`
//!   plus [`ObjectStoreCas::client_retries(false)`](ObjectStoreCas::client_retries)
//!   to save the confirming read.
//!
//! # Versions
//!
//! This crate is built against object_store 0.14 ([`OBJECT_STORE_VERSION`]);
//! the client handed to [`ObjectStoreCas::new`] must come from the same
//! release line (a 0.13 `Arc<dyn ObjectStore>` is a different type). For
//! applications on object_store 0.13 (DataFusion, delta-rs), the cargo
//! feature `object_store_0_13` adds `v0_13::ObjectStoreCas`: the same
//! adapter compiled against 0.13, taking a 0.13 `Arc<dyn ObjectStore>`. The
//! `object_store+` URLs ([`register`]) always build 0.14 clients.
//! docs/adapters.md describes the version policy.
//!
//! # URLs
//!
//! After [`register`], `casaas_core::open_store("object_store+s3://bucket/prefix")`
//! builds the client with object_store's own URL parsing and environment
//! conventions (see [`url::open`]).
//!
//! [`Capabilities::conditional_delete`]: casaas_core::Capabilities::conditional_delete
//! [`CasStore::capabilities`]: casaas_core::CasStore::capabilities

#![deny(missing_docs)]

// The adapter (`error.rs`, `store.rs`, `version.rs`) names object_store only
// as `os`, so that `v0_13` compiles the same files against 0.13.
use object_store as os;

mod error;
mod store;
pub mod url;
#[cfg(feature = "object_store_0_13")]
pub mod v0_13;
mod version;

pub use casaas_core::provider::CONDITIONAL_SINGLE_PART_LIMIT;
pub use store::ObjectStoreCas;
pub use version::ObjectVersion;

/// The first lines of the adapter's doc examples, naming this line's types.
macro_rules! doc_imports {
    () => {
        "use casaas_object_store::ObjectStoreCas;\nuse object_store as os;"
    };
}
use doc_imports;

/// The object_store release line this crate is built against.
pub const OBJECT_STORE_VERSION: &str = "0.14";

/// Registers the `object_store+` adapter with [`casaas_core::open_store`],
/// e.g. `object_store+s3://bucket/prefix?aws_endpoint=...`. Idempotent.
pub fn register() {
    casaas_core::provider::register_adapter("object_store", url::open_adapter);
}

/// The README's example, compiled (and run where it needs no server) as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
