//! Unifies the features of casaas's dependencies across its workspace.
//!
//! It has no code: its `Cargo.toml` depends on every dependency whose
//! features would otherwise differ between `cargo build -p casaas`,
//! `-p casaas-conformance` and `--workspace`, with the union of their
//! features, and every workspace member but `casaas-core` depends on it.
//! So switching between those builds compiles only the binaries.
