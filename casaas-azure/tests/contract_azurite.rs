//! The contract suite against Azurite: every check, 8-way races, 20 rounds.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;

use casaas_core::CasStore;

async fn fresh_store() -> Arc<dyn CasStore> {
    Arc::new(common::fresh("azure-contract").await)
}

casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 20);

/// The same contract in the create-only layout (`layout=epochs`), whose
/// objects are chains of create-if-absent epochs on this server.
mod epochs {
    use std::sync::Arc;

    use casaas_core::CasStore;
    use casaas_core::layout::EpochStore;

    async fn fresh_store() -> Arc<dyn CasStore> {
        Arc::new(EpochStore::with_collection(
            super::fresh_store().await,
            4,
            2,
        ))
    }

    casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 10, layout = epochs);
}

/// A percent-encoded prefix is decoded once: `az://acct/c/x%2541` stores
/// blobs under `x%41/`, not `xA/`.
#[tokio::test]
async fn percent_encoded_prefix_is_decoded_once() {
    use bytes::Bytes;
    let server = common::server();
    let url = format!(
        "az://{}/{}/x%2541?endpoint={}&create_container=true",
        server.var("AZURE_STORAGE_ACCOUNT"),
        server.var("AZURE_STORAGE_CONTAINER"),
        server.var("AZURE_STORAGE_ENDPOINT")
    );
    let env = |name: &str| server.env.get(name).cloned();
    let store = casaas_azure::AzureBlobStoreBuilder::from_url_with_env(&url, env)
        .unwrap()
        .build()
        .await
        .unwrap();
    assert_eq!(store.prefix(), "x%41/");
    let key = casaas_core::testkit::unique_prefix("decode-once");
    let version = store.create(&key, Bytes::from_static(b"1")).await.unwrap();
    // The same blob through a store whose prefix is set without a URL.
    let raw = common::builder(&server)
        .prefix("x%41")
        .build()
        .await
        .unwrap();
    assert!(raw.get(&key).await.unwrap().is_some());
    let wrong = common::builder(&server).prefix("xA").build().await.unwrap();
    assert!(wrong.get(&key).await.unwrap().is_none());
    store.delete(&key, &version).await.unwrap();
}
