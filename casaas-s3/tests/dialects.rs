//! The vendor dialects of conditional writes (`forbid_overwrite=oss|cos`,
//! `gcs_interop`, `tigris_consistent`) and `conditional_delete=false`,
//! against a recorded-request S3 server on loopback that answers like the
//! vendor: these stores cannot run here, so the test server records every
//! request's method, path and headers, and each test asserts the exact
//! headers sent and the kind of every refusal.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "support/recorded_s3.rs"]
mod recorded_s3;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{Lease, LeaseConfig};
use casaas_core::{CasStore, ErrorKind, Version};
use casaas_s3::S3Store;
use recorded_s3::{BUCKET, GENERATION_BASE, Vendor, start};

async fn open(endpoint: &str, options: &str) -> S3Store {
    S3Store::builder()
        .url(&format!(
            "s3://{BUCKET}/p?endpoint={endpoint}&path_style=true&region=us-east-1{options}"
        ))
        .unwrap()
        // Explicit credentials and region: nothing consults instance metadata.
        .static_credentials("AKIDTEST", "test-secret")
        .build()
        .await
        .unwrap()
}

fn b(text: &'static str) -> Bytes {
    Bytes::from_static(text.as_bytes())
}

// ---------------------------------------------------------------- OSS, COS

#[tokio::test]
async fn oss_create_is_forbid_overwrite_and_a_second_create_is_refused() {
    let (fake, endpoint) = start(Vendor::Oss).await;
    let store = open(&endpoint, "&forbid_overwrite=oss").await;

    let version = store.create("lock", b("one")).await.unwrap();
    assert!(version.as_etag().is_some(), "{version:?}");
    let put = fake.last();
    assert_eq!(
        (put.method.as_str(), put.path.as_str()),
        ("PUT", "/bucket/p/lock")
    );
    assert_eq!(
        put.header("x-oss-forbid-overwrite"),
        Some("true"),
        "{put:?}"
    );
    assert_eq!(
        put.header("if-none-match"),
        None,
        "OSS answers 501 to it: {put:?}"
    );
    assert_eq!(put.header("if-match"), None, "{put:?}");
    // Added before signing: the signature covers the condition.
    assert!(
        put.signed_headers()
            .split(';')
            .any(|h| h == "x-oss-forbid-overwrite"),
        "{}",
        put.signed_headers()
    );

    let err = store.create("lock", b("two")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("FileAlreadyExists"))
    );
    assert_eq!(
        fake.body("p/lock"),
        Some(b("one")),
        "the losing create changed nothing"
    );

    let got = store.get("lock").await.unwrap().unwrap();
    assert_eq!((got.body, got.version), (b("one"), version));
}

#[tokio::test]
async fn oss_has_no_replace_or_delete_and_sends_nothing_for_them() {
    let (fake, endpoint) = start(Vendor::Oss).await;
    let store = open(&endpoint, "&forbid_overwrite=oss").await;
    let version = store.create("lock", b("one")).await.unwrap();
    let sent = fake.count();

    let err = store.replace("lock", &version, b("two")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("forbid_overwrite=oss"), "{err}");
    let err = store.delete("lock", &version).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(fake.count(), sent, "nothing may be sent for them");
    assert_eq!(fake.body("p/lock"), Some(b("one")));

    let caps = store.capabilities();
    assert!(caps.create_if_absent);
    assert!(
        !caps.replace_if_match && !caps.conditional_delete,
        "{caps:?}"
    );
}

#[tokio::test]
async fn oss_without_the_option_refuses_create_as_unsupported_never_success() {
    let (fake, endpoint) = start(Vendor::Oss).await;
    let store = open(&endpoint, "").await;
    let err = store.create("lock", b("one")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(err.status(), Some(501));
    assert!(
        err.to_string().contains("forbid_overwrite"),
        "the message names the fix: {err}"
    );
    assert_eq!(fake.last().header("if-none-match"), Some("*"));
    assert_eq!(fake.body("p/lock"), None);
}

#[tokio::test]
async fn cos_create_sends_its_own_header() {
    let (fake, endpoint) = start(Vendor::Cos).await;
    let store = open(&endpoint, "&forbid_overwrite=cos").await;
    store.create("lock", b("one")).await.unwrap();
    let put = fake.last();
    assert_eq!(
        put.header("x-cos-forbid-overwrite"),
        Some("true"),
        "{put:?}"
    );
    assert_eq!(put.header("x-oss-forbid-overwrite"), None, "{put:?}");
    assert_eq!(put.header("if-none-match"), None, "{put:?}");
    let err = store.create("lock", b("two")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(fake.body("p/lock"), Some(b("one")));
}

// --------------------------------------------------------------- GCS (XML)

#[tokio::test]
async fn gcs_interop_conditions_on_generations() {
    let (fake, endpoint) = start(Vendor::GcsInterop).await;
    let store = open(&endpoint, "&gcs_interop=true").await;

    let v1 = store.create("lock", b("one")).await.unwrap();
    let put = fake.last();
    assert_eq!(
        put.header("x-goog-if-generation-match"),
        Some("0"),
        "{put:?}"
    );
    assert_eq!(
        put.header("if-none-match"),
        None,
        "GCS ignores it on PUT: {put:?}"
    );
    assert!(
        put.signed_headers()
            .split(';')
            .any(|h| h == "x-goog-if-generation-match"),
        "{}",
        put.signed_headers()
    );
    assert_eq!(v1, Version::Generation(GENERATION_BASE + 1));

    let err = store.create("lock", b("two")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(err.status(), Some(412));

    let got = store.get("lock").await.unwrap().unwrap();
    assert_eq!((got.body, got.version.clone()), (b("one"), v1.clone()));

    let v2 = store.replace("lock", &v1, b("two")).await.unwrap();
    let put = fake.last();
    assert_eq!(
        put.header("x-goog-if-generation-match"),
        Some((GENERATION_BASE + 1).to_string().as_str()),
        "{put:?}"
    );
    assert_eq!(put.header("if-match"), None, "{put:?}");
    assert_eq!(v2, Version::Generation(GENERATION_BASE + 2));

    let err = store.replace("lock", &v1, b("stale")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    assert_eq!(fake.body("p/lock"), Some(b("two")));

    // An ETag is not a generation: refused before anything is sent.
    let sent = fake.count();
    let err = store
        .replace("lock", &Version::etag("\"etag-2\""), b("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(fake.count(), sent);

    // The listing carries ETags only; each entry's generation is read.
    let listed = store.list("").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].key.as_str(), &listed[0].version), ("lock", &v2));
    assert_eq!(fake.last().method, "HEAD");

    let err = store.delete("lock", &v1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    store.delete("lock", &v2).await.unwrap();
    let delete = fake.last();
    assert_eq!(delete.method, "DELETE");
    assert_eq!(
        delete.header("x-goog-if-generation-match"),
        Some((GENERATION_BASE + 2).to_string().as_str())
    );
    assert_eq!(delete.header("if-match"), None);
    assert_eq!(store.get("lock").await.unwrap(), None);
}

#[tokio::test]
async fn gcs_xml_without_the_option_lets_a_second_create_overwrite() {
    // Why the option exists: If-None-Match on PUT is ignored there, so the
    // plain S3 dialect "wins" a create on an existing key.
    let (fake, endpoint) = start(Vendor::GcsInterop).await;
    let store = open(&endpoint, "").await;
    store.create("lock", b("one")).await.unwrap();
    store.create("lock", b("two")).await.unwrap();
    assert_eq!(fake.body("p/lock"), Some(b("two")));
}

// ------------------------------------------------------------------ Tigris

#[tokio::test]
async fn tigris_consistent_goes_on_every_read_and_conditional_write() {
    let (fake, endpoint) = start(Vendor::S3).await;
    let store = open(&endpoint, "&tigris_consistent=true").await;

    let v1 = store.create("lock", b("one")).await.unwrap();
    let err = store.create("lock", b("two")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    store.get("lock").await.unwrap().unwrap();
    let v2 = store.replace("lock", &v1, b("two")).await.unwrap();
    store.list("").await.unwrap();
    store.delete("lock", &v2).await.unwrap();
    assert_eq!(store.get("lock").await.unwrap(), None);

    let requests = fake.requests();
    let methods: Vec<&str> = requests.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(
        methods,
        ["PUT", "PUT", "GET", "PUT", "GET", "DELETE", "GET"]
    );
    for request in &requests {
        assert_eq!(
            request.header("x-tigris-consistent"),
            Some("true"),
            "{request:?}"
        );
        assert!(
            request
                .signed_headers()
                .split(';')
                .any(|h| h == "x-tigris-consistent"),
            "{request:?}"
        );
    }
    // The standard conditions are still sent.
    assert_eq!(requests[0].header("if-none-match"), Some("*"));
    assert_eq!(requests[3].header("if-match"), v1.as_etag());
    assert_eq!(requests[5].header("if-match"), v2.as_etag());

    // Without the option, no such header.
    let plain = open(&endpoint, "").await;
    plain.get("lock").await.unwrap();
    assert_eq!(fake.last().header("x-tigris-consistent"), None);
}

// ------------------------------------------ stores that ignore If-Match on DELETE

#[tokio::test]
async fn conditional_delete_off_sends_nothing_and_leases_never_need_it() {
    let (fake, endpoint) = start(Vendor::S3).await;
    let store = open(&endpoint, "&conditional_delete=false").await;
    let v1 = store.create("lock", b("one")).await.unwrap();
    let sent = fake.count();
    let err = store.delete("lock", &v1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(fake.count(), sent, "delete must send nothing");
    assert_eq!(fake.body("p/lock"), Some(b("one")));
    let caps = store.capabilities();
    assert!(
        !caps.conditional_delete && caps.replace_if_match,
        "{caps:?}"
    );

    // A lease's whole life (acquire, renew, release) is creates and
    // conditional replaces: no DELETE ever reaches the store.
    let config = LeaseConfig::from_ttl(Duration::from_secs(30)).with_verify_store(false);
    let store: Arc<dyn CasStore> = Arc::new(store);
    let lease = Lease::new(store, "locks/job", "a", config).unwrap();
    let held = lease
        .try_acquire()
        .await
        .unwrap()
        .into_result()
        .expect("free");
    held.release().await.unwrap();
    let again = lease
        .try_acquire()
        .await
        .unwrap()
        .into_result()
        .expect("released");
    again.release().await.unwrap();
    assert!(
        fake.requests().iter().all(|r| r.method != "DELETE"),
        "{:?}",
        fake.requests()
    );
}
