//! Test support for casaas, kept out of the shipped libraries.
//!
//! - [`chaos_proxy`]: a fault-injecting HTTP proxy that sits between a
//!   provider crate and a real server on loopback, to test how each provider
//!   classifies real transport faults (may a failed write have taken
//!   effect, or was nothing sent?).

#![deny(missing_docs)]

pub mod chaos_proxy;

pub use chaos_proxy::{ChaosProxy, ProxyError, ProxyFault, ProxyRecord, RandomFaults};
