//! The status / S3 code → ErrorKind mapping, case by case.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, SystemTime};

use casaas_core::ErrorKind::{self, *};
use casaas_core::provider::Delivery::{self, MaybeSent};
use casaas_core::provider::{Operation, classify};
use casaas_s3::error::{code_table, parse_retry_after};
use rstest::rstest;

#[rstest]
// The condition did not hold.
#[case(
    Operation::Create,
    MaybeSent,
    Some(412),
    Some("PreconditionFailed"),
    PreconditionFailed
)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(412),
    Some("PreconditionFailed"),
    PreconditionFailed
)]
#[case(
    Operation::Delete,
    MaybeSent,
    Some(412),
    Some("PreconditionFailed"),
    PreconditionFailed
)]
#[case(Operation::Replace, MaybeSent, Some(412), None, PreconditionFailed)]
// S3's answer to two conditional writes in flight at once.
#[case(
    Operation::Create,
    MaybeSent,
    Some(409),
    Some("ConditionalRequestConflict"),
    ConcurrentRequest
)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(409),
    Some("ConditionalRequestConflict"),
    ConcurrentRequest
)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(409),
    Some("OperationAborted"),
    ConcurrentRequest
)]
// If-Match on a key that is gone.
#[case(Operation::Replace, MaybeSent, Some(404), Some("NoSuchKey"), NotFound)]
#[case(Operation::Delete, MaybeSent, Some(404), Some("NoSuchKey"), NotFound)]
#[case(Operation::Get, MaybeSent, Some(404), None, NotFound)]
// A missing bucket is a configuration error.
#[case(
    Operation::Create,
    MaybeSent,
    Some(404),
    Some("NoSuchBucket"),
    Misconfigured
)]
#[case(
    Operation::List,
    MaybeSent,
    Some(404),
    Some("NoSuchBucket"),
    Misconfigured
)]
// Throttling.
#[case(Operation::Create, MaybeSent, Some(503), Some("SlowDown"), Throttled)]
#[case(Operation::Get, MaybeSent, Some(503), Some("SlowDown"), Throttled)]
#[case(Operation::Replace, MaybeSent, Some(429), None, Throttled)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(429),
    Some("TooManyRequests"),
    Throttled
)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(400),
    Some("RequestLimitExceeded"),
    Throttled
)]
#[case(Operation::Create, MaybeSent, Some(503), Some("ServerBusy"), Throttled)]
// Conditions the store does not implement.
#[case(
    Operation::Create,
    MaybeSent,
    Some(501),
    Some("NotImplemented"),
    Unsupported
)]
#[case(Operation::Delete, MaybeSent, Some(501), None, Unsupported)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(400),
    Some("InvalidArgument"),
    Unsupported
)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(400),
    Some("InvalidRequest"),
    Unsupported
)]
#[case(Operation::Delete, MaybeSent, Some(400), None, Unsupported)]
#[case(
    Operation::Get,
    MaybeSent,
    Some(400),
    Some("NotImplemented"),
    Unsupported
)]
// Server errors: the write may have happened (Ceph RGW answers 500 to
// some race losers).
#[case(
    Operation::Create,
    MaybeSent,
    Some(500),
    Some("InternalError"),
    Ambiguous
)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(500),
    Some("UnknownError"),
    Ambiguous
)]
#[case(Operation::Replace, MaybeSent, Some(500), None, Ambiguous)]
#[case(Operation::Create, MaybeSent, Some(502), None, Ambiguous)]
#[case(Operation::Create, MaybeSent, Some(503), None, Ambiguous)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(503),
    Some("ServiceUnavailable"),
    Ambiguous
)]
#[case(Operation::Create, MaybeSent, Some(504), None, Ambiguous)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(400),
    Some("RequestTimeout"),
    Ambiguous
)]
#[case(Operation::Create, MaybeSent, Some(408), None, Ambiguous)]
// Credentials.
#[case(Operation::Get, MaybeSent, Some(401), None, Unauthorized)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(403),
    Some("AccessDenied"),
    Unauthorized
)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(403),
    Some("SignatureDoesNotMatch"),
    Unauthorized
)]
#[case(
    Operation::List,
    MaybeSent,
    Some(403),
    Some("InvalidAccessKeyId"),
    Unauthorized
)]
// Wrong region or endpoint.
#[case(
    Operation::Get,
    MaybeSent,
    Some(301),
    Some("PermanentRedirect"),
    Misconfigured
)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(400),
    Some("AuthorizationHeaderMalformed"),
    Misconfigured
)]
#[case(
    Operation::List,
    MaybeSent,
    Some(400),
    Some("InvalidBucketName"),
    Misconfigured
)]
// Input the store refuses.
#[case(
    Operation::Create,
    MaybeSent,
    Some(400),
    Some("EntityTooLarge"),
    InvalidInput
)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(400),
    Some("KeyTooLongError"),
    InvalidInput
)]
#[case(
    Operation::Get,
    MaybeSent,
    Some(400),
    Some("InvalidArgument"),
    InvalidInput
)]
#[case(
    Operation::Create,
    MaybeSent,
    Some(411),
    Some("MissingContentLength"),
    InvalidInput
)]
// Not sent, or sent without an answer.
#[case(Operation::Create, Delivery::NotSent, None, None, NotSent)]
#[case(Operation::Replace, Delivery::NotSent, None, None, NotSent)]
#[case(Operation::Get, Delivery::NotSent, None, None, NotSent)]
#[case(Operation::Create, MaybeSent, None, None, Ambiguous)]
#[case(Operation::Replace, MaybeSent, None, None, Ambiguous)]
#[case(Operation::Delete, MaybeSent, None, None, Ambiguous)]
#[case(Operation::Get, MaybeSent, None, None, Ambiguous)]
#[case(Operation::List, MaybeSent, None, None, Ambiguous)]
// A conflict S3 does not name may hide an applied write.
#[case(Operation::Replace, MaybeSent, Some(409), None, Ambiguous)]
// Aliyun OSS refusing a create sent with x-oss-forbid-overwrite: the key
// exists and nothing was written. Only a create sends that header.
#[case(
    Operation::Create,
    MaybeSent,
    Some(409),
    Some("FileAlreadyExists"),
    PreconditionFailed
)]
#[case(
    Operation::Replace,
    MaybeSent,
    Some(409),
    Some("FileAlreadyExists"),
    Ambiguous
)]
fn kinds(
    #[case] op: Operation,
    #[case] delivery: Delivery,
    #[case] status: Option<u16>,
    #[case] code: Option<&str>,
    #[case] kind: ErrorKind,
) {
    assert_eq!(
        classify(op, delivery, status, code, &code_table),
        kind,
        "{op:?} {delivery:?} {status:?} {code:?}"
    );
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
