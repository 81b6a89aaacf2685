//! casaas over an [OpenDAL](opendal) [`Operator`](opendal::Operator): the
//! CAS-object contract ([`casaas_core::CasStore`]) on the operator a table
//! format or engine (iceberg-rust, Databend) already holds, so leases,
//! fenced logs and elections need no second client for the same bucket.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use casaas_core::CasStore;
//! use casaas_opendal::OpendalCas;
//!
//! // The operator the application already has.
//! let op = opendal::Operator::new(opendal::services::Memory::default())?;
//! let store = Arc::new(OpendalCas::new(op, "warehouse/db/t1/metadata")?);
//! store.create("v1.metadata.json", Bytes::from_static(b"{}")).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # What the adapter cannot do
//!
//! Capabilities are exactly what OpenDAL advertises for the service
//! (`op.info().capability()`), so they differ per backend:
//!
//! - S3, Azure Blob: create-if-absent, replace (`if_match`), conditional
//!   delete (`if_match`).
//! - GCS: create-if-absent, replace and delete on the generation
//!   (`if_version_match`).
//! - `fs`, `memory`: create-if-absent only — enough for Delta-style commit
//!   files, not for leases (`casaas_core::lease::Lease::new` refuses such a store).
//!
//! Reads cost a `stat` plus a conditional read (one request for a direct
//! provider), so that body and version always belong to the same write.
//!
//! # Versions
//!
//! Built against OpenDAL 0.59 ([`OPENDAL_VERSION`]); the operator handed to
//! [`OpendalCas::new`] must come from the same release line. Only the
//! services `memory`, `s3`, `gcs`, `azblob` and `fs` are enabled here; an
//! application enabling more on its own `opendal` dependency gets them too
//! (features unify), with capabilities read the same way.
//!
//! This crate enables OpenDAL without `auto-register-services`; an
//! application whose `opendal` dependency keeps the default features has its
//! HTTP transport installed at start-up, others call `opendal::install_default()`
//! (or install their own transport) before the first request.
//!
//! # URLs
//!
//! After [`register`], `casaas_core::open_store("opendal+s3://bucket/root?region=...")`
//! builds the operator with OpenDAL's `Operator::from_uri` (see [`url::open`]).

#![deny(missing_docs)]

mod error;
mod store;
pub mod url;
mod version;

pub use casaas_core::provider::CONDITIONAL_SINGLE_PART_LIMIT;
pub use store::OpendalCas;
pub use version::ObjectVersion;

/// The OpenDAL release line this crate is built against.
pub const OPENDAL_VERSION: &str = "0.59";

/// Registers the `opendal+` adapter with [`casaas_core::open_store`], e.g.
/// `opendal+s3://bucket/root?endpoint=...&region=...`. Idempotent.
pub fn register() {
    casaas_core::provider::register_adapter("opendal", url::open_adapter);
}

/// The README's example, compiled (and run where it needs no server) as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
