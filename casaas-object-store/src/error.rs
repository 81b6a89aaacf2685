//! Translating object_store's errors into casaas [`ErrorKind`]s.
//!
//! object_store does not expose HTTP statuses publicly; its error variants
//! already name the outcome (`AlreadyExists`, `Precondition`, `NotFound`,
//! ...). What remains (`Generic`) is a transport failure or an unexpected
//! status, after object_store's own retries. Such an answer to a write may
//! follow an attempt that took effect, so it is always
//! [`ErrorKind::Ambiguous`] on writes. The variants are this adapter's table
//! of codes under the one policy of [`casaas_core::provider::classify`].

use std::error::Error as _;

use casaas_core::provider::{Delivery, Operation, classify};
use casaas_core::{CasError, ErrorKind};

// This file, `store.rs` and `version.rs` are compiled once per object_store
// line (the crate root for 0.14, `v0_13` for 0.13): they name the library
// only as the parent's `os`.
use super::os;

use os::client::{HttpError, HttpErrorKind};

/// The HTTP status object_store's message names, if any. Its retry error
/// type is private, but its message reads "... status code: 503 ...".
fn status_in(err: &os::Error) -> Option<u16> {
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
fn http_kind(err: &os::Error) -> Option<HttpErrorKind> {
    let mut source = err.source();
    while let Some(e) = source {
        if let Some(http) = e.downcast_ref::<HttpError>() {
            return Some(http.kind());
        }
        source = e.source();
    }
    None
}

/// object_store's table for [`casaas_core::provider::classify`]: its error variants
/// (the code) already name most outcomes; a `Generic` failure of a write
/// may follow object_store's own retry of an attempt that took effect.
fn code_table(op: Operation, status: Option<u16>, code: Option<&str>) -> Option<ErrorKind> {
    Some(match (code?, status) {
        ("NotFound", _) => ErrorKind::NotFound,
        ("AlreadyExists" | "Precondition" | "NotModified", _) => ErrorKind::PreconditionFailed,
        ("NotImplemented" | "NotSupported", _) => ErrorKind::Unsupported,
        ("PermissionDenied", _) => ErrorKind::Unauthorized,
        ("UnknownConfigurationKey", _) => ErrorKind::Misconfigured,
        ("InvalidPath", _) => ErrorKind::InvalidInput,
        ("Generic", Some(400 | 501)) if op.writes() => ErrorKind::Unsupported,
        ("Generic", Some(404)) => ErrorKind::Misconfigured,
        ("Generic", _) if op.writes() => ErrorKind::Ambiguous,
        _ => return None,
    })
}

/// Maps `err` from an operation on `key`. Condition failures
/// (`AlreadyExists`, `Precondition`) map to [`ErrorKind::PreconditionFailed`]
/// here; the store decides separately whether they may hide its own write.
pub(crate) fn map_error(err: os::Error, op: Operation, key: &str) -> CasError {
    use os::Error as E;
    let status = status_in(&err);
    let (code, message) = match &err {
        E::NotFound { .. } => ("NotFound", "the object is not there".to_string()),
        E::AlreadyExists { .. } => (
            "AlreadyExists",
            "another write is already there".to_string(),
        ),
        E::Precondition { .. } => (
            "Precondition",
            "the object's current version is not the expected one".to_string(),
        ),
        E::NotModified { .. } => ("NotModified", "the store answered not modified".to_string()),
        E::NotImplemented { operation, .. } => (
            "NotImplemented",
            format!(
                "this object_store backend does not implement {operation}; a store without \
                 PutMode::Update (LocalFileSystem, HttpStore, S3 with conditional put \
                 disabled) cannot hold leases"
            ),
        ),
        E::NotSupported { .. } => (
            "NotSupported",
            "this object_store backend does not support the operation".to_string(),
        ),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => (
            "PermissionDenied",
            "check the credentials the object_store client was built with".to_string(),
        ),
        E::UnknownConfigurationKey { key, .. } => (
            "UnknownConfigurationKey",
            format!("'{key}' is not an object_store configuration key"),
        ),
        E::InvalidPath { .. } => ("InvalidPath", "object_store refused the path".to_string()),
        _ => match http_kind(&err) {
            Some(HttpErrorKind::Connect) if status.is_none() => ("Connect", err.to_string()),
            _ => ("Generic", err.to_string()),
        },
    };
    let delivery = if code == "Connect" {
        Delivery::NotSent
    } else {
        Delivery::MaybeSent
    };
    let kind = classify(op, delivery, status, Some(code), &code_table);
    let message = match (code, kind) {
        ("Generic", ErrorKind::Unsupported) => {
            format!("the store refused the conditional write: {message}")
        }
        ("Generic", ErrorKind::Misconfigured) => {
            format!("check the bucket or container: {message}")
        }
        ("Generic", ErrorKind::Ambiguous) if op.writes() => format!(
            "the write may or may not have taken effect (object_store may have retried \
             it): {message}"
        ),
        _ => message,
    };
    let mut mapped = CasError::new(kind, message).with_key(key).with_code(code);
    if code == "Generic" && kind == ErrorKind::Misconfigured {
        mapped = mapped.with_bucket_missing();
    }
    if let Some(status) = status {
        mapped = mapped.with_status(status);
    }
    mapped.with_source(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(text: &str) -> Box<dyn std::error::Error + Send + Sync> {
        text.to_string().into()
    }

    #[test]
    fn condition_failures_are_precondition_failed() {
        let err = os::Error::AlreadyExists {
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
        let err = os::Error::Generic {
            store: "S3",
            source: boxed("Server returned non-2xx status code: 503 Service Unavailable: "),
        };
        let mapped = map_error(err, Operation::Replace, "k");
        assert_eq!(mapped.kind(), ErrorKind::Ambiguous);
        assert!(mapped.may_have_taken_effect());
        let err = os::Error::Generic {
            store: "S3",
            source: boxed("Server returned non-2xx status code: 503 Service Unavailable: "),
        };
        // A bare 503 is no proof the store refused the request (the one
        // policy); a 429 is.
        assert_eq!(
            map_error(err, Operation::Get, "k").kind(),
            ErrorKind::Ambiguous
        );
        let err = os::Error::Generic {
            store: "S3",
            source: boxed("Server returned non-2xx status code: 429 Too Many Requests: "),
        };
        assert_eq!(
            map_error(err, Operation::Get, "k").kind(),
            ErrorKind::Throttled
        );
    }

    #[test]
    fn missing_update_is_unsupported() {
        let err = os::Error::NotImplemented {
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
