//! Translating OpenDAL's errors into casaas [`ErrorKind`]s.
//!
//! OpenDAL names outcomes, not statuses: `ConditionNotMatch` (a caller's
//! condition failed), `Conflict` (a concurrent conditional request, S3's 409;
//! nothing written), `Unsupported` (a condition the service lacks; OpenDAL
//! never drops a condition silently), and marks transient failures
//! temporary. A temporary failure of a write may follow an attempt that took
//! effect, so on writes it is [`ErrorKind::Ambiguous`].

use casaas_core::provider::{Delivery, Operation, classify};
use casaas_core::{CasError, ErrorKind};

/// OpenDAL's table for [`casaas_core::provider::classify`]: its error kinds (the
/// code) name outcomes; a rate limit on a write may follow OpenDAL's own
/// retry of an attempt that took effect, so only reads are throttled.
fn code_table(op: Operation, _status: Option<u16>, code: Option<&str>) -> Option<ErrorKind> {
    Some(match code? {
        "NotFound" => ErrorKind::NotFound,
        "ConditionNotMatch" | "AlreadyExists" => ErrorKind::PreconditionFailed,
        "Conflict" => ErrorKind::ConcurrentRequest,
        "Unsupported" => ErrorKind::Unsupported,
        "PermissionDenied" => ErrorKind::Unauthorized,
        "ConfigInvalid" => ErrorKind::Misconfigured,
        "RateLimited" if !op.writes() => ErrorKind::Throttled,
        _ => return None,
    })
}

/// Maps `err` from an operation on `key`.
pub(crate) fn map_error(err: opendal::Error, op: Operation, key: &str) -> CasError {
    let code = err.kind().into_static();
    let kind = classify(op, Delivery::MaybeSent, None, Some(code), &code_table);
    let message = match kind {
        ErrorKind::NotFound => "the object is not there",
        ErrorKind::PreconditionFailed => "the object's current version is not the expected one",
        ErrorKind::ConcurrentRequest => "another conditional request on the object was in flight",
        ErrorKind::Unsupported => {
            "the OpenDAL service does not support this condition or operation"
        }
        ErrorKind::Unauthorized => "check the credentials the operator was built with",
        ErrorKind::Misconfigured => "the operator's configuration is invalid",
        ErrorKind::Throttled => "the store asked to slow down",
        _ if op.writes() => "the write may or may not have taken effect",
        _ if err.is_temporary() => "a temporary failure; retrying is sensible",
        _ => "an unexpected answer from the store",
    };
    // OpenDAL's Display carries the operation, service and path, and the
    // transport's own error after "=>"; it never holds credentials.
    let mut detail = err.message().to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        detail.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    CasError::new(kind, format!("{message}: {}", redact_queries(&detail)))
        .with_key(key)
        .with_code(code)
        .with_source(OpendalFailure(redact_queries(&err.to_string())))
}

/// OpenDAL's error as text, kept as the source of a [`CasError`] without its
/// request URLs' query strings (a SAS token travels in the query).
#[derive(Debug)]
struct OpendalFailure(String);

impl std::fmt::Display for OpendalFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpendalFailure {}

/// `text` with the query string of every URL removed.
fn redact_queries(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        // Copy up to the query of this URL, then skip the query.
        let url_end = rest[start..]
            .find(|c: char| c.is_whitespace() || c == ',' || c == '}' || c == ')')
            .map_or(rest.len(), |at| start + at);
        let url = &rest[..url_end];
        match url.find('?') {
            Some(query) => {
                out.push_str(&url[..query]);
                out.push_str("?<redacted>");
            }
            None => out.push_str(url),
        }
        rest = &rest[url_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_never_reach_the_error() {
        let err = opendal::Error::new(opendal::ErrorKind::Unexpected, "send http request")
            .with_context(
                "url",
                "https://acct.blob.core.windows.net/c/k?sv=2024&sig=SECRET, next",
            );
        let mapped = map_error(err, Operation::Create, "k");
        let debug = format!("{mapped:?} {mapped}");
        assert!(!debug.contains("SECRET"), "{debug}");
        assert!(
            debug.contains("https://acct.blob.core.windows.net/c/k?<redacted>"),
            "{debug}"
        );
    }

    #[test]
    fn outcomes_map_to_their_kinds() {
        for (opendal_kind, op, expected) in [
            (
                opendal::ErrorKind::ConditionNotMatch,
                Operation::Replace,
                ErrorKind::PreconditionFailed,
            ),
            (
                opendal::ErrorKind::Conflict,
                Operation::Create,
                ErrorKind::ConcurrentRequest,
            ),
            (
                opendal::ErrorKind::Unsupported,
                Operation::Delete,
                ErrorKind::Unsupported,
            ),
            (
                opendal::ErrorKind::Unexpected,
                Operation::Create,
                ErrorKind::Ambiguous,
            ),
            (
                opendal::ErrorKind::RateLimited,
                Operation::Create,
                ErrorKind::Ambiguous,
            ),
            (
                opendal::ErrorKind::RateLimited,
                Operation::Get,
                ErrorKind::Throttled,
            ),
            (
                opendal::ErrorKind::NotFound,
                Operation::Get,
                ErrorKind::NotFound,
            ),
        ] {
            let err = opendal::Error::new(opendal_kind, "x");
            let mapped = map_error(err, op, "k");
            assert_eq!(mapped.kind(), expected, "{opendal_kind:?} on {op:?}");
            assert_eq!(mapped.key(), Some("k"));
        }
    }
}
