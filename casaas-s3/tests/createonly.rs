//! casaas-s3 against the `createonly` server (`cargo xtask servers up
//! createonly`): SeaweedFS behind a proxy that answers `501 NotImplemented` to
//! every request carrying `If-Match`, as a store with create-if-absent but
//! no conditional replace does. A 501 to a conditional write means "not
//! done": it must never come back as success, nor as a lost race.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use bytes::Bytes;
use casaas_core::{CasStore, ErrorKind};

#[tokio::test]
async fn create_is_honoured_and_replace_is_unsupported() {
    let store = common::store("createonly", "s3-createonly").await;

    let v1 = store.create("k", Bytes::from_static(b"one")).await.unwrap();
    let err = store
        .create("k", Bytes::from_static(b"two"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(err.status(), Some(412), "{err}");

    let got = store.get("k").await.unwrap().expect("created");
    assert_eq!((got.body, &got.version), (Bytes::from_static(b"one"), &v1));

    // The current version, so only the missing feature can refuse it.
    let err = store
        .replace("k", &v1, Bytes::from_static(b"two"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(
        (err.status(), err.code()),
        (Some(501), Some("NotImplemented")),
        "{err}"
    );
    assert!(!err.may_have_taken_effect(), "{err}");
    assert!(
        err.to_string().contains("does not implement"),
        "the message says what is missing: {err}"
    );

    // Conditional delete is refused the same way, and nothing changed.
    let err = store.delete("k", &v1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(err.status(), Some(501), "{err}");
    let got = store.get("k").await.unwrap().expect("still there");
    assert_eq!((got.body, got.version), (Bytes::from_static(b"one"), v1));

    // Listing passes through.
    let listed = store.list("").await.unwrap();
    assert_eq!(
        listed.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["k"]
    );
}

#[tokio::test]
async fn a_replace_of_a_missing_key_is_unsupported_not_not_found() {
    // The proxy refuses before the server is asked: even a condition that
    // would fail on the server comes back as "not implemented".
    let store = common::store("createonly", "s3-createonly-missing").await;
    let other = common::store("createonly", "s3-createonly-other").await;
    let v = other.create("k", Bytes::from_static(b"x")).await.unwrap();
    let err = store
        .replace("absent", &v, Bytes::from_static(b"y"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(store.get("absent").await.unwrap(), None);
}

#[tokio::test]
async fn a_conditional_complete_multipart_upload_is_refused() {
    use aws_sdk_s3::error::ProvideErrorMetadata;
    use aws_sdk_s3::primitives::ByteStream;
    use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};

    let store = common::store("createonly", "s3-createonly-multipart").await;
    let (client, bucket, key) = (store.client(), store.bucket(), store.object_key("big"));
    let created = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(&key)
        .send()
        .await
        .unwrap();
    let upload_id = created.upload_id().unwrap();
    let part = client
        .upload_part()
        .bucket(bucket)
        .key(&key)
        .upload_id(upload_id)
        .part_number(1)
        .body(ByteStream::from_static(b"part"))
        .send()
        .await
        .unwrap();
    let parts = CompletedMultipartUpload::builder()
        .parts(
            CompletedPart::builder()
                .part_number(1)
                .set_e_tag(part.e_tag().map(str::to_string))
                .build(),
        )
        .build();
    let err = client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(&key)
        .upload_id(upload_id)
        .multipart_upload(parts)
        .if_match("\"anything\"")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(501));
    assert_eq!(err.code(), Some("NotImplemented"));
    let _ = client
        .abort_multipart_upload()
        .bucket(bucket)
        .key(&key)
        .upload_id(upload_id)
        .send()
        .await;
    assert_eq!(store.get("big").await.unwrap(), None);
}

/// The epoch layout's virtual objects pass the contract on this server
/// (collection blocks of 4, so that collection runs during the races).
mod epochs {
    use std::sync::Arc;

    use casaas_core::CasStore;
    use casaas_core::layout::EpochStore;

    async fn fresh_store() -> Arc<dyn CasStore> {
        Arc::new(EpochStore::with_collection(
            super::common::dyn_store("createonly", "s3-createonly-epochs").await,
            4,
            2,
        ))
    }

    casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 10, layout = epochs);
}

/// Leases on this server take the create-only layout by themselves (its
/// capabilities say nothing of it, the URL does), pass the store guard,
/// and hand over with increasing tokens.
#[tokio::test]
async fn leases_hold_in_the_create_only_layout() {
    use std::time::Duration;

    use casaas_core::layout::{LeaseLayout, with_layout};
    use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig, WaitOptions};

    let store = with_layout(
        common::dyn_store("createonly", "s3-createonly-lease").await,
        LeaseLayout::Epochs,
    );
    let config = LeaseConfig::from_ttl(Duration::from_secs(3));
    let a = Lease::new(store.clone(), "lock", "a", config.clone()).unwrap();
    let b = Lease::new(store.clone(), "lock", "b", config).unwrap();
    let guard = a.acquire(WaitOptions::default()).await.unwrap();
    assert_eq!(guard.token(), 1);
    // Renewed through several terms, while b is refused.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(guard.is_held(), "{:?}", guard.lost_reason());
    assert!(matches!(
        b.try_acquire().await.unwrap(),
        AcquireOutcome::Held(_)
    ));
    guard.release().await.unwrap();
    let guard = b.acquire(WaitOptions::default()).await.unwrap();
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
    // Without the layout, the guard says what to do.
    let plain = common::dyn_store("createonly", "s3-createonly-plain").await;
    let err = Lease::new(plain, "lock", "c", LeaseConfig::default())
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("layout=epochs"), "{err}");
}
