//! Failures without an S3 answer, against throwaway loopback listeners:
//! a server that never answers, one that hangs up after reading the
//! request, and nothing listening at all.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use bytes::Bytes;
use casaas_core::{CasStore, ErrorKind, Version};
use casaas_s3::S3Store;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

async fn store_at(port: u16) -> S3Store {
    S3Store::builder()
        .url(&format!(
            "s3://b/p?endpoint=http://127.0.0.1:{port}&path_style=true&region=us-east-1&timeout=1&connect_timeout=1"
        ))
        .unwrap()
        .static_credentials("k", "s")
        .build()
        .await
        .unwrap()
}

/// Accepts connections; reads the request; then either stalls or hangs up.
async fn listener(hang_up: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = socket.read(&mut buf).await;
                if hang_up {
                    drop(socket);
                } else {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn timeout_after_sending_is_ambiguous() {
    let store = store_at(listener(false).await).await;
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    assert!(err.may_have_taken_effect());
    let err = store
        .replace("k", &Version::etag("\"e\""), Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    // A read sent without an answer is unknown too (the one policy for
    // every provider); it has no effect, so retrying it is the fix.
    let err = store.get("k").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn hang_up_after_sending_is_ambiguous() {
    let store = store_at(listener(true).await).await;
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    let err = store
        .delete("k", &Version::etag("\"e\""))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
}

#[tokio::test]
async fn refused_connection_is_not_sent() {
    // Bind then drop: the port is free and refuses connections.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let store = store_at(port).await;
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSent, "{err}");
    assert!(!err.may_have_taken_effect());
    assert!(err.is_retryable());
}
