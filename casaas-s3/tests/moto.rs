//! casaas-s3 against moto's server (`cargo xtask servers up moto`): the
//! contract suite and the evidence each failure carries.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use casaas_core::{CasStore, ErrorKind, Version};

async fn fresh_store() -> Arc<dyn CasStore> {
    common::dyn_store("moto", "s3-moto").await
}

// No race checks on moto: its conditional writes are not atomic (two
// concurrent writes conditioned on one state can both succeed; see
// casaas-testkit/tests/server_races.rs), so a round with two winners there
// proves nothing about this backend. The races run on Ceph RGW, Azurite,
// fake-gcs and the embedded backends.
casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 20, races = false);

#[tokio::test]
async fn failures_carry_status_and_code() {
    let store = common::store("moto", "s3-moto-evidence").await;
    let v1 = store.create("k", Bytes::from_static(b"1")).await.unwrap();
    let err = store
        .create("k", Bytes::from_static(b"2"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(err.status(), Some(412), "{err}");
    assert_eq!(err.code(), Some("PreconditionFailed"), "{err}");
    assert_eq!(err.key(), Some("k"));

    let v2 = store
        .replace("k", &v1, Bytes::from_static(b"2"))
        .await
        .unwrap();
    let err = store
        .replace("k", &v1, Bytes::from_static(b"3"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.status()),
        (ErrorKind::PreconditionFailed, Some(412)),
        "{err}"
    );

    // If-Match on a key that is not there.
    let err = store
        .replace("gone", &v2, Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::NotFound | ErrorKind::PreconditionFailed
        ),
        "{err}"
    );
    assert!(matches!(err.status(), Some(404 | 412)), "{err}");

    // A generation is not an S3 version: refused before sending.
    let err = store
        .replace("k", &Version::Generation(1), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

#[tokio::test]
async fn missing_bucket_is_misconfigured_and_named() {
    let store = common::builder("moto", "s3-moto-nobucket")
        .bucket("casaas-no-such-bucket")
        .build()
        .await
        .unwrap();
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(err.to_string().contains("casaas-no-such-bucket"), "{err}");
    let err = store.list("").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert_eq!(err.code(), Some("NoSuchBucket"), "{err}");
}

#[tokio::test]
async fn list_follows_pages() {
    let store = common::builder("moto", "s3-moto-pages")
        .list_page_size(2)
        .build()
        .await
        .unwrap();
    let mut expected = Vec::new();
    for i in 0..7 {
        let key = format!("p/{i:02}");
        let v = store.create(&key, Bytes::from(key.clone())).await.unwrap();
        expected.push((key, v));
    }
    let listed: Vec<_> = store
        .list("p/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.version))
        .collect();
    assert_eq!(listed, expected);
}

#[tokio::test]
async fn server_date_is_recorded() {
    let store = common::store("moto", "s3-moto-date").await;
    assert!(store.last_server_date().is_none());
    store.get("absent").await.unwrap();
    let sample = store
        .last_server_date_sample()
        .expect("a Date header was seen");
    // moto runs on this machine: its clock is ours, to the second.
    assert!(sample.skew_seconds().abs() < 5.0, "{sample:?}");
    let before = store.last_server_date().unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    store.create("k", Bytes::from_static(b"x")).await.unwrap();
    assert!(store.last_server_date().unwrap() > before);
    assert!(store.last_server_date().unwrap() <= SystemTime::now() + Duration::from_secs(2));
}

#[tokio::test]
async fn open_store_by_url() {
    casaas_s3::register();
    let server = casaas_core::testkit::test_server("moto");
    // Credentials come from the chain; here the URL alone must still open
    // (no request is made until used).
    let store = casaas_core::open_store(&server.url).await.unwrap();
    assert!(
        store.describe().starts_with("s3://casaas-test/"),
        "{}",
        store.describe()
    );
    assert!(store.capabilities().conditional_delete);
}

/// A percent-encoded prefix is decoded once: `s3://b/x%2541` stores keys
/// under `x%41/`, not `xA/`.
#[tokio::test]
async fn percent_encoded_prefix_is_decoded_once() {
    let server = casaas_core::testkit::test_server("moto");
    let mut url = url::Url::parse(&server.url).unwrap();
    url.set_path("/x%2541");
    let store = casaas_s3::S3Store::builder()
        .url(url.as_str())
        .unwrap()
        .static_credentials(
            server.var("AWS_ACCESS_KEY_ID"),
            server.var("AWS_SECRET_ACCESS_KEY"),
        )
        .build()
        .await
        .unwrap();
    let key = casaas_core::testkit::unique_prefix("decode-once");
    let version = store.create(&key, Bytes::from_static(b"1")).await.unwrap();
    // The object's full key, as the server lists it.
    let listed = store
        .client()
        .list_objects_v2()
        .bucket(store.bucket())
        .prefix(format!("x%41/{key}"))
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, [format!("x%41/{key}")]);
    store.delete(&key, &version).await.unwrap();
}
