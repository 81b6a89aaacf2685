#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Read-write locks (`RwLock`): readers share, a writer waits for them and
//! excludes everyone, a waiting writer stops new readers, crashed holders
//! of either kind expire, and stores without the record layout are
//! refused. Memory store, paused tokio time behind the lease's clock.

use std::sync::Arc;
use std::time::Duration;

use casaas_core::lease::{Entropy, Lease, LeaseConfig, RwLock, WaitOptions};
use casaas_core::testkit::CreateOnlyStore;
use casaas_core::{CasStore, MemoryStore};

const KEY: &str = "locks/table";
const READERS: &str = "locks/table.readers/";

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

fn rwlock(store: &Arc<dyn CasStore>, owner: &str, seed: u64) -> RwLock {
    let lease = Lease::new(store.clone(), KEY, owner, config())
        .unwrap()
        .with_entropy(Entropy::seeded(seed));
    RwLock::new(lease)
        .unwrap()
        .with_entropy(Entropy::seeded(seed + 1_000))
}

async fn slots(store: &dyn CasStore) -> Vec<String> {
    store
        .list(READERS)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn readers_share_and_a_writer_waits_until_they_release() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let a = rwlock(&store, "a", 1)
        .read(WaitOptions::default())
        .await
        .unwrap();
    let b = rwlock(&store, "b", 2)
        .read(WaitOptions::default())
        .await
        .unwrap();
    // Two readers of one owner take a slot each.
    let same = rwlock(&store, "a", 3);
    let a2 = same.read(WaitOptions::default()).await.unwrap();
    assert_eq!(
        slots(store.as_ref()).await,
        [
            "locks/table.readers/a.0",
            "locks/table.readers/a.1",
            "locks/table.readers/b.0"
        ]
    );
    assert!(a.is_held() && b.is_held() && a2.is_held());

    let writer = rwlock(&store, "w", 4);
    let write = tokio::spawn(async move { writer.write(WaitOptions::default()).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!write.is_finished(), "the writer passed held readers");
    a.release().await.unwrap();
    b.release().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!write.is_finished(), "the writer passed a held reader");
    a2.release().await.unwrap();
    let w = write.await.unwrap().unwrap();
    assert_eq!(w.token(), 1);
    // The writer removed the released slots on its way.
    assert!(slots(store.as_ref()).await.is_empty());
    w.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_stops_new_readers_and_readers_follow_it() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let first = rwlock(&store, "first", 1)
        .read(WaitOptions::default())
        .await
        .unwrap();
    let writer = rwlock(&store, "w", 2);
    let write = tokio::spawn(async move { writer.write(WaitOptions::default()).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let late = rwlock(&store, "late", 3);
    let read = tokio::spawn(async move { late.read(WaitOptions::default()).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!write.is_finished() && !read.is_finished());
    first.release().await.unwrap();
    let w = write.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!read.is_finished(), "a reader passed the writer");
    assert!(w.is_held());
    w.release().await.unwrap();
    let r = read.await.unwrap().unwrap();
    assert!(r.is_held());
    // The next writer's token is higher.
    let writer = rwlock(&store, "w2", 4);
    let write = tokio::spawn(async move { writer.write(WaitOptions::default()).await });
    r.release().await.unwrap();
    assert_eq!(write.await.unwrap().unwrap().token(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_crashed_reader_expires_for_the_writer_and_a_crashed_writer_for_readers() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    rwlock(&store, "crashed-reader", 1)
        .read(WaitOptions::default())
        .await
        .unwrap()
        .abandon();
    let start = tokio::time::Instant::now();
    let w = rwlock(&store, "w", 2)
        .write(WaitOptions::default())
        .await
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(w.is_held());
    w.abandon();

    let start = tokio::time::Instant::now();
    let r = rwlock(&store, "r", 3)
        .read(WaitOptions::default())
        .await
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    r.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_deadline_ends_the_wait_and_a_writer_gives_the_lock_back() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let reader = rwlock(&store, "r", 1)
        .read(WaitOptions::default())
        .await
        .unwrap();
    let writer = rwlock(&store, "w", 2);
    let err = writer
        .write(WaitOptions::default().with_deadline(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");
    // The lock object was released: another reader passes at once.
    let second = rwlock(&store, "r2", 3)
        .read(WaitOptions::default().with_deadline(Duration::from_secs(1)))
        .await
        .unwrap();
    reader.release().await.unwrap();
    second.release().await.unwrap();
}

#[test]
fn a_create_only_store_is_refused_with_what_to_use_instead() {
    let store: Arc<dyn CasStore> = Arc::new(CreateOnlyStore(Arc::new(MemoryStore::new())));
    let lease = Lease::new(store, KEY, "a", config()).unwrap();
    let err = RwLock::new(lease).unwrap_err();
    assert!(err.to_string().contains("record layout"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_of_zero_makes_one_attempt() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let now = WaitOptions::default().with_deadline(Duration::ZERO);
    let reader = rwlock(&store, "r", 1).read(now.clone()).await.unwrap();
    let err = rwlock(&store, "w", 2).write(now.clone()).await.unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");
    reader.release().await.unwrap();
    let writer = rwlock(&store, "w", 3).write(now.clone()).await.unwrap();
    let err = rwlock(&store, "r", 4).read(now).await.unwrap_err();
    assert!(err.to_string().contains("deadline"), "{err}");
    writer.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reader_takes_its_slot_again_after_a_writer_cleared_it() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let reader = rwlock(&store, "r", 1);
    for round in 0..3 {
        reader
            .read(WaitOptions::default())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        // The writer deletes the released slot on its way.
        let w = rwlock(&store, "w", 10 + round)
            .write(WaitOptions::default())
            .await
            .unwrap();
        assert!(slots(store.as_ref()).await.is_empty());
        w.release().await.unwrap();
    }
}
