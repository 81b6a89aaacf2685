//! object_store's `(e_tag, version)` pair carried in one casaas [`Version`].
//!
//! object_store needs different halves of a write's identity per backend:
//! S3 and Azure condition `PutMode::Update` on the ETag, GCS on the
//! generation (`version`). Both are kept, so the adapter never has to know
//! which store it talks to. The encoding:
//!
//! - only an ETag: `Version::ETag(etag)`, the same value the direct provider
//!   crates produce for S3 and Azure;
//! - both: `Version::ETag("<etag>;version=<version>")`;
//! - only a version: `Version::ETag(";version=<version>")`.
//!
//! Versions never contain `;version=` (GCS generations are digits, S3
//! version ids are URL-safe tokens, Azure's are timestamps), so the last
//! occurrence splits the pair unambiguously.

use casaas_core::{CasError, Version};
use object_store::UpdateVersion;

const SEPARATOR: &str = ";version=";

/// The identity of one stored write as object_store reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    /// The entity tag, verbatim.
    pub e_tag: Option<String>,
    /// The store's version id (GCS generation, S3/Azure version id).
    pub version: Option<String>,
}

impl ObjectVersion {
    /// Keeps whatever the store reported; `None` if it reported neither
    /// (such a store cannot take part in conditional writes).
    pub fn new(e_tag: Option<String>, version: Option<String>) -> Option<Self> {
        let e_tag = e_tag.filter(|t| !t.is_empty());
        let version = version.filter(|v| !v.is_empty());
        (e_tag.is_some() || version.is_some()).then_some(ObjectVersion { e_tag, version })
    }

    /// The casaas [`Version`] carrying both halves.
    pub fn to_version(&self) -> Version {
        match (&self.e_tag, &self.version) {
            (Some(tag), None) => Version::ETag(tag.clone()),
            (tag, Some(version)) => Version::ETag(format!(
                "{}{SEPARATOR}{version}",
                tag.as_deref().unwrap_or("")
            )),
            (None, None) => Version::ETag(String::new()),
        }
    }

    /// Reads a [`Version`] this adapter produced. A generation (from another
    /// backend) is refused before anything is sent.
    pub fn from_version(version: &Version) -> Result<Self, CasError> {
        let text = version.as_etag().ok_or_else(|| {
            CasError::invalid_input(format!(
                "version {version:?} was not produced by an object_store store; pass the \
                 version returned by this store's get, create or replace"
            ))
        })?;
        let (tag, version) = match text.rsplit_once(SEPARATOR) {
            Some((tag, version)) => (tag.to_string(), Some(version.to_string())),
            None => (text.to_string(), None),
        };
        ObjectVersion::new(Some(tag), version)
            .ok_or_else(|| CasError::invalid_input("an empty version cannot be a condition"))
    }

    /// The condition object_store's `PutMode::Update` takes.
    pub fn to_update(&self) -> UpdateVersion {
        UpdateVersion {
            e_tag: self.e_tag.clone(),
            version: self.version.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_survive_a_round_trip() {
        for (tag, version) in [
            (Some("\"abc\""), None),
            (Some("\"abc\""), Some("1700000000000001")),
            (None, Some("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")),
            (Some("0"), None),
        ] {
            let original =
                ObjectVersion::new(tag.map(String::from), version.map(String::from)).unwrap();
            let back = ObjectVersion::from_version(&original.to_version()).unwrap();
            assert_eq!(back, original);
        }
    }

    #[test]
    fn etag_only_matches_the_direct_providers() {
        let v = ObjectVersion::new(Some("\"abc\"".into()), None).unwrap();
        assert_eq!(v.to_version(), Version::etag("\"abc\""));
    }

    #[test]
    fn neither_half_is_no_version() {
        assert!(ObjectVersion::new(None, None).is_none());
        assert!(ObjectVersion::new(Some(String::new()), None).is_none());
        assert!(ObjectVersion::from_version(&Version::etag("")).is_err());
        assert!(ObjectVersion::from_version(&Version::Generation(3)).is_err());
    }
}
