//! Keeping secrets out of every message, log line and report.
//!
//! Three rules, applied to any text before it is shown or written:
//! the user part of a URL (`http://user:secret@host`) is replaced, the value
//! of any credential-looking `name=value` pair (`sig=…`, `token=…`,
//! `X-Amz-Credential=…`, `password=…`) is replaced, and every value
//! registered as secret (the binary registers the values of credential
//! environment variables) is replaced wherever it appears.

use std::sync::{Mutex, OnceLock};

use casaas_core::StoreUrl;
pub use casaas_core::provider::REDACTED;
use casaas_core::provider::{is_secret_name, is_secret_option};

/// Secret values shorter than this are not registered: they would
/// redact ordinary words.
const MIN_SECRET_LEN: usize = 8;

fn registry() -> &'static Mutex<Vec<String>> {
    static SECRETS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    SECRETS.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers `value` as a secret: from now on [`redact_text`] replaces it
/// wherever it appears. Values shorter than 8 bytes are ignored.
pub fn register_secret(value: &str) {
    let value = value.trim();
    if value.len() < MIN_SECRET_LEN {
        return;
    }
    let mut secrets = registry().lock().unwrap_or_else(|p| p.into_inner());
    if !secrets.iter().any(|s| s == value) {
        secrets.push(value.to_string());
        // Longest first, so that a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// Registers the values of environment variables whose names look like
/// credentials (`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AZURE_STORAGE_KEY`, `…_PASSWORD`, …).
pub fn register_secrets_from_env() {
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        if is_secret_name(name) {
            register_secret(value);
        }
    }
}

/// Registers the secrets a URL carries — the user parts of it and of any
/// URL inside it (`endpoint=http://user:password@host`), and the values of
/// credential-looking query parameters — so that they are redacted even
/// where a library prints them without the URL around them (for example a
/// `Host` header in a trace log).
pub fn register_url_secrets(url: &str) {
    // A URL that does not parse opens nothing; the text redaction still
    // covers its user part wherever it is printed.
    if let Ok(url) = StoreUrl::parse(url) {
        for secret in url.secrets() {
            // As typed, and decoded (`p%40ss` is printed as `p@ss` too).
            let decoded = percent_encoding::percent_decode_str(&secret)
                .decode_utf8_lossy()
                .into_owned();
            register_any_length(&decoded);
            register_any_length(&secret);
        }
    }
}

/// Registers a secret given explicitly as one (a password in a URL),
/// however short, as long as it is not empty or a single character.
fn register_any_length(value: &str) {
    if value.len() < 2 {
        return;
    }
    let mut secrets = registry().lock().unwrap_or_else(|p| p.into_inner());
    if !secrets.iter().any(|s| s == value) {
        secrets.push(value.to_string());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// Removes the user part of a URL and the values of credential-looking
/// query parameters, should there be any.
///
/// ```
/// use casaas_conformance::redact_url;
/// assert_eq!(redact_url("s3://key:secret@bucket/p"), "s3://[redacted]@bucket/p");
/// assert_eq!(
///     redact_url("s3://b/p?endpoint=http://u:pw@127.0.0.1:9000&sig=abc&region=x"),
///     "s3://b/p?endpoint=http://[redacted]@127.0.0.1:9000&sig=[redacted]&region=x"
/// );
/// assert_eq!(redact_url("file:///tmp/x"), "file:///tmp/x");
/// ```
pub fn redact_url(url: &str) -> String {
    match StoreUrl::parse(url) {
        Ok(parsed) => redact_registered(parsed.to_string()),
        Err(_) => redact_text(url),
    }
}

/// Redacts every secret in `text`: URL user parts, credential-looking
/// `name=value` pairs and registered secret values.
///
/// ```
/// use casaas_conformance::redact_text;
/// assert_eq!(
///     redact_text("the request did not reach http://user:pw@127.0.0.1:1 (token=abc)"),
///     "the request did not reach http://[redacted]@127.0.0.1:1 (token=[redacted])"
/// );
/// ```
pub fn redact_text(text: &str) -> String {
    redact_registered(redact_pairs(&redact_userinfo(text)))
}

/// Replaces every registered secret value in `text`.
fn redact_registered(mut out: String) -> String {
    let secrets = registry().lock().unwrap_or_else(|p| p.into_inner());
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), REDACTED);
        }
    }
    out
}

/// Characters that end a URL's authority or a parameter's value in text.
fn ends_token(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\'' | '"' | '`' | ')' | '>' | ']' | '}' | ',' | ';' | '\\'
        )
}

fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| ends_token(c) || matches!(c, '/' | '?' | '#'))
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => {
                out.push_str(REDACTED);
                rest = &tail[at..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

fn redact_pairs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let (before, after) = rest.split_at(eq);
        let name_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .map_or(0, |i| {
                i + before[i..].chars().next().map_or(1, char::len_utf8)
            });
        let name = &before[name_start..];
        out.push_str(before);
        out.push('=');
        let value = &after[1..];
        let end = value
            .find(|c: char| ends_token(c) || c == '&')
            .unwrap_or(value.len());
        let secret = !name.is_empty()
            && !value.starts_with(REDACTED)
            && is_secret_option(name.rsplit('.').next().unwrap_or(name), &value[..end]);
        if secret {
            if end > 0 {
                out.push_str(REDACTED);
            }
            rest = &value[end..];
        } else {
            rest = value;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_anywhere_in_text() {
        assert_eq!(
            redact_text("a http://u:p@h:1/x and https://v@w?q"),
            "a http://[redacted]@h:1/x and https://[redacted]@w?q"
        );
        assert_eq!(redact_text("user@example.com"), "user@example.com");
        assert_eq!(redact_text("s3://b/p@x"), "s3://b/p@x");
    }

    #[test]
    fn credential_looking_pairs() {
        assert_eq!(
            redact_text("X-Amz-Credential=AK/1&X-Amz-Signature=ff&x-id=PutObject"),
            "X-Amz-Credential=[redacted]&X-Amz-Signature=[redacted]&x-id=PutObject"
        );
        assert_eq!(
            redact_text("etag_unquoted=true&region=us-east-1&path_style=true"),
            "etag_unquoted=true&region=us-east-1&path_style=true"
        );
        assert_eq!(
            redact_text("account_key=abc==; sv=2020"),
            "account_key=[redacted]; sv=2020"
        );
    }

    #[test]
    fn secrets_of_a_url_are_redacted_without_the_url_around_them() {
        register_url_secrets("s3://b/p?endpoint=http://someone:pw0rd42@h:1&sas=sv-abc-123");
        assert_eq!(
            redact_text("host:someone:pw0rd42@h:1 and sv-abc-123 and pw0rd42"),
            "host:[redacted]@h:1 and [redacted] and [redacted]"
        );
    }

    #[test]
    fn registered_secrets_wherever_they_appear() {
        register_secret("short");
        register_secret("s3cr3t-value-42");
        assert_eq!(
            redact_text("short, and s3cr3t-value-42!"),
            "short, and [redacted]!"
        );
    }

    /// A flag with a credential-looking name (OpenDAL's `skip_signature`)
    /// is no secret: registering its `true` redacted every `true` of a JSON
    /// report, which then no longer parsed.
    #[test]
    fn flags_with_credential_looking_names_are_not_secrets() {
        let url =
            "opendal+gcs://b/?endpoint=http://127.0.0.1:1&skip_signature=true&sig=s3cr3t-flag-test";
        register_url_secrets(url);
        assert_eq!(
            redact_url(url),
            "opendal+gcs://b/?endpoint=http://127.0.0.1:1&skip_signature=true&sig=[redacted]"
        );
        assert_eq!(
            redact_text(r#"{"create_if_absent": true}"#),
            r#"{"create_if_absent": true}"#
        );
        // Text already redacted stays as it is.
        assert_eq!(redact_text("sig=[redacted]&x=1"), "sig=[redacted]&x=1");
        assert_eq!(redact_text("s3cr3t-flag-test"), "[redacted]");
    }
}
