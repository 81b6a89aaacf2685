//! `contract_suite!` as provider crates use it, here on the in-memory store,
//! so a change that breaks the macro breaks core's own build.
#![allow(missing_docs)]

use std::sync::Arc;

use casaas_core::{CasStore, MemoryStore};

async fn fresh_store() -> Arc<dyn CasStore> {
    Arc::new(MemoryStore::new())
}

casaas_core::contract_suite!(fresh_store, tasks = 4, rounds = 10);

/// The epoch layout's virtual objects pass the same contract, on a store
/// that refuses every conditional replace.
mod epochs {
    use std::sync::Arc;

    use casaas_core::layout::EpochStore;
    use casaas_core::testkit::CreateOnlyStore;
    use casaas_core::{CasStore, MemoryStore};

    async fn fresh_store() -> Arc<dyn CasStore> {
        // Small blocks, so that collection runs during the races.
        Arc::new(EpochStore::with_collection(
            Arc::new(CreateOnlyStore(MemoryStore::new())),
            4,
            2,
        ))
    }

    casaas_core::contract_suite!(fresh_store, tasks = 4, rounds = 20, layout = epochs);
}
