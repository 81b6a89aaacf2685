#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Fair turns (`FairLease`): first come first served among waiters that
//! arrive one after another, a crashed waiter's ticket expiring, and a
//! foreign object in the queue left untouched. Memory store, paused tokio
//! time behind the lease's clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{
    Entropy, FairLease, Lease, LeaseConfig, LeaseError, LeaseRecord, WaitOptions,
};
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ForwardingStore, ListEntry, MemoryStore, Version,
};

const KEY: &str = "locks/fair";
const QUEUE: &str = "locks/fair.queue/";

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

fn fair(store: &Arc<dyn CasStore>, owner: &str, seed: u64) -> FairLease {
    let lease = Lease::new(store.clone(), KEY, owner, config())
        .unwrap()
        .with_entropy(Entropy::seeded(seed));
    FairLease::new(lease)
        .unwrap()
        .with_entropy(Entropy::seeded(seed + 1_000))
}

fn ticket(number: u64) -> String {
    format!("{QUEUE}{number:020}")
}

async fn tickets(store: &dyn CasStore) -> Vec<String> {
    store
        .list(QUEUE)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn waiters_that_arrive_one_after_another_are_served_in_order_and_a_releaser_goes_last() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let first = fair(&store, "first", 1);
    let held = first.acquire(WaitOptions::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "the holder's ticket ended"
    );

    let order = Arc::new(Mutex::new(Vec::new()));
    let names = ["b", "c", "d", "e", "f", "g"];
    let mut waiters = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let waiter = fair(&store, name, 10 + i as u64);
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = waiter.acquire(WaitOptions::default()).await.unwrap();
            order
                .lock()
                .unwrap()
                .push((waiter.lease().owner().to_string(), guard.token()));
            tokio::time::sleep(Duration::from_millis(300)).await;
            guard.release().await.unwrap();
        }));
        // Arrive one after another: each ticket is taken before the next
        // waiter lists the queue.
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(tickets(store.as_ref()).await.len(), i + 1);
    }
    assert_eq!(
        tickets(store.as_ref()).await,
        (1..=6).map(ticket).collect::<Vec<_>>()
    );

    // The holder releases and wants the lock again at once: it queues last.
    held.release().await.unwrap();
    let again = first.acquire(WaitOptions::default()).await.unwrap();
    order
        .lock()
        .unwrap()
        .push(("first".to_string(), again.token()));
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let owners: Vec<&str> = order.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(owners, ["b", "c", "d", "e", "f", "g", "first"]);
    // The lock decided each turn: one holder after another, tokens rising.
    let tokens: Vec<u64> = order.iter().map(|(_, t)| *t).collect();
    assert_eq!(tokens, (2..=8).collect::<Vec<_>>());
    again.release().await.unwrap();
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "tickets left behind"
    );
}

#[tokio::test(start_paused = true)]
async fn a_crashed_waiters_ticket_expires_and_the_queue_moves_on() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let holder = fair(&store, "holder", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    // Its ticket ends just after the guard is returned.
    tokio::time::sleep(Duration::from_millis(1)).await;
    // A waiter took ticket 1 and died: its record is never renewed.
    let crashed = LeaseRecord::new("crashed", "feedface", 1, 10_000, 0);
    store.create(&ticket(1), crashed.encode()).await.unwrap();

    let start = tokio::time::Instant::now();
    let waiter = fair(&store, "waiter", 2);
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(WaitOptions::default()).await.unwrap();
        (guard, tokio::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(tickets(store.as_ref()).await, [ticket(1), ticket(2)]);
    holder.release().await.unwrap();
    // The lock is free, but the waiter waits its turn behind ticket 1
    // until that ticket has been seen unchanged for ttl·(1+ρ).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!waiting.is_finished(), "jumped a live-looking ticket");
    let (guard, held_at) = waiting.await.unwrap();
    let waited = held_at.duration_since(start);
    let expiry = config().takeover_wait(Duration::from_secs(10));
    assert!(waited >= expiry, "{waited:?}");
    assert!(waited <= expiry + Duration::from_secs(1), "{waited:?}");
    assert_eq!(guard.token(), 2);
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "the expired ticket stayed"
    );
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_foreign_object_in_the_queue_is_an_error_and_never_overwritten() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let body = Bytes::from_static(b"not a ticket");
    store.create(&ticket(1), body.clone()).await.unwrap();
    let waiter = fair(&store, "waiter", 1);
    let err = waiter
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(60)))
        .await
        .unwrap_err();
    match &err {
        LeaseError::ForeignObject { key, .. } => assert_eq!(key, &ticket(1)),
        other => panic!("expected a foreign object error, got {other:?}"),
    }
    assert!(err.to_string().contains("refusing to touch it"), "{err}");
    assert_eq!(store.get(&ticket(1)).await.unwrap().unwrap().body, body);
    // Our own ticket was ended, and the lock never written.
    assert_eq!(tickets(store.as_ref()).await, [ticket(1)]);
    assert!(store.get(KEY).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_no_ticket_and_a_barging_lease_is_not_queued() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let holder = fair(&store, "holder", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    // Its ticket ends just after the guard is returned.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let err = fair(&store, "impatient", 2)
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::DeadlineExceeded(_)), "{err:?}");
    assert_eq!(tickets(store.as_ref()).await, Vec::<String>::new());

    // Fair mode binds only those who use it: a plain Lease takes a free
    // lock ahead of a queued fair waiter.
    let queued = fair(&store, "queued", 3);
    let waiting = tokio::spawn(async move { queued.acquire(WaitOptions::default()).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let barger = Lease::new(store.clone(), KEY, "barger", config()).unwrap();
    holder.release().await.unwrap();
    let barged = barger.acquire(WaitOptions::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished());
    barged.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    assert_eq!(guard.token(), 3);
    guard.release().await.unwrap();
}

/// A store that cannot delete on a condition (as S3 servers without
/// conditional delete): tickets end by a conditional release, then an
/// unconditional delete.
#[derive(Debug)]
struct NoConditionalDelete(MemoryStore);

#[async_trait::async_trait]
impl ForwardingStore for NoConditionalDelete {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.0
    }
    async fn wrap_delete(&self, key: &str, _expected: &Version) -> Result<(), CasError> {
        Err(CasError::unsupported(format!(
            "no conditional delete of {key}"
        )))
    }
    fn wrap_capabilities(&self) -> Capabilities {
        Capabilities::full().without_conditional_delete()
    }
}

#[tokio::test(start_paused = true)]
async fn without_conditional_delete_tickets_still_end_and_expire() {
    let store: Arc<dyn CasStore> = Arc::new(NoConditionalDelete(MemoryStore::new()));
    let holder = fair(&store, "holder", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    // Its ticket ends just after the guard is returned.
    tokio::time::sleep(Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "the holder's ticket ended"
    );
    let crashed = LeaseRecord::new("crashed", "feedface", 1, 10_000, 0);
    store.create(&ticket(1), crashed.encode()).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (i, name) in ["b", "c"].iter().enumerate() {
        let waiter = fair(&store, name, 10 + i as u64);
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = waiter.acquire(WaitOptions::default()).await.unwrap();
            order
                .lock()
                .unwrap()
                .push(waiter.lease().owner().to_string());
            guard.release().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["b", "c"]);
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "tickets left behind"
    );
}

/// A store whose replaces of one ticket fail (retryably) while `fail` is
/// set: that ticket's renewals cannot land, so its waiter loses it while
/// the record stays in the queue.
#[derive(Debug)]
struct FailingRenewals {
    inner: MemoryStore,
    key: String,
    fail: AtomicBool,
}

#[async_trait::async_trait]
impl ForwardingStore for FailingRenewals {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        if key == self.key && self.fail.load(Ordering::SeqCst) {
            return Err(CasError::new(ErrorKind::NotSent, "renewal refused"));
        }
        self.inner.replace(key, expected, body).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_ticket_is_ended_and_its_waiter_does_not_wait_behind_its_own_ghost() {
    let failing = Arc::new(FailingRenewals {
        inner: MemoryStore::new(),
        key: ticket(2),
        fail: AtomicBool::new(true),
    });
    let store: Arc<dyn CasStore> = failing.clone();
    // A live waiter ahead, renewing ticket 1.
    let ahead = Lease::new(store.clone(), ticket(1), "ahead", config())
        .unwrap()
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    let waiter = fair(&store, "waiter", 2);
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(WaitOptions::default()).await.unwrap();
        (guard, tokio::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(tickets(store.as_ref()).await, [ticket(1), ticket(2)]);
    // Ticket 2 cannot be renewed: its waiter loses it within a TTL and
    // queues again. Its record stays listed; before, the new ticket then
    // waited a whole expiry behind it.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(!waiting.is_finished());
    ahead.release().await.unwrap();
    let (guard, held_at) = waiting.await.unwrap();
    let waited = held_at.duration_since(start);
    assert!(waited <= Duration::from_secs(14), "{waited:?}");
    failing.fail.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "tickets left behind"
    );
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn crashed_waiters_in_a_row_cost_one_expiry_not_one_each() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let holder = fair(&store, "holder", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    // Its ticket ends just after the guard is returned.
    tokio::time::sleep(Duration::from_millis(1)).await;
    for n in 1..=3 {
        let crashed = LeaseRecord::new(format!("crashed-{n}"), "feedface", n, 10_000, 0);
        store.create(&ticket(n), crashed.encode()).await.unwrap();
    }
    let start = tokio::time::Instant::now();
    let waiter = fair(&store, "waiter", 2);
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(WaitOptions::default()).await.unwrap();
        (guard, tokio::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    holder.release().await.unwrap();
    let (guard, held_at) = waiting.await.unwrap();
    let waited = held_at.duration_since(start);
    let expiry = config().takeover_wait(Duration::from_secs(10));
    assert!(waited >= expiry, "{waited:?}");
    assert!(waited <= expiry + Duration::from_secs(2), "{waited:?}");
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "tickets left behind"
    );
    guard.release().await.unwrap();
}

/// A store whose deletes of tickets take `delay` (a slow request).
#[derive(Debug)]
struct SlowTicketDeletes {
    inner: MemoryStore,
    delay: Duration,
}

#[async_trait::async_trait]
impl ForwardingStore for SlowTicketDeletes {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        if key.starts_with(QUEUE) {
            tokio::time::sleep(self.delay).await;
        }
        self.inner.delete(key, expected).await
    }
}

#[tokio::test(start_paused = true)]
async fn the_guard_is_returned_before_the_ticket_is_ended() {
    let store: Arc<dyn CasStore> = Arc::new(SlowTicketDeletes {
        inner: MemoryStore::new(),
        delay: Duration::from_secs(2),
    });
    let start = tokio::time::Instant::now();
    let guard = fair(&store, "first", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(tickets(store.as_ref()).await, [ticket(1)]);
    // The ticket still ends, on its own.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        tickets(store.as_ref()).await.is_empty(),
        "the ticket was not ended"
    );
    guard.release().await.unwrap();
}

/// A store whose listing lags deletes: ticket 1, never written, is listed
/// while fewer than `max_gets` reads of it were made (time does not pass
/// in a loop that never sleeps) and for the first two seconds.
#[derive(Debug)]
struct LaggingList {
    inner: MemoryStore,
    gets: AtomicUsize,
    until: tokio::time::Instant,
}

const MAX_GETS: usize = 1_000;

#[async_trait::async_trait]
impl ForwardingStore for LaggingList {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn wrap_get(&self, key: &str) -> Result<Option<casaas_core::StoredObject>, CasError> {
        if key == ticket(1) {
            self.gets.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.get(key).await
    }
    async fn wrap_list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        let mut listed = self.inner.list(prefix).await?;
        if self.gets.load(Ordering::SeqCst) < MAX_GETS && tokio::time::Instant::now() < self.until {
            listed.insert(0, ListEntry::new(ticket(1), Version::Generation(1)));
        }
        Ok(listed)
    }
}

#[tokio::test(start_paused = true)]
async fn a_ticket_listed_after_it_is_gone_is_read_once_per_poll_period() {
    let lagging = Arc::new(LaggingList {
        inner: MemoryStore::new(),
        gets: AtomicUsize::new(0),
        until: tokio::time::Instant::now() + Duration::from_secs(2),
    });
    let store: Arc<dyn CasStore> = lagging.clone();
    // Ticket 1 is listed (but gone) before our ticket is taken: ours is 2.
    let guard = fair(&store, "waiter", 1)
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    let gets = lagging.gets.load(Ordering::SeqCst);
    let polls = (Duration::from_secs(2).as_millis() / config().poll_period.as_millis()) as usize;
    assert!(gets <= polls + 3, "{gets} reads of a gone ticket in 2 s");
    assert_eq!(guard.token(), 1);
    guard.release().await.unwrap();
}
