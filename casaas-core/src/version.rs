//! Opaque, exact object versions.

use std::fmt;

use crate::CasError;

/// The version of a stored object, exactly as the store names it.
///
/// Callers treat it as opaque: they get it from a read or a write and hand it
/// back in a condition. Two versions are equal only if they name the same
/// stored write — but beware ABA on stores whose version is a content hash
/// (S3 single-part ETags): the protocols put a fresh nonce in every record so
/// that one version names one write.
///
/// ```
/// use casaas_core::Version;
///
/// let etag = Version::etag("\"9b2cf535f27731c974343645a3985328\"");
/// assert_eq!(etag.to_string(), "\"9b2cf535f27731c974343645a3985328\"");
/// let generation = Version::Generation(1700000000000001);
/// assert_ne!(etag, generation);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Version {
    /// An entity tag kept verbatim as the server sent it, quotes included
    /// (S3, Azure, the local-file backend).
    ETag(String),
    /// A numeric generation (GCS generations, the in-memory backend).
    Generation(i64),
}

impl Version {
    /// An ETag version, kept verbatim.
    pub fn etag(tag: impl Into<String>) -> Self {
        Version::ETag(tag.into())
    }

    /// The ETag text, if this is an ETag version.
    pub fn as_etag(&self) -> Option<&str> {
        match self {
            Version::ETag(t) => Some(t),
            Version::Generation(_) => None,
        }
    }

    /// The generation, if this is a generation version.
    pub fn as_generation(&self) -> Option<i64> {
        match self {
            Version::Generation(g) => Some(*g),
            Version::ETag(_) => None,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::ETag(t) => f.write_str(t),
            Version::Generation(g) => write!(f, "{g}"),
        }
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::ETag(t) => write!(f, "ETag({t})"),
            Version::Generation(g) => write!(f, "Generation({g})"),
        }
    }
}

/// A write's identity as clients that keep two halves report it: an entity
/// tag and a version id (object_store's `(e_tag, version)`, OpenDAL's
/// `(etag, version)`), carried in one [`Version`].
///
/// Backends condition writes on different halves: S3 and Azure on the ETag,
/// GCS on the generation. Keeping both means an adapter never has to know
/// which backend it talks to. The encoding:
///
/// - only an ETag: `Version::ETag(etag)`, the same value the direct provider
///   crates produce for S3 and Azure;
/// - both: `Version::ETag("<etag>;version=<version>")`;
/// - only a version: `Version::ETag(";version=<version>")`.
///
/// Version ids never contain `;version=` (GCS generations are digits, S3
/// version ids URL-safe tokens, Azure's timestamps), so the last occurrence
/// splits the pair unambiguously.
///
/// ```
/// use casaas_core::Version;
/// use casaas_core::provider::VersionPair;
///
/// let pair = VersionPair::new(Some("\"abc\"".into()), Some("17".into())).unwrap();
/// let version = pair.to_version();
/// assert_eq!(version, Version::etag("\"abc\";version=17"));
/// assert_eq!(VersionPair::from_version(&version, "this store").unwrap(), pair);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VersionPair {
    /// The entity tag, verbatim.
    pub e_tag: Option<String>,
    /// The store's version id (GCS generation, S3/Azure version id).
    pub version: Option<String>,
}

const PAIR_SEPARATOR: &str = ";version=";

impl VersionPair {
    /// Keeps whatever the store reported; `None` if it reported neither
    /// (such a store cannot take part in conditional writes).
    pub fn new(e_tag: Option<String>, version: Option<String>) -> Option<Self> {
        let e_tag = e_tag.filter(|t| !t.is_empty());
        let version = version.filter(|v| !v.is_empty());
        (e_tag.is_some() || version.is_some()).then_some(VersionPair { e_tag, version })
    }

    /// The casaas [`Version`] carrying both halves.
    pub fn to_version(&self) -> Version {
        match (&self.e_tag, &self.version) {
            (Some(tag), None) => Version::ETag(tag.clone()),
            (tag, Some(version)) => Version::ETag(format!(
                "{}{PAIR_SEPARATOR}{version}",
                tag.as_deref().unwrap_or("")
            )),
            (None, None) => Version::ETag(String::new()),
        }
    }

    /// Reads a [`Version`] produced by [`to_version`](Self::to_version). A
    /// generation (from another backend) is refused before anything is sent;
    /// `produced_by` names the kind of store for the message.
    pub fn from_version(version: &Version, produced_by: &str) -> Result<Self, CasError> {
        let text = version.as_etag().ok_or_else(|| {
            CasError::invalid_input(format!(
                "version {version:?} was not produced by {produced_by}; pass the version \
                 returned by this store's get, create or replace"
            ))
        })?;
        let (tag, version) = match text.rsplit_once(PAIR_SEPARATOR) {
            Some((tag, version)) => (tag.to_string(), Some(version.to_string())),
            None => (text.to_string(), None),
        };
        VersionPair::new(Some(tag), version)
            .ok_or_else(|| CasError::invalid_input("an empty version cannot be a condition"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_round_trip() {
        for v in [Version::etag("\"abc\""), Version::Generation(42)] {
            let text = serde_json::to_string(&v).unwrap();
            let back: Version = serde_json::from_str(&text).unwrap();
            assert_eq!(v, back);
        }
        assert_eq!(
            serde_json::to_string(&Version::Generation(7)).unwrap(),
            r#"{"generation":7}"#
        );
    }

    #[test]
    fn both_halves_of_a_pair_survive_a_round_trip() {
        for (tag, version) in [
            (Some("\"abc\""), None),
            (Some("\"abc\""), Some("1700000000000001")),
            (None, Some("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")),
            (Some("0"), None),
        ] {
            let original =
                VersionPair::new(tag.map(String::from), version.map(String::from)).unwrap();
            let back = VersionPair::from_version(&original.to_version(), "test").unwrap();
            assert_eq!(back, original);
        }
    }

    #[test]
    fn an_etag_only_pair_matches_the_direct_providers() {
        let v = VersionPair::new(Some("\"abc\"".into()), None).unwrap();
        assert_eq!(v.to_version(), Version::etag("\"abc\""));
    }

    #[test]
    fn a_pair_with_neither_half_is_no_version() {
        assert!(VersionPair::new(None, None).is_none());
        assert!(VersionPair::new(Some(String::new()), None).is_none());
        assert!(VersionPair::from_version(&Version::etag(""), "test").is_err());
        assert!(VersionPair::from_version(&Version::Generation(3), "test").is_err());
    }
}
