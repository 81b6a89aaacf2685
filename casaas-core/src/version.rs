//! Opaque, exact object versions.

use std::fmt;

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
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
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
}
