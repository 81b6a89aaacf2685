//! The vendor dialects of conditional writes (`forbid_overwrite=oss|cos`,
//! `gcs_interop`, `tigris_consistent`) and `conditional_delete=false`,
//! against a recorded-request S3 server on loopback that answers like the
//! vendor: these stores cannot run here, so the test server records every
//! request's method, path and headers, and each test asserts the exact
//! headers sent and the kind of every refusal.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{Lease, LeaseConfig};
use casaas_core::{CasStore, ErrorKind, Version};
use casaas_s3::S3Store;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// How the server answers conditional requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vendor {
    /// Aliyun OSS: 501 to `If-None-Match` / `If-Match`; with
    /// `x-oss-forbid-overwrite: true`, 409 `FileAlreadyExists` when the key
    /// exists.
    Oss,
    /// Tencent COS: the same with `x-cos-forbid-overwrite`.
    Cos,
    /// GCS's XML API: `x-goog-if-generation-match` honoured (412 on a
    /// mismatch), `If-None-Match` on PUT ignored (as reported), the
    /// generation in `x-goog-generation` on every object answer.
    GcsInterop,
    /// Plain S3 conditions (Tigris speaks these).
    S3,
}

impl Vendor {
    fn forbid_header(self) -> Option<&'static str> {
        match self {
            Vendor::Oss => Some("x-oss-forbid-overwrite"),
            Vendor::Cos => Some("x-cos-forbid-overwrite"),
            _ => None,
        }
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn signed_headers(&self) -> &str {
        let auth = self.header("authorization").unwrap_or("");
        auth.split("SignedHeaders=")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap_or("")
    }
}

#[derive(Debug, Clone)]
struct Object {
    body: Bytes,
    etag: String,
    generation: i64,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Object>,
    log: Vec<Recorded>,
    writes: u64,
}

struct Fake {
    vendor: Vendor,
    state: Mutex<State>,
}

impl Fake {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn requests(&self) -> Vec<Recorded> {
        self.state().log.clone()
    }

    fn count(&self) -> usize {
        self.state().log.len()
    }

    fn last(&self) -> Recorded {
        self.state()
            .log
            .last()
            .cloned()
            .expect("no request reached the server")
    }

    fn body(&self, key: &str) -> Option<Bytes> {
        self.state().objects.get(key).map(|o| o.body.clone())
    }
}

const BUCKET: &str = "bucket";
const GENERATION_BASE: i64 = 1_700_000_000_000_000;

/// Starts the server; returns it and its endpoint.
async fn start(vendor: Vendor) -> (Arc<Fake>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let fake = Arc::new(Fake {
        vendor,
        state: Mutex::new(State::default()),
    });
    let server = fake.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let fake = server.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| answer(fake.clone(), req));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (fake, endpoint)
}

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

fn xml_error(status: u16, code: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{code}</Message><RequestId>1</RequestId></Error>"
    );
    Response::builder()
        .status(status)
        .header("content-type", "application/xml")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn object_answer(vendor: Vendor, object: &Object, body: Option<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::builder()
        .status(StatusCode::OK)
        .header("etag", &object.etag)
        .header("last-modified", "Mon, 01 Jan 2024 00:00:00 GMT");
    if vendor == Vendor::GcsInterop {
        response = response.header("x-goog-generation", object.generation.to_string());
    }
    match body {
        Some(body) => response
            .header("content-length", body.len().to_string())
            .body(Full::new(body))
            .unwrap(),
        // HEAD: the length of what a GET would send, and no body.
        None => response
            .header("content-length", object.body.len().to_string())
            .body(Full::new(Bytes::new()))
            .unwrap(),
    }
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| decode(v))
}

fn list_answer(state: &State, prefix: &str) -> Response<Full<Bytes>> {
    let mut contents = String::new();
    let mut count = 0;
    for (key, object) in state.objects.range(prefix.to_string()..) {
        if !key.starts_with(prefix) {
            break;
        }
        count += 1;
        contents.push_str(&format!(
            "<Contents><Key>{key}</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>\
             <ETag>{}</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            object.etag.replace('"', "&quot;"),
            object.body.len()
        ));
    }
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult \
         xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>{BUCKET}</Name>\
         <Prefix>{prefix}</Prefix><KeyCount>{count}</KeyCount><MaxKeys>1000</MaxKeys>\
         <IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
    );
    Response::builder()
        .status(200)
        .header("content-type", "application/xml")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

async fn answer(
    fake: Arc<Fake>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let recorded = Recorded {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        query: req.uri().query().unwrap_or("").to_string(),
        headers: req
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
    };
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let vendor = fake.vendor;
    let mut state = fake.state();
    state.log.push(recorded.clone());
    let path = decode(recorded.path.trim_start_matches('/'));
    let (_, key) = path.split_once('/').unwrap_or((path.as_str(), ""));
    let key = key.to_string();
    let has = |name: &str| recorded.header(name).is_some();
    let existing = state.objects.get(&key).cloned();

    let response = match method {
        Method::GET if key.is_empty() => {
            let prefix = query_param(&recorded.query, "prefix").unwrap_or_default();
            list_answer(&state, &prefix)
        }
        Method::GET | Method::HEAD => match existing {
            Some(object) => {
                let body = (method == Method::GET).then(|| object.body.clone());
                object_answer(vendor, &object, body)
            }
            None if method == Method::HEAD => Response::builder()
                .status(404)
                .body(Full::new(Bytes::new()))
                .unwrap(),
            None => xml_error(404, "NoSuchKey"),
        },
        Method::PUT => {
            let refusal = match vendor {
                Vendor::Oss | Vendor::Cos => {
                    let forbid = vendor
                        .forbid_header()
                        .and_then(|h| recorded.header(h))
                        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                    if has("if-none-match") || has("if-match") {
                        Some(xml_error(501, "NotImplemented"))
                    } else if forbid && existing.is_some() {
                        Some(xml_error(409, "FileAlreadyExists"))
                    } else {
                        None
                    }
                }
                Vendor::GcsInterop => {
                    match recorded
                        .header("x-goog-if-generation-match")
                        .map(|g| g.parse::<i64>().unwrap())
                    {
                        None => None,
                        Some(0) if existing.is_none() => None,
                        Some(g) if existing.as_ref().is_some_and(|o| o.generation == g) => None,
                        Some(_) => Some(xml_error(412, "PreconditionFailed")),
                    }
                }
                Vendor::S3 => {
                    if recorded.header("if-none-match") == Some("*") && existing.is_some() {
                        Some(xml_error(412, "PreconditionFailed"))
                    } else if let Some(etag) = recorded.header("if-match") {
                        match &existing {
                            None => Some(xml_error(404, "NoSuchKey")),
                            Some(o) if o.etag != etag => Some(xml_error(412, "PreconditionFailed")),
                            Some(_) => None,
                        }
                    } else {
                        None
                    }
                }
            };
            match refusal {
                Some(refusal) => refusal,
                None => {
                    state.writes += 1;
                    let object = Object {
                        body,
                        etag: format!("\"etag-{}\"", state.writes),
                        generation: GENERATION_BASE + state.writes as i64,
                    };
                    state.objects.insert(key, object.clone());
                    let mut response = Response::builder().status(200).header("etag", &object.etag);
                    if vendor == Vendor::GcsInterop {
                        response =
                            response.header("x-goog-generation", object.generation.to_string());
                    }
                    response.body(Full::new(Bytes::new())).unwrap()
                }
            }
        }
        Method::DELETE => {
            let refusal = match (vendor, &existing) {
                (Vendor::Oss | Vendor::Cos, _) if has("if-match") => {
                    Some(xml_error(501, "NotImplemented"))
                }
                (Vendor::GcsInterop, _) => match recorded
                    .header("x-goog-if-generation-match")
                    .map(|g| g.parse::<i64>().unwrap())
                {
                    None => None,
                    Some(_) if existing.is_none() => Some(xml_error(404, "NoSuchKey")),
                    Some(g) if existing.as_ref().is_some_and(|o| o.generation == g) => None,
                    Some(_) => Some(xml_error(412, "PreconditionFailed")),
                },
                (Vendor::S3, _) => match recorded.header("if-match") {
                    None => None,
                    Some(_) if existing.is_none() => Some(xml_error(404, "NoSuchKey")),
                    Some(etag) if existing.as_ref().is_some_and(|o| o.etag == etag) => None,
                    Some(_) => Some(xml_error(412, "PreconditionFailed")),
                },
                _ => None,
            };
            match refusal {
                Some(refusal) => refusal,
                None => {
                    state.objects.remove(&key);
                    Response::builder()
                        .status(204)
                        .body(Full::new(Bytes::new()))
                        .unwrap()
                }
            }
        }
        _ => xml_error(405, "MethodNotAllowed"),
    };
    Ok(response)
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
    let config = LeaseConfig::with_ttl(Duration::from_secs(30)).verify_store(false);
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
