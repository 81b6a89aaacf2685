#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Bad input, per provider, against the real servers `cargo xtask servers
//! up` started (moto for S3, fake-gcs for GCS, Azurite for Azure) and the
//! embedded file and memory backends: malformed URLs, corrupt and foreign
//! lock objects, wrong credentials, unreachable endpoints, missing buckets
//! and containers, permission-denied answers.
//!
//! Every message is snapshotted (insta), and every one must be a single line
//! that carries no credential; ports, prefixes and directories are redacted
//! so that the snapshots are stable. Where something could have been
//! written, the test reads the server afterwards: a foreign object is still
//! there byte for byte with its version, and a refused write left nothing.
//!
//! What a server cannot show, and where it is shown instead:
//! - moto and fake-gcs check no credentials at all (moto accepts any
//!   signature, fake-gcs any token), so wrong credentials are shown on
//!   Azurite (shared-key signatures) and Ceph RGW (S3 signatures), and
//!   permission-denied answers on Azurite (SAS permissions).
//! - The file backend runs as whoever runs the tests (often root here), so a
//!   read-only directory denies nothing; it is left out of the permission
//!   cases.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig, LeaseError};
use casaas_core::testkit::{TestServer, test_server, unique_prefix};
use casaas_core::{CasError, CasStore, open_store};
use casaas_testkit::chaos_proxy::{endpoint_of, rewrite_store_url};

/// Credentials for moto, which accepts any: distinctive, so that a leak
/// could not go unseen.
const S3_KEY_ID: &str = "AKIABADINPUTCHECK001";
const S3_SECRET: &str = "bad-input-s3-secret-never-shown-4c2e9b";
/// A well-formed shared key that is not the account's.
const WRONG_AZURE_KEY: &str =
    "d3Jvbmcta2V5LWZvci1iYWQtaW5wdXQtdGVzdHMtbmV2ZXItc2hvd24tMDEyMzQ1Njc4OQ==";

/// The lease key every case aims at.
const LOCK_KEY: &str = "locks/bad-input";

fn register() {
    casaas_s3::register();
    casaas_gcs::register();
    casaas_azure::register();
    casaas_object_store::register();
    casaas_opendal::register();
}

// ---------------------------------------------------------------- checks

/// Replaces what changes between runs: loopback ports, the run's prefix and
/// directories, request ids.
fn redact(text: &str, replacements: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (from, to) in replacements {
        if !from.is_empty() {
            out = out.replace(from, to);
        }
    }
    for host in ["127.0.0.1:", "localhost:"] {
        let mut redacted = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find(host) {
            let after = at + host.len();
            redacted.push_str(&rest[..after]);
            let digits = rest[after..].bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                redacted.push_str("[PORT]");
            }
            rest = &rest[after + digits..];
        }
        redacted.push_str(rest);
        out = redacted;
    }
    redact_guard_keys(&redact_uuids(&out))
}

/// The store guard's probe key is random (`.casaas-guard/` + 32 hex
/// digits); a request URL in a message shows it percent-encoded.
fn redact_guard_keys(text: &str) -> String {
    let mut out = text.to_string();
    for marker in [".casaas-guard%2F", ".casaas-guard/"] {
        let mut redacted = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find(marker) {
            let after = at + marker.len();
            redacted.push_str(&rest[..after]);
            let hex = rest[after..]
                .bytes()
                .take_while(u8::is_ascii_hexdigit)
                .count();
            if hex == 32 {
                redacted.push_str("[GUARD_KEY]");
            }
            rest = &rest[after + if hex == 32 { hex } else { 0 }..];
        }
        redacted.push_str(rest);
        out = redacted;
    }
    out
}

/// `8-4-4-4-12` hex groups (request ids) become `[UUID]`.
fn redact_uuids(text: &str) -> String {
    let bytes = text.as_bytes();
    let shape = [8, 4, 4, 4, 12];
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let mut j = i;
        let mut matched = true;
        for (n, len) in shape.iter().enumerate() {
            let run = bytes[j..]
                .iter()
                .take(*len + 1)
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
            if run != *len {
                matched = false;
                break;
            }
            j += len;
            if n < shape.len() - 1 {
                if bytes.get(j) != Some(&b'-') {
                    matched = false;
                    break;
                }
                j += 1;
            }
        }
        if matched && (i == 0 || !bytes[i - 1].is_ascii_hexdigit()) {
            out.push_str("[UUID]");
            i = j;
        } else {
            out.push(text[i..].chars().next().unwrap());
            i += text[i..].chars().next().unwrap().len_utf8();
        }
    }
    out
}

/// Each message is one non-empty line without any of `secrets`; then the
/// redacted `label: message` lines are snapshotted as `name`.
fn check_and_snapshot(
    name: &str,
    cases: &[(String, String)],
    secrets: &[&str],
    replacements: &[(&str, &str)],
) {
    let mut lines = Vec::new();
    for (label, message) in cases {
        assert!(!message.trim().is_empty(), "{label}: an empty message");
        assert!(
            !message.contains('\n'),
            "{label}: the message is more than one line:\n{message}"
        );
        for secret in secrets {
            assert!(
                !message.contains(secret),
                "{label}: a credential appears in the message"
            );
        }
        lines.push(format!("{label}: {}", redact(message, replacements)));
    }
    insta::assert_snapshot!(name, lines.join("\n"));
}

fn open_error(result: Result<Arc<dyn CasStore>, CasError>) -> String {
    match result {
        Ok(store) => panic!("opened {}", store.describe()),
        Err(err) => err.to_string(),
    }
}

// ------------------------------------------------------------ the stores

async fn s3_store(url: &str) -> Result<Arc<dyn CasStore>, CasError> {
    let store = casaas_s3::S3Store::builder()
        .url(url)?
        .static_credentials(S3_KEY_ID, S3_SECRET)
        .build()
        .await?;
    Ok(Arc::new(store))
}

async fn gcs_store(url: &str) -> Result<Arc<dyn CasStore>, CasError> {
    Ok(Arc::new(casaas_gcs::GcsStore::open(url).await?))
}

/// An Azure store with exactly the credential variables given (never the
/// process environment).
async fn azure_store(url: &str, env: &[(&str, &str)]) -> Result<Arc<dyn CasStore>, CasError> {
    let store = casaas_azure::AzureBlobStoreBuilder::from_url_with_env(url, |name| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_string())
    })?
    .build()
    .await?;
    Ok(Arc::new(store))
}

fn azure_key(server: &TestServer) -> String {
    server.var("AZURE_STORAGE_KEY").to_string()
}

async fn azure_with_key(server: &TestServer, url: &str) -> Result<Arc<dyn CasStore>, CasError> {
    azure_store(url, &[("AZURE_STORAGE_KEY", &azure_key(server))]).await
}

/// The test server's URL under a fresh prefix; `prefix` is what to redact.
fn fresh_url(server: &TestServer, label: &str) -> (String, String) {
    let prefix = unique_prefix(label);
    (
        rewrite_store_url(&server.url, None, None, &prefix).unwrap(),
        prefix,
    )
}

/// A loopback port nothing listens on (bound, then closed).
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn lease(store: &Arc<dyn CasStore>) -> Lease {
    Lease::new(
        store.clone(),
        LOCK_KEY,
        "bad-input",
        LeaseConfig::from_ttl(Duration::from_secs(5)),
    )
    .unwrap()
}

/// One acquisition attempt that must fail, within `bound`; its message.
async fn acquire_error(store: &Arc<dyn CasStore>, bound: Duration) -> String {
    let started = Instant::now();
    let result = tokio::time::timeout(bound, lease(store).try_acquire())
        .await
        .unwrap_or_else(|_| panic!("the attempt took more than {bound:?}"));
    assert!(started.elapsed() <= bound);
    match result {
        Ok(AcquireOutcome::Acquired(_)) => panic!("acquired"),
        Ok(AcquireOutcome::Held(held)) => panic!("reported as held by {}", held.owner),
        Ok(other) => panic!("unexpected outcome {other:?}"),
        Err(err) => err.to_string(),
    }
}

// ------------------------------------------------------- malformed URLs

#[tokio::test]
async fn malformed_urls_name_what_to_fix() {
    register();
    let moto = test_server("moto");
    let (moto_endpoint, _) = endpoint_of(&moto.url).unwrap();
    let fake_gcs = test_server("fake-gcs");
    let (gcs_endpoint, _) = endpoint_of(&fake_gcs.url).unwrap();
    let azurite = test_server("azurite");
    let (azure_origin, azure_path) = endpoint_of(&azurite.url).unwrap();
    let azure_endpoint = format!("{azure_origin}{azure_path}");
    let key = azure_key(&azurite);
    let s3 = |q: &str| format!("s3://casaas-test/p?endpoint={moto_endpoint}&region=us-east-1{q}");
    let gs = |q: &str| format!("gs://casaas-test/p?endpoint={gcs_endpoint}{q}");
    let az = |q: &str| format!("az://devstoreaccount1/casaas-test/p?endpoint={azure_endpoint}{q}");

    let mut cases: Vec<(String, String)> = Vec::new();
    let mut case = |label: &str, message: String| cases.push((label.to_string(), message));

    // Through the registry: the scheme, and URLs that are not URLs.
    case(
        "bad scheme",
        open_error(open_store("s4://casaas-test/p").await),
    );
    case("not a URL", open_error(open_store("casaas-test/p").await));
    case(
        "memory: unknown option",
        open_error(open_store("memory://bad-input/p?persist=true").await),
    );
    case(
        "file: relative directory",
        open_error(open_store("file://relative/dir").await),
    );
    case(
        "file: unknown option",
        open_error(open_store("file:///var/empty/locks?sync=off").await),
    );

    // S3.
    case(
        "s3: missing bucket",
        open_error(s3_store("s3:///p?region=us-east-1").await),
    );
    case(
        "s3: port instead of endpoint",
        open_error(s3_store("s3://127.0.0.1:9000/p").await),
    );
    case(
        "s3: bad option value",
        open_error(s3_store(&s3("&path_style=maybe")).await),
    );
    case(
        "s3: unknown option",
        open_error(s3_store(&s3("&regoin=eu-west-1")).await),
    );
    case(
        "s3: repeated option",
        open_error(s3_store(&s3("&region=eu-west-1")).await),
    );
    case(
        "s3: bad endpoint",
        open_error(s3_store("s3://casaas-test/p?endpoint=not%20a%20url&region=us-east-1").await),
    );
    case(
        "s3: bad timeout",
        open_error(s3_store(&s3("&timeout=soon")).await),
    );

    // GCS.
    case(
        "gcs: missing bucket",
        open_error(gcs_store("gs:///p").await),
    );
    case(
        "gcs: bucket with capitals",
        open_error(gcs_store(&format!("gs://Casaas_Test/p?endpoint={gcs_endpoint}")).await),
    );
    case(
        "gcs: bad option value",
        open_error(gcs_store(&gs("&anonymous=perhaps")).await),
    );
    case(
        "gcs: unknown option",
        open_error(gcs_store(&gs("&endpiont=x")).await),
    );
    case(
        "gcs: bad endpoint",
        open_error(gcs_store("gs://casaas-test/p?endpoint=ftp://127.0.0.1:1").await),
    );

    // Azure (a valid key, so that the URL is what is wrong).
    let with_key = [("AZURE_STORAGE_KEY", key.as_str())];
    case(
        "azure: missing account",
        open_error(azure_store("az:///casaas-test/p", &with_key).await),
    );
    case(
        "azure: missing container",
        open_error(azure_store("az://devstoreaccount1", &with_key).await),
    );
    case(
        "azure: bad option value",
        open_error(azure_store(&az("&create_container=sure"), &with_key).await),
    );
    case(
        "azure: unknown option",
        open_error(azure_store(&az("&containr=x"), &with_key).await),
    );
    case(
        "azure: bad endpoint",
        open_error(
            azure_store(
                "az://devstoreaccount1/casaas-test/p?endpoint=not%20a%20url",
                &with_key,
            )
            .await,
        ),
    );
    case(
        "azure: no credentials",
        open_error(azure_store(&az(""), &[]).await),
    );

    // The adapters (URLs only; no request is sent).
    case(
        "object_store: unknown configuration key",
        open_error(open_store("object_store+s3://casaas-test/p?aws_endpiont=http://x").await),
    );
    case(
        "object_store: bad retries",
        open_error(open_store("object_store+s3://casaas-test/p?retries=many").await),
    );
    case(
        "object_store: unknown scheme",
        open_error(open_store("object_store+s4://casaas-test/p").await),
    );
    case(
        "opendal: bad option value",
        open_error(open_store("opendal+s3://casaas-test/p?conditional_delete=sometimes").await),
    );
    case(
        "opendal: unknown scheme",
        open_error(open_store("opendal+s4://casaas-test/p").await),
    );

    check_and_snapshot(
        "malformed_urls",
        &cases,
        &[S3_SECRET, &key],
        &[
            (&moto_endpoint, "[MOTO]"),
            (&gcs_endpoint, "[FAKE_GCS]"),
            (&azure_origin, "[AZURITE]"),
        ],
    );
}

// ------------------------------------------- corrupt and foreign objects

/// What another program might have left at a lease key.
fn foreign_bodies() -> Vec<(&'static str, Bytes)> {
    vec![
        (
            "garbage bytes",
            Bytes::from_static(b"\x00\x01\xfe\xffPK\x03\x04 not a lease at all"),
        ),
        ("empty object", Bytes::new()),
        (
            "JSON of another program",
            Bytes::from_static(
                br#"{"ID":"7c1d0b2e","Operation":"OperationTypeApply","Who":"ci@runner","Version":"1.9.0"}"#,
            ),
        ),
        (
            "a casaas record of a future schema",
            Bytes::from_static(
                br#"{"kind":"casaas.lease","schema":99,"owner":"tomorrow","nonce":"n","token":7,"ttl_ms":5000,"acquired_at_ms":1,"renewed_at_ms":1,"released":false}"#,
            ),
        ),
        (
            "a casaas record cut short",
            Bytes::from_static(br#"{"kind":"casaas.lease","schema":1,"owner":"a","tok"#),
        ),
    ]
}

/// For each foreign body: put it at the lease key, try to acquire (one
/// attempt, and the blocking `acquire` with a deadline), and check that the
/// object is byte for byte what was put, at the same version.
async fn foreign_objects(
    name: &str,
    open: impl AsyncFn(&str) -> Arc<dyn CasStore>,
    secrets: &[&str],
    replacements: &[(&str, &str)],
) {
    let mut cases = Vec::new();
    for (label, body) in foreign_bodies() {
        let store = open(label).await;
        let version = store.create(LOCK_KEY, body.clone()).await.unwrap();
        let message = acquire_error(&store, Duration::from_secs(30)).await;
        let blocking = tokio::time::timeout(
            Duration::from_secs(30),
            lease(&store).acquire(
                casaas_core::lease::WaitOptions::default().with_deadline(Duration::from_secs(10)),
            ),
        )
        .await
        .expect("a foreign object is an error at once, not a wait");
        match blocking {
            Err(LeaseError::ForeignObject { .. } | LeaseError::UnsupportedSchema { .. }) => {}
            other => panic!("{label}: acquire answered {other:?}"),
        }
        let after = store.get(LOCK_KEY).await.unwrap().expect("still there");
        assert_eq!(after.body, body, "{label}: the object was changed");
        assert_eq!(after.version, version, "{label}: the object was rewritten");
        cases.push((label.to_string(), message));
    }
    check_and_snapshot(name, &cases, secrets, replacements);
}

#[tokio::test]
async fn foreign_lock_objects_on_s3_are_refused_and_left_alone() {
    let server = test_server("moto");
    foreign_objects(
        "foreign_objects_s3",
        async |_: &str| s3_store(&fresh_url(&server, "bad-input").0).await.unwrap(),
        &[S3_SECRET],
        &[],
    )
    .await;
}

#[tokio::test]
async fn foreign_lock_objects_on_gcs_are_refused_and_left_alone() {
    let server = test_server("fake-gcs");
    foreign_objects(
        "foreign_objects_gcs",
        async |_: &str| gcs_store(&fresh_url(&server, "bad-input").0).await.unwrap(),
        &[],
        &[],
    )
    .await;
}

#[tokio::test]
async fn foreign_lock_objects_on_azure_are_refused_and_left_alone() {
    let server = test_server("azurite");
    let key = azure_key(&server);
    foreign_objects(
        "foreign_objects_azure",
        async |_: &str| {
            azure_with_key(&server, &fresh_url(&server, "bad-input").0)
                .await
                .unwrap()
        },
        &[&key],
        &[],
    )
    .await;
}

#[tokio::test]
async fn foreign_lock_objects_on_the_file_backend_are_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    foreign_objects(
        "foreign_objects_file",
        async |label: &str| {
            let sub = root.join(format!("case-{}", label.len()));
            std::fs::create_dir_all(&sub).unwrap();
            open_store(&format!("file://{}", sub.display()))
                .await
                .unwrap()
        },
        &[],
        &[],
    )
    .await;
}

#[tokio::test]
async fn foreign_lock_objects_in_memory_are_refused_and_left_alone() {
    foreign_objects(
        "foreign_objects_memory",
        async |label: &str| {
            open_store(&format!(
                "memory://{}/p",
                unique_prefix("bad-input").replace('/', "-")
            ))
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"))
        },
        &[],
        &[],
    )
    .await;
}

// ------------------------------------------------------ wrong credentials

/// moto and fake-gcs accept any credentials (see the module docs); Azurite
/// checks the shared-key signature.
#[tokio::test]
async fn wrong_azure_key_is_refused_and_writes_nothing() {
    let server = test_server("azurite");
    let key = azure_key(&server);
    let (url, prefix) = fresh_url(&server, "bad-input-wrong-key");
    // Make sure the container exists, with the right key.
    let good = azure_with_key(&server, &url).await.unwrap();
    let url = url.replace("&create_container=true", "");
    let wrong = azure_store(&url, &[("AZURE_STORAGE_KEY", WRONG_AZURE_KEY)])
        .await
        .unwrap();
    let cases = vec![
        (
            "acquire".to_string(),
            acquire_error(&wrong, Duration::from_secs(30)).await,
        ),
        (
            "read".to_string(),
            wrong.get(LOCK_KEY).await.unwrap_err().to_string(),
        ),
    ];
    assert!(
        good.get(LOCK_KEY).await.unwrap().is_none(),
        "nothing written"
    );
    check_and_snapshot(
        "wrong_credentials_azure",
        &cases,
        &[&key, WRONG_AZURE_KEY],
        &[(&prefix, "[PREFIX]")],
    );
}

/// Ceph RGW checks S3 signatures (moto does not): a wrong secret for a
/// known key, and a key Ceph has never heard of, are each refused with a
/// message that says which, and nothing is written.
#[tokio::test]
async fn wrong_s3_credentials_on_ceph_are_refused_and_write_nothing() {
    const WRONG_SECRET: &str = "bad-input-wrong-ceph-secret-never-shown-91d0";
    const UNKNOWN_KEY_ID: &str = "AKIABADINPUTUNKNOWN1";
    let server = test_server("ceph");
    let key_id = server.var("AWS_ACCESS_KEY_ID").to_string();
    let secret = server.var("AWS_SECRET_ACCESS_KEY").to_string();
    let (url, prefix) = fresh_url(&server, "bad-input-wrong-ceph-key");
    let with = |id: String, secret: String| {
        let url = url.clone();
        async move {
            let store = casaas_s3::S3Store::builder()
                .url(&url)
                .unwrap()
                .static_credentials(id, secret)
                .build()
                .await
                .unwrap();
            Arc::new(store) as Arc<dyn CasStore>
        }
    };
    let good = with(key_id.clone(), secret.clone()).await;
    let mut cases = Vec::new();
    for (label, store) in [
        (
            "wrong secret",
            with(key_id.clone(), WRONG_SECRET.into()).await,
        ),
        (
            "unknown key",
            with(UNKNOWN_KEY_ID.into(), secret.clone()).await,
        ),
    ] {
        cases.push((
            format!("{label}, acquire"),
            acquire_error(&store, Duration::from_secs(30)).await,
        ));
        cases.push((
            format!("{label}, read"),
            store.get(LOCK_KEY).await.unwrap_err().to_string(),
        ));
    }
    assert!(
        good.get(LOCK_KEY).await.unwrap().is_none(),
        "nothing written"
    );
    check_and_snapshot(
        "wrong_credentials_ceph",
        &cases,
        &[&secret, WRONG_SECRET],
        &[(&prefix, "[PREFIX]")],
    );
}

// ----------------------------------------------------- permission denied

/// A container SAS that may read and list but not write: Azurite checks
/// the permissions and answers 403.
#[tokio::test]
async fn a_read_only_sas_is_refused_and_writes_nothing() {
    use azure_storage::prelude::BlobSasPermissions;
    use azure_storage::shared_access_signature::SasToken;
    use azure_storage_blobs::prelude::ClientBuilder;

    let server = test_server("azurite");
    let key = azure_key(&server);
    let (url, prefix) = fresh_url(&server, "bad-input-read-only");
    let good = azure_with_key(&server, &url).await.unwrap();
    let (origin, path) = endpoint_of(&server.url).unwrap();
    let signer = ClientBuilder::with_location(
        azure_storage::CloudLocation::Custom {
            account: "devstoreaccount1".into(),
            uri: format!("{origin}{path}"),
        },
        azure_storage::StorageCredentials::access_key(
            "devstoreaccount1",
            azure_core::auth::Secret::new(key.clone()),
        ),
    )
    .container_client(server.var("AZURE_STORAGE_CONTAINER"));
    let permissions = BlobSasPermissions {
        read: true,
        list: true,
        ..Default::default()
    };
    let expiry = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let sas = signer
        .shared_access_signature(permissions, expiry)
        .await
        .unwrap()
        .token()
        .unwrap();
    let signature = sas
        .split('&')
        .find_map(|p| p.strip_prefix("sig="))
        .unwrap()
        .to_string();
    let url = url.replace("&create_container=true", "");
    let read_only = azure_store(&url, &[("AZURE_STORAGE_SAS_TOKEN", &sas)])
        .await
        .unwrap();
    // Reading is allowed: the SAS is valid, only writes are denied.
    assert!(read_only.get(LOCK_KEY).await.unwrap().is_none());
    let cases = vec![
        (
            "acquire".to_string(),
            acquire_error(&read_only, Duration::from_secs(30)).await,
        ),
        (
            "create".to_string(),
            read_only
                .create("other", Bytes::from_static(b"x"))
                .await
                .unwrap_err()
                .to_string(),
        ),
    ];
    assert!(
        good.get(LOCK_KEY).await.unwrap().is_none(),
        "nothing written"
    );
    assert!(
        good.get("other").await.unwrap().is_none(),
        "nothing written"
    );
    check_and_snapshot(
        "permission_denied_azure",
        &cases,
        &[&key, &sas, &signature],
        &[(&prefix, "[PREFIX]")],
    );
}

// ------------------------------------------------- unreachable endpoints

#[tokio::test]
async fn unreachable_endpoints_fail_fast_and_say_so() {
    let port = dead_port();
    let dead = format!("http://127.0.0.1:{port}");
    let moto = test_server("moto");
    let fake_gcs = test_server("fake-gcs");
    let azurite = test_server("azurite");
    let key = azure_key(&azurite);
    let bound = Duration::from_secs(20);
    let mut cases = Vec::new();

    let url = rewrite_store_url(&moto.url, Some(&dead), Some(2), "bad-input").unwrap();
    let store = s3_store(&url).await.unwrap();
    cases.push(("s3".to_string(), acquire_error(&store, bound).await));

    let url = rewrite_store_url(&fake_gcs.url, Some(&dead), Some(2), "bad-input").unwrap();
    let store = gcs_store(&url).await.unwrap();
    cases.push(("gcs".to_string(), acquire_error(&store, bound).await));

    let url = rewrite_store_url(
        &azurite.url.replace("&create_container=true", ""),
        Some(&format!("{dead}/devstoreaccount1")),
        Some(2),
        "bad-input",
    )
    .unwrap();
    let store = azure_with_key(&azurite, &url).await.unwrap();
    cases.push(("azure".to_string(), acquire_error(&store, bound).await));

    check_and_snapshot(
        "unreachable_endpoints",
        &cases,
        &[S3_SECRET, &key],
        &[(&dead, "[DEAD_ENDPOINT]")],
    );
}

// ------------------------------------------ missing buckets and containers

#[tokio::test]
async fn missing_buckets_and_containers_say_so_and_are_not_created() {
    let moto = test_server("moto");
    let fake_gcs = test_server("fake-gcs");
    let azurite = test_server("azurite");
    let key = azure_key(&azurite);
    let bound = Duration::from_secs(30);
    let missing = "casaas-missing-bucket";
    let mut cases = Vec::new();

    let url = moto
        .url
        .replace("s3://casaas-test/", &format!("s3://{missing}/"));
    let store = s3_store(&url).await.unwrap();
    cases.push(("s3".to_string(), acquire_error(&store, bound).await));
    // A plain read says so too: NoSuchBucket is not "absent".
    let read = store.get(LOCK_KEY).await.unwrap_err();
    assert!(read.is_bucket_missing(), "{read}");

    let url = fake_gcs
        .url
        .replace("gs://casaas-test/", &format!("gs://{missing}/"));
    let store = gcs_store(&url).await.unwrap();
    cases.push(("gcs".to_string(), acquire_error(&store, bound).await));
    // Not checked: fake-gcs answers a read in a missing bucket with the same
    // bare 404 "Not Found" as a missing object, so a `get` there says
    // "absent" (real GCS names the bucket); the acquire's create then does.

    let url = azurite
        .url
        .replace("/casaas-test?", &format!("/{missing}?"))
        .replace("&create_container=true", "");
    let store = azure_with_key(&azurite, &url).await.unwrap();
    cases.push(("azure".to_string(), acquire_error(&store, bound).await));
    assert!(
        store.get(LOCK_KEY).await.is_err(),
        "the container was not created"
    );

    // The file backend creates a missing directory when it opens a store:
    // there is no missing-bucket case for it.

    check_and_snapshot("missing_buckets", &cases, &[S3_SECRET, &key], &[]);
}
