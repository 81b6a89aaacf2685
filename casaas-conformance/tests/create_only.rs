#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! A store that honours create-if-absent but refuses every conditional
//! replace (501) is judged on the create-only layout: SAFE FOR LEASES
//! (create-only layout) when its creates hold, NOT SAFE when they do not.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_conformance::{NoProgress, Report, RunVerdict, Settings, Suite, Target, Verdict};
use casaas_core::layout::{LeaseLayout, with_layout};
use casaas_core::testkit::CreateOnlyStore;
use casaas_core::{CasError, CasStore, ForwardingStore, MemoryStore, Version};

fn settings() -> Settings {
    let mut s = Settings::quick();
    s.concurrency = 4;
    s.rounds = Some(5);
    s
}

async fn run(store: Arc<dyn CasStore>) -> Report {
    let ids: Vec<String> = [
        "create_if_absent",
        "create_conflict",
        "replace_if_match",
        "replace_stale",
        "missing_key",
        "race_create",
        "race_replace",
        "lease_protocol",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Suite::standard()
        .only(&ids)
        .unwrap()
        .run(
            &Target::new(store, "test://create-only"),
            &settings(),
            Arc::new(NoProgress),
        )
        .await
        .unwrap()
}

fn verdict(report: &Report, id: &str) -> Verdict {
    report.probes.iter().find(|p| p.id == id).unwrap().verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_only_store_is_safe_in_the_create_only_layout() {
    let store: Arc<dyn CasStore> = Arc::new(CreateOnlyStore(MemoryStore::new()));
    let report = run(store).await;
    assert_eq!(report.verdict, RunVerdict::Safe, "{}", report.to_table());
    assert_eq!(report.summary, "SAFE FOR LEASES (create-only layout)");
    assert_eq!(report.layout, LeaseLayout::Epochs);
    assert_eq!(report.exit_code(), 0);
    // The lease probe ran on the epoch layout and passed there.
    let lease = report
        .probes
        .iter()
        .find(|p| p.id == "lease_protocol")
        .unwrap();
    assert_eq!(lease.verdict, Verdict::Pass, "{}", lease.detail);
    assert_eq!(lease.options, vec!["layout=epochs".to_string()]);
    // The replace probes are notes, saying why they no longer decide.
    let replace = report
        .probes
        .iter()
        .find(|p| p.id == "replace_if_match")
        .unwrap();
    assert_eq!(replace.verdict, Verdict::Note);
    assert!(
        replace.detail.contains("create-only layout"),
        "{}",
        replace.detail
    );
    let json = report.to_json();
    assert!(json.contains(r#""layout": "epochs""#), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_store_stays_on_the_record_layout_unless_told() {
    let report = run(Arc::new(MemoryStore::new())).await;
    assert_eq!(report.summary, "SAFE FOR LEASES");
    assert_eq!(report.layout, LeaseLayout::Record);
    // Told: the same store judged on the create-only layout.
    let report = run(with_layout(
        Arc::new(MemoryStore::new()),
        LeaseLayout::Epochs,
    ))
    .await;
    assert_eq!(report.summary, "SAFE FOR LEASES (create-only layout)");
    assert_eq!(verdict(&report, "replace_if_match"), Verdict::Pass);
}

/// Refuses replace, and creates overwrite: nothing holds.
#[derive(Debug, Default)]
struct OverwritingCreates(MemoryStore);

#[async_trait]
impl ForwardingStore for OverwritingCreates {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.0
    }
    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        if let Some(o) = self.0.get(key).await? {
            self.0.delete(key, &o.version).await?;
        }
        self.0.create(key, body).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_whose_creates_do_not_hold_is_not_safe_in_either_layout() {
    let store: Arc<dyn CasStore> = Arc::new(CreateOnlyStore(OverwritingCreates::default()));
    let report = run(store).await;
    assert_eq!(report.verdict, RunVerdict::NotSafe, "{}", report.to_table());
    assert_eq!(report.layout, LeaseLayout::Record);
    assert_eq!(verdict(&report, "create_conflict"), Verdict::Fail);
}
