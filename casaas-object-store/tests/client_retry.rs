//! object_store retries a conditional put whose first attempt took effect
//! and reports the retry's refusal (`AlreadyExists` / `Precondition`). The
//! adapter must not call that a lost race: the lease protocol has to
//! recognise the write as its own.
//!
//! `RetryingStore` reproduces exactly what object_store's HTTP retry does
//! (apply, lose the answer, re-send, get refused) around `InMemory`, so the
//! outcome is deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::lease::{AcquireOutcome, FencedLog, Lease, LeaseConfig};
use casaas_core::{CasStore, ErrorKind};
use casaas_object_store::ObjectStoreCas;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Applies the next `armed` conditional puts, then answers each with what a
/// retry of the same request gets.
#[derive(Debug)]
struct RetryingStore {
    inner: InMemory,
    armed: AtomicUsize,
    retried: AtomicUsize,
}

impl RetryingStore {
    fn new(armed: usize) -> Self {
        RetryingStore {
            inner: InMemory::new(),
            armed: AtomicUsize::new(armed),
            retried: AtomicUsize::new(0),
        }
    }
}

impl fmt::Display for RetryingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RetryingStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for RetryingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let conditional = !matches!(opts.mode, PutMode::Overwrite);
        let fire = conditional
            && self
                .armed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if !fire {
            return self.inner.put_opts(location, payload, opts).await;
        }
        // The first attempt lands; its answer is "lost" (a 503 in the real
        // client), and the retry of the same request is refused.
        self.inner
            .put_opts(location, payload.clone(), opts.clone())
            .await?;
        self.retried.fetch_add(1, Ordering::SeqCst);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

#[tokio::test]
async fn a_refused_retry_of_our_own_create_is_ambiguous_not_lost() {
    let client = Arc::new(RetryingStore::new(1));
    let store = ObjectStoreCas::new(client.clone(), "p").unwrap();
    let err = store
        .create("k", Bytes::from_static(b"mine"))
        .await
        .unwrap_err();
    assert_eq!(client.retried.load(Ordering::SeqCst), 1);
    assert_eq!(err.kind(), ErrorKind::Ambiguous, "{err}");
    assert!(err.may_have_taken_effect());

    // Someone else's object stays a plain precondition failure.
    let err = store
        .create("k", Bytes::from_static(b"theirs"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
}

#[tokio::test]
async fn without_the_confirming_read_the_retry_looks_like_a_lost_race() {
    // The configuration the docs reserve for clients with retries off: here
    // (retries on) it misreports, which is what the default guards against.
    let client = Arc::new(RetryingStore::new(1));
    let store = ObjectStoreCas::new(client, "p")
        .unwrap()
        .client_retries(false);
    let err = store
        .create("k", Bytes::from_static(b"mine"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
}

#[tokio::test]
async fn lease_acquired_through_a_retried_create_is_ours() {
    let client = Arc::new(RetryingStore::new(1));
    let store: Arc<dyn CasStore> = Arc::new(ObjectStoreCas::new(client.clone(), "p").unwrap());
    let lease = Lease::new(store.clone(), "leader", "node-a", config()).unwrap();
    let guard = match lease.try_acquire().await.unwrap() {
        AcquireOutcome::Acquired(guard) => guard,
        AcquireOutcome::Held(by) => panic!("our own lease was taken for {by:?}"),
        other => panic!("unexpected outcome {other:?}"),
    };
    assert_eq!(client.retried.load(Ordering::SeqCst), 1);
    assert_eq!(guard.owner(), "node-a");
    // A second owner sees the lease held by us.
    let other = Lease::new(store, "leader", "node-b", config()).unwrap();
    match other.try_acquire().await.unwrap() {
        AcquireOutcome::Held(by) => assert_eq!(by.owner, "node-a"),
        AcquireOutcome::Acquired(_) => panic!("two holders"),
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[tokio::test]
async fn lease_released_through_a_retried_replace_is_free() {
    // Without conditional delete, release is a conditional replace.
    let client = Arc::new(RetryingStore::new(0));
    let store: Arc<dyn CasStore> = Arc::new(ObjectStoreCas::new(client.clone(), "p").unwrap());
    let lease = Lease::new(store.clone(), "leader", "node-a", config()).unwrap();
    let AcquireOutcome::Acquired(guard) = lease.try_acquire().await.unwrap() else {
        panic!("the lease is free");
    };
    client.armed.store(1, Ordering::SeqCst);
    guard.release().await.unwrap();
    assert_eq!(client.retried.load(Ordering::SeqCst), 1);
    let other = Lease::new(store, "leader", "node-b", config()).unwrap();
    match other.try_acquire().await.unwrap() {
        AcquireOutcome::Acquired(guard) => assert_eq!(guard.owner(), "node-b"),
        AcquireOutcome::Held(by) => panic!("the released lease is still held by {by:?}"),
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[tokio::test]
async fn log_append_through_a_retried_create_is_recorded_once() {
    let client = Arc::new(RetryingStore::new(0));
    let store: Arc<dyn CasStore> = Arc::new(ObjectStoreCas::new(client.clone(), "t").unwrap());
    let log = FencedLog::<String>::new(store, "_log").unwrap();
    log.append(1, "first".into()).await.unwrap();
    client.armed.store(1, Ordering::SeqCst);
    let entry = log.append(1, "second".into()).await.unwrap();
    assert_eq!(client.retried.load(Ordering::SeqCst), 1);
    assert_eq!(entry.seq, 2);
    let values: Vec<String> = log
        .entries(1)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.value)
        .collect();
    assert_eq!(values, ["first", "second"]);
}
