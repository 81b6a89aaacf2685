//! How S3 answers become [`casaas_core::ErrorKind`]s.
//!
//! The mapping is a pure function of the operation, the HTTP status and the
//! S3 error code ([`classify_response`]), or of whether a failed request left
//! the machine ([`classify_transport`]), so that each case is unit-tested on
//! its own. [`from_sdk_error`] is the glue that extracts those facts from an
//! `aws-sdk-s3` error.

use std::error::Error as StdError;
use std::time::{Duration, SystemTime};

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::dns::ResolveDnsError;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use aws_smithy_types::date_time::{DateTime, Format};
use casaas_core::{CasError, ErrorKind};

/// The store operation a failure belongs to: the same status means
/// different things for a read and for a conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// GetObject.
    Get,
    /// PutObject with `If-None-Match: *`.
    Create,
    /// PutObject with `If-Match: <etag>`.
    Replace,
    /// DeleteObject with `If-Match: <etag>`.
    Delete,
    /// ListObjectsV2.
    List,
}

impl Op {
    /// Does this operation send a conditional header?
    pub fn is_conditional(self) -> bool {
        matches!(self, Op::Create | Op::Replace | Op::Delete)
    }

    /// Does this operation change the store?
    pub fn is_write(self) -> bool {
        self.is_conditional()
    }

    fn verb(self) -> &'static str {
        match self {
            Op::Get => "GetObject",
            Op::Create => "PutObject (If-None-Match: *)",
            Op::Replace => "PutObject (If-Match)",
            Op::Delete => "DeleteObject (If-Match)",
            Op::List => "ListObjectsV2",
        }
    }
}

/// S3 error codes that mean "slow down", whatever the status.
const THROTTLE_CODES: &[&str] = &[
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "TooManyRequests",
    "RequestLimitExceeded",
    "ServerBusy",
];

/// Maps an S3 error response (status and error code, if the body had one)
/// for operation `op` to the contract's error kind.
///
/// ```
/// use casaas_core::ErrorKind;
/// use casaas_s3::errors::{Op, classify_response};
///
/// assert_eq!(classify_response(Op::Create, 412, Some("PreconditionFailed")), ErrorKind::PreconditionFailed);
/// assert_eq!(classify_response(Op::Replace, 500, Some("InternalError")), ErrorKind::Ambiguous);
/// ```
pub fn classify_response(op: Op, status: u16, code: Option<&str>) -> ErrorKind {
    let code = code.unwrap_or("");
    if THROTTLE_CODES.contains(&code) {
        return ErrorKind::Throttled;
    }
    match (status, code) {
        (412, _) => ErrorKind::PreconditionFailed,
        // S3: another conditional write to this key is in flight; nothing
        // was written. OperationAborted is the older name for the same.
        (409, "ConditionalRequestConflict" | "OperationAborted") => ErrorKind::ConcurrentRequest,
        (409, _) if op.is_conditional() => ErrorKind::ConcurrentRequest,
        (404, "NoSuchBucket") => ErrorKind::Misconfigured,
        (404, _) => ErrorKind::NotFound,
        (429, _) => ErrorKind::Throttled,
        (401 | 403, _) => ErrorKind::Unauthorized,
        // A wrong region or endpoint: S3 redirects instead of serving.
        (301 | 307 | 308, _)
        | (400, "AuthorizationHeaderMalformed" | "IllegalLocationConstraintException") => {
            ErrorKind::Misconfigured
        }
        (400, "InvalidBucketName") => ErrorKind::Misconfigured,
        (400, "EntityTooLarge" | "KeyTooLongError" | "InvalidDigest" | "BadDigest") => {
            ErrorKind::InvalidInput
        }
        // The server did not finish reading the request: the write may or
        // may not have been applied by a proxy in front of it.
        (400, "RequestTimeout") | (408, _) => ErrorKind::Ambiguous,
        (501, _) | (400, "NotImplemented") => ErrorKind::Unsupported,
        // A store that does not know a conditional header rejects it.
        (400, _) if op.is_conditional() => ErrorKind::Unsupported,
        (400..=499, _) => ErrorKind::InvalidInput,
        // Some stores (Ceph RGW) answer 500 to the loser of a conditional
        // race, but a 5xx does not prove that nothing was written.
        (500..=599, _) => ErrorKind::Ambiguous,
        _ => ErrorKind::Ambiguous,
    }
}

/// Where a request without a response failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before anything was sent: building the request, resolving
    /// credentials, DNS, connection refused or timed out while connecting.
    NotSent,
    /// After the request may have been sent: read timeout, reset, the
    /// operation timeout, a response that could not be parsed.
    MaybeSent,
}

/// Maps a failure without an S3 error response to an error kind.
pub fn classify_transport(op: Op, stage: Stage) -> ErrorKind {
    match stage {
        Stage::NotSent => ErrorKind::Transport,
        Stage::MaybeSent if op.is_write() => ErrorKind::Ambiguous,
        // A read has no effect to be unsure about; retrying it is the fix.
        Stage::MaybeSent => ErrorKind::Transport,
    }
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
    pub op: Op,
    pub key: &'a str,
    pub bucket: &'a str,
    pub location: &'a str,
}

fn message(kind: ErrorKind, ctx: &Context<'_>, code: &str) -> String {
    let verb = ctx.op.verb();
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
        ErrorKind::Unsupported => format!(
            "{verb}: the store at {} does not implement this conditional request \
             (see the vendor notes in docs/providers/s3.md)",
            ctx.location
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
        ErrorKind::Transport => format!(
            "{verb}: the request did not reach the store at {}",
            ctx.location
        ),
        _ => format!("{verb}: failed"),
    }
}

/// Decides whether a failure without a response happened before anything
/// was sent, by looking through its chain of causes.
fn stage_of(err: &(dyn StdError + 'static)) -> Stage {
    let mut next: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<hyper_util::client::legacy::Error>()
            && h.is_connect()
        {
            return Stage::NotSent;
        }
        if e.downcast_ref::<ResolveDnsError>().is_some() {
            return Stage::NotSent;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
            )
        {
            return Stage::NotSent;
        }
        next = e.source();
    }
    Stage::MaybeSent
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
    let kind = match (&err, status) {
        (SdkError::ServiceError(_), Some(status)) => {
            classify_response(ctx.op, status, code.as_deref())
        }
        (SdkError::ConstructionFailure(_), _) => {
            // Nothing was sent; usually missing credentials or a bad setting.
            let mut error = CasError::misconfigured(format!(
                "{}: the request could not be built (credentials, region or endpoint): {}",
                ctx.op.verb(),
                chain(&err)
            ))
            .with_key(ctx.key);
            if let Some(status) = status {
                error = error.with_status(status);
            }
            return error;
        }
        (SdkError::ResponseError(_), Some(status)) if status >= 300 => {
            classify_response(ctx.op, status, code.as_deref())
        }
        (SdkError::ResponseError(_), _) => classify_transport(ctx.op, Stage::MaybeSent),
        (SdkError::TimeoutError(_), _) => classify_transport(ctx.op, Stage::MaybeSent),
        (SdkError::DispatchFailure(_), _) | (_, _) => classify_transport(ctx.op, stage_of(&err)),
    };
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
