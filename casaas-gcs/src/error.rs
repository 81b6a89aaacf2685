//! Mapping GCS failures into [`CasError`].
//!
//! Every failed request, whether it went through the storage client (reads,
//! writes) or through the JSON API client of this crate (list, delete), is
//! first reduced to a [`Failure`]: the facts that decide what happened. The
//! kind comes from the one policy of [`casaas_core::provider::classify`] with GCS's
//! [`code_table`]; [`map_failure`] builds the `CasError`, so the mapping is
//! unit-tested without a network.

use std::time::Duration;

use casaas_core::provider::Operation;
use casaas_core::{CasError, ErrorKind};

/// The facts of one failed request, and how far it got: core's one record
/// for every provider (GCS's reason goes in `code`).
pub use casaas_core::provider::{Failure, Stage};

/// Whether a 404 message says the bucket, not the object, is missing.
fn names_missing_bucket(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("bucket does not exist")
        || m.contains("no such bucket")
        || m.contains("bucket not found")
}

/// GCS's table of answers for [`casaas_core::provider::classify`]; `None` leaves the
/// answer to the core policy. `message` is the provider's message, which
/// alone tells a missing bucket from a missing object on a read.
pub fn code_table(
    op: Operation,
    status: Option<u16>,
    reason: Option<&str>,
    message: &str,
) -> Option<ErrorKind> {
    match (status?, reason) {
        // A 404 on an upload or a list can only mean the bucket is missing;
        // on a read or delete the message tells bucket from object.
        (404, _)
            if matches!(op, Operation::Create | Operation::Replace | Operation::List)
                || names_missing_bucket(message) =>
        {
            Some(ErrorKind::Misconfigured)
        }
        // gRPC ABORTED: a concurrency conflict, the call was not applied.
        (409, Some("ABORTED")) => Some(ErrorKind::ConcurrentRequest),
        _ => None,
    }
}

/// Turns the facts of a failed `op` on `key` in `bucket` into the contract's
/// error, keeping the HTTP status and provider reason as evidence.
pub fn map_failure(op: Operation, bucket: &str, key: &str, failure: Failure) -> CasError {
    let verb = op.name();
    let detail = if failure.message.is_empty() {
        String::new()
    } else {
        format!(": {}", failure.message)
    };
    let table = |op, status, reason: Option<&str>| code_table(op, status, reason, &failure.message);
    let kind = match failure.stage {
        // Not an answer GCS sends: a read learns the store is not GCS.
        Stage::Unreadable if !op.writes() => ErrorKind::Unsupported,
        _ => failure.kind(op, &table),
    };
    let message = match (failure.stage, kind) {
        (Stage::NotSent, _) => format!("the {verb} request was not sent{detail}"),
        (Stage::Credentials, _) => format!(
            "no credentials for the {verb} request{detail}; configure Application Default \
             Credentials (GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default \
             login`), or use anonymous credentials for an emulator"
        ),
        (Stage::Rejected, _) => format!("the {verb} request could not be built{detail}"),
        (Stage::TimedOut, _) => format!("no answer to the {verb} request in time{detail}"),
        (Stage::Interrupted, _) => {
            format!("the connection broke during the {verb} request{detail}")
        }
        (Stage::Unreadable, ErrorKind::Unsupported) => format!(
            "the store's answer to the {verb} request is not what GCS sends \
             (an incomplete emulator?){detail}"
        ),
        (Stage::Unreadable, _) => {
            format!("the answer to the {verb} request could not be read{detail}")
        }
        (Stage::Answered, kind) => answer_message(kind, verb, bucket, failure.status, &detail),
        (_, _) => format!("the {verb} request failed{detail}"),
    };
    let missing_bucket = kind == ErrorKind::Misconfigured && failure.status == Some(404);
    let mut err = failure.into_error(kind, message, key);
    if missing_bucket {
        err = err.with_bucket_missing();
    }
    err
}

fn answer_message(
    kind: ErrorKind,
    verb: &str,
    bucket: &str,
    status: Option<u16>,
    detail: &str,
) -> String {
    match kind {
        ErrorKind::PreconditionFailed => {
            format!("the generation condition did not hold{detail}")
        }
        ErrorKind::Throttled => format!(
            "GCS asked to slow down (about one write per second to one object is \
             sustainable){detail}"
        ),
        ErrorKind::Misconfigured => format!(
            "bucket '{bucket}' does not exist or is not visible to these credentials; \
             create it or fix the URL{detail}"
        ),
        ErrorKind::NotFound => format!("no such object{detail}"),
        ErrorKind::Unauthorized => format!(
            "the credentials may not {verb} in bucket '{bucket}'; grant \
             roles/storage.objectUser on the bucket (or storage.objects.get, create, \
             delete and list){detail}"
        ),
        ErrorKind::ConcurrentRequest => {
            format!("a concurrent change to the same object conflicted{detail}")
        }
        ErrorKind::Unsupported if status == Some(501) => {
            format!("the store does not implement this {verb} request{detail}")
        }
        ErrorKind::Ambiguous if matches!(status, Some(408 | 500..=599)) => {
            format!("the store failed during the {verb} request{detail}")
        }
        ErrorKind::InvalidInput => format!("the store rejected the {verb} request{detail}"),
        _ => format!(
            "unexpected HTTP status {} to the {verb} request{detail}",
            status.unwrap_or(0)
        ),
    }
}

/// The facts of a failed storage-client call.
pub(crate) fn from_sdk(err: &google_cloud_storage::Error) -> Failure {
    let reason_of = |status: &google_cloud_gax::error::rpc::Status| {
        status.details.iter().find_map(|d| match d {
            google_cloud_gax::error::rpc::StatusDetails::ErrorInfo(info)
                if !info.reason.is_empty() =>
            {
                Some(info.reason.clone())
            }
            _ => None,
        })
    };
    if err.is_connect() {
        return Failure::at(Stage::NotSent, err.to_string());
    }
    if err.is_timeout() {
        return Failure::at(Stage::TimedOut, err.to_string());
    }
    if err.is_authentication() {
        return Failure::at(Stage::Credentials, err.to_string());
    }
    if err.is_binding() {
        return Failure::at(Stage::Rejected, err.to_string());
    }
    if err.is_deserialization() {
        return Failure::at(Stage::Unreadable, err.to_string());
    }
    if let Some(code) = err.http_status_code() {
        let retry_after = err
            .http_headers()
            .and_then(|h| h.get("retry-after"))
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let (reason, message) = match err.status() {
            Some(status) => (reason_of(status), status.message.clone()),
            None => (
                None,
                err.http_payload()
                    .map(|p| short_text(p))
                    .unwrap_or_default(),
            ),
        };
        return Failure::answered(code, reason, message).with_retry_after(retry_after);
    }
    if let Some(status) = err.status() {
        // A gRPC answer: give it the HTTP status GCS documents for the code.
        use google_cloud_gax::error::rpc::Code;
        let http = match status.code {
            Code::NotFound => Some(404),
            Code::FailedPrecondition => Some(412),
            Code::ResourceExhausted => Some(429),
            Code::PermissionDenied => Some(403),
            Code::Unauthenticated => Some(401),
            Code::Aborted | Code::AlreadyExists => Some(409),
            Code::InvalidArgument | Code::OutOfRange => Some(400),
            Code::Unimplemented => Some(501),
            Code::Unavailable | Code::Internal | Code::Unknown | Code::DataLoss => Some(503),
            Code::DeadlineExceeded | Code::Cancelled => None,
            _ => None,
        };
        let reason = reason_of(status).or_else(|| Some(status.code.name().to_string()));
        return match http {
            Some(http) => Failure::answered(http, reason, status.message.clone()),
            None => {
                let mut failure = Failure::at(Stage::TimedOut, status.message.clone());
                failure.code = reason;
                failure
            }
        };
    }
    // Serialization errors of a streamed body and broken connections both
    // happen while the request is on the wire.
    Failure::at(Stage::Interrupted, err.to_string())
}

/// The facts of a failed request of this crate's JSON API client that got
/// no answer.
pub(crate) fn from_reqwest(err: &reqwest::Error) -> Failure {
    if err.is_connect() {
        Failure::at(Stage::NotSent, err.to_string())
    } else if err.is_timeout() {
        Failure::at(Stage::TimedOut, err.to_string())
    } else if err.is_builder() {
        Failure::at(Stage::Rejected, err.to_string())
    } else if err.is_decode() {
        Failure::at(Stage::Unreadable, err.to_string())
    } else {
        Failure::at(Stage::Interrupted, err.to_string())
    }
}

/// The facts of an error answer of the JSON API: status, and the reason and
/// message of a body `{"error": {"message": …, "errors": [{"reason": …}]}}`.
pub fn from_json_answer(status: u16, retry_after: Option<&str>, body: &[u8]) -> Failure {
    #[derive(serde::Deserialize)]
    struct Wrapper {
        error: Body,
    }
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(default)]
        message: String,
        #[serde(default)]
        errors: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        #[serde(default)]
        reason: String,
    }
    let retry_after = retry_after.and_then(parse_retry_after);
    match serde_json::from_slice::<Wrapper>(body) {
        Ok(w) => {
            let reason = w.error.errors.into_iter().map(|e| e.reason).next();
            Failure::answered(status, reason, w.error.message)
        }
        Err(_) => Failure::answered(status, None, short_text(body)),
    }
    .with_retry_after(retry_after)
}

/// `Retry-After` in seconds (the HTTP-date form is not used by GCS).
fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The first 200 characters of a body, on one line.
fn short_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rstest::rstest;

    fn answered(op: Operation, status: u16, message: &str) -> CasError {
        map_failure(
            op,
            "bkt",
            "k",
            Failure::answered(status, Some("reason".into()), message),
        )
    }

    #[rstest]
    #[case(Operation::Create, 412, ErrorKind::PreconditionFailed)]
    #[case(Operation::Replace, 412, ErrorKind::PreconditionFailed)]
    #[case(Operation::Delete, 412, ErrorKind::PreconditionFailed)]
    #[case(Operation::Replace, 429, ErrorKind::Throttled)]
    #[case(Operation::Get, 429, ErrorKind::Throttled)]
    #[case(Operation::Create, 500, ErrorKind::Ambiguous)]
    #[case(Operation::Replace, 502, ErrorKind::Ambiguous)]
    #[case(Operation::Replace, 503, ErrorKind::Ambiguous)]
    #[case(Operation::Create, 504, ErrorKind::Ambiguous)]
    #[case(Operation::Get, 503, ErrorKind::Ambiguous)]
    #[case(Operation::Create, 408, ErrorKind::Ambiguous)]
    #[case(Operation::Get, 404, ErrorKind::NotFound)]
    #[case(Operation::Delete, 404, ErrorKind::NotFound)]
    #[case(Operation::Create, 401, ErrorKind::Unauthorized)]
    #[case(Operation::List, 403, ErrorKind::Unauthorized)]
    #[case(Operation::Replace, 409, ErrorKind::Ambiguous)]
    #[case(Operation::Get, 409, ErrorKind::InvalidInput)]
    #[case(Operation::Create, 501, ErrorKind::Unsupported)]
    #[case(Operation::Create, 400, ErrorKind::InvalidInput)]
    #[case(Operation::Create, 413, ErrorKind::InvalidInput)]
    fn status_codes(#[case] op: Operation, #[case] status: u16, #[case] kind: ErrorKind) {
        let err = answered(op, status, "No such object: bkt/k");
        assert_eq!(err.kind(), kind, "{op:?} {status}: {err}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.code(), Some("reason"));
        assert_eq!(err.key(), Some("k"));
    }

    #[rstest]
    #[case(Operation::Create, "Not Found")]
    #[case(Operation::Replace, "Not Found")]
    #[case(Operation::List, "Not Found")]
    #[case(Operation::Get, "The specified bucket does not exist.")]
    #[case(Operation::Delete, "The specified bucket does not exist.")]
    fn missing_bucket_names_the_bucket(#[case] op: Operation, #[case] message: &str) {
        let err = answered(op, 404, message);
        assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
        assert!(err.to_string().contains("bucket 'bkt'"), "{err}");
    }

    #[rstest]
    #[case(Stage::NotSent, Operation::Create, ErrorKind::NotSent)]
    #[case(Stage::NotSent, Operation::Get, ErrorKind::NotSent)]
    #[case(Stage::TimedOut, Operation::Create, ErrorKind::Ambiguous)]
    #[case(Stage::TimedOut, Operation::Get, ErrorKind::Ambiguous)]
    #[case(Stage::Interrupted, Operation::Get, ErrorKind::Ambiguous)]
    #[case(Stage::Interrupted, Operation::Replace, ErrorKind::Ambiguous)]
    #[case(Stage::Unreadable, Operation::Replace, ErrorKind::Ambiguous)]
    #[case(Stage::Unreadable, Operation::Get, ErrorKind::Unsupported)]
    #[case(Stage::Credentials, Operation::Get, ErrorKind::Unauthorized)]
    #[case(Stage::Rejected, Operation::Create, ErrorKind::Misconfigured)]
    fn stages(#[case] stage: Stage, #[case] op: Operation, #[case] kind: ErrorKind) {
        let err = map_failure(op, "bkt", "k", Failure::at(stage, "details"));
        assert_eq!(err.kind(), kind, "{err}");
        assert_eq!(err.status(), None);
        assert!(err.to_string().contains("details"), "{err}");
    }

    #[test]
    fn only_writes_after_send_are_ambiguous() {
        let err = map_failure(Operation::Create, "b", "k", Failure::at(Stage::NotSent, ""));
        assert!(!err.may_have_taken_effect());
        assert!(err.is_retryable());
        let err = map_failure(
            Operation::Create,
            "b",
            "k",
            Failure::at(Stage::TimedOut, ""),
        );
        assert!(err.may_have_taken_effect());
    }

    #[test]
    fn json_error_bodies() {
        let body = br#"{"error":{"code":412,"message":"At least one of the pre-conditions you specified did not hold.","errors":[{"domain":"global","reason":"conditionNotMet","message":"x"}]}}"#;
        let f = from_json_answer(412, None, body);
        assert_eq!(f.code.as_deref(), Some("conditionNotMet"));
        assert!(f.message.starts_with("At least one"));
        let err = map_failure(Operation::Delete, "b", "k", f);
        assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
        assert_eq!(err.evidence(), "412 conditionNotMet");

        let f = from_json_answer(429, Some("3"), b"Too many\n requests");
        assert_eq!(f.message, "Too many requests");
        assert_eq!(f.code, None);
        let err = map_failure(Operation::Replace, "b", "k", f);
        assert_eq!(err.kind(), ErrorKind::Throttled);
        assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn sdk_errors() {
        use google_cloud_gax::error::rpc::{Code, Status};
        // A JSON error answer as the storage client reports it.
        let status = Status::default()
            .set_code(Code::Unknown)
            .set_message("Precondition failed");
        let err = google_cloud_storage::Error::service_with_http_metadata(
            status,
            Some(412),
            Some(http::HeaderMap::new()),
        );
        let f = from_sdk(&err);
        assert_eq!((f.stage, f.status), (Stage::Answered, Some(412)));
        assert_eq!(
            map_failure(Operation::Create, "b", "k", f).kind(),
            ErrorKind::PreconditionFailed
        );
        // A raw (non-JSON) error answer.
        let mut headers = http::HeaderMap::new();
        headers.insert("retry-after", http::HeaderValue::from_static("2"));
        let err =
            google_cloud_storage::Error::http(429, headers, bytes::Bytes::from_static(b"slow"));
        let e = map_failure(Operation::Replace, "b", "k", from_sdk(&err));
        assert_eq!(e.kind(), ErrorKind::Throttled);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        // Timeouts, refused connections, broken connections.
        let err = google_cloud_storage::Error::timeout("deadline");
        assert_eq!(
            map_failure(Operation::Replace, "b", "k", from_sdk(&err)).kind(),
            ErrorKind::Ambiguous
        );
        let err = google_cloud_storage::Error::connect("refused");
        assert_eq!(
            map_failure(Operation::Replace, "b", "k", from_sdk(&err)).kind(),
            ErrorKind::NotSent
        );
        let err = google_cloud_storage::Error::io("reset");
        assert_eq!(
            map_failure(Operation::Replace, "b", "k", from_sdk(&err)).kind(),
            ErrorKind::Ambiguous
        );
        // A gRPC answer without HTTP status.
        let err = google_cloud_storage::Error::service(
            Status::default()
                .set_code(Code::FailedPrecondition)
                .set_message("no"),
        );
        let e = map_failure(Operation::Delete, "b", "k", from_sdk(&err));
        assert_eq!(e.kind(), ErrorKind::PreconditionFailed);
        assert_eq!(e.code(), Some("FAILED_PRECONDITION"));
    }
}
