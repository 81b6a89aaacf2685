#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Group commit: many updates behind one conditional write, with the same
//! fencing and exactly-once as one update per write.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{
    Applied, Cancelled, FencedLog, FencedResource, GroupCommitConfig, GroupLog, GroupResource,
    LeaseError,
};
use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};
use casaas_core::{CasStore, ErrorKind, MemoryStore};
use futures::FutureExt;

/// A store that has passed the store guard, with every request delayed by
/// up to `max_delay` (so that updates queue up while a write is in flight).
async fn store(max_delay: Duration) -> FaultyStore<MemoryStore> {
    let store = FaultyStore::new(MemoryStore::new(), 7, FaultConfig::default());
    casaas_core::testkit::pass_store_guard(&store)
        .await
        .unwrap();
    store.set_config(FaultConfig {
        delay: if max_delay.is_zero() { 0.0 } else { 1.0 },
        max_delay,
        ..FaultConfig::default()
    });
    store
}

fn counter(store: &FaultyStore<MemoryStore>, config: GroupCommitConfig) -> GroupResource<u64> {
    let resource = FencedResource::<u64>::new(Arc::new(store.clone()), "counter").unwrap();
    GroupResource::new(resource, config)
}

fn group_log(store: &FaultyStore<MemoryStore>, config: GroupCommitConfig) -> GroupLog<String> {
    let log = FencedLog::<String>::new(Arc::new(store.clone()), "log").unwrap();
    GroupLog::new(log, config)
}

fn increment(v: Option<&u64>) -> u64 {
    v.copied().unwrap_or(0) + 1
}

/// The counter as stored.
async fn stored(group: &GroupResource<u64>) -> u64 {
    group
        .resource()
        .read()
        .await
        .unwrap()
        .map_or(0, |f| f.value)
}

#[tokio::test(start_paused = true)]
async fn concurrent_updates_share_writes_and_each_sees_its_own_value() {
    let store = store(Duration::from_millis(20)).await;
    let group = counter(&store, GroupCommitConfig::default());
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let group = group.clone();
            tokio::spawn(async move { group.update(1, increment).await })
        })
        .collect();
    let mut applied: Vec<Applied<u64>> = Vec::new();
    for task in tasks {
        applied.push(task.await.unwrap().unwrap());
    }
    let values: BTreeSet<u64> = applied.iter().map(|a| a.value).collect();
    assert_eq!(
        values,
        (1..=64).collect(),
        "every update applied once, in some order"
    );
    assert_eq!(stored(&group).await, 64);
    let writes: std::collections::HashSet<_> = applied.iter().map(|a| a.version.clone()).collect();
    assert!(writes.len() < 16, "64 updates took {} writes", writes.len());
    for a in &applied {
        assert!(a.offset < a.batch_len && a.token == 1);
        let batch: Vec<_> = applied.iter().filter(|b| b.version == a.version).collect();
        assert_eq!(batch.len(), a.batch_len, "a batch's callers all answered");
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_whose_answer_is_lost_is_found_again_by_its_nonce() {
    let store = store(Duration::ZERO).await;
    let group = counter(&store, GroupCommitConfig::default());
    let tickets = [
        group.submit(1, increment).await.unwrap(),
        group
            .submit(1, |v| v.copied().unwrap_or(0) * 10)
            .await
            .unwrap(),
        group.submit(1, increment).await.unwrap(),
    ];
    // The batch's read, then its write: applied, its answer lost.
    store.inject(Fault::Delay(Duration::ZERO));
    store.inject(Fault::LoseResponse);
    let mut values = Vec::new();
    for ticket in tickets {
        values.push(ticket.wait().await.unwrap().value);
    }
    assert_eq!(values, [1, 10, 11], "in queue order");
    assert_eq!(store.counts().lost_responses, 1, "the fault was met");
    assert_eq!(stored(&group).await, 11, "applied once, not twice");
}

#[tokio::test(start_paused = true)]
async fn a_batch_refused_without_being_written_is_written_once_on_retry() {
    let store = store(Duration::ZERO).await;
    let group = counter(&store, GroupCommitConfig::default());
    let a = group.submit(1, increment).await.unwrap();
    let b = group.submit(1, increment).await.unwrap();
    store.inject(Fault::Delay(Duration::ZERO));
    store.inject(Fault::ServerErrorNotApplied);
    assert_eq!(a.wait().await.unwrap().value, 1);
    assert_eq!(b.wait().await.unwrap().value, 2);
    assert_eq!(store.counts().server_errors, 1);
    assert_eq!(stored(&group).await, 2);
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_cannot_be_resolved_is_ambiguous_for_every_caller() {
    let store = store(Duration::ZERO).await;
    let resource = FencedResource::<u64>::new(Arc::new(store.clone()), "counter")
        .unwrap()
        .with_retry_policy(
            casaas_core::lease::RetryPolicy::default()
                .with_request_timeout(Duration::from_secs(1))
                .with_retry_period(Duration::from_millis(10))
                .with_max_attempts(1),
        );
    let group = GroupResource::new(resource, GroupCommitConfig::default());
    let a = group.submit(1, increment).await.unwrap();
    let b = group.submit(1, increment).await.unwrap();
    store.inject(Fault::Delay(Duration::ZERO));
    store.inject(Fault::LoseResponse);
    for ticket in [a, b] {
        let err = ticket.wait().await.unwrap_err();
        assert_eq!(err.store_kind(), Some(ErrorKind::Ambiguous), "{err}");
    }
    assert_eq!(stored(&group).await, 2, "the whole batch landed, once");
}

#[tokio::test(start_paused = true)]
async fn a_deposed_holders_batch_is_refused_as_a_whole() {
    let store = store(Duration::ZERO).await;
    let group = counter(&store, GroupCommitConfig::default());
    group.update(5, increment).await.unwrap();
    let stale = [
        group.submit(3, increment).await.unwrap(),
        group.submit(3, increment).await.unwrap(),
    ];
    let current = group.submit(5, increment).await.unwrap();
    for ticket in stale {
        assert!(matches!(
            ticket.wait().await,
            Err(LeaseError::FencedOut {
                presented: 3,
                recorded: 5
            })
        ));
    }
    let applied = current.wait().await.unwrap();
    assert_eq!(
        (applied.value, applied.batch_len),
        (2, 1),
        "tokens never share a batch"
    );
    assert_eq!(stored(&group).await, 2);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_update_is_removed_before_its_batch_and_may_apply_after() {
    let store = store(Duration::from_millis(50)).await;
    let group = counter(&store, GroupCommitConfig::default());
    let first = group.submit(1, increment).await.unwrap();
    let removed = group.submit(1, |_| 1000).await.unwrap();
    let dropped = group.submit(1, |_| 2000).await.unwrap();
    let last = group.submit(1, increment).await.unwrap();
    assert!(matches!(removed.cancel(), Cancelled::Removed));
    drop(dropped);
    assert_eq!(first.wait().await.unwrap().value, 1);
    assert_eq!(last.wait().await.unwrap().value, 2);

    let sealed = group.submit(1, increment).await.unwrap();
    // Let the committer seal the batch and send its write.
    tokio::time::sleep(Duration::from_millis(1)).await;
    match sealed.cancel() {
        Cancelled::MayHaveApplied(ticket) => assert_eq!(ticket.wait().await.unwrap().value, 3),
        Cancelled::Removed => panic!("the batch was sealed: too late to remove"),
    }
    assert_eq!(stored(&group).await, 3);
}

#[tokio::test(start_paused = true)]
async fn the_queue_is_bounded_and_batches_respect_their_limits() {
    let store = store(Duration::from_millis(5)).await;
    let config = GroupCommitConfig::default()
        .with_max_queued(4)
        .with_max_batch_records(2);
    let group = counter(&store, config);
    let mut tickets = Vec::new();
    for _ in 0..4 {
        tickets.push(group.submit(1, increment).await.unwrap());
    }
    assert!(
        group.submit(1, increment).now_or_never().is_none(),
        "a fifth update waits for room"
    );
    let mut lens = Vec::new();
    for ticket in tickets {
        lens.push(ticket.wait().await.unwrap().batch_len);
    }
    assert_eq!(lens, [2, 2, 2, 2]);
    assert_eq!(stored(&group).await, 4);
}

#[tokio::test(start_paused = true)]
async fn concurrent_appends_become_records_of_one_entry_read_one_by_one() {
    let store = store(Duration::from_millis(20)).await;
    let group = group_log(&store, GroupCommitConfig::default());
    group.log().append(1, "single".to_string()).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let group = group.clone();
            tokio::spawn(async move { group.append(1, format!("r{i}")).await })
        })
        .collect();
    let mut appended = Vec::new();
    for task in tasks {
        appended.push(task.await.unwrap().unwrap());
    }
    let records = group.log().entries(1).await.unwrap();
    assert_eq!(records.len(), 33, "one item per record");
    assert_eq!((records[0].seq, records[0].offset), (1, 0));
    assert_eq!(records[0].value, "single");
    let positions: Vec<_> = records.iter().map(|r| (r.seq, r.offset)).collect();
    let mut sorted = positions.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        positions, sorted,
        "records in (entry, offset) order, once each"
    );
    for a in &appended {
        let at = records
            .iter()
            .find(|r| (r.seq, r.offset) == (a.seq, a.offset))
            .unwrap();
        assert_eq!(at.value, a.value, "the caller's position holds its record");
    }
    let entries = records.last().unwrap().seq;
    assert!(entries < 12, "33 records took {entries} entries");
    let latest = group.log().latest().await.unwrap().unwrap();
    assert_eq!(
        (latest.seq, latest.value.clone()),
        (entries, records[32].value.clone())
    );
    let batch = group.log().read(entries).await.unwrap();
    assert_eq!(batch.last().unwrap().value, latest.value);
}

#[tokio::test(start_paused = true)]
async fn a_log_batch_whose_answer_is_lost_lands_once_and_a_deposed_one_not_at_all() {
    let store = store(Duration::ZERO).await;
    let group = group_log(&store, GroupCommitConfig::default());
    group.append(2, "first".into()).await.unwrap();
    let a = group.submit(2, "a".into()).await.unwrap();
    let b = group.submit(2, "b".into()).await.unwrap();
    store.inject(Fault::LoseResponse);
    let (a, b) = (a.wait().await.unwrap(), b.wait().await.unwrap());
    assert_eq!((a.seq, a.offset, b.seq, b.offset), (2, 0, 2, 1));
    assert_eq!(store.counts().lost_responses, 1);
    let stale = [
        group.submit(1, "zombie".into()).await.unwrap(),
        group.submit(1, "zombie".into()).await.unwrap(),
    ];
    for ticket in stale {
        assert!(matches!(
            ticket.wait().await,
            Err(LeaseError::FencedOut { presented: 1, .. })
        ));
    }
    let values: Vec<_> = group
        .log()
        .entries(1)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(values, ["first", "a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn log_batches_respect_the_byte_limit_and_refuse_a_record_that_never_fits() {
    let store = store(Duration::ZERO).await;
    // Each record "xxxxxxxx" encodes to 10 bytes.
    let group = group_log(
        &store,
        GroupCommitConfig::default().with_max_batch_bytes(25),
    );
    let tickets = [
        group.submit(1, "xxxxxxxx".into()).await.unwrap(),
        group.submit(1, "xxxxxxxx".into()).await.unwrap(),
        group.submit(1, "xxxxxxxx".into()).await.unwrap(),
    ];
    let mut places = Vec::new();
    for ticket in tickets {
        let entry = ticket.wait().await.unwrap();
        places.push((entry.seq, entry.offset));
    }
    assert_eq!(places, [(1, 0), (1, 1), (2, 0)]);
    let err = group.append(1, "x".repeat(40)).await.unwrap_err();
    assert!(matches!(err, LeaseError::InvalidConfig(_)), "{err}");
}

#[tokio::test(start_paused = true)]
async fn logs_written_one_record_per_entry_still_read() {
    let store = store(Duration::ZERO).await;
    // An entry as versions before group commit wrote it.
    let old = br#"{"kind":"casaas.log","schema":1,"seq":1,"token":1,"nonce":"n1","value":"old"}"#;
    store
        .inner()
        .create("log/00000000000000000001", Bytes::from_static(old))
        .await
        .unwrap();
    let group = group_log(&store, GroupCommitConfig::default());
    let a = group.submit(1, "new-a".into()).await.unwrap();
    let b = group.submit(1, "new-b".into()).await.unwrap();
    a.wait().await.unwrap();
    b.wait().await.unwrap();
    let fresh = FencedLog::<String>::new(Arc::new(store.clone()), "log").unwrap();
    let values: Vec<_> = fresh
        .entries(1)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.seq, r.offset, r.value))
        .collect();
    assert_eq!(
        values,
        [
            (1, 0, "old".to_string()),
            (2, 0, "new-a".to_string()),
            (2, 1, "new-b".to_string())
        ]
    );
    assert_eq!(fresh.read(1).await.unwrap()[0].value, "old");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_update_fails_its_batch_and_the_next_caller_still_succeeds() {
    let store = store(Duration::from_millis(5)).await;
    let group = counter(&store, GroupCommitConfig::default());
    group.update(1, increment).await.unwrap();
    let err = group
        .update(1, |_: Option<&u64>| -> u64 { panic!("boom in an update") })
        .await
        .unwrap_err();
    match &err {
        LeaseError::Store(e) => {
            assert_eq!(e.kind(), ErrorKind::Ambiguous);
            assert!(e.message().contains("panicked"), "{err}");
            assert!(e.message().contains("boom in an update"), "{err}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    // The handle still works, for one caller and for a crowd.
    assert_eq!(group.update(1, increment).await.unwrap().value, 2);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let group = group.clone();
            tokio::spawn(async move { group.update(1, increment).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(stored(&group).await, 18);
}

#[test]
fn a_committer_dropped_with_its_runtime_refuses_the_queue_and_the_next_runtime_commits() {
    let (group, ticket) = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = runtime.block_on(store(Duration::ZERO));
        let group = counter(&store, GroupCommitConfig::default());
        // Queued, its committer spawned but never polled: a current-thread
        // runtime runs other tasks only while blocked on.
        let ticket = runtime.block_on(group.submit(1, increment)).unwrap();
        (group, ticket)
        // The runtime shuts down here, dropping the committer.
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let refused = tokio::time::timeout(Duration::from_secs(10), ticket.wait())
            .await
            .expect("a queued update must not wait forever");
        match refused.unwrap_err() {
            LeaseError::Store(e) => assert_eq!(e.kind(), ErrorKind::NotSent, "{e}"),
            other => panic!("expected a store error, got {other:?}"),
        }
        let applied = tokio::time::timeout(Duration::from_secs(10), group.update(1, increment))
            .await
            .expect("a later caller must not wait forever")
            .unwrap();
        assert_eq!(applied.value, 1, "the refused update was never applied");
    });
}

#[test]
fn outside_a_runtime_a_group_handle_refuses_instead_of_panicking() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(store(Duration::ZERO));
    let group = counter(&store, GroupCommitConfig::default());
    drop(runtime);
    let err = futures::executor::block_on(group.update(1, increment)).unwrap_err();
    assert!(matches!(err, LeaseError::InvalidConfig(_)), "{err:?}");
}

#[tokio::test]
async fn a_queue_limit_beyond_the_semaphores_is_clamped() {
    let store = store(Duration::ZERO).await;
    let mut config = GroupCommitConfig::default();
    config.max_queued = usize::MAX;
    let group = counter(&store, config);
    assert_eq!(group.update(1, increment).await.unwrap().value, 1);
    let built = GroupCommitConfig::default().with_max_queued(usize::MAX);
    assert_eq!(built.max_queued, tokio::sync::Semaphore::MAX_PERMITS);
    let group = counter(&store, built);
    assert_eq!(group.update(1, increment).await.unwrap().value, 2);
}

#[tokio::test(start_paused = true)]
async fn reading_a_batch_entry_gives_every_record_not_the_first() {
    let store = store(Duration::from_millis(20)).await;
    let group = group_log(&store, GroupCommitConfig::default());
    let tickets = futures::future::join_all((0..8).map(|i| group.submit(1, format!("r{i}")))).await;
    let mut appended = Vec::new();
    for ticket in tickets {
        appended.push(ticket.unwrap().wait().await.unwrap());
    }
    let seq = appended[0].seq;
    let records = group.log().read(seq).await.unwrap();
    assert!(records.len() > 1, "the submits made one batch entry");
    for (offset, record) in records.iter().enumerate() {
        assert_eq!((record.seq, record.offset), (seq, offset));
        assert_eq!(record.value, format!("r{offset}"));
    }
}
