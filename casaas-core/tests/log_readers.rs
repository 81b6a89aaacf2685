#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Every log reader reads every writer's entries: a plain `FencedLog` in
//! another process reads a group commit's batch entries whole, a group
//! commit's log reads plain appends, in both layouts; an entry of a newer
//! schema or a foreign object is refused by name, never misread.

use std::sync::Arc;
use std::time::Duration;

use casaas_core::layout::{LeaseLayout, with_layout};
use casaas_core::lease::{FencedLog, GroupCommitConfig, GroupLog, LeaseError};
use casaas_core::testkit::{FaultConfig, FaultyStore};
use casaas_core::{CasStore, MemoryStore};

const PREFIX: &str = "log";

/// A store past the guard whose requests take up to 20 ms, so that
/// concurrent submits queue up into one batch entry.
async fn store(layout: LeaseLayout) -> Arc<dyn CasStore> {
    let faulty = FaultyStore::new(MemoryStore::new(), 11, FaultConfig::default());
    let store = with_layout(Arc::new(faulty.clone()), layout);
    casaas_core::testkit::pass_store_guard(&casaas_core::layout::lease_view(store.clone()))
        .await
        .unwrap();
    faulty.set_config(FaultConfig {
        delay: 1.0,
        max_delay: Duration::from_millis(20),
        ..FaultConfig::default()
    });
    store
}

fn plain(store: &Arc<dyn CasStore>) -> FencedLog<String> {
    FencedLog::new(store.clone(), PREFIX).unwrap()
}

fn grouped(store: &Arc<dyn CasStore>) -> GroupLog<String> {
    GroupLog::new(plain(store), GroupCommitConfig::default())
}

/// `count` records submitted at once, as `{tag}{i}`: the seq of their
/// first entry, which holds several of them.
async fn batch(group: &GroupLog<String>, tag: &str, count: usize) -> u64 {
    let tickets =
        futures::future::join_all((0..count).map(|i| group.submit(1, format!("{tag}{i}")))).await;
    let mut seqs = Vec::new();
    for ticket in tickets {
        seqs.push(ticket.unwrap().wait().await.unwrap().seq);
    }
    seqs[0]
}

#[tokio::test(start_paused = true)]
async fn a_plain_reader_reads_a_group_commits_entries_whole() {
    for layout in [LeaseLayout::Record, LeaseLayout::Epochs] {
        let store = store(layout).await;
        let seq = batch(&grouped(&store), "g", 8).await;
        // Another process, without group commit.
        let reader = plain(&store);
        let records = reader.read(seq).await.unwrap();
        assert!(records.len() > 1, "{layout}: one batch entry: {records:?}");
        for (offset, record) in records.iter().enumerate() {
            assert_eq!(
                (record.seq, record.offset, record.value.as_str()),
                (seq, offset, format!("g{offset}").as_str()),
                "{layout}"
            );
        }
        let all: Vec<String> = reader
            .entries(1)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.value)
            .collect();
        let expected: Vec<String> = (0..8).map(|i| format!("g{i}")).collect();
        assert_eq!(all, expected, "{layout}");
        assert_eq!(reader.latest().await.unwrap().unwrap().value, "g7");
    }
}

#[tokio::test(start_paused = true)]
async fn a_group_commits_log_reads_plain_appends_and_both_mix() {
    for layout in [LeaseLayout::Record, LeaseLayout::Epochs] {
        let store = store(layout).await;
        let writer = plain(&store);
        assert_eq!(writer.append(1, "p0".into()).await.unwrap().seq, 1);
        let group = grouped(&store);
        let seq = batch(&group, "g", 4).await;
        assert!(seq > 1, "{layout}");
        writer.append(1, "p1".into()).await.unwrap();
        // Each side reads every entry, whichever wrote it.
        for (who, log) in [("group", group.log()), ("plain", &plain(&store))] {
            let first = log.read(1).await.unwrap();
            assert_eq!(first.len(), 1, "{layout}, {who}");
            assert_eq!((first[0].offset, first[0].value.as_str()), (0, "p0"));
            let values: Vec<String> = log
                .entries(1)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.value)
                .collect();
            assert_eq!(
                values,
                ["p0", "g0", "g1", "g2", "g3", "p1"],
                "{layout}, {who}"
            );
            assert!(log.read(99).await.unwrap().is_empty(), "{layout}, {who}");
        }
    }
}

#[tokio::test]
async fn a_newer_or_foreign_entry_is_refused_by_name() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let log = plain(&store);
    log.append(1, "first".into()).await.unwrap();
    let newer = r#"{"kind":"casaas.log","schema":3,"seq":2,"token":1,"nonce":"n","records":{}}"#;
    store.create(&log.entry_key(2), newer.into()).await.unwrap();
    match log.read(2).await.unwrap_err() {
        LeaseError::UnsupportedSchema { key, version } => {
            assert_eq!((key.as_str(), version), (log.entry_key(2).as_str(), 3));
        }
        other => panic!("expected an unsupported schema, got {other:?}"),
    }
    store
        .create(&log.entry_key(3), "not a log entry".into())
        .await
        .unwrap();
    let err = log.read(3).await.unwrap_err();
    assert!(matches!(err, LeaseError::ForeignObject { .. }), "{err:?}");
}
