//! Delta Lake commits through casaas.
//!
//! A Delta commit creates `_delta_log/<version>.json` if it is absent. When
//! the store's answer to that create is lost, or is a refusal that may be
//! the store seeing the request twice, delta-rs's own log store takes it
//! for a lost race and commits the same transaction again at the next
//! version: a duplicate that no reader can undo. This crate's
//! [`CasaasLogStore`] writes each commit with casaas's
//! [`CreateOnce`](casaas_core::lease::CreateOnce): a nonce in the commit's
//! `commitInfo`, and every unknown answer settled by reading the entry back.
//! A commit is reported written exactly when it is, as a conflict only when
//! another writer's commit holds the version, and otherwise as an error
//! that says whether it may have landed.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use deltalake_core::kernel::{DataType, PrimitiveType, StructField};
//! use deltalake_core::DeltaTable;
//!
//! // Every table of these schemes now commits through casaas.
//! casaas_delta::register();
//! let dir = tempfile::tempdir()?;
//! let url = url::Url::from_directory_path(dir.path()).map_err(|()| "not a directory")?;
//! let table = DeltaTable::try_from_url(url).await?
//!     .create()
//!     .with_columns([StructField::new("id", DataType::Primitive(PrimitiveType::Long), false)])
//!     .await?;
//! assert_eq!(table.version(), Some(0));
//! assert!(format!("{:?}", table.log_store()).contains("DefaultLogStore"));
//! # Ok(())
//! # }
//! ```
//!
//! Which store the commits go to is a storage option of the table:
//!
//! - without [`STORE_URL_OPTION`], the table's own object store (the one
//!   delta-rs built from the table URL and its options), through casaas's
//!   object_store adapter: nothing else to configure;
//! - `casaas_url=URL` names a casaas store rooted at the table
//!   (`s3://bucket/tables/t1?endpoint=http://127.0.0.1:7480&etag_unquoted=true`,
//!   `az://account/container/t1`, `gs://bucket/t1`, `object_store+...`;
//!   never casaas's own `file://` or `memory://` stores, which delta-rs
//!   cannot read: on a `file://` table leave it out), with the options `casaas.NAME=VALUE` beside it
//!   (`casaas.verify`, `casaas.capability_profile`, `casaas.layout`,
//!   credentials): every provider option, the store guard, capability
//!   profiles and the create-only layout apply.
//!
//! [`Maintenance`] runs one `vacuum`-style job at a time per table, fenced by
//! a lease token.

#![deny(missing_docs)]

mod log_store;
pub mod maintenance;
pub mod nonce;

use std::sync::Arc;

pub use log_store::{
    CasaasLogStore, CasaasLogStoreFactory, CommitStore, OPTION_PREFIX, STORE_URL_OPTION,
    commit_store,
};
pub use maintenance::{
    MAINTENANCE_LEASE_KEY, MAINTENANCE_STEPS_KEY, Maintenance, MaintenanceFence, MaintenanceStep,
};

/// The URL schemes [`register`] installs the log store for: every scheme
/// delta-rs's storage crates open (and `file`, `memory`).
pub const SCHEMES: [&str; 10] = [
    "s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "file", "memory",
];

/// Installs [`CasaasLogStoreFactory`] for every scheme in [`SCHEMES`], in
/// delta-rs's process-wide registry, replacing the log store registered
/// before (delta-rs's default, or the one of `deltalake-aws`'s
/// `register_handlers`: call this after it). The object stores (how the
/// table's data is read and written) stay as registered.
pub fn register() {
    register_for(&SCHEMES);
}

/// [`register`] for the given schemes only.
pub fn register_for(schemes: &[&str]) {
    let factories = deltalake_core::logstore::logstore_factories();
    for scheme in schemes {
        if let Ok(url) = url::Url::parse(&format!("{scheme}://")) {
            factories.insert(url, Arc::new(CasaasLogStoreFactory));
        }
    }
}

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
