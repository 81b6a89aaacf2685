//! The nonce a commit carries, so that an unanswered commit can be found
//! again: one field in the commit's `commitInfo` action.
//!
//! The Delta protocol lets `commitInfo` hold any fields, and readers ignore
//! those they do not know, so the field changes nothing for any reader.

use bytes::Bytes;
use serde_json::{Map, Value};

/// The `commitInfo` field that holds a commit's nonce.
pub const NONCE_FIELD: &str = "casaasNonce";

/// Why a commit's bytes could not be given a nonce.
#[derive(Debug, thiserror::Error)]
pub enum NonceError {
    /// A line of the commit is not a JSON object.
    #[error("line {line} of the commit is not a JSON action: {source}")]
    NotJson {
        /// The 1-based line.
        line: usize,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// The commit carries a nonce already.
    #[error("the commit's commitInfo already has a `{NONCE_FIELD}` field")]
    AlreadyCarried,
}

const COMMIT_INFO_PREFIX: &str = "{\"commitInfo\":{";

/// `commit` (newline-delimited JSON actions) with `nonce` in its
/// `commitInfo`, which is added as the first action when there is none.
pub fn with_nonce(commit: &[u8], nonce: &str) -> Result<Bytes, NonceError> {
    let text = String::from_utf8_lossy(commit);
    let nonce_json = Value::String(nonce.to_string()).to_string();
    let mut lines: Vec<String> = Vec::new();
    let mut carried = false;
    for (index, line) in text.split('\n').enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if carried || !line.contains("\"commitInfo\"") {
            lines.push(line.to_string());
            continue;
        }
        let mut action: Map<String, Value> =
            serde_json::from_str(line).map_err(|source| NonceError::NotJson {
                line: index + 1,
                source,
            })?;
        let Some(Value::Object(info)) = action.get_mut("commitInfo") else {
            lines.push(line.to_string());
            continue;
        };
        if info.contains_key(NONCE_FIELD) {
            return Err(NonceError::AlreadyCarried);
        }
        carried = true;
        // The writer's own serialization kept byte for byte where it has the
        // usual shape; only the field is inserted.
        if let Some(rest) = line.strip_prefix(COMMIT_INFO_PREFIX) {
            let separator = if rest.starts_with('}') { "" } else { "," };
            lines.push(format!(
                "{COMMIT_INFO_PREFIX}\"{NONCE_FIELD}\":{nonce_json}{separator}{rest}"
            ));
        } else {
            info.insert(NONCE_FIELD.to_string(), Value::String(nonce.to_string()));
            lines.push(Value::Object(action).to_string());
        }
    }
    if !carried {
        lines.insert(
            0,
            format!("{COMMIT_INFO_PREFIX}\"{NONCE_FIELD}\":{nonce_json}}}}}"),
        );
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(Bytes::from(out))
}

/// The nonce a stored commit carries, if any (a commit written without
/// casaas carries none).
pub fn nonce_of(commit: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(commit).ok()?;
    text.split('\n')
        .filter(|line| line.contains("\"commitInfo\""))
        .find_map(|line| {
            let action: Value = serde_json::from_str(line).ok()?;
            Some(
                action
                    .get("commitInfo")?
                    .get(NONCE_FIELD)?
                    .as_str()?
                    .to_string(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nonce_goes_into_commit_info_and_nothing_else_changes() {
        let commit = b"{\"commitInfo\":{\"timestamp\":1,\"operation\":\"WRITE\"}}\n{\"add\":{\"path\":\"a.parquet\"}}\n";
        let out = with_nonce(commit, "n-1").unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "{\"commitInfo\":{\"casaasNonce\":\"n-1\",\"timestamp\":1,\"operation\":\"WRITE\"}}\n{\"add\":{\"path\":\"a.parquet\"}}\n"
        );
        assert_eq!(nonce_of(&out).as_deref(), Some("n-1"));
        for line in std::str::from_utf8(&out).unwrap().lines() {
            serde_json::from_str::<Value>(line).unwrap();
        }
    }

    #[test]
    fn an_empty_or_reordered_commit_info_and_a_missing_one() {
        let empty = with_nonce(b"{\"commitInfo\":{}}\n", "a").unwrap();
        assert_eq!(nonce_of(&empty).as_deref(), Some("a"));
        let spaced = with_nonce(b"{ \"commitInfo\" : {\"x\":1} }", "b").unwrap();
        assert_eq!(nonce_of(&spaced).as_deref(), Some("b"));
        let none = with_nonce(b"{\"add\":{\"path\":\"commitInfo\"}}", "c").unwrap();
        let text = std::str::from_utf8(&none).unwrap();
        assert!(
            text.starts_with("{\"commitInfo\":{\"casaasNonce\":\"c\"}}\n"),
            "{text}"
        );
        assert_eq!(nonce_of(&none).as_deref(), Some("c"));
    }

    #[test]
    fn foreign_and_broken_commits() {
        assert_eq!(nonce_of(b"{\"commitInfo\":{\"timestamp\":1}}"), None);
        assert_eq!(nonce_of(b"\xff\xfe"), None);
        assert!(matches!(
            with_nonce(b"{\"commitInfo\":{\"casaasNonce\":\"x\"}}", "y"),
            Err(NonceError::AlreadyCarried)
        ));
        assert!(matches!(
            with_nonce(b"{\"commitInfo\": nope", "y"),
            Err(NonceError::NotJson { line: 1, .. })
        ));
    }
}
