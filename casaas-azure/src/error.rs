//! From what the wire said to the contract's [`CasError`].
//!
//! The transport reduces every failed request to a [`Failure`]; the pure
//! function [`map_failure`] turns it into a [`CasError`] for the operation
//! that failed. Keeping the mapping pure keeps it testable per status code
//! and per Azure error code without a server.

use std::fmt;
use std::time::Duration;

use casaas_core::provider::Operation;
use casaas_core::{CasError, ErrorKind};

/// A failed request, reduced to what the error mapping needs. Never holds
/// credentials: transport details are rendered without the request URL
/// (which may carry a SAS).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The service answered with an error status.
    Status {
        /// The HTTP status.
        status: u16,
        /// The Azure error code (`x-ms-error-code` header or the XML body's `Code`).
        code: Option<String>,
        /// The first line of the service's message, if any.
        message: Option<String>,
        /// The `Retry-After` the service asked for, if any.
        retry_after: Option<Duration>,
    },
    /// No connection could be made: the request was never sent.
    NotSent {
        /// What failed, for people.
        detail: String,
    },
    /// The connection failed or timed out after the request was (at least
    /// partly) sent: it may have taken effect.
    AfterSend {
        /// Whether the client's timeout fired.
        timed_out: bool,
        /// What failed, for people.
        detail: String,
    },
    /// The service said yes, but its answer could not be understood (a
    /// header missing or malformed): the request did take effect.
    BadResponse {
        /// What could not be understood.
        detail: String,
    },
    /// No credential could be obtained (token fetch failed).
    Credential {
        /// What failed, for people.
        detail: String,
    },
    /// The request could not be built (bad URL, bad key encoding).
    Request {
        /// What failed, for people.
        detail: String,
    },
}

impl Failure {
    /// A status failure with an error code and nothing else.
    pub fn status(status: u16, code: Option<&str>) -> Self {
        Failure::Status {
            status,
            code: code.map(str::to_string),
            message: None,
            retry_after: None,
        }
    }

    /// The Azure error code, if the service gave one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Failure::Status { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// The HTTP status, if the service answered.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Failure::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Core's record of this failure: how far the request got, the status
    /// and code if the service answered. Its [`kind`](casaas_core::provider::Failure::kind)
    /// is the one error policy with Azure's [`code_table`].
    pub fn record(&self) -> casaas_core::provider::Failure {
        use casaas_core::provider::{Failure as Record, Stage};
        match self {
            Failure::Status {
                status,
                code,
                message,
                retry_after,
            } => Record::answered(*status, code.clone(), message.clone().unwrap_or_default())
                .with_retry_after(*retry_after),
            Failure::NotSent { detail } => Record::at(Stage::NotSent, detail.clone()),
            Failure::AfterSend { timed_out, detail } => Record::at(
                if *timed_out {
                    Stage::TimedOut
                } else {
                    Stage::Interrupted
                },
                detail.clone(),
            ),
            Failure::BadResponse { detail } => Record::at(Stage::Unreadable, detail.clone()),
            Failure::Credential { detail } => Record::at(Stage::Credentials, detail.clone()),
            Failure::Request { detail } => Record::at(Stage::Rejected, detail.clone()),
        }
    }

    /// Reduces an SDK error: errors from this crate's transport carry a
    /// [`Failure`]; the SDK's own errors happen either before sending (URL,
    /// signing, credential) or after a successful answer (parsing).
    pub(crate) fn from_sdk(error: &azure_core::Error) -> Failure {
        if let Some(wire) = find_wire(error) {
            return wire.0.clone();
        }
        use azure_core::error::ErrorKind as K;
        match error.kind() {
            K::HttpResponse { status, error_code } => Failure::Status {
                status: u16::from(*status),
                code: error_code.clone(),
                message: None,
                retry_after: None,
            },
            K::Credential => Failure::Credential {
                detail: error.to_string(),
            },
            K::DataConversion => Failure::BadResponse {
                detail: error.to_string(),
            },
            K::Io => Failure::AfterSend {
                timed_out: false,
                detail: error.to_string(),
            },
            _ => Failure::Request {
                detail: error.to_string(),
            },
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Status {
                status,
                code,
                message,
                ..
            } => {
                write!(f, "HTTP {status}")?;
                if let Some(code) = code {
                    write!(f, " {code}")?;
                }
                if let Some(message) = message {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            Failure::NotSent { detail } => write!(f, "not sent: {detail}"),
            Failure::AfterSend {
                timed_out: true,
                detail,
            } => write!(f, "timed out after sending: {detail}"),
            Failure::AfterSend { detail, .. } => write!(f, "failed after sending: {detail}"),
            Failure::BadResponse { detail } => write!(f, "unreadable answer: {detail}"),
            Failure::Credential { detail } => write!(f, "no credential: {detail}"),
            Failure::Request { detail } => write!(f, "request not built: {detail}"),
        }
    }
}

/// A [`Failure`] travelling inside an `azure_core::Error` from this crate's
/// transport up through the SDK.
#[derive(Debug, Clone)]
pub(crate) struct WireFailure(pub(crate) Failure);

impl fmt::Display for WireFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WireFailure {}

fn find_wire(error: &azure_core::Error) -> Option<&WireFailure> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = error.get_ref().map(|e| {
        let e: &(dyn std::error::Error + 'static) = e;
        e
    });
    while let Some(e) = current {
        if let Some(wire) = e.downcast_ref::<WireFailure>() {
            return Some(wire);
        }
        if let Some(inner) = e.downcast_ref::<azure_core::Error>() {
            current = inner.get_ref().map(|e| {
                let e: &(dyn std::error::Error + 'static) = e;
                e
            });
            continue;
        }
        current = e.source();
    }
    None
}

/// Maps a failed request to the contract's error.
///
/// `container` names the container in messages about a missing container.
/// The HTTP status and Azure error code are kept in the error as evidence.
///
/// ```
/// use casaas_azure::{Failure, map_failure};
/// use casaas_core::ErrorKind;
/// use casaas_core::provider::Operation;
///
/// // Azurite answers a losing create with 409, Azure with 412: both mean
/// // someone else's write is there.
/// for (status, code) in [(409, "BlobAlreadyExists"), (412, "ConditionNotMet")] {
///     let err = map_failure(Operation::Create, &Failure::status(status, Some(code)), "c");
///     assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
///     assert_eq!(err.status(), Some(status));
///     assert_eq!(err.code(), Some(code));
/// }
/// ```
pub fn map_failure(op: Operation, failure: &Failure, container: &str) -> CasError {
    let kind = failure.record().kind(op, &code_table);
    let error = match failure {
        Failure::Status {
            status,
            code,
            message,
            retry_after,
        } => {
            let mut error = map_status(
                op,
                kind,
                *status,
                code.as_deref(),
                message.as_deref(),
                container,
            )
            .with_status(*status);
            if let Some(code) = code {
                error = error.with_code(code.clone());
            }
            if let Some(after) = retry_after {
                error = error.with_retry_after(*after);
            }
            error
        }
        Failure::NotSent { detail } => CasError::new(
            kind,
            format!("could not reach the blob endpoint; nothing was sent ({detail})"),
        ),
        Failure::AfterSend { timed_out, detail } => CasError::new(
            kind,
            if *timed_out {
                format!("timed out after the request was sent; it may have taken effect ({detail})")
            } else {
                format!(
                    "the connection failed after the request was sent; it may have taken effect ({detail})"
                )
            },
        ),
        // The service said yes but the answer could not be read: Azure
        // keeps it `Ambiguous` for reads too (retrying is the fix).
        Failure::BadResponse { detail } => CasError::new(
            kind,
            if op.writes() {
                format!(
                    "the service accepted the request but its answer could not be read, so the \
                     new version is unknown; read to resolve ({detail})"
                )
            } else {
                format!("the service's answer could not be read ({detail})")
            },
        ),
        Failure::Credential { detail } => CasError::new(
            kind,
            format!("could not obtain a token for Azure Storage ({detail})"),
        ),
        Failure::Request { detail } => CasError::misconfigured(format!(
            "the request could not be built; check the account, container and endpoint ({detail})"
        )),
    };
    error.with_source(failure.clone().into_error())
}

impl Failure {
    fn into_error(self) -> WireFailure {
        WireFailure(self)
    }
}

/// Azure's table of error codes for [`casaas_core::provider::classify`]; `None`
/// leaves the answer to the core policy.
pub fn code_table(_op: Operation, status: Option<u16>, code: Option<&str>) -> Option<ErrorKind> {
    Some(match (status?, code) {
        // Azurite answers a losing `If-None-Match: *` put with 409
        // BlobAlreadyExists; Azure answers 412. Same meaning.
        (409, Some("BlobAlreadyExists")) => ErrorKind::PreconditionFailed,
        (404, Some("ContainerNotFound")) => ErrorKind::Misconfigured,
        // Any 404 but a missing blob: the account or endpoint is wrong.
        (404, Some(other)) if other != "BlobNotFound" => ErrorKind::Misconfigured,
        // Azure documents ServerBusy as a refusal to serve the request.
        (503, Some("ServerBusy")) => ErrorKind::Throttled,
        (400, Some(c)) if c.starts_with("Unsupported") => ErrorKind::Unsupported,
        (400, _) => ErrorKind::Misconfigured,
        // Documented refusals: the blob's state forbids the operation.
        (409, Some("SnapshotsPresent" | "BlobArchived" | "ContainerBeingDeleted")) => {
            ErrorKind::Misconfigured
        }
        _ => return None,
    })
}

fn map_status(
    op: Operation,
    kind: ErrorKind,
    status: u16,
    code: Option<&str>,
    message: Option<&str>,
    container: &str,
) -> CasError {
    let said = message
        .map(|m| format!(" The service said: {m}"))
        .unwrap_or_default();
    let text = match (kind, status, code) {
        (ErrorKind::PreconditionFailed, _, _) => match (op, code) {
            (Operation::Create, _) => "the blob already exists".to_string(),
            (_, Some(c)) if c.starts_with("Lease") => format!(
                "the blob has a native lease ({c}); writes need its lease id, or wait until \
                 it is released or broken"
            ),
            _ => "the blob's current ETag is not the one given".to_string(),
        },
        (ErrorKind::Misconfigured, 404, Some("ContainerNotFound")) => format!(
            "container '{container}' does not exist in this storage account; create it, or add \
             create_container=true to the URL"
        ),
        (ErrorKind::Misconfigured, 409, Some(c)) => {
            format!("the blob or container is in a state that refuses this operation ({c}).{said}")
        }
        (ErrorKind::Misconfigured, 404, Some(other)) => {
            format!("the service answered 404 {other}; check the account name and endpoint.{said}")
        }
        (ErrorKind::NotFound, _, _) => "no such blob".to_string(),
        (ErrorKind::Unauthorized, _, _) => format!(
            "Azure Storage refused the credentials; check the account key, SAS permissions \
             and expiry, or the token's role (it needs Storage Blob Data Contributor).{said}"
        ),
        (ErrorKind::Throttled, _, _) => "the storage account asked us to slow down".to_string(),
        (ErrorKind::Unsupported, 501, _) => {
            format!("the service does not implement this operation.{said}")
        }
        (ErrorKind::Unsupported, _, Some(c)) => {
            format!("the service rejected a header or parameter it does not support ({c}).{said}")
        }
        (ErrorKind::InvalidInput, 413, _) => format!("the body is too large.{said}"),
        (ErrorKind::Ambiguous, 408, _) => {
            "the service timed out reading the request; it may have taken effect".to_string()
        }
        (ErrorKind::Ambiguous, 500..=599, _) => {
            format!("server error; the request may have taken effect.{said}")
        }
        (ErrorKind::Ambiguous, _, _) => format!(
            "unexpected answer HTTP {status} {} to a write; it may have taken effect.{said}",
            code.unwrap_or("(no error code)")
        ),
        _ => format!(
            "unexpected answer HTTP {status} {}.{said}",
            code.unwrap_or("(no error code)")
        ),
    };
    let error = CasError::new(kind, text);
    if code == Some("ContainerNotFound") {
        error.with_bucket_missing()
    } else {
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use casaas_core::provider::{Delivery, classify};

    fn kind(op: Operation, status: u16, code: Option<&str>) -> ErrorKind {
        map_failure(op, &Failure::status(status, code), "c").kind()
    }

    #[test]
    fn code_table_under_the_policy() {
        use Delivery::MaybeSent;
        use ErrorKind::*;
        for (op, delivery, status, code, kind) in [
            (Operation::Create, Delivery::NotSent, None, None, NotSent),
            (Operation::Create, MaybeSent, None, None, Ambiguous),
            (Operation::Get, MaybeSent, None, None, Ambiguous),
            (
                Operation::Create,
                MaybeSent,
                Some(409),
                Some("BlobAlreadyExists"),
                PreconditionFailed,
            ),
            (
                Operation::Replace,
                MaybeSent,
                Some(412),
                Some("ConditionNotMet"),
                PreconditionFailed,
            ),
            (
                Operation::Replace,
                MaybeSent,
                Some(412),
                Some("LeaseIdMissing"),
                PreconditionFailed,
            ),
            (
                Operation::Get,
                MaybeSent,
                Some(404),
                Some("BlobNotFound"),
                NotFound,
            ),
            (Operation::Delete, MaybeSent, Some(404), None, NotFound),
            (
                Operation::Create,
                MaybeSent,
                Some(404),
                Some("ContainerNotFound"),
                Misconfigured,
            ),
            (
                Operation::Get,
                MaybeSent,
                Some(404),
                Some("ResourceNotFound"),
                Misconfigured,
            ),
            (
                Operation::List,
                MaybeSent,
                Some(403),
                Some("AuthorizationFailure"),
                Unauthorized,
            ),
            (Operation::Replace, MaybeSent, Some(429), None, Throttled),
            (
                Operation::Replace,
                MaybeSent,
                Some(503),
                Some("ServerBusy"),
                Throttled,
            ),
            (Operation::Replace, MaybeSent, Some(503), None, Ambiguous),
            (
                Operation::Create,
                MaybeSent,
                Some(500),
                Some("InternalError"),
                Ambiguous,
            ),
            (Operation::Create, MaybeSent, Some(408), None, Ambiguous),
            (Operation::Create, MaybeSent, Some(501), None, Unsupported),
            (
                Operation::Create,
                MaybeSent,
                Some(400),
                Some("UnsupportedHeader"),
                Unsupported,
            ),
            (
                Operation::Create,
                MaybeSent,
                Some(400),
                Some("InvalidHeaderValue"),
                Misconfigured,
            ),
            (
                Operation::Create,
                MaybeSent,
                Some(413),
                Some("RequestBodyTooLarge"),
                InvalidInput,
            ),
            // A conflict Azure's table does not name may hide an applied write.
            (Operation::Replace, MaybeSent, Some(409), None, Ambiguous),
            (
                Operation::Delete,
                MaybeSent,
                Some(409),
                Some("SnapshotsPresent"),
                Misconfigured,
            ),
            (
                Operation::NativeLease,
                MaybeSent,
                Some(409),
                Some("SomethingNew"),
                Ambiguous,
            ),
            (
                Operation::Get,
                MaybeSent,
                Some(409),
                Some("LeaseAlreadyPresent"),
                InvalidInput,
            ),
        ] {
            assert_eq!(
                classify(op, delivery, status, code, &code_table),
                kind,
                "{op:?} {delivery:?} {status:?} {code:?}"
            );
            if let Some(status) = status {
                assert_eq!(
                    map_failure(op, &Failure::status(status, code), "c").kind(),
                    kind
                );
            }
        }
    }

    #[test]
    fn creates_that_lose() {
        assert_eq!(
            kind(Operation::Create, 409, Some("BlobAlreadyExists")),
            ErrorKind::PreconditionFailed
        );
        assert_eq!(
            kind(Operation::Create, 412, Some("ConditionNotMet")),
            ErrorKind::PreconditionFailed
        );
    }

    #[test]
    fn wire_failure_found_through_sdk_error() {
        let failure = Failure::status(412, Some("ConditionNotMet"));
        let sdk = azure_core::Error::new(
            azure_core::error::ErrorKind::Other,
            WireFailure(failure.clone()),
        );
        let wrapped = azure_core::Error::new(azure_core::error::ErrorKind::Other, sdk);
        assert_eq!(Failure::from_sdk(&wrapped), failure);
    }
}
