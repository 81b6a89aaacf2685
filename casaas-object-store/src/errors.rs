//! Translating object_store's errors into casaas [`ErrorKind`]s.
//!
//! object_store does not expose HTTP statuses publicly; its error variants
//! already name the outcome (`AlreadyExists`, `Precondition`, `NotFound`,
//! ...). What remains (`Generic`) is a transport failure or an unexpected
//! status, after object_store's own retries. Such an answer to a write may
//! follow an attempt that took effect, so it is always
//! [`ErrorKind::Ambiguous`] on writes.

use std::error::Error as _;

use casaas_core::{CasError, ErrorKind};
use object_store::client::{HttpError, HttpErrorKind};

/// Which kind of request failed: writes get the cautious classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Read,
    List,
    Create,
    Replace,
}

impl Operation {
    fn is_write(self) -> bool {
        matches!(self, Operation::Create | Operation::Replace)
    }
}

/// The HTTP status object_store's message names, if any. Its retry error
/// type is private, but its message reads "... status code: 503 ...".
fn status_in(err: &object_store::Error) -> Option<u16> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        let text = e.to_string();
        if let Some(at) = text.find("status code: ") {
            let digits: String = text[at + "status code: ".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(status) = digits.parse() {
                return Some(status);
            }
        }
        source = e.source();
    }
    None
}

/// The transport-level kind of the failure, if the chain holds one.
fn http_kind(err: &object_store::Error) -> Option<HttpErrorKind> {
    let mut source = err.source();
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<HttpError>() {
            return Some(http.kind());
        }
        source = e.source();
    }
    None
}

/// Maps `err` from an operation on `key`. Condition failures
/// (`AlreadyExists`, `Precondition`) map to [`ErrorKind::PreconditionFailed`]
/// here; the store decides separately whether they may hide its own write.
pub(crate) fn map_error(err: object_store::Error, op: Operation, key: &str) -> CasError {
    use object_store::Error as E;
    let status = status_in(&err);
    let (kind, code, message) = match &err {
        E::NotFound { .. } => (
            ErrorKind::NotFound,
            "NotFound",
            "the object is not there".to_string(),
        ),
        E::AlreadyExists { .. } => (
            ErrorKind::PreconditionFailed,
            "AlreadyExists",
            "another write is already there".to_string(),
        ),
        E::Precondition { .. } => (
            ErrorKind::PreconditionFailed,
            "Precondition",
            "the object's current version is not the expected one".to_string(),
        ),
        E::NotModified { .. } => (
            ErrorKind::PreconditionFailed,
            "NotModified",
            "the store answered not modified".to_string(),
        ),
        E::NotImplemented { operation, .. } => (
            ErrorKind::Unsupported,
            "NotImplemented",
            format!(
                "this object_store backend does not implement {operation}; a store without \
                 PutMode::Update (LocalFileSystem, HttpStore, S3 with conditional put \
                 disabled) cannot hold leases"
            ),
        ),
        E::NotSupported { .. } => (
            ErrorKind::Unsupported,
            "NotSupported",
            "this object_store backend does not support the operation".to_string(),
        ),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => (
            ErrorKind::Unauthorized,
            "PermissionDenied",
            "check the credentials the object_store client was built with".to_string(),
        ),
        E::UnknownConfigurationKey { key, .. } => (
            ErrorKind::Misconfigured,
            "UnknownConfigurationKey",
            format!("'{key}' is not an object_store configuration key"),
        ),
        E::InvalidPath { .. } => (
            ErrorKind::InvalidInput,
            "InvalidPath",
            "object_store refused the path".to_string(),
        ),
        _ => generic(&err, op, status),
    };
    let mut mapped = CasError::new(kind, message).with_key(key).with_code(code);
    if let Some(status) = status {
        mapped = mapped.with_status(status);
    }
    mapped.with_source(err)
}

fn generic(
    err: &object_store::Error,
    op: Operation,
    status: Option<u16>,
) -> (ErrorKind, &'static str, String) {
    let detail = err.to_string();
    match status {
        Some(400 | 501) if op.is_write() => (
            ErrorKind::Unsupported,
            "BadRequest",
            format!("the store refused the conditional write: {detail}"),
        ),
        Some(404) => (
            ErrorKind::Misconfigured,
            "NotFound",
            format!("check the bucket or container: {detail}"),
        ),
        _ if op.is_write() => (
            ErrorKind::Ambiguous,
            "Generic",
            format!(
                "the write may or may not have taken effect (object_store may have retried \
                 it): {detail}"
            ),
        ),
        Some(429 | 503) => (ErrorKind::Throttled, "Generic", detail),
        Some(_) => (ErrorKind::Ambiguous, "Generic", detail),
        None => match http_kind(err) {
            Some(HttpErrorKind::Connect) => (ErrorKind::Transport, "Connect", detail),
            _ => (ErrorKind::Ambiguous, "Generic", detail),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(text: &str) -> Box<dyn std::error::Error + Send + Sync> {
        text.to_string().into()
    }

    #[test]
    fn condition_failures_are_precondition_failed() {
        let err = object_store::Error::AlreadyExists {
            path: "p".into(),
            source: boxed("Server returned non-2xx status code: 412 Precondition Failed: "),
        };
        let mapped = map_error(err, Operation::Create, "k");
        assert_eq!(mapped.kind(), ErrorKind::PreconditionFailed);
        assert_eq!(mapped.status(), Some(412));
        assert_eq!(mapped.key(), Some("k"));
    }

    #[test]
    fn generic_failures_of_writes_are_ambiguous() {
        let err = object_store::Error::Generic {
            store: "S3",
            source: boxed("Server returned non-2xx status code: 503 Service Unavailable: "),
        };
        let mapped = map_error(err, Operation::Replace, "k");
        assert_eq!(mapped.kind(), ErrorKind::Ambiguous);
        assert!(mapped.may_have_taken_effect());
        let err = object_store::Error::Generic {
            store: "S3",
            source: boxed("Server returned non-2xx status code: 503 Service Unavailable: "),
        };
        assert_eq!(
            map_error(err, Operation::Read, "k").kind(),
            ErrorKind::Throttled
        );
    }

    #[test]
    fn missing_update_is_unsupported() {
        let err = object_store::Error::NotImplemented {
            operation: "PutMode::Update".into(),
            implementer: "LocalFileSystem".into(),
        };
        let mapped = map_error(err, Operation::Replace, "k");
        assert_eq!(mapped.kind(), ErrorKind::Unsupported);
        assert!(
            mapped.to_string().contains("cannot hold leases"),
            "{mapped}"
        );
    }
}
