//! The contract suite against Azurite: every check, 8-way races, 20 rounds.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;

use casaas_core::CasStore;

async fn fresh_store() -> Arc<dyn CasStore> {
    Arc::new(common::fresh("azure-contract").await)
}

casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 20);
