#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Contenders racing for a lock that does not exist yet, in both layouts,
//! on the memory and file stores: losing the first write is "someone else
//! got there first", never a failure. Every attempt answers acquired or
//! held, and every waiting contender gets its turn.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::layout::{LeaseLayout, with_layout};
use casaas_core::lease::{AcquireOutcome, Lease, LeaseConfig, WaitOptions};
use casaas_core::{CasError, CasStore, FileStore, ForwardingStore, MemoryStore, Version};

const LAYOUTS: [LeaseLayout; 2] = [LeaseLayout::Record, LeaseLayout::Epochs];

type Hook = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `hook` once, just before the first create of a key containing
/// `part`: a contender that read the lock as absent is made to lose that
/// write (the lock object, or in the epoch layout the marker or the first
/// epoch) to another contender's whole holding.
struct BeforeFirstCreate {
    inner: Arc<dyn CasStore>,
    part: &'static str,
    hook: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for BeforeFirstCreate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeFirstCreate")
    }
}

#[async_trait]
impl ForwardingStore for BeforeFirstCreate {
    type Inner = dyn CasStore;
    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }
    fn wrap_identity(&self) -> String {
        self.inner.identity()
    }
    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let hook = if key.contains(self.part) {
            self.hook.lock().unwrap().take()
        } else {
            None
        };
        if let Some(hook) = hook {
            hook.await;
        }
        self.inner.create(key, body).await
    }
}

fn config() -> LeaseConfig {
    let mut config = LeaseConfig::from_ttl(Duration::from_secs(10));
    config.poll_period = Duration::from_millis(20);
    config.retry_period = Duration::from_millis(20);
    config
}

async fn backends(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn CasStore>)> {
    let file: Arc<dyn CasStore> = Arc::new(FileStore::open(dir).await.unwrap());
    vec![("memory", Arc::new(MemoryStore::new())), ("file", file)]
}

/// The failure seen on a real server: a contender reads the lock as absent,
/// another acquires and releases it before the first one's create lands,
/// and that create loses. The attempt must then contend for the released
/// lock (and win it), not report the lost create as an error.
#[tokio::test]
async fn a_create_lost_to_a_finished_holding_contends_again() {
    let dir = tempfile::tempdir().unwrap();
    // The lock object (or, in the epoch layout, its marker), then the
    // first epoch once the marker exists.
    let cases = [
        (LeaseLayout::Record, "locks/"),
        (LeaseLayout::Epochs, "locks/"),
        (LeaseLayout::Epochs, ".epochs/"),
    ];
    for (name, backend) in backends(dir.path()).await {
        for (n, (layout, part)) in cases.into_iter().enumerate() {
            let store = with_layout(backend.clone(), layout);
            let key = format!("locks/{name}-{n}");
            let what = format!("{name}, {layout} layout, lost create of '{part}'");
            let quick = Lease::new(store.clone(), key.clone(), "quick", config()).unwrap();
            let hook: Hook = Box::pin(async move {
                let guard = quick.acquire(WaitOptions::default()).await.unwrap();
                assert_eq!(guard.token(), 1);
                guard.release().await.unwrap();
            });
            let racing: Arc<dyn CasStore> = Arc::new(BeforeFirstCreate {
                inner: store.clone(),
                part,
                hook: Mutex::new(Some(hook)),
            });
            let slow = Lease::new(racing.clone(), key.clone(), "slow", config()).unwrap();
            let guard = match slow.try_acquire().await {
                Ok(AcquireOutcome::Acquired(guard)) => guard,
                other => panic!("{what}: {other:?}"),
            };
            // It lost to "quick" (token 1), then took the released lock.
            assert_eq!(guard.token(), 2, "{what}");
            guard.release().await.unwrap();
        }
    }
}

/// How a contender asks for the lock.
#[derive(Debug, Clone, Copy)]
enum Asking {
    /// One attempt that tells who holds it, then a wait (`casaas lock
    /// --wait`).
    TryThenWait,
    /// A wait from the start (`Lease::acquire`).
    Wait,
}

/// `contenders` processes (each its own store view and lease) start
/// together on a fresh key. Each must get its turn; the tokens handed out
/// are exactly 1..=contenders.
async fn race_for_a_fresh_lock(
    store: Arc<dyn CasStore>,
    key: String,
    contenders: usize,
    asking: Asking,
) {
    let barrier = Arc::new(tokio::sync::Barrier::new(contenders));
    let mut tasks = Vec::new();
    for n in 0..contenders {
        let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let lease = Lease::new(store, key, format!("contender-{n}"), config()).unwrap();
            barrier.wait().await;
            let wait = WaitOptions::default().with_deadline(Duration::from_secs(60));
            let first = match asking {
                Asking::TryThenWait => lease.try_acquire().await,
                Asking::Wait => lease
                    .acquire(wait.clone())
                    .await
                    .map(AcquireOutcome::Acquired),
            };
            let guard = match first {
                Ok(AcquireOutcome::Acquired(guard)) => guard,
                Ok(AcquireOutcome::Held(_)) => lease
                    .acquire(wait)
                    .await
                    .unwrap_or_else(|e| panic!("contender {n} waited and failed: {e}")),
                Ok(other) => panic!("contender {n}: {other:?}"),
                Err(e) => panic!("contender {n}'s first attempt failed: {e}"),
            };
            let token = guard.token();
            tokio::task::yield_now().await;
            guard.release().await.unwrap();
            token
        }));
    }
    let mut tokens = Vec::new();
    for task in tasks {
        tokens.push(task.await.unwrap());
    }
    tokens.sort_unstable();
    let expected: Vec<u64> = (1..=contenders as u64).collect();
    assert_eq!(tokens, expected, "{key}: every contender held it once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_contenders_on_a_fresh_lock_all_get_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    for (name, backend) in backends(dir.path()).await {
        for layout in LAYOUTS {
            let store = with_layout(backend.clone(), layout);
            for asking in [Asking::TryThenWait, Asking::Wait] {
                for round in 0..10 {
                    let key = format!("locks/race-{name}-{layout}-{asking:?}-{round}");
                    race_for_a_fresh_lock(store.clone(), key, 4, asking).await;
                }
            }
        }
    }
}
