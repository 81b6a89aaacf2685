//! How a table's storage options choose the commit store, and what a
//! wrong option or a foreign commit does: a clear error, nothing lost.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;

use casaas_delta::{CasaasLogStore, CommitStore, STORE_URL_OPTION};
use deltalake_core::kernel::{DataType, PrimitiveType, StructField};
use deltalake_core::logstore::{ObjectStoreRef, StorageConfig, default_logstore};
use deltalake_core::{DeltaTable, DeltaTableBuilder};
use url::Url;

fn options(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn prefixed_options_go_to_casaas_and_credentials_are_shared_by_scheme() {
    assert!(matches!(
        CommitStore::from_options(&options(&[("aws_region", "x")])),
        CommitStore::Adapter
    ));
    let store = CommitStore::from_options(&options(&[
        (STORE_URL_OPTION, "s3://b/t?endpoint=http://127.0.0.1:1"),
        ("casaas.etag_unquoted", "true"),
        ("aws_access_key_id", "shared"),
        ("aws_secret_access_key", "shared-secret"),
        ("casaas.aws_secret_access_key", "own-secret"),
        ("azure_storage_key", "not for s3"),
        ("aws_endpoint", "object_store's, not casaas's"),
    ]));
    let shown = format!("{store:?}");
    assert!(
        !shown.contains("shared-secret") && !shown.contains("own-secret"),
        "a secret in debug output: {shown}"
    );
    let CommitStore::Url { url, options } = store else {
        panic!("a casaas_url names the store")
    };
    assert_eq!(url, "s3://b/t?endpoint=http://127.0.0.1:1");
    assert_eq!(
        options,
        vec![
            ("aws_access_key_id".to_string(), "shared".to_string()),
            (
                "aws_secret_access_key".to_string(),
                "own-secret".to_string()
            ),
            ("etag_unquoted".to_string(), "true".to_string()),
        ]
    );
}

#[tokio::test]
async fn casaas_own_file_store_is_refused_when_the_table_is_built() {
    casaas_delta::register();
    let dir = tempfile::tempdir().unwrap();
    let url = Url::from_directory_path(dir.path()).unwrap();
    let err = DeltaTableBuilder::from_url(url.clone())
        .unwrap()
        .with_storage_options(options(&[(STORE_URL_OPTION, url.as_str())]))
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("casaas_url") && err.contains("leave"), "{err}");
}

async fn create(table: DeltaTable) -> Result<DeltaTable, deltalake_core::DeltaTableError> {
    table
        .create()
        .with_columns([StructField::new(
            "id",
            DataType::Primitive(PrimitiveType::Long),
            false,
        )])
        .await
}

#[tokio::test]
async fn a_misspelt_casaas_option_fails_the_first_commit_and_writes_nothing() {
    casaas_delta::register();
    let dir = tempfile::tempdir().unwrap();
    let url = Url::from_directory_path(dir.path()).unwrap();
    let table = DeltaTableBuilder::from_url(url)
        .unwrap()
        .with_storage_options(options(&[
            (
                STORE_URL_OPTION,
                "s3://bucket/t?endpoint=http://127.0.0.1:9",
            ),
            ("casaas.regoin", "eu-west-1"),
        ]))
        .build()
        .unwrap();
    let err = create(table).await.unwrap_err().to_string();
    assert!(err.contains("was not written"), "{err}");
    assert!(err.contains("unknown option 'regoin'"), "{err}");
    assert!(
        !dir.path().join("_delta_log").exists()
            || std::fs::read_dir(dir.path().join("_delta_log"))
                .unwrap()
                .next()
                .is_none(),
        "nothing was committed"
    );
}

/// A version written by another tool (delta-rs's own log store, no nonce)
/// is another writer's: the casaas writer moves on to the next version and
/// never overwrites it.
#[tokio::test]
async fn a_commit_written_without_casaas_is_kept_and_the_writer_moves_on() {
    let dir = tempfile::tempdir().unwrap();
    let url = Url::from_directory_path(dir.path()).unwrap();
    let root: ObjectStoreRef = Arc::new(object_store_0_13::local::LocalFileSystem::new());
    let prefixed: ObjectStoreRef = Arc::new(
        deltalake_core::logstore::object_store::prefix::PrefixStore::new(
            root.clone(),
            deltalake_core::Path::from_url_path(url.path()).unwrap(),
        ),
    );
    let config = StorageConfig::default();
    let casaas = Arc::new(CasaasLogStore::new(
        prefixed.clone(),
        root.clone(),
        &url,
        &config,
        CommitStore::Adapter,
    ));
    let plain = default_logstore(prefixed, root, &url, &config);
    let table = create(DeltaTable::new(casaas.clone())).await.unwrap();
    // Both load version 0; the plain writer commits version 1 first.
    let mut stale = DeltaTable::new(casaas);
    stale.load().await.unwrap();
    let mut other = DeltaTable::new(plain.clone());
    other.load().await.unwrap();
    assert_eq!(append_nothing(&other).await, 1);
    let foreign = plain.read_commit_entry(1).await.unwrap().unwrap();
    assert_eq!(casaas_delta::nonce::nonce_of(&foreign), None);
    // The casaas writer, still at version 0, is told version 1 is taken.
    assert_eq!(append_nothing(&stale).await, 2);
    assert_eq!(plain.read_commit_entry(1).await.unwrap().unwrap(), foreign);
    let ours = plain.read_commit_entry(2).await.unwrap().unwrap();
    assert!(casaas_delta::nonce::nonce_of(&ours).is_some());
    drop(table);
}

/// Commits an append of no files; returns the version it got.
async fn append_nothing(table: &DeltaTable) -> u64 {
    let snapshot = table.snapshot().unwrap().clone();
    deltalake_core::kernel::transaction::CommitBuilder::default()
        .with_actions(vec![])
        .build(
            Some(&snapshot),
            table.log_store(),
            deltalake_core::protocol::DeltaOperation::Write {
                mode: deltalake_core::protocol::SaveMode::Append,
                partition_by: None,
                predicate: None,
            },
        )
        .await
        .unwrap()
        .version()
}
