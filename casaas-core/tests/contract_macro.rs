//! `contract_suite!` as provider crates use it, here on the in-memory store,
//! so a change that breaks the macro breaks core's own build.
#![allow(missing_docs)]

use std::sync::Arc;

use casaas_core::{CasStore, MemoryStore};

async fn fresh_store() -> Arc<dyn CasStore> {
    Arc::new(MemoryStore::new())
}

casaas_core::contract_suite!(fresh_store, tasks = 4, rounds = 10);
