//! A recorded-request S3 server on loopback for tests: it records each
//! request's method, path and headers, and answers conditional requests
//! the way a vendor this machine cannot run does (Aliyun OSS, Tencent COS,
//! GCS's XML API, plain S3 as Tigris speaks it). Shared by the tests of
//! casaas-s3 and casaas-conformance.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// How the server answers conditional requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
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
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn signed_headers(&self) -> &str {
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

pub struct Fake {
    vendor: Vendor,
    state: Mutex<State>,
}

impl Fake {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().log.clone()
    }

    pub fn count(&self) -> usize {
        self.state().log.len()
    }

    pub fn last(&self) -> Recorded {
        self.state()
            .log
            .last()
            .cloned()
            .expect("no request reached the server")
    }

    pub fn body(&self, key: &str) -> Option<Bytes> {
        self.state().objects.get(key).map(|o| o.body.clone())
    }
}

pub const BUCKET: &str = "bucket";
pub const GENERATION_BASE: i64 = 1_700_000_000_000_000;

/// Starts the server; returns it and its endpoint.
pub async fn start(vendor: Vendor) -> (Arc<Fake>, String) {
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
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
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
