//! object_store's `(e_tag, version)` pair: casaas-core's [`VersionPair`],
//! and the condition `PutMode::Update` takes from it.

use casaas_core::provider::VersionPair;

// The object_store line this copy is compiled against (see `error.rs`).
use super::os;

use os::UpdateVersion;

/// The identity of one stored write as object_store reports it.
pub type ObjectVersion = VersionPair;

/// What [`Version`](casaas_core::Version)s name in error messages.
pub(crate) const PRODUCED_BY: &str = "an object_store store";

/// The condition object_store's `PutMode::Update` takes.
pub(crate) fn update_version(pair: &VersionPair) -> UpdateVersion {
    UpdateVersion {
        e_tag: pair.e_tag.clone(),
        version: pair.version.clone(),
    }
}
