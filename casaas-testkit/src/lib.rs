//! Test support for casaas, kept out of the shipped libraries.
//!
//! - [`chaos_proxy`]: a fault-injecting HTTP proxy that sits between a
//!   provider crate and a real server on loopback, to test how each provider
//!   classifies real transport faults (may a failed write have taken
//!   effect, or was nothing sent?).
//! - [`chaos`]: the torture run's events and its independent checker (the
//!   `chaos` binary runs workers, kills and freezes them, then checks).

#![deny(missing_docs)]

pub mod chaos;
pub mod chaos_proxy;

use std::collections::BTreeMap;
use std::sync::Arc;

use casaas_core::CasStore;

pub use chaos_proxy::{ChaosProxy, ProxyError, ProxyFault, ProxyRecord, RandomFaults};

/// Opens the store at `url` with the credentials of `env` (a test server's
/// env file, read with `casaas_core::testkit::server_env`) given beside it,
/// instead of the process environment: the one way in,
/// [`casaas_core::open_store_with`].
pub async fn open_with_env(
    url: &str,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<Arc<dyn CasStore>> {
    casaas_s3::register();
    casaas_gcs::register();
    casaas_azure::register();
    let options = casaas_core::testkit::server_env::credential_options(env);
    Ok(casaas_core::open_store_with(url, options).await?)
}
