//! The contract suite through object_store's client against moto
//! (`cargo xtask servers up moto`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;

use casaas_core::CasStore;

async fn fresh_store() -> Arc<dyn CasStore> {
    common::server_store("moto", "object-store-moto").await
}

// No race checks on moto: its conditional writes are not atomic (two
// concurrent writes conditioned on one state can both succeed; see
// casaas-testkit/tests/server_races.rs), so a round with two winners there
// proves nothing about this backend. The races run on Ceph RGW, Azurite,
// fake-gcs and the embedded backends.
casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 20, races = false);

#[tokio::test]
async fn capabilities_claim_create_and_replace_but_not_delete() {
    let caps = fresh_store().await.capabilities();
    assert!(caps.create_if_absent && caps.replace_if_match, "{caps:?}");
    assert!(!caps.conditional_delete, "{caps:?}");
}
