#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! A value published with a lock or a leader: written with the record,
//! kept by renewals, changed by `proclaim` without a new term, seen by
//! `leader()` and observers, bounded in size, and absent from records
//! that carry none (so old records and old readers are unaffected).

use std::sync::Arc;
use std::time::Duration;

use casaas_core::lease::{
    Election, Entropy, Lease, LeaseConfig, LeaseRecord, MAX_VALUE_BYTES, WaitOptions,
};
use casaas_core::{CasStore, MemoryStore};

const KEY: &str = "elections/db";

fn lease(store: &Arc<dyn CasStore>, owner: &str, seed: u64) -> Lease {
    Lease::new(
        store.clone(),
        KEY,
        owner,
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )
    .unwrap()
    .with_entropy(Entropy::seeded(seed))
}

#[tokio::test(start_paused = true)]
async fn a_leaders_value_is_read_kept_by_renewals_and_proclaimed_without_a_new_term() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let election = Election::new(
        lease(&store, "node-1", 1)
            .with_value("10.0.0.7:5432")
            .unwrap(),
    );
    let observer = Election::new(lease(&store, "watcher", 2));
    let mut observed = observer.observe();
    let leadership = election.campaign(WaitOptions::default()).await.unwrap();
    let leader = observer.leader().await.unwrap().unwrap();
    assert_eq!(leader.value.as_deref(), Some("10.0.0.7:5432"));
    assert_eq!(leader.token, 1);

    // Renewals carry it.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let (record, _) = observer.lease().read().await.unwrap().unwrap();
    assert_eq!(record.value.as_deref(), Some("10.0.0.7:5432"));
    assert!(record.renewed_at_ms > record.acquired_at_ms);

    leadership.proclaim("10.0.0.8:5432").await.unwrap();
    assert_eq!(leadership.guard().value().as_deref(), Some("10.0.0.8:5432"));
    let leader = observer.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.token, leader.value.as_deref()),
        (1, Some("10.0.0.8:5432"))
    );
    // Observers see it at their next read; the leader's own at once.
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if observed
                .borrow_and_update()
                .as_ref()
                .is_some_and(|l| l.value.as_deref() == Some("10.0.0.8:5432"))
            {
                break;
            }
            observed.changed().await.unwrap();
        }
    })
    .await
    .unwrap();
    assert_eq!(
        election
            .observe()
            .borrow()
            .as_ref()
            .and_then(|l| l.value.clone())
            .as_deref(),
        Some("10.0.0.8:5432")
    );
    // Later renewals keep the new value.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let leader = observer.leader().await.unwrap().unwrap();
    assert_eq!(leader.value.as_deref(), Some("10.0.0.8:5432"));
    leadership.resign().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_value_over_the_bound_is_refused_with_what_to_do() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let big = "x".repeat(MAX_VALUE_BYTES + 1);
    let err = lease(&store, "a", 1).with_value(big.clone()).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("{} bytes", MAX_VALUE_BYTES + 1)),
        "{err}"
    );
    assert!(err.to_string().contains("publish a short value"), "{err}");
    let fits = lease(&store, "a", 1)
        .with_value("x".repeat(MAX_VALUE_BYTES))
        .unwrap();
    let guard = fits.acquire(WaitOptions::default()).await.unwrap();
    let err = guard.proclaim(big).await.unwrap_err();
    assert!(err.to_string().contains("more than the"), "{err}");
    // Nothing was written: the value is the one acquired with.
    let (record, _) = fits.read().await.unwrap().unwrap();
    assert_eq!(record.value.map(|v| v.len()), Some(MAX_VALUE_BYTES));
    guard.release().await.unwrap();
}

#[test]
fn records_without_a_value_read_as_before_and_are_written_as_before() {
    // A record as libraries before values wrote it.
    let old = br#"{"kind":"casaas.lease","schema":1,"owner":"o","nonce":"n","token":3,"ttl_ms":10000,"acquired_at_ms":1,"renewed_at_ms":2,"released":false}"#;
    let record = LeaseRecord::decode(KEY, old).unwrap();
    assert_eq!(record.value, None);
    assert_eq!(record.encode().as_ref(), old.as_slice());
    // A record with a value keeps schema 1: older readers ignore the field.
    let mut with = record.clone();
    with.value = Some("addr".into());
    let text = String::from_utf8(with.encode().to_vec()).unwrap();
    assert!(
        text.contains(r#""schema":1"#) && text.ends_with(r#","value":"addr"}"#),
        "{text}"
    );
    assert_eq!(LeaseRecord::decode(KEY, text.as_bytes()).unwrap(), with);
}
