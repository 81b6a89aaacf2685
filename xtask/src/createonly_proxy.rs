//! The `createonly` test server's proxy: an S3 store that honours only
//! create-if-absent. It forwards every request to an S3 server unchanged
//! (`If-None-Match` included), except that a request carrying `If-Match`
//! (a conditional replace or delete, a conditional
//! CompleteMultipartUpload) is answered `501 NotImplemented` with an S3 XML
//! error and never reaches the server — the way stores without conditional
//! replace answer it.
//!
//! Run as the hidden `cargo xtask createonly-proxy --listen PORT --upstream
//! URL` by `servers up createonly`, which records its PID.

use std::convert::Infallible;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// The header whose presence makes the proxy refuse a request.
const REFUSED_HEADER: &str = "if-match";

struct Proxy {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// Serves on 127.0.0.1:`port` in front of `upstream` (`http://127.0.0.1:P`)
/// until killed.
pub fn run(port: u16, upstream: &str) -> Result<()> {
    let host = upstream
        .strip_prefix("http://")
        .map(|h| h.trim_end_matches('/'))
        .filter(|h| h.starts_with("127.") || h.starts_with("localhost"))
        .with_context(|| format!("the upstream must be http://127.0.0.1:PORT, not {upstream}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(serve(port, format!("http://{host}")))
}

async fn serve(port: u16, upstream: String) -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("listening on 127.0.0.1:{port}"))?;
    let proxy = Arc::new(Proxy {
        upstream,
        client: Client::builder(TokioExecutor::new()).build_http(),
    });
    eprintln!(
        "createonly-proxy: 127.0.0.1:{port} -> {} (If-Match answered 501)",
        proxy.upstream
    );
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                eprintln!("createonly-proxy: accept failed: {err}");
                continue;
            }
        };
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(proxy.clone(), req));
            if let Err(err) = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                eprintln!("createonly-proxy: connection ended: {err}");
            }
        });
    }
}

fn full(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}

/// The S3 error a store without conditional replace answers.
fn not_implemented(method: &Method, path: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NotImplemented</Code>\
         <Message>A header you provided implies functionality that is not implemented: \
         If-Match</Message><Resource>{}</Resource><RequestId>createonly</RequestId></Error>",
        xml_escape(path)
    );
    eprintln!("createonly-proxy: 501 to {method} {path} (If-Match)");
    let mut response = full(StatusCode::NOT_IMPLEMENTED, Bytes::from(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    response
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

async fn handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.to_string());
    if parts.headers.contains_key(REFUSED_HEADER) {
        return Ok(not_implemented(&parts.method, &path));
    }
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            return Ok(full(
                StatusCode::BAD_REQUEST,
                Bytes::from(format!("reading the request body failed: {err}")),
            ));
        }
    };
    match forward(&proxy, &parts.method, &path, &parts.headers, body).await {
        Ok(response) => Ok(response),
        Err(err) => {
            eprintln!("createonly-proxy: {} {path}: {err:#}", parts.method);
            Ok(full(
                StatusCode::BAD_GATEWAY,
                Bytes::from(format!("the upstream S3 server did not answer: {err}")),
            ))
        }
    }
}

/// Forwards one request whole and returns the server's answer whole. The
/// Host header is kept as the client signed it.
async fn forward(
    proxy: &Proxy,
    method: &Method,
    path: &str,
    headers: &hyper::HeaderMap,
    body: Bytes,
) -> Result<Response<Full<Bytes>>> {
    let mut builder = Request::builder()
        .method(method.clone())
        .uri(format!("{}{path}", proxy.upstream));
    for (name, value) in headers {
        if name != TRANSFER_ENCODING && name != CONNECTION && name != CONTENT_LENGTH {
            builder = builder.header(name, value);
        }
    }
    let request = builder
        .header(CONTENT_LENGTH, body.len())
        .body(Full::new(body))?;
    let response = proxy.client.request(request).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut answer = full(parts.status, body.clone());
    for (name, value) in &parts.headers {
        if name != TRANSFER_ENCODING && name != CONNECTION && name != CONTENT_LENGTH {
            answer.headers_mut().append(name, value.clone());
        }
    }
    // A HEAD answer keeps the length of what a GET would send.
    let length = match (method, parts.headers.get(CONTENT_LENGTH)) {
        (&Method::HEAD, Some(length)) => length.clone(),
        _ => HeaderValue::from(body.len()),
    };
    answer.headers_mut().insert(CONTENT_LENGTH, length);
    Ok(answer)
}
