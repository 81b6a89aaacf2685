//! object_store's own retry of a committed conditional put, on the real
//! stack: a loopback proxy in front of moto applies the first conditional
//! PUT (moto commits it) and answers the client 503 instead of moto's 200.
//! object_store retries, moto answers 412 to the retry, and object_store
//! reports `AlreadyExists` / `Precondition` for a write that is ours. The
//! lease protocol must still recognise the lease as its own.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig};
use casaas_core::testkit::{test_server, unique_prefix};
use casaas_core::{CasStore, ErrorKind};
use casaas_object_store::ObjectStoreCas;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Counts of what the proxy saw and did.
#[derive(Default)]
struct ProxyState {
    /// Conditional PUTs still to be answered 503 after moto applied them.
    armed: AtomicUsize,
    /// Conditional PUTs forwarded to moto.
    conditional_puts: AtomicUsize,
    /// 503s sent in place of moto's answer.
    injected: AtomicUsize,
}

/// Reads one HTTP/1.1 request (head and Content-Length body) from `stream`.
async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

/// `head` with `Connection: close` in place of any connection header.
fn closing(head: &str) -> String {
    let mut lines: Vec<&str> = head
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    lines.push("Connection: close");
    format!("{}\r\n\r\n", lines.join("\r\n"))
}

/// Serves one request per connection: forwards it to moto, and for an armed
/// conditional PUT answers 503 once moto has applied it.
async fn proxy(listener: TcpListener, upstream: String, state: Arc<ProxyState>) {
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            return;
        };
        let (upstream, state) = (upstream.clone(), state.clone());
        tokio::spawn(async move {
            let Some((head, body)) = read_request(&mut client).await else {
                return;
            };
            let lower = head.to_ascii_lowercase();
            let conditional_put = lower.starts_with("put ")
                && (lower.contains("\r\nif-none-match:") || lower.contains("\r\nif-match:"));
            let Ok(mut server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let mut request = closing(&head).into_bytes();
            request.extend_from_slice(&body);
            if server.write_all(&request).await.is_err() {
                return;
            }
            let mut answer = Vec::new();
            if server.read_to_end(&mut answer).await.is_err() {
                return;
            }
            if conditional_put {
                state.conditional_puts.fetch_add(1, Ordering::SeqCst);
            }
            let inject = conditional_put
                && state
                    .armed
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
            let reply = if inject {
                state.injected.fetch_add(1, Ordering::SeqCst);
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec()
            } else {
                let split = answer
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map_or(answer.len(), |at| at + 4);
                let mut reply = closing(&String::from_utf8_lossy(&answer[..split])).into_bytes();
                reply.extend_from_slice(&answer[split..]);
                reply
            };
            let _ = client.write_all(&reply).await;
            let _ = client.shutdown().await;
        });
    }
}

/// A store whose object_store client (default retries) talks to moto
/// through the proxy.
async fn store_behind_proxy(label: &str) -> (Arc<dyn CasStore>, Arc<ProxyState>) {
    let server = test_server("moto");
    let upstream = server
        .var("AWS_ENDPOINT_URL")
        .trim_start_matches("http://")
        .to_string();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let state = Arc::new(ProxyState::default());
    tokio::spawn(proxy(listener, upstream, state.clone()));
    let client = common::s3_client(&server)
        .with_endpoint(endpoint)
        .build()
        .unwrap();
    let store = ObjectStoreCas::new(Arc::new(client), unique_prefix(label)).unwrap();
    (Arc::new(store), state)
}

#[tokio::test]
async fn the_retry_of_an_applied_create_is_reported_ambiguous() {
    let (store, proxy) = store_behind_proxy("os-moto-retry-create").await;
    proxy.armed.store(1, Ordering::SeqCst);
    let err = store
        .create("k", Bytes::from_static(b"mine"))
        .await
        .unwrap_err();
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 1);
    // object_store re-sent the put, and moto refused the copy.
    assert_eq!(proxy.conditional_puts.load(Ordering::SeqCst), 2);
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    let stored = store.get("k").await.unwrap().unwrap();
    assert_eq!(stored.body, Bytes::from_static(b"mine"));
}

#[tokio::test]
async fn a_lease_won_through_a_retried_create_is_ours() {
    let (store, proxy) = store_behind_proxy("os-moto-retry-lease").await;
    proxy.armed.store(1, Ordering::SeqCst);
    let config = LeaseConfig::from_ttl(Duration::from_secs(10));
    let lease = Lease::new(store.clone(), "leader", "node-a", config.clone()).unwrap();
    let guard = match lease.try_acquire().await.unwrap() {
        AcquireOutcome::Acquired(guard) => guard,
        AcquireOutcome::Held(by) => panic!("our own lease was taken for {by:?}"),
        other => panic!("unexpected outcome {other:?}"),
    };
    assert_eq!(proxy.injected.load(Ordering::SeqCst), 1);
    assert!(proxy.conditional_puts.load(Ordering::SeqCst) >= 2);
    assert_eq!(guard.owner(), "node-a");
    let other = Lease::new(store, "leader", "node-b", config).unwrap();
    match other.try_acquire().await.unwrap() {
        AcquireOutcome::Held(by) => assert_eq!(by.owner, "node-a"),
        AcquireOutcome::Acquired(_) => panic!("two holders"),
        other => panic!("unexpected outcome {other:?}"),
    }
    guard.release().await.unwrap();
}
