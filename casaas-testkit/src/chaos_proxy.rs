//! A fault-injecting HTTP proxy between a provider crate and a real server.
//!
//! The provider's judgement of transport faults (did a failed write maybe
//! take effect, or was nothing sent?) happens in its HTTP stack, below
//! anything an in-process fault wrapper reaches. This proxy produces the
//! real faults on loopback: it forwards a request and drops the connection
//! before the answer, resets before forwarding, cuts the answer's body
//! short, stalls past the client's timeout and forwards late, answers 503
//! SlowDown / 429 / 500 itself, or forwards a request twice. It keeps every
//! client connection alive (whatever the server says), so connection reuse
//! is exercised too, and logs what it did to each request.
//!
//! Faults apply to writes (PUT, POST, PATCH, DELETE) only; reads always pass,
//! so that a test can check what the server really holds.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONNECTION, CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the proxy does to one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyFault {
    /// Forward and answer normally.
    Forward,
    /// Forward, wait for the server's answer, then drop the connection: the
    /// write is applied and the client never hears.
    DropAfterForward,
    /// Drop the connection without forwarding: nothing reaches the server.
    ResetBeforeForward,
    /// Forward, then answer with the headers and only half of the body
    /// before closing: applied, answer cut short.
    TruncateResponse,
    /// Hold the request this long before forwarding it (past the client's
    /// timeout): the write lands after the client gave up.
    StallThenForward(Duration),
    /// Answer 503 SlowDown without forwarding.
    SlowDown,
    /// Answer 429 Too Many Requests without forwarding.
    TooManyRequests,
    /// Answer 500 without forwarding.
    InternalError,
    /// Forward the request twice and answer with the second answer (a won
    /// create comes back as a conflict).
    Duplicate,
    /// Forward, wait for the server's answer, then answer 500 instead: the
    /// write is applied and the client hears a server error (a gateway
    /// whose backend answered after the gateway gave up), which clients
    /// retry.
    ServerErrorAfterForward,
}

impl ProxyFault {
    /// Does the server see the write (at least once)?
    pub fn reaches_server(self) -> bool {
        !matches!(
            self,
            ProxyFault::ResetBeforeForward
                | ProxyFault::SlowDown
                | ProxyFault::TooManyRequests
                | ProxyFault::InternalError
        )
    }

    /// Every fault, for random schedules (stalls of `stall`).
    pub fn all(stall: Duration) -> Vec<ProxyFault> {
        vec![
            ProxyFault::DropAfterForward,
            ProxyFault::ResetBeforeForward,
            ProxyFault::TruncateResponse,
            ProxyFault::StallThenForward(stall),
            ProxyFault::SlowDown,
            ProxyFault::TooManyRequests,
            ProxyFault::InternalError,
            ProxyFault::Duplicate,
        ]
    }
}

/// How faults are chosen for writes that have no scripted fault.
#[derive(Debug, Clone)]
pub struct RandomFaults {
    /// Seed of the choice.
    pub seed: u64,
    /// Probability that a write gets a fault.
    pub probability: f64,
    /// The faults to choose from, uniformly.
    pub faults: Vec<ProxyFault>,
}

/// What the proxy did to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRecord {
    /// Order of arrival, from 0.
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The fault applied.
    pub fault: ProxyFault,
    /// Statuses the server answered (empty if not forwarded or not yet).
    pub upstream_statuses: Vec<u16>,
}

/// Errors of the proxy itself.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream address is not `http://HOST:PORT`.
    #[error("the upstream must be http://HOST:PORT on loopback, got '{0}'")]
    BadUpstream(String),
    /// The listener could not be bound.
    #[error("could not listen on 127.0.0.1: {0}")]
    Bind(#[from] std::io::Error),
}

#[derive(Debug)]
struct State {
    scripted: VecDeque<ProxyFault>,
    random: Option<(RandomFaults, ChaCha8Rng)>,
    /// Writes whose path lacks this pass without a fault.
    only_paths_containing: Option<String>,
    log: Vec<ProxyRecord>,
    next_seq: u64,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    state: Mutex<State>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running proxy; stopped when dropped.
#[derive(Debug)]
pub struct ChaosProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

type ProxyBody = BoxBody<Bytes, std::io::Error>;

/// Returned by the service to make hyper close the connection unanswered.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by the chaos proxy")]
struct Dropped;

impl ChaosProxy {
    /// Starts a proxy on a free loopback port in front of `upstream`
    /// (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> Result<ChaosProxy, ProxyError> {
        let host = upstream
            .strip_prefix("http://")
            .map(|h| h.trim_end_matches('/'))
            .filter(|h| {
                h.starts_with("127.") || h.starts_with("localhost") || h.starts_with("[::1]")
            })
            .ok_or_else(|| ProxyError::BadUpstream(upstream.to_string()))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: format!("http://{host}"),
            state: Mutex::new(State {
                scripted: VecDeque::new(),
                random: None,
                only_paths_containing: None,
                log: Vec::new(),
                next_seq: 0,
            }),
            client: Client::builder(TokioExecutor::new()).build_http(),
        });
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(listener, shared.clone(), stop.clone()));
        Ok(ChaosProxy { addr, shared, stop })
    }

    /// The proxy's endpoint, `http://127.0.0.1:PORT`, to give the client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The fault for the next write that arrives (scripted faults go first,
    /// in order).
    pub fn script(&self, fault: ProxyFault) {
        self.shared.lock().scripted.push_back(fault);
    }

    /// Random faults for the writes without a scripted one.
    pub fn randomize(&self, random: RandomFaults) {
        let rng = ChaCha8Rng::seed_from_u64(random.seed);
        self.shared.lock().random = Some((random, rng));
    }

    /// Faults (scripted or random) only for writes whose path and query
    /// contain `needle` (a Delta commit: `_delta_log/`); other writes pass.
    pub fn only_paths_containing(&self, needle: &str) {
        self.shared.lock().only_paths_containing = Some(needle.to_string());
    }

    /// Every request so far and what was done to it.
    pub fn log(&self) -> Vec<ProxyRecord> {
        self.shared.lock().log.clone()
    }

    /// How many requests got each fault other than [`ProxyFault::Forward`].
    pub fn fault_count(&self) -> usize {
        self.shared
            .lock()
            .log
            .iter()
            .filter(|r| r.fault != ProxyFault::Forward)
            .count()
    }
}

/// The server a store URL's `endpoint=` option names, as `http://HOST:PORT`,
/// and the path after it (Azure endpoints carry the account in the path).
pub fn endpoint_of(store_url: &str) -> Result<(String, String), String> {
    let url = url::Url::parse(store_url).map_err(|e| format!("not a URL: {e}"))?;
    let endpoint = url
        .query_pairs()
        .find(|(k, _)| k == "endpoint")
        .map(|(_, v)| v.to_string())
        .ok_or("the store URL has no endpoint= option")?;
    let parsed = url::Url::parse(&endpoint).map_err(|e| format!("endpoint: {e}"))?;
    let host = parsed.host_str().ok_or("the endpoint has no host")?;
    let port = parsed
        .port_or_known_default()
        .ok_or("the endpoint has no port")?;
    Ok((
        format!("http://{host}:{port}"),
        parsed.path().trim_end_matches('/').to_string(),
    ))
}

/// `store_url` with its endpoint replaced by `endpoint` (if given), its
/// `timeout` option set to `timeout_s` seconds (if given), and `prefix`
/// appended to its path.
pub fn rewrite_store_url(
    store_url: &str,
    endpoint: Option<&str>,
    timeout_s: Option<u64>,
    prefix: &str,
) -> Result<String, String> {
    let mut url = url::Url::parse(store_url).map_err(|e| format!("not a URL: {e}"))?;
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| {
            (endpoint.is_none() || k != "endpoint") && (timeout_s.is_none() || k != "timeout")
        })
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    {
        let mut pairs = url.query_pairs_mut();
        pairs.clear().extend_pairs(kept);
        if let Some(endpoint) = endpoint {
            pairs.append_pair("endpoint", endpoint);
        }
        if let Some(timeout) = timeout_s {
            pairs.append_pair("timeout", &timeout.to_string());
        }
    }
    let base = url.path().trim_end_matches('/').to_string();
    url.set_path(&format!("{base}/{}", prefix.trim_matches('/')));
    Ok(url.to_string())
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(err) => {
                    tracing::debug!(error = %err, "chaos proxy accept failed");
                    continue;
                }
            },
        };
        let shared = shared.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(shared.clone(), req));
            let conn = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = stop.cancelled() => {}
                result = conn => {
                    if let Err(err) = result {
                        tracing::trace!(error = %err, "chaos proxy connection ended");
                    }
                }
            }
        });
    }
}

fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::PUT | Method::POST | Method::PATCH | Method::DELETE
    )
}

/// Picks the fault for a request and logs it; returns its log index.
fn choose(shared: &Shared, method: &Method, path: String) -> (usize, ProxyFault) {
    let mut state = shared.lock();
    let targeted = state
        .only_paths_containing
        .as_deref()
        .is_none_or(|needle| path.contains(needle));
    let fault = if is_write(method) && targeted {
        match state.scripted.pop_front() {
            Some(fault) => fault,
            None => match &mut state.random {
                Some((random, rng)) if !random.faults.is_empty() => {
                    if rng.random_bool(random.probability.clamp(0.0, 1.0)) {
                        random.faults[rng.random_range(0..random.faults.len())]
                    } else {
                        ProxyFault::Forward
                    }
                }
                _ => ProxyFault::Forward,
            },
        }
    } else {
        ProxyFault::Forward
    };
    let seq = state.next_seq;
    state.next_seq += 1;
    state.log.push(ProxyRecord {
        seq,
        method: method.to_string(),
        path,
        fault,
        upstream_statuses: Vec::new(),
    });
    (state.log.len() - 1, fault)
}

/// A request as forwarded: method, path, headers, whole body.
#[derive(Clone)]
struct Forwardable {
    method: Method,
    path: String,
    headers: hyper::HeaderMap,
    body: Bytes,
}

struct Answer {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Bytes,
}

async fn forward(shared: &Shared, index: usize, req: &Forwardable) -> Result<Answer, Dropped> {
    let uri = format!("{}{}", shared.upstream, req.path);
    let mut builder = Request::builder().method(req.method.clone()).uri(uri);
    for (name, value) in &req.headers {
        // The body is forwarded whole; the Host header is kept as the client
        // signed it.
        if name != TRANSFER_ENCODING && name != CONNECTION && name != CONTENT_LENGTH {
            builder = builder.header(name, value);
        }
    }
    let request = builder
        .header(CONTENT_LENGTH, req.body.len())
        .body(Full::new(req.body.clone()))
        .map_err(|_| Dropped)?;
    let response = shared.client.request(request).await.map_err(|err| {
        tracing::debug!(error = %err, "chaos proxy could not reach the server");
        Dropped
    })?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    if let Some(record) = shared.lock().log.get_mut(index) {
        record.upstream_statuses.push(parts.status.as_u16());
    }
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

fn full(body: Bytes) -> ProxyBody {
    Full::new(body)
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn respond(answer: Answer) -> Response<ProxyBody> {
    let mut response = Response::new(full(answer.body.clone()));
    *response.status_mut() = answer.status;
    for (name, value) in &answer.headers {
        // Keep the client's connection alive whatever the server says.
        if name != CONNECTION && name != TRANSFER_ENCODING && name != CONTENT_LENGTH {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(answer.body.len()));
    response
}

fn error_answer(status: u16, code: &str, retry_after: Option<u64>) -> Response<ProxyBody> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by the chaos proxy</Message></Error>"
    );
    let mut response = Response::new(full(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Dropped> {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.to_string());
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let (index, fault) = choose(&shared, &parts.method, path.clone());
    let req = Forwardable {
        method: parts.method,
        path,
        headers: parts.headers,
        body,
    };
    match fault {
        ProxyFault::Forward => Ok(respond(forward(&shared, index, &req).await?)),
        ProxyFault::DropAfterForward => {
            forward(&shared, index, &req).await?;
            Err(Dropped)
        }
        ProxyFault::ResetBeforeForward => Err(Dropped),
        ProxyFault::TruncateResponse => {
            let answer = forward(&shared, index, &req).await?;
            let full_len = answer.body.len().max(2);
            let half = answer.body.slice(..answer.body.len() / 2);
            let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
                Ok(Frame::data(half)),
                Err(std::io::Error::other("cut short by the chaos proxy")),
            ];
            let mut response =
                Response::new(StreamBody::new(futures::stream::iter(frames)).boxed());
            *response.status_mut() = answer.status;
            response
                .headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(full_len));
            Ok(response)
        }
        ProxyFault::StallThenForward(stall) => {
            // Detached: the write goes on after the client has given up.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let late = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(stall).await;
                let _ = tx.send(forward(&late, index, &req).await);
            });
            match rx.await {
                Ok(answer) => Ok(respond(answer?)),
                Err(_) => Err(Dropped),
            }
        }
        ProxyFault::SlowDown => Ok(error_answer(503, "SlowDown", Some(1))),
        ProxyFault::TooManyRequests => Ok(error_answer(429, "TooManyRequests", Some(1))),
        ProxyFault::InternalError => Ok(error_answer(500, "InternalError", None)),
        ProxyFault::Duplicate => {
            forward(&shared, index, &req).await?;
            Ok(respond(forward(&shared, index, &req).await?))
        }
        ProxyFault::ServerErrorAfterForward => {
            forward(&shared, index, &req).await?;
            Ok(error_answer(500, "InternalError", None))
        }
    }
}
