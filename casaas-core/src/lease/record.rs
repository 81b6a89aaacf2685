//! The lease record: the small versioned JSON document stored in the lock object.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::LeaseError;

/// The `kind` field of every lease record: how casaas recognises its own
/// objects (anything else at the key is foreign and never overwritten).
pub const LEASE_RECORD_KIND: &str = "casaas.lease";

/// The newest schema version this library writes and understands. A record
/// of a lock held under a [`Session`](super::Session) is schema 2 (it names
/// its session, and a library that knew only schema 1 would judge its expiry
/// by the lock object alone, which a session lock never rewrites); every
/// other record is still written as schema 1, so older readers keep reading
/// them.
pub const LEASE_SCHEMA_VERSION: u64 = 2;

/// The schema of a record that names no session.
const PLAIN_SCHEMA_VERSION: u64 = 1;

/// One write of the lock object.
///
/// ```
/// use casaas_core::lease::LeaseRecord;
///
/// let record = LeaseRecord::new("worker-1", "00ff", 7, 15_000, 1_700_000_000_000);
/// let body = record.encode();
/// let back = LeaseRecord::decode("locks/a", &body).unwrap();
/// assert_eq!(back, record);
/// assert!(LeaseRecord::decode("locks/a", b"hello").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LeaseRecord {
    /// Always [`LEASE_RECORD_KIND`].
    pub kind: String,
    /// Schema version ([`LEASE_SCHEMA_VERSION`]).
    pub schema: u64,
    /// Who holds (or last held) the lease.
    pub owner: String,
    /// A fresh random value per write, so that one version names one write
    /// (S3 ETags of identical bodies are identical) and an ambiguous write
    /// can be resolved by reading.
    pub nonce: String,
    /// The fencing token of this holding; strictly increasing across
    /// acquisitions, kept by renewals and by the release.
    pub token: u64,
    /// The holder's TTL in milliseconds.
    pub ttl_ms: u64,
    /// Advisory wall-clock time (Unix ms) of the acquisition, on the holder's clock.
    pub acquired_at_ms: u64,
    /// Advisory wall-clock time (Unix ms) of this write, on the holder's clock.
    pub renewed_at_ms: u64,
    /// The holder gave the lease up; anyone may take it at once.
    #[serde(default)]
    pub released: bool,
    /// The session this lock is held under, if any: then the holder never
    /// rewrites the lock while holding it, and the lock expires only when
    /// that session's term ends (see [`Session`](super::Session)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionRef>,
    /// What the holder publishes with its holding (a leader's address, say:
    /// [`Lease::with_value`](super::Lease::with_value),
    /// [`LeaseGuard::proclaim`](super::LeaseGuard::proclaim)), at most
    /// [`MAX_VALUE_BYTES`]. Absent from records that carry none, so every
    /// reader, old or new, reads them as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// The largest value a lease record carries, in bytes (UTF-8): it is
/// written again with every renewal.
pub const MAX_VALUE_BYTES: usize = 4096;

/// Refuses a value over [`MAX_VALUE_BYTES`], saying by how much.
pub(crate) fn check_value(key: &str, value: &str) -> Result<(), LeaseError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(LeaseError::InvalidConfig(format!(
            "the value for the lock '{key}' is {} bytes, more than the {MAX_VALUE_BYTES} a lease record carries: publish a short value (an address, an id) and keep the rest elsewhere",
            value.len()
        )));
    }
    Ok(())
}

/// The session (its heartbeat and term) a lock is held under.
///
/// The heartbeat is named **relative to the lock's directory**
/// (`../sessions/worker-1` for the lock `shards/7` and the heartbeat
/// `sessions/worker-1`), so that every process finds the same object
/// whatever prefix it opened the store at: a contender that opened
/// `…/locks/shards/` and reads the lock `7` resolves it to a key above its
/// root and refuses to judge, instead of reading some other object (or none)
/// and taking a live lock. The term is the session heartbeat lease's fencing
/// token: it grows each time the session is opened again, so a lock names
/// exactly one opening.
///
/// ```
/// use casaas_core::lease::SessionRef;
///
/// let named = SessionRef::new("shards/7", "sessions/worker-1", 3);
/// assert_eq!(named.heartbeat, "../sessions/worker-1");
/// // The same lock seen from the store's root, and from a prefix above it:
/// assert_eq!(named.heartbeat_key("shards/7").as_deref(), Some("sessions/worker-1"));
/// assert_eq!(named.heartbeat_key("locks/shards/7").as_deref(), Some("locks/sessions/worker-1"));
/// // From inside `shards/`, the heartbeat is out of reach.
/// assert_eq!(named.heartbeat_key("7"), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionRef {
    /// The heartbeat's key relative to the lock's directory (`..` climbs one
    /// level; keys themselves never contain `..`).
    pub heartbeat: String,
    /// The session's term (its heartbeat lease's fencing token).
    pub term: u64,
}

impl SessionRef {
    /// The session whose heartbeat is at `heartbeat_key`, in term `term`,
    /// as the lock at `lock_key` (a key of the same store) names it.
    pub fn new(lock_key: &str, heartbeat_key: &str, term: u64) -> Self {
        let lock_dir: Vec<&str> = directory(lock_key).collect();
        let target: Vec<&str> = heartbeat_key.split('/').collect();
        let common = lock_dir
            .iter()
            .zip(&target)
            .take_while(|(a, b)| a == b)
            .count()
            // The heartbeat's own name is never part of a shared directory.
            .min(target.len().saturating_sub(1));
        let mut parts: Vec<&str> = vec![".."; lock_dir.len() - common];
        parts.extend(&target[common..]);
        SessionRef {
            heartbeat: parts.join("/"),
            term,
        }
    }

    /// The heartbeat's key in a store where the lock's key is `lock_key`;
    /// `None` when it lies above that store's root (or the path is not one
    /// this library writes).
    pub fn heartbeat_key(&self, lock_key: &str) -> Option<String> {
        let mut key: Vec<&str> = directory(lock_key).collect();
        for segment in self.heartbeat.split('/') {
            match segment {
                ".." => {
                    key.pop()?;
                }
                "" | "." => return None,
                name => key.push(name),
            }
        }
        let key = key.join("/");
        crate::validate_key(&key).ok().map(|()| key)
    }
}

/// The directory segments of `key` (all but its last segment).
fn directory(key: &str) -> impl Iterator<Item = &str> {
    let mut segments: Vec<&str> = key.split('/').collect();
    segments.pop();
    segments.into_iter()
}

impl LeaseRecord {
    /// A fresh, held record written at wall time `now_ms` (Unix ms).
    pub fn new(
        owner: impl Into<String>,
        nonce: impl Into<String>,
        token: u64,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Self {
        LeaseRecord {
            kind: LEASE_RECORD_KIND.to_string(),
            schema: PLAIN_SCHEMA_VERSION,
            owner: owner.into(),
            nonce: nonce.into(),
            token,
            ttl_ms,
            acquired_at_ms: now_ms,
            renewed_at_ms: now_ms,
            released: false,
            session: None,
            value: None,
        }
    }

    /// The same record, held under `session` (schema 2).
    pub fn under_session(mut self, session: SessionRef) -> Self {
        self.session = Some(session);
        self.schema = LEASE_SCHEMA_VERSION;
        self
    }

    /// The body to store.
    pub fn encode(&self) -> Bytes {
        // Serializing a struct of strings, integers and a bool cannot fail.
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Parses a body read from `key`. A body that is not a casaas lease
    /// record is [`LeaseError::ForeignObject`]; a newer schema is
    /// [`LeaseError::UnsupportedSchema`].
    pub fn decode(key: &str, body: &[u8]) -> Result<Self, LeaseError> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|_| foreign(key, body))?;
        check_envelope_schemas(
            key,
            body,
            &value,
            LEASE_RECORD_KIND,
            PLAIN_SCHEMA_VERSION..=LEASE_SCHEMA_VERSION,
        )?;
        let record: LeaseRecord = serde_json::from_value(value).map_err(|_| foreign(key, body))?;
        // A session lock written as schema 1 would be read by older
        // libraries as a lease that expires on its own: never trust one.
        if record.session.is_some() != (record.schema == LEASE_SCHEMA_VERSION) {
            return Err(foreign(key, body));
        }
        Ok(record)
    }

    /// The holder's TTL.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// Advisory wall-clock expiry: the last write's wall time plus the TTL.
    pub fn wall_expiry(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.renewed_at_ms.saturating_add(self.ttl_ms))
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Checks `kind` and `schema` of a parsed JSON body.
pub(crate) fn check_envelope(
    key: &str,
    body: &[u8],
    value: &serde_json::Value,
    kind: &str,
    schema: u64,
) -> Result<(), LeaseError> {
    check_envelope_schemas(key, body, value, kind, schema..=schema)
}

/// [`check_envelope`] accepting any schema version in `schemas` (records
/// written by older versions of this library that are still understood).
pub(crate) fn check_envelope_schemas(
    key: &str,
    body: &[u8],
    value: &serde_json::Value,
    kind: &str,
    schemas: std::ops::RangeInclusive<u64>,
) -> Result<(), LeaseError> {
    if value.get("kind").and_then(|k| k.as_str()) != Some(kind) {
        if crate::layout::is_layout_marker(body) {
            return Err(LeaseError::Store(crate::layout::layout_mismatch(
                key,
                crate::layout::LeaseLayout::Epochs,
                crate::layout::LeaseLayout::Record,
            )));
        }
        return Err(foreign(key, body));
    }
    let schema = *schemas.end();
    match value.get("schema").and_then(|s| s.as_u64()) {
        Some(v) if schemas.contains(&v) => Ok(()),
        Some(v) if v > schema => Err(LeaseError::UnsupportedSchema {
            key: key.to_string(),
            version: v,
        }),
        _ => Err(foreign(key, body)),
    }
}

/// A [`LeaseError::ForeignObject`] showing the first bytes, sanitized.
pub(crate) fn foreign(key: &str, body: &[u8]) -> LeaseError {
    LeaseError::ForeignObject {
        key: key.to_string(),
        found: sanitize(body),
    }
}

/// At most 48 bytes of `body`, printable ASCII only, for an error message.
fn sanitize(body: &[u8]) -> String {
    const SHOWN: usize = 48;
    if body.is_empty() {
        return "an empty object".to_string();
    }
    let mut out = String::from("\"");
    for &b in body.iter().take(SHOWN) {
        if b == b'"' || b == b'\\' {
            out.push('\\');
            out.push(b as char);
        } else if (0x20..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            out.push('.');
        }
    }
    out.push('"');
    if body.len() > SHOWN {
        out.push_str(&format!("... ({} bytes)", body.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_bodies_are_named() {
        let err = LeaseRecord::decode("k", b"\x00binary\nstuff").unwrap_err();
        match err {
            LeaseError::ForeignObject { key, found } => {
                assert_eq!(key, "k");
                assert_eq!(found, "\".binary.stuff\"");
            }
            other => panic!("{other:?}"),
        }
        for body in [
            &br#"{"kind":"other","schema":1}"#[..],
            br#"{"kind":"casaas.lease"}"#,
            br#"{"kind":"casaas.lease","schema":1,"owner":3}"#,
            br#"[1,2]"#,
            b"",
        ] {
            assert!(matches!(
                LeaseRecord::decode("k", body),
                Err(LeaseError::ForeignObject { .. })
            ));
        }
        let long = vec![b'x'; 100];
        let LeaseError::ForeignObject { found, .. } = LeaseRecord::decode("k", &long).unwrap_err()
        else {
            panic!()
        };
        assert!(found.ends_with("... (100 bytes)"), "{found}");
    }

    #[test]
    fn future_schema_is_refused() {
        let mut v = serde_json::to_value(LeaseRecord::new("o", "n", 1, 10, 0)).unwrap();
        v["schema"] = 3.into();
        let body = serde_json::to_vec(&v).unwrap();
        assert!(matches!(
            LeaseRecord::decode("k", &body),
            Err(LeaseError::UnsupportedSchema { version: 3, .. })
        ));
    }

    #[test]
    fn a_session_lock_is_schema_2_and_names_its_session() {
        let record = LeaseRecord::new("o", "n", 4, 10, 0)
            .under_session(SessionRef::new("locks/a", "s/w1", 7));
        let body = record.encode();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.contains(r#""schema":2"#), "{text}");
        assert!(
            text.contains(r#""session":{"heartbeat":"../s/w1","term":7}"#),
            "{text}"
        );
        assert_eq!(LeaseRecord::decode("k", &body).unwrap(), record);
        // A plain record keeps schema 1 and no session field, so libraries
        // that know only schema 1 still read it.
        let plain =
            String::from_utf8(LeaseRecord::new("o", "n", 4, 10, 0).encode().to_vec()).unwrap();
        assert!(
            plain.contains(r#""schema":1"#) && !plain.contains("session"),
            "{plain}"
        );
    }

    #[test]
    fn a_heartbeat_is_named_from_the_lock_and_found_from_any_root_that_holds_both() {
        let cases = [
            ("a", "s", "s"),
            ("a", "sessions/w", "sessions/w"),
            ("locks/a", "sessions/w", "../sessions/w"),
            ("locks/x/a", "locks/w", "../w"),
            ("locks/a", "locks/w", "w"),
            ("locks/a", "locks/sub/w", "sub/w"),
            ("deep/er/lock", "s", "../../s"),
            ("locks", "locks/w", "locks/w"),
        ];
        for (lock, beat, relative) in cases {
            let named = SessionRef::new(lock, beat, 1);
            assert_eq!(named.heartbeat, relative, "{lock} → {beat}");
            assert_eq!(named.heartbeat_key(lock).as_deref(), Some(beat));
            // Opened one prefix higher: both keys gain it.
            assert_eq!(
                named.heartbeat_key(&format!("p/{lock}")),
                Some(format!("p/{beat}"))
            );
        }
        let named = SessionRef::new("shards/7", "sessions/w", 1);
        assert_eq!(named.heartbeat_key("7"), None, "above the root");
        for bad in ["", "a//b", "./a", "a/.", "/a"] {
            let named = SessionRef {
                heartbeat: bad.to_string(),
                term: 1,
            };
            assert_eq!(named.heartbeat_key("x/y"), None, "{bad:?}");
        }
    }

    #[test]
    fn a_session_and_a_schema_that_disagree_are_foreign() {
        let mut v = serde_json::to_value(
            LeaseRecord::new("o", "n", 1, 10, 0).under_session(SessionRef::new("k", "s", 1)),
        )
        .unwrap();
        v["schema"] = 1.into();
        let body = serde_json::to_vec(&v).unwrap();
        assert!(matches!(
            LeaseRecord::decode("k", &body),
            Err(LeaseError::ForeignObject { .. })
        ));
        let mut v = serde_json::to_value(LeaseRecord::new("o", "n", 1, 10, 0)).unwrap();
        v["schema"] = 2.into();
        let body = serde_json::to_vec(&v).unwrap();
        assert!(matches!(
            LeaseRecord::decode("k", &body),
            Err(LeaseError::ForeignObject { .. })
        ));
    }

    #[test]
    fn unknown_fields_are_tolerated() {
        let mut v = serde_json::to_value(LeaseRecord::new("o", "n", 1, 10, 0)).unwrap();
        v["extra"] = "x".into();
        let body = serde_json::to_vec(&v).unwrap();
        assert_eq!(LeaseRecord::decode("k", &body).unwrap().token, 1);
    }
}
