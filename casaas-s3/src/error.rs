//! How S3 answers become [`casaas_core::ErrorKind`]s.
//!
//! S3 supplies only its table of error codes ([`code_table`]); the kind
//! comes from the one policy of [`casaas_core::provider::classify`], a pure
//! function of the operation, whether the request may have been sent, the
//! HTTP status and the S3 error code, so that each case is unit-tested on
//! its own. The crate-private `from_sdk_error` is the glue that extracts
//! those facts from an `aws-sdk-s3` error.

use std::error::Error as StdError;
use std::time::{Duration, SystemTime};

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::dns::ResolveDnsError;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::date_time::{DateTime, Format};
use casaas_core::provider::{Delivery, Failure, Operation, Stage, classify};
use casaas_core::{CasError, ErrorKind};

/// The S3 verb of an operation, for messages.
fn verb(op: Operation) -> &'static str {
    match op {
        Operation::Get => "GetObject",
        // Neutral names: the condition's header depends on the dialect.
        Operation::Create => "PutObject (create-if-absent)",
        Operation::Replace => "PutObject (replace-if-match)",
        Operation::Delete => "DeleteObject (delete-if-match)",
        Operation::List => "ListObjectsV2",
        Operation::CreateBucket => "CreateBucket",
        _ => "request",
    }
}

/// S3 error codes that mean "slow down, nothing was done", whatever the
/// status (AWS documents 503 `SlowDown` as a refusal to serve the request).
const THROTTLE_CODES: &[&str] = &[
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "TooManyRequests",
    "RequestLimitExceeded",
    "ServerBusy",
];

/// S3's table of error codes for [`casaas_core::provider::classify`]: what an answer
/// means where S3 (or an S3-compatible) documents it; `None` leaves the
/// answer to the core policy.
pub fn code_table(op: Operation, status: Option<u16>, code: Option<&str>) -> Option<ErrorKind> {
    let code = code.unwrap_or("");
    if THROTTLE_CODES.contains(&code) {
        return Some(ErrorKind::Throttled);
    }
    Some(match (status?, code) {
        // Another conditional write to this key is in flight; nothing was
        // written. OperationAborted is the older name for the same.
        (409, "ConditionalRequestConflict" | "OperationAborted") => ErrorKind::ConcurrentRequest,
        (404, "NoSuchBucket") => ErrorKind::Misconfigured,
        // Aliyun OSS (and, as reported, Tencent COS) refuse a create sent
        // with their forbid-overwrite header this way: the object exists
        // and nothing was written, as a 412 says elsewhere.
        (409, "FileAlreadyExists") if op == Operation::Create => ErrorKind::PreconditionFailed,
        // A wrong region or endpoint: S3 redirects instead of serving.
        (301 | 307 | 308, _)
        | (400, "AuthorizationHeaderMalformed" | "IllegalLocationConstraintException")
        | (400, "InvalidBucketName") => ErrorKind::Misconfigured,
        (400, "EntityTooLarge" | "KeyTooLongError" | "InvalidDigest" | "BadDigest") => {
            ErrorKind::InvalidInput
        }
        // The server did not finish reading the request: a proxy in front
        // of it may have applied the write.
        (400, "RequestTimeout") => ErrorKind::Ambiguous,
        (400, "NotImplemented") => ErrorKind::Unsupported,
        // A store that does not know a conditional header rejects it.
        (400, _) if op.is_conditional() => ErrorKind::Unsupported,
        _ => return None,
    })
}

/// Maps an S3 error response (status and error code, if the body had one)
/// for operation `op` to the contract's error kind: [`code_table`] under
/// the core policy.
///
/// ```
/// use casaas_core::ErrorKind;
/// use casaas_core::provider::Operation;
/// use casaas_s3::error::classify_response;
///
/// assert_eq!(classify_response(Operation::Create, 412, Some("PreconditionFailed")), ErrorKind::PreconditionFailed);
/// assert_eq!(classify_response(Operation::Replace, 500, Some("InternalError")), ErrorKind::Ambiguous);
/// ```
pub fn classify_response(op: Operation, status: u16, code: Option<&str>) -> ErrorKind {
    classify(op, Delivery::MaybeSent, Some(status), code, &code_table)
}

/// Parses a `Retry-After` header: delay seconds or an HTTP date (relative
/// to `now`; a date in the past gives zero).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = parse_http_date(value)?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn parse_http_date(value: &str) -> Option<SystemTime> {
    DateTime::from_str(value.trim(), Format::HttpDate)
        .ok()
        .and_then(|d| SystemTime::try_from(d).ok())
}

/// What the caller was doing, for messages.
pub(crate) struct Context<'a> {
    pub op: Operation,
    pub key: &'a str,
    pub bucket: &'a str,
    pub location: &'a str,
}

fn message(kind: ErrorKind, ctx: &Context<'_>, code: &str) -> String {
    let verb = verb(ctx.op);
    match kind {
        ErrorKind::PreconditionFailed => format!("{verb}: another write is there"),
        ErrorKind::ConcurrentRequest => {
            format!(
                "{verb}: another conditional request on this key was in flight; nothing was written"
            )
        }
        ErrorKind::Throttled => format!("{verb}: the store asked to slow down"),
        ErrorKind::NotFound => format!("{verb}: the object is not there"),
        ErrorKind::Ambiguous => format!(
            "{verb}: the request may or may not have taken effect; read the object to find out"
        ),
        ErrorKind::Unsupported if ctx.op == Operation::Create => format!(
            "{verb}: the store at {} does not implement this conditional request; some \
             stores take a vendor header instead (forbid_overwrite=oss|cos, gcs_interop=true: \
             see the vendor notes in docs/providers/s3.md)",
            ctx.location
        ),
        ErrorKind::Unsupported => format!(
            "{verb}: the store at {} does not implement this conditional request \
             (see the vendor notes in docs/providers/s3.md)",
            ctx.location
        ),
        ErrorKind::Unauthorized if code == "SignatureDoesNotMatch" => format!(
            "{verb}: the store refused the request's signature: the secret access key does not \
             belong to the access key id (or the clock is far off); check both"
        ),
        ErrorKind::Unauthorized if code == "InvalidAccessKeyId" => format!(
            "{verb}: the store does not know the access key id: check AWS_ACCESS_KEY_ID or the \
             profile in use"
        ),
        ErrorKind::Unauthorized => format!(
            "{verb}: the store rejected the credentials or they lack permission on bucket '{}' \
             (the needed actions are s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket)",
            ctx.bucket
        ),
        ErrorKind::Misconfigured if code == "NoSuchBucket" => format!(
            "bucket '{}' does not exist at {}: create it or fix the bucket in the URL",
            ctx.bucket, ctx.location
        ),
        ErrorKind::Misconfigured => format!(
            "{verb}: the store at {} redirected or rejected the request as misaddressed: \
             check region=, endpoint= and path_style= for bucket '{}'",
            ctx.location, ctx.bucket
        ),
        ErrorKind::InvalidInput => format!("{verb}: the store rejected the request as invalid"),
        ErrorKind::NotSent => format!(
            "{verb}: the request did not reach the store at {}",
            ctx.location
        ),
        _ => format!("{verb}: failed"),
    }
}

/// Decides whether a failure without a response happened before anything
/// was sent, by looking through its chain of causes.
fn delivery_of(err: &(dyn StdError + 'static)) -> Delivery {
    let mut next: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<hyper_util::client::legacy::Error>()
            && h.is_connect()
        {
            return Delivery::NotSent;
        }
        if e.downcast_ref::<ResolveDnsError>().is_some() {
            return Delivery::NotSent;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
            )
        {
            return Delivery::NotSent;
        }
        next = e.source();
    }
    Delivery::MaybeSent
}

/// Converts an `aws-sdk-s3` error into a [`CasError`] carrying the status,
/// the S3 error code and Retry-After.
pub(crate) fn from_sdk_error<E>(err: SdkError<E, HttpResponse>, ctx: &Context<'_>) -> CasError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    let code = err.code().map(str::to_owned);
    let retry_after = err
        .raw_response()
        .and_then(|r| r.headers().get("retry-after"))
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    let stage = match (&err, status) {
        (SdkError::ServiceError(_), Some(_)) => Stage::Answered,
        (SdkError::ConstructionFailure(_), _) => {
            // Nothing was sent; usually missing credentials or a bad setting.
            let mut error = CasError::misconfigured(format!(
                "{}: the request could not be built (credentials, region or endpoint): {}",
                verb(ctx.op),
                chain(&err)
            ))
            .with_key(ctx.key);
            if let Some(status) = status {
                error = error.with_status(status);
            }
            return error;
        }
        (SdkError::ResponseError(_), Some(status)) if status >= 300 => Stage::Answered,
        // No answer in time, or a 2xx whose body could not be read.
        (SdkError::TimeoutError(_), _) => Stage::TimedOut,
        (SdkError::ResponseError(_), _) => Stage::Unreadable,
        _ => match delivery_of(&err) {
            Delivery::NotSent => Stage::NotSent,
            // Possibly sent (and any later, finer answer): assume it may
            // have been.
            _ => Stage::Interrupted,
        },
    };
    // Only an error answer's status and code say what happened; a 2xx that
    // could not be read is evidence, not a verdict.
    let answered = stage == Stage::Answered;
    let mut failure = Failure::at(stage, String::new()).with_retry_after(retry_after);
    failure.status = status.filter(|_| answered);
    failure.code = code.clone().filter(|_| answered);
    let kind = failure.kind(ctx.op, &code_table);
    let mut message = message(kind, ctx, code.as_deref().unwrap_or(""));
    if status.is_none() {
        message = format!("{message}: {}", chain(&err));
    }
    let mut error = CasError::new(kind, message).with_key(ctx.key);
    if let Some(status) = status {
        error = error.with_status(status);
    }
    if let Some(code) = code {
        error = error.with_code(code);
    }
    if let Some(after) = retry_after {
        error = error.with_retry_after(after);
    }
    if error.code() == Some("NoSuchBucket") {
        error = error.with_bucket_missing();
    }
    error.with_source(err)
}

/// The error and its causes on one line (SDK errors say little at the top).
fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context<'static> {
        Context {
            op: Operation::Get,
            key: "locks/a",
            bucket: "b",
            location: "http://127.0.0.1:9000",
        }
    }

    #[test]
    fn refused_credentials_say_which_part_is_wrong() {
        let wrong_secret = message(ErrorKind::Unauthorized, &ctx(), "SignatureDoesNotMatch");
        assert!(wrong_secret.contains("secret access key"), "{wrong_secret}");
        let unknown_id = message(ErrorKind::Unauthorized, &ctx(), "InvalidAccessKeyId");
        assert!(
            unknown_id.contains("does not know the access key id"),
            "{unknown_id}"
        );
        let denied = message(ErrorKind::Unauthorized, &ctx(), "AccessDenied");
        assert!(denied.contains("s3:PutObject"), "{denied}");
        assert!(denied.contains("bucket 'b'"), "{denied}");
    }
}
