//! The status / S3 code → ErrorKind mapping, case by case.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, SystemTime};

use casaas_core::ErrorKind::{self, *};
use casaas_s3::errors::{Op, Stage, classify_response, classify_transport, parse_retry_after};
use rstest::rstest;

#[rstest]
// The condition did not hold.
#[case(Op::Create, 412, Some("PreconditionFailed"), PreconditionFailed)]
#[case(Op::Replace, 412, Some("PreconditionFailed"), PreconditionFailed)]
#[case(Op::Delete, 412, Some("PreconditionFailed"), PreconditionFailed)]
#[case(Op::Replace, 412, None, PreconditionFailed)]
// S3's answer to two conditional writes in flight at once.
#[case(Op::Create, 409, Some("ConditionalRequestConflict"), ConcurrentRequest)]
#[case(
    Op::Replace,
    409,
    Some("ConditionalRequestConflict"),
    ConcurrentRequest
)]
#[case(Op::Replace, 409, Some("OperationAborted"), ConcurrentRequest)]
// If-Match on a key that is gone.
#[case(Op::Replace, 404, Some("NoSuchKey"), NotFound)]
#[case(Op::Delete, 404, Some("NoSuchKey"), NotFound)]
#[case(Op::Get, 404, None, NotFound)]
// A missing bucket is a configuration error.
#[case(Op::Create, 404, Some("NoSuchBucket"), Misconfigured)]
#[case(Op::List, 404, Some("NoSuchBucket"), Misconfigured)]
// Throttling.
#[case(Op::Create, 503, Some("SlowDown"), Throttled)]
#[case(Op::Get, 503, Some("SlowDown"), Throttled)]
#[case(Op::Replace, 429, None, Throttled)]
#[case(Op::Replace, 429, Some("TooManyRequests"), Throttled)]
#[case(Op::Replace, 400, Some("RequestLimitExceeded"), Throttled)]
#[case(Op::Create, 503, Some("ServerBusy"), Throttled)]
// Conditions the store does not implement.
#[case(Op::Create, 501, Some("NotImplemented"), Unsupported)]
#[case(Op::Delete, 501, None, Unsupported)]
#[case(Op::Create, 400, Some("InvalidArgument"), Unsupported)]
#[case(Op::Replace, 400, Some("InvalidRequest"), Unsupported)]
#[case(Op::Delete, 400, None, Unsupported)]
#[case(Op::Get, 400, Some("NotImplemented"), Unsupported)]
// Server errors: the write may have happened (Ceph RGW answers 500 to
// some race losers).
#[case(Op::Create, 500, Some("InternalError"), Ambiguous)]
#[case(Op::Replace, 500, Some("UnknownError"), Ambiguous)]
#[case(Op::Replace, 500, None, Ambiguous)]
#[case(Op::Create, 502, None, Ambiguous)]
#[case(Op::Create, 503, None, Ambiguous)]
#[case(Op::Create, 503, Some("ServiceUnavailable"), Ambiguous)]
#[case(Op::Create, 504, None, Ambiguous)]
#[case(Op::Create, 400, Some("RequestTimeout"), Ambiguous)]
#[case(Op::Create, 408, None, Ambiguous)]
// Credentials.
#[case(Op::Get, 401, None, Unauthorized)]
#[case(Op::Create, 403, Some("AccessDenied"), Unauthorized)]
#[case(Op::Create, 403, Some("SignatureDoesNotMatch"), Unauthorized)]
#[case(Op::List, 403, Some("InvalidAccessKeyId"), Unauthorized)]
// Wrong region or endpoint.
#[case(Op::Get, 301, Some("PermanentRedirect"), Misconfigured)]
#[case(Op::Create, 400, Some("AuthorizationHeaderMalformed"), Misconfigured)]
#[case(Op::List, 400, Some("InvalidBucketName"), Misconfigured)]
// Input the store refuses.
#[case(Op::Create, 400, Some("EntityTooLarge"), InvalidInput)]
#[case(Op::Create, 400, Some("KeyTooLongError"), InvalidInput)]
#[case(Op::Get, 400, Some("InvalidArgument"), InvalidInput)]
#[case(Op::Create, 411, Some("MissingContentLength"), InvalidInput)]
fn response(
    #[case] op: Op,
    #[case] status: u16,
    #[case] code: Option<&str>,
    #[case] kind: ErrorKind,
) {
    assert_eq!(
        classify_response(op, status, code),
        kind,
        "{op:?} {status} {code:?}"
    );
}

#[rstest]
#[case(Op::Create, Stage::NotSent, Transport)]
#[case(Op::Replace, Stage::NotSent, Transport)]
#[case(Op::Get, Stage::NotSent, Transport)]
#[case(Op::Create, Stage::MaybeSent, Ambiguous)]
#[case(Op::Replace, Stage::MaybeSent, Ambiguous)]
#[case(Op::Delete, Stage::MaybeSent, Ambiguous)]
#[case(Op::Get, Stage::MaybeSent, Transport)]
#[case(Op::List, Stage::MaybeSent, Transport)]
fn transport(#[case] op: Op, #[case] stage: Stage, #[case] kind: ErrorKind) {
    assert_eq!(classify_transport(op, stage), kind);
}

#[test]
fn retry_after() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
    assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
    assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:30 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon", now), None);
}
