//! Stores on the servers `cargo xtask servers up` started.
#![allow(dead_code)]

use std::sync::Arc;

use casaas_core::CasStore;
use casaas_core::testkit::{test_server, unique_prefix};
use casaas_s3::{S3Store, S3StoreBuilder};

/// A builder for server `name`: its URL (with its quirk options), its
/// explicit credentials, and a fresh prefix.
pub fn builder(name: &str, label: &str) -> S3StoreBuilder {
    let server = test_server(name);
    S3Store::builder()
        .url(&server.url)
        .unwrap()
        .static_credentials(
            server.var("AWS_ACCESS_KEY_ID"),
            server.var("AWS_SECRET_ACCESS_KEY"),
        )
        .prefix(unique_prefix(label))
}

/// An `S3Store` on server `name` under a fresh prefix.
pub async fn store(name: &str, label: &str) -> S3Store {
    builder(name, label).build().await.unwrap()
}

/// The same, as the trait object the contract suite takes.
pub async fn dyn_store(name: &str, label: &str) -> Arc<dyn CasStore> {
    Arc::new(store(name, label).await)
}
