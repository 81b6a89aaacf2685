//! The error mapping, per status code and Azure error code (no server), and
//! the same answers observed live on Azurite.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use casaas_azure::{
    AzureBlobStore, AzureCredentials, DEV_ACCOUNT, Failure, NativeLeaseError, map_failure,
    map_lease_failure,
};
use casaas_core::provider::Operation;
use casaas_core::{CasStore, ErrorKind};
use rstest::rstest;

#[rstest]
// A losing create: Azurite says 409 BlobAlreadyExists, Azure 412.
#[case(
    Operation::Create,
    409,
    Some("BlobAlreadyExists"),
    ErrorKind::PreconditionFailed
)]
#[case(
    Operation::Create,
    412,
    Some("ConditionNotMet"),
    ErrorKind::PreconditionFailed
)]
#[case(
    Operation::Replace,
    412,
    Some("ConditionNotMet"),
    ErrorKind::PreconditionFailed
)]
#[case(
    Operation::Delete,
    412,
    Some("ConditionNotMet"),
    ErrorKind::PreconditionFailed
)]
#[case(
    Operation::Replace,
    412,
    Some("LeaseIdMissing"),
    ErrorKind::PreconditionFailed
)]
#[case(Operation::Replace, 429, None, ErrorKind::Throttled)]
#[case(Operation::Replace, 503, Some("ServerBusy"), ErrorKind::Throttled)]
#[case(
    Operation::Replace,
    503,
    Some("ServiceUnavailable"),
    ErrorKind::Ambiguous
)]
#[case(Operation::Replace, 500, Some("InternalError"), ErrorKind::Ambiguous)]
#[case(
    Operation::Replace,
    500,
    Some("OperationTimedOut"),
    ErrorKind::Ambiguous
)]
#[case(Operation::Create, 502, None, ErrorKind::Ambiguous)]
#[case(Operation::Create, 408, None, ErrorKind::Ambiguous)]
#[case(Operation::Get, 404, Some("BlobNotFound"), ErrorKind::NotFound)]
#[case(Operation::Delete, 404, Some("BlobNotFound"), ErrorKind::NotFound)]
#[case(Operation::Get, 404, None, ErrorKind::NotFound)]
#[case(
    Operation::Create,
    404,
    Some("ContainerNotFound"),
    ErrorKind::Misconfigured
)]
#[case(
    Operation::Get,
    404,
    Some("ResourceNotFound"),
    ErrorKind::Misconfigured
)]
#[case(
    Operation::Get,
    403,
    Some("AuthorizationFailure"),
    ErrorKind::Unauthorized
)]
#[case(
    Operation::Get,
    403,
    Some("AuthenticationFailed"),
    ErrorKind::Unauthorized
)]
#[case(
    Operation::List,
    403,
    Some("AuthorizationPermissionMismatch"),
    ErrorKind::Unauthorized
)]
#[case(Operation::Get, 401, None, ErrorKind::Unauthorized)]
#[case(Operation::Create, 501, None, ErrorKind::Unsupported)]
#[case(
    Operation::Create,
    400,
    Some("UnsupportedHeader"),
    ErrorKind::Unsupported
)]
#[case(
    Operation::Create,
    400,
    Some("InvalidHeaderValue"),
    ErrorKind::Misconfigured
)]
#[case(
    Operation::Create,
    413,
    Some("RequestBodyTooLarge"),
    ErrorKind::InvalidInput
)]
#[case(
    Operation::Delete,
    409,
    Some("SnapshotsPresent"),
    ErrorKind::Misconfigured
)]
fn status_and_code(
    #[case] op: Operation,
    #[case] status: u16,
    #[case] code: Option<&str>,
    #[case] expected: ErrorKind,
) {
    let err = map_failure(op, &Failure::status(status, code), "locks");
    assert_eq!(err.kind(), expected, "{op:?} {status} {code:?}: {err}");
    // The evidence stays in the error.
    assert_eq!(err.status(), Some(status));
    assert_eq!(err.code(), code);
}

#[test]
fn missing_container_is_named() {
    let err = map_failure(
        Operation::Create,
        &Failure::status(404, Some("ContainerNotFound")),
        "locks",
    );
    assert!(err.message().contains("'locks'"), "{err}");
    assert!(err.message().contains("create_container=true"), "{err}");
}

#[test]
fn retry_after_is_kept() {
    let failure = Failure::Status {
        status: 503,
        code: Some("ServerBusy".into()),
        message: Some("Ingress is over the account limit.".into()),
        retry_after: Some(Duration::from_secs(2)),
    };
    let err = map_failure(Operation::Replace, &failure, "c");
    assert_eq!(err.kind(), ErrorKind::Throttled);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
}

#[test]
fn transport_failures() {
    let not_sent = Failure::NotSent {
        detail: "connection refused".into(),
    };
    let err = map_failure(Operation::Create, &not_sent, "c");
    assert_eq!(err.kind(), ErrorKind::NotSent);
    assert!(!err.may_have_taken_effect());

    for timed_out in [true, false] {
        let after = Failure::AfterSend {
            timed_out,
            detail: "x".into(),
        };
        let err = map_failure(Operation::Replace, &after, "c");
        assert_eq!(err.kind(), ErrorKind::Ambiguous);
        assert!(err.may_have_taken_effect());
        assert_eq!(err.status(), None);
    }
    // A 2xx whose answer could not be read did take effect: resolve by reading.
    let bad = Failure::BadResponse {
        detail: "no ETag".into(),
    };
    assert_eq!(
        map_failure(Operation::Create, &bad, "c").kind(),
        ErrorKind::Ambiguous
    );
    let cred = Failure::Credential {
        detail: "token endpoint refused".into(),
    };
    assert_eq!(
        map_failure(Operation::Get, &cred, "c").kind(),
        ErrorKind::Unauthorized
    );
}

#[rstest]
#[case(409, "LeaseAlreadyPresent", "held")]
#[case(409, "LeaseIsBreakingAndCannotBeAcquired", "held")]
#[case(409, "LeaseIdMismatchWithLeaseOperation", "lost")]
#[case(409, "LeaseIsBrokenAndCannotBeRenewed", "lost")]
#[case(409, "LeaseNotPresentWithLeaseOperation", "lost")]
#[case(412, "LeaseLost", "lost")]
#[case(404, "BlobNotFound", "missing")]
#[case(404, "ContainerNotFound", "store")]
#[case(503, "ServerBusy", "store")]
fn lease_codes(#[case] status: u16, #[case] code: &str, #[case] expected: &str) {
    let err = map_lease_failure(&Failure::status(status, Some(code)), "c");
    let got = match &err {
        NativeLeaseError::HeldByAnother { .. } => "held",
        NativeLeaseError::Lost { .. } => "lost",
        NativeLeaseError::BlobNotFound => "missing",
        NativeLeaseError::Store(_) => "store",
        _ => "other",
    };
    assert_eq!(got, expected, "{status} {code}: {err}");
}

// --- The same answers, live on Azurite. ---

#[tokio::test]
async fn azurite_answers_keep_status_and_code() {
    let store = common::fresh("azure-errors").await;
    let v1 = store.create("k", Bytes::from_static(b"1")).await.unwrap();
    let err = store
        .create("k", Bytes::from_static(b"2"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert_eq!(err.evidence(), "409 BlobAlreadyExists");
    assert_eq!(err.key(), Some("k"));

    let v2 = store
        .replace("k", &v1, Bytes::from_static(b"2"))
        .await
        .unwrap();
    assert_ne!(v1, v2, "ETags change on every write");
    let err = store
        .replace("k", &v1, Bytes::from_static(b"3"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert_eq!(err.evidence(), "412 ConditionNotMet");

    let err = store.delete("k", &v1).await.unwrap_err();
    assert_eq!(err.evidence(), "412 ConditionNotMet");
    store.delete("k", &v2).await.unwrap();
    // Measured: Azurite answers a conditional delete of a missing blob with
    // 412 ConditionNotMet, not 404 (the contract allows either).
    let err = store.delete("k", &v2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert_eq!(err.evidence(), "412 ConditionNotMet");
    // A plain read of it is a 404 BlobNotFound, answered as absent.
    assert!(store.get("k").await.unwrap().is_none());

    // A version from another backend is refused before any request.
    let err = store
        .replace("k", &casaas_core::Version::Generation(1), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn azurite_missing_container_is_misconfigured() {
    let server = common::server();
    let store = common::builder(&server)
        .create_container(true)
        .build()
        .await
        .unwrap();
    // Same account and endpoint, a container nobody created.
    let missing = AzureBlobStore::builder(DEV_ACCOUNT, "no-such-container")
        .endpoint(server.var("AZURE_STORAGE_ENDPOINT"))
        .credentials(AzureCredentials::SharedKey(
            server.var("AZURE_STORAGE_KEY").into(),
        ))
        .build()
        .await
        .unwrap();
    assert!(store.get("anything").await.unwrap().is_none());
    let err = missing
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert_eq!(err.evidence(), "404 ContainerNotFound");
    assert!(err.to_string().contains("'no-such-container'"), "{err}");
    let err = missing.get("k").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    let err = missing.list("").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
}

#[tokio::test]
async fn azurite_wrong_key_is_unauthorized() {
    let server = common::server();
    // A valid base64 key that is not the account's.
    let wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==";
    let store = common::builder(&server)
        .credentials(AzureCredentials::SharedKey(wrong.into()))
        .create_container(false)
        .build()
        .await
        .unwrap();
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert_eq!(err.status(), Some(403));
    assert!(!format!("{err} {err:?}").contains(wrong));
}

#[tokio::test]
async fn refused_connection_is_transport() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = AzureBlobStore::builder(DEV_ACCOUNT, "c-refused")
        .endpoint(format!("http://127.0.0.1:{port}/{DEV_ACCOUNT}"))
        .credentials(AzureCredentials::Sas("sv=2022-11-02&sig=SECRETSIG".into()))
        .build()
        .await
        .unwrap();
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSent, "{err}");
    assert!(!err.may_have_taken_effect());
    assert!(!format!("{err} {err:?}").contains("SECRETSIG"), "{err:?}");
}

#[tokio::test]
async fn silence_after_send_is_ambiguous() {
    // A server that accepts, reads, and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            held.push(socket);
        }
    });
    let store = AzureBlobStore::builder(DEV_ACCOUNT, "c-silent")
        .endpoint(format!("http://127.0.0.1:{port}/{DEV_ACCOUNT}"))
        .credentials(AzureCredentials::SharedKey(
            casaas_azure::DEV_ACCOUNT_KEY.into(),
        ))
        .timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    assert!(err.may_have_taken_effect());
    assert!(started.elapsed() < Duration::from_secs(5));
    server.abort();
}

#[tokio::test]
async fn azurite_etags_change_on_every_write() {
    let store = common::fresh("azure-etags").await;
    let mut version = store
        .create("k", Bytes::from_static(b"same"))
        .await
        .unwrap();
    let mut seen = vec![version.clone()];
    for _ in 0..10 {
        // Identical bytes each time: the ETag still changes.
        version = store
            .replace("k", &version, Bytes::from_static(b"same"))
            .await
            .unwrap();
        assert!(!seen.contains(&version), "{version:?} repeated in {seen:?}");
        seen.push(version.clone());
    }
    println!("azurite etags: {seen:?}");
    let listed = store.list("").await.unwrap();
    assert_eq!(
        listed[0].version, version,
        "list and write agree on the ETag text"
    );
}

#[tokio::test]
async fn azurite_keys_with_url_characters_round_trip() {
    let store = common::fresh("azure-keys").await;
    let keys = [
        "100%",
        "a%2Fb",
        "with space",
        "q?x=1",
        "hash#tag",
        "plus+sign",
        "é/ü",
        "semi;colon",
    ];
    for key in keys {
        let v = store
            .create(key, Bytes::from(key.to_string()))
            .await
            .unwrap();
        let got = store.get(key).await.unwrap().expect(key);
        assert_eq!(
            (got.body, &got.version),
            (Bytes::from(key.to_string()), &v),
            "{key}"
        );
        store
            .replace(key, &v, Bytes::from_static(b"2"))
            .await
            .unwrap();
    }
    let mut listed: Vec<_> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    listed.sort();
    let mut expected: Vec<_> = keys.iter().map(|k| k.to_string()).collect();
    expected.sort();
    assert_eq!(listed, expected);
}
