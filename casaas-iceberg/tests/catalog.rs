//! The catalog on the memory store and on the local disk: every operation,
//! the objects it writes (the layout shared with the PyIceberg catalog),
//! concurrent commits, and commits whose answers are lost.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;

use casaas_core::testkit::{FaultConfig, FaultyStore, pass_store_guard};
use casaas_core::{CasStore, MemoryStore};
use casaas_iceberg::CasaasCatalog;
use iceberg::io::FileIO;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use serde_json::Value;

fn schema() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap()
}

fn creation(name: &str) -> TableCreation {
    TableCreation::builder()
        .name(name.to_string())
        .schema(schema())
        .properties(HashMap::from([
            // Many writers on one table: PyIceberg's and iceberg-rust's
            // default of 4 retries is too few for the tests' contention.
            ("commit.retry.num-retries".to_string(), "1000".to_string()),
            ("commit.retry.min-wait-ms".to_string(), "1".to_string()),
            ("commit.retry.max-wait-ms".to_string(), "20".to_string()),
            (
                "commit.retry.total-timeout-ms".to_string(),
                "120000".to_string(),
            ),
        ]))
        .build()
}

async fn object(store: &dyn CasStore, key: &str) -> Value {
    let found = store
        .get(key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no {key}"));
    serde_json::from_slice(&found.body).unwrap()
}

async fn set_property(catalog: &CasaasCatalog, table: &TableIdent, k: &str, v: &str) {
    let loaded = catalog.load_table(table).await.unwrap();
    let tx = Transaction::new(&loaded);
    let tx = tx
        .update_table_properties()
        .set(k.to_string(), v.to_string())
        .apply(tx)
        .unwrap();
    tx.commit(catalog).await.unwrap();
}

#[tokio::test]
async fn every_operation_on_the_memory_store_writes_the_shared_layout() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let catalog = CasaasCatalog::new(
        "lake",
        store.clone(),
        FileIO::new_with_memory(),
        "memory://wh",
    );
    let db = NamespaceIdent::new("db".into());
    catalog
        .create_namespace(&db, HashMap::from([("owner".into(), "me".into())]))
        .await
        .unwrap();
    let again = catalog
        .create_namespace(&db, HashMap::new())
        .await
        .unwrap_err();
    assert_eq!(again.kind(), ErrorKind::NamespaceAlreadyExists);
    assert_eq!(
        catalog.list_namespaces(None).await.unwrap(),
        vec![db.clone()]
    );
    let ns = object(store.as_ref(), "namespaces/db").await;
    assert_eq!(ns["kind"], "casaas.iceberg.namespace");
    assert_eq!(ns["state"], "live");
    assert_eq!(ns["properties"]["owner"], "me");
    assert!(ns["nonce"].is_string());

    let events = TableIdent::new(db.clone(), "events v1".into());
    let table = catalog
        .create_table(&db, creation("events v1"))
        .await
        .unwrap();
    let first = table.metadata_location().unwrap().to_string();
    assert!(
        first.starts_with("memory://wh/db.db/events v1/metadata/00000-"),
        "{first}"
    );
    // Names are percent-encoded as Python's quote(safe="") does.
    let pointer = object(store.as_ref(), "tables/db/events%20v1").await;
    assert_eq!(pointer["kind"], "casaas.iceberg.table");
    assert_eq!(pointer["state"], "live");
    assert_eq!(pointer["schema"], 1);
    assert_eq!(pointer["metadata-location"], first.as_str());
    assert_eq!(
        pointer["identifier"],
        serde_json::json!(["db", "events v1"])
    );
    let dup = catalog
        .create_table(&db, creation("events v1"))
        .await
        .unwrap_err();
    assert_eq!(dup.kind(), ErrorKind::TableAlreadyExists);

    set_property(&catalog, &events, "a", "1").await;
    let loaded = catalog.load_table(&events).await.unwrap();
    assert_eq!(
        loaded.metadata().properties().get("a").map(String::as_str),
        Some("1")
    );
    let second = loaded.metadata_location().unwrap().to_string();
    assert!(second.contains("/metadata/00001-"), "{second}");
    assert_eq!(loaded.metadata().metadata_log()[0].metadata_file, first);
    assert_eq!(
        catalog.list_tables(&db).await.unwrap(),
        vec![events.clone()]
    );

    let renamed = TableIdent::new(db.clone(), "events2".into());
    catalog.rename_table(&events, &renamed).await.unwrap();
    assert!(!catalog.table_exists(&events).await.unwrap());
    let moved = catalog.load_table(&renamed).await.unwrap();
    assert_eq!(moved.metadata_location().unwrap(), second);
    let tomb = object(store.as_ref(), "tables/db/events%20v1").await;
    assert_eq!(tomb["state"], "dropped");
    assert_eq!(tomb["renamed-to"], serde_json::json!(["db", "events2"]));
    let new = object(store.as_ref(), "tables/db/events2").await;
    assert!(new.get("renamed-from").is_none(), "{new}");

    let not_empty = catalog.drop_namespace(&db).await.unwrap_err();
    assert_eq!(not_empty.kind(), ErrorKind::PreconditionFailed);
    catalog.drop_table(&renamed).await.unwrap();
    assert!(catalog.list_tables(&db).await.unwrap().is_empty());
    // A tombstone is replaced by a later create, and register adopts a
    // table's metadata.
    let back = catalog
        .register_table(&renamed, second.clone())
        .await
        .unwrap();
    assert_eq!(
        back.metadata().properties().get("a").map(String::as_str),
        Some("1")
    );
    catalog.drop_table(&renamed).await.unwrap();
    catalog.drop_namespace(&db).await.unwrap();
    assert!(catalog.list_namespaces(None).await.unwrap().is_empty());
    assert_eq!(
        object(store.as_ref(), "namespaces/db").await["state"],
        "dropped"
    );
    let missing = catalog.load_table(&renamed).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::TableNotFound);
}

/// `writers` tasks each commit `commits` property updates to one table:
/// every commit lands exactly once (the metadata log has one entry per
/// commit and every property is there).
async fn concurrent_commits(catalog: CasaasCatalog, writers: usize, commits: usize) {
    let db = NamespaceIdent::new("db".into());
    catalog.create_namespace(&db, HashMap::new()).await.unwrap();
    let table = catalog.create_table(&db, creation("t")).await.unwrap();
    let ident = table.identifier().clone();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let catalog = catalog.clone();
        let ident = ident.clone();
        tasks.push(tokio::spawn(async move {
            for c in 0..commits {
                set_property(&catalog, &ident, &format!("w{w}-c{c}"), "1").await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let end = catalog.load_table(&ident).await.unwrap();
    let metadata = end.metadata();
    for w in 0..writers {
        for c in 0..commits {
            assert!(metadata.properties().contains_key(&format!("w{w}-c{c}")));
        }
    }
    // Applied once each: one metadata file per commit after the first.
    assert_eq!(metadata.metadata_log().len(), writers * commits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_on_the_local_disk_each_land_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/catalog?create_dirs=true", dir.path().display());
    let store = casaas::open_store(&url).await.unwrap();
    let warehouse = format!("file://{}/warehouse", dir.path().display());
    let catalog = CasaasCatalog::new("lake", store, FileIO::new_with_fs(), warehouse);
    concurrent_commits(catalog, 4, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_whose_answers_are_lost_land_exactly_once() {
    let faulty = Arc::new(FaultyStore::new(
        MemoryStore::new(),
        7,
        FaultConfig::default(),
    ));
    pass_store_guard(faulty.as_ref()).await.unwrap();
    faulty.set_config(FaultConfig {
        lose_response: 0.2,
        duplicate: 0.1,
        ..FaultConfig::default()
    });
    let catalog = CasaasCatalog::new(
        "lake",
        faulty.clone(),
        FileIO::new_with_memory(),
        "memory://wh",
    );
    concurrent_commits(catalog, 3, 6).await;
    let counts = faulty.counts();
    assert!(counts.lost_responses >= 3, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_the_store_never_settles_is_unknown_not_a_conflict() {
    let faulty = Arc::new(FaultyStore::new(
        MemoryStore::new(),
        11,
        FaultConfig::default(),
    ));
    pass_store_guard(faulty.as_ref()).await.unwrap();
    let catalog = CasaasCatalog::new(
        "lake",
        faulty.clone(),
        FileIO::new_with_memory(),
        "memory://wh",
    );
    let db = NamespaceIdent::new("db".into());
    catalog.create_namespace(&db, HashMap::new()).await.unwrap();
    let table = catalog.create_table(&db, creation("t")).await.unwrap();
    // Every write answered 5xx: each may have landed as far as the writer
    // knows, and reading never settles it.
    faulty.set_config(FaultConfig {
        server_error: 1.0,
        ..FaultConfig::default()
    });
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set("k".into(), "v".into())
        .apply(tx)
        .unwrap();
    let err = tx.commit(&catalog).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unexpected, "{err}");
    assert!(!err.retryable(), "{err}");
    let message = err.to_string();
    assert!(message.contains("commit state unknown"), "{message}");
    assert!(message.contains("/metadata/00001-"), "{message}");
    faulty.set_config(FaultConfig::default());
    let now = catalog.load_table(table.identifier()).await.unwrap();
    assert_eq!(now.metadata_location(), table.metadata_location());
}
