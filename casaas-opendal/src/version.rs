//! OpenDAL's `(etag, version)` pair: casaas-core's [`VersionPair`].

use casaas_core::provider::VersionPair;

/// The identity of one stored write as OpenDAL reports it.
pub type ObjectVersion = VersionPair;

/// What [`Version`](casaas_core::Version)s name in error messages.
pub(crate) const PRODUCED_BY: &str = "an OpenDAL store";
