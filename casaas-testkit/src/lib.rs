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

pub use chaos_proxy::{ChaosProxy, ProxyError, ProxyFault, ProxyRecord, RandomFaults};
