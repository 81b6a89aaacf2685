//! Test support, behind the `testkit` feature and not part of the
//! library's API: the [`contract`] suite every backend passes, the lookup of
//! the real servers that `cargo xtask servers up` starts ([`server_env`],
//! which owns their env-file format), and wrappers that inject faults into
//! ([`FaultyStore`]) or count the requests of ([`CountingStore`]) any
//! backend.
//!
//! Enable it where tests need it:
//!
//! ```toml
//! [dev-dependencies]
//! casaas-core = { version = "0.1", features = ["testkit"] }
//! ```

pub mod contract;
mod counting_store;
mod create_only;
mod faulty_store;
pub mod server_env;

pub use counting_store::{CountingStore, RequestCounts};
pub use create_only::CreateOnlyStore;
pub use faulty_store::{Fault, FaultConfig, FaultCounts, FaultyStore};
pub use server_env::{TestServer, test_server, unique_prefix};

/// Runs the [store guard](crate::guard) on `store` now, so that the
/// requests a test scripts, injects faults into or counts afterwards are
/// the protocol's alone (the guard runs once per store per process, before
/// the first write).
pub async fn pass_store_guard(store: &dyn crate::CasStore) -> Result<(), crate::CasError> {
    crate::guard::StoreGuard::new().ensure(store).await
}
