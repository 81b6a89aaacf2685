//! URL parsing, capabilities from quirk options, and no secret in Debug.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::Bytes;
use casaas_core::{CasStore, ErrorKind, Version};
use casaas_s3::S3Store;
use rstest::rstest;

const BASE: &str = "s3://bucket/app?endpoint=http://127.0.0.1:9&path_style=true&region=us-east-1";

async fn open(url: &str) -> S3Store {
    S3Store::builder()
        .url(url)
        .unwrap()
        .static_credentials("AKIDEXAMPLE", "wJalrXUtnFEMI-very-secret")
        .build()
        .await
        .unwrap()
}

#[rstest]
#[case("s3://bucket/p?bogus=1", "unknown option 'bogus'")]
#[case("s3://bucket/p?path_style=maybe", "'path_style' must be true or false")]
#[case(
    "s3://bucket/p?etag_unquoted=2",
    "'etag_unquoted' must be true or false"
)]
#[case("s3://bucket/p?timeout=-1", "'timeout' must be a positive duration")]
#[case(
    "s3://bucket/p?connect_timeout=soon",
    "'connect_timeout' must be a positive"
)]
#[case("s3://bucket/p?region=a&region=b", "'region' is given twice")]
#[case(
    "s3://bucket/p?forbid_overwrite=true",
    "'forbid_overwrite' must be oss (Aliyun OSS) or cos"
)]
#[case(
    "s3://bucket/p?forbid_overwrite=minio",
    "'forbid_overwrite' must be oss (Aliyun OSS) or cos"
)]
#[case(
    "s3://bucket/p?tigris_consistent=sure",
    "'tigris_consistent' must be true or false"
)]
#[case(
    "s3://bucket/p?gcs_interop=true&forbid_overwrite=oss",
    "two different dialects"
)]
#[case("s3:///p", "needs a bucket")]
#[case("gs://bucket/p", "starts with s3://")]
#[case("s3://bucket:9000/p", "endpoint=http://host:port")]
#[case("not a url", "not a valid store URL")]
fn bad_urls_are_rejected(#[case] url: &str, #[case] says: &str) {
    let err = S3Store::builder().url(url).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{url}: {err}");
    assert!(err.to_string().contains(says), "{url}: {err}");
}

#[test]
fn credentials_in_url_are_rejected_without_echo() {
    let err = S3Store::builder()
        .url("s3://AKIDEXAMPLE:topsecret@bucket/p")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured);
    let text = format!("{err} {err:?}");
    assert!(text.contains("must not be put in an s3:// URL"), "{text}");
    assert!(
        !text.contains("topsecret") && !text.contains("AKIDEXAMPLE"),
        "{text}"
    );
}

#[tokio::test]
async fn bad_endpoint_is_rejected() {
    for (url, says) in [
        (
            "s3://b/p?endpoint=ftp://127.0.0.1:9000",
            "must start with http",
        ),
        ("s3://b/p?endpoint=127.0.0.1:9000", "is not a URL"),
    ] {
        let err = S3Store::builder()
            .url(url)
            .unwrap()
            .static_credentials("k", "s")
            .build()
            .await
            .unwrap_err();
        assert!(err.to_string().contains(says), "{url}: {err}");
    }
}

#[tokio::test]
async fn debug_and_describe_hold_no_secret() {
    let store = open(BASE).await;
    let builder = S3Store::builder()
        .url(BASE)
        .unwrap()
        .static_credentials("AKIDEXAMPLE", "wJalrXUtnFEMI-very-secret");
    for text in [
        format!("{store:?}"),
        format!("{store:#?}"),
        store.describe(),
        format!("{builder:?}"),
    ] {
        assert!(!text.contains("wJalrXUtnFEMI"), "{text}");
        assert!(!text.contains("AKIDEXAMPLE"), "{text}");
    }
    assert_eq!(
        store.describe(),
        "s3://bucket/app/ (http://127.0.0.1:9, path-style)"
    );
}

#[tokio::test]
async fn prefix_and_keys() {
    let store = open(BASE).await;
    assert_eq!(store.object_key("locks/a"), "app/locks/a");
    let store = open("s3://bucket/?region=us-east-1&endpoint=http://127.0.0.1:9").await;
    assert_eq!(store.object_key("locks/a"), "locks/a");
    let store = open("s3://bucket/my%20app/x?region=us-east-1&endpoint=http://127.0.0.1:9").await;
    assert_eq!(store.object_key("k"), "my app/x/k");
    let err = S3Store::builder()
        .url("s3://bucket/a//b?region=us-east-1")
        .unwrap()
        .static_credentials("k", "s")
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("prefix is unusable"), "{err}");
}

#[tokio::test]
async fn quirk_options_show_in_capabilities() {
    let plain = open(BASE).await.capabilities();
    assert!(plain.create_if_absent && plain.replace_if_match && plain.conditional_delete);
    assert!(plain.notes.is_empty());

    let ceph = open(&format!(
        "{BASE}&etag_unquoted=true&conditional_delete=false&versioned_bucket=true"
    ))
    .await;
    let caps = ceph.capabilities();
    assert!(!caps.conditional_delete);
    assert_eq!(caps.notes.len(), 3, "{:?}", caps.notes);
    assert!(caps.notes.iter().any(|n| n.contains("If-None-Match")));

    // Without conditional delete, delete answers Unsupported without
    // sending anything (nothing listens at the endpoint).
    let err = ceph.delete("k", &Version::etag("\"e\"")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(err.status(), None);
}

#[tokio::test]
async fn dialect_options_show_in_config_and_capabilities() {
    use casaas_s3::ForbidOverwrite;

    for (option, dialect) in [
        ("oss", Some(ForbidOverwrite::Oss)),
        ("COS", Some(ForbidOverwrite::Cos)),
        ("none", None),
    ] {
        let store = open(&format!("{BASE}&forbid_overwrite={option}")).await;
        assert_eq!(store.config().quirks.forbid_overwrite, dialect, "{option}");
        let caps = store.capabilities();
        // A create-only store has neither conditional replace nor delete.
        assert_eq!(caps.replace_if_match, dialect.is_none(), "{option}");
        assert_eq!(caps.conditional_delete, dialect.is_none(), "{option}");
        assert!(caps.create_if_absent);
    }

    let store = open(&format!("{BASE}&tigris_consistent=true&gcs_interop=yes")).await;
    let quirks = store.config().quirks;
    assert!(quirks.tigris_consistent && quirks.gcs_interop);
    let caps = store.capabilities();
    assert!(caps.replace_if_match && caps.conditional_delete);
    assert!(caps.notes.iter().any(|n| n.contains("X-Tigris-Consistent")));
    assert!(
        caps.notes
            .iter()
            .any(|n| n.contains("x-goog-if-generation-match"))
    );

    // The builder refuses the contradiction the URL parser refuses.
    let err = S3Store::builder()
        .url(BASE)
        .unwrap()
        .static_credentials("k", "s")
        .gcs_interop(true)
        .forbid_overwrite(Some(ForbidOverwrite::Oss))
        .build()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
}

#[tokio::test]
async fn invalid_keys_send_nothing() {
    let store = open(BASE).await;
    for key in ["", "/a", "a//b", "../x"] {
        let err = store.create(key, Bytes::new()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{key}");
    }
    let err = store.list("/").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn register_opens_s3_urls() {
    casaas_s3::register();
    assert!(casaas_core::provider::registered_schemes().contains(&"s3".to_string()));
    let err = casaas_core::open_store("s3://bucket/p?nope=1")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown option 'nope'"), "{err}");
}

/// `open_with`: options and static credentials given beside the URL, the
/// same words as the other providers; a credential given alone is refused.
#[tokio::test]
async fn open_with_takes_options_and_credentials_beside_the_url() {
    let store = S3Store::open_with(
        "s3://bucket/app?endpoint=http://127.0.0.1:9&path_style=true",
        [
            ("region", "eu-west-3"),
            ("aws_access_key_id", "AKIDEXAMPLE"),
            ("aws_secret_access_key", "wJalrXUtnFEMI-very-secret"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(store.config().region.as_deref(), Some("eu-west-3"));
    assert_eq!(store.config().prefix, "app");
    assert!(!format!("{store:?}").contains("very-secret"));
    let err = S3Store::open_with(
        "s3://bucket/app?endpoint=http://127.0.0.1:9",
        [("aws_access_key_id", "AKIDEXAMPLE")],
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("together"), "{err}");
}
