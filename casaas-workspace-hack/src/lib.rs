//! Unifies the features of casaas's dependencies across its workspace.
//!
//! It has no code: its `Cargo.toml`, written by `cargo hakari generate`,
//! depends on every dependency whose features would otherwise differ
//! between `cargo build -p casaas-cli`, `-p casaas-conformance` and
//! `--workspace`, with the union of their features, and the workspace's
//! crates with binaries and tests depend on it (not the libraries a user
//! builds without the command). So switching between those builds
//! compiles only the binaries. Published crates depend on the empty
//! `workspace-hack` stub of crates.io instead.
