//! The appends workload on real S3 servers (`cargo xtask servers up
//! seaweedfs ceph`): the catalog's pointers and the table's metadata and
//! data files on the server, a fifth of the pointer writes' answers dropped
//! after they land. Every append is in the table exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod shared;

use std::sync::Arc;

use casaas_core::testkit::server_env::{test_server, unique_prefix};
use casaas_iceberg::CasaasCatalog;
use iceberg::io::FileIOBuilder;
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use shared::workload::{DropAnswers, run};

async fn appends_on(server: &str) {
    let server = test_server(server);
    let prefix = unique_prefix("iceberg");
    let (base, query) = server.url.split_once('?').unwrap();
    let url = format!(
        "{}{prefix}?{query}",
        base.trim_end_matches('/').to_string() + "/"
    );
    let store = casaas::open_store_with(&url, server.store_options())
        .await
        .unwrap();
    let store = Arc::new(DropAnswers::new(store, 0.2));
    let endpoint = server.var("AWS_ENDPOINT_URL");
    let file_io = FileIOBuilder::new(Arc::new(OpenDalResolvingStorageFactory::new()))
        .with_props([
            ("s3.endpoint", endpoint),
            ("s3.access-key-id", server.var("AWS_ACCESS_KEY_ID")),
            ("s3.secret-access-key", server.var("AWS_SECRET_ACCESS_KEY")),
            ("s3.region", server.var("AWS_REGION")),
            ("s3.path-style-access", "true"),
        ])
        .build();
    let warehouse = url.split_once('?').unwrap().0.to_string();
    let catalog = CasaasCatalog::new("servers", store.clone(), file_io, warehouse);
    let outcome = run(&catalog, 3, 4).await.unwrap();
    assert!(outcome.exactly_once(), "{outcome:?}");
    assert_eq!(outcome.rows, 12, "{outcome:?}");
    assert!(store.dropped() > 0, "no answer was dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_with_lost_answers_on_seaweedfs_land_exactly_once() {
    appends_on("seaweedfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_with_lost_answers_on_ceph_land_exactly_once() {
    appends_on("ceph").await;
}
