#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The probes judge the embedded backends safe and a store that ignores
//! conditions not safe.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_conformance::{
    NoProgress, Report, RunVerdict, ServerClock, Settings, Severity, Suite, Target, Verdict,
};
use casaas_core::{
    Capabilities, CasError, CasStore, FileStore, ListEntry, MemoryStore, StoredObject, Version,
};

fn settings() -> Settings {
    let mut s = Settings::quick();
    s.rounds = Some(5);
    s
}

async fn run(store: Arc<dyn CasStore>, suite: Suite) -> Report {
    suite
        .run(
            &Target::new(store, "test://"),
            &settings(),
            Arc::new(NoProgress),
        )
        .await
        .unwrap()
}

fn verdict(report: &Report, id: &str) -> Verdict {
    report
        .probes
        .iter()
        .find(|p| p.id == id)
        .unwrap_or_else(|| panic!("no probe {id}"))
        .verdict
}

fn assert_safe(report: &Report) {
    for p in &report.probes {
        // Backend-specific probes are unsupported elsewhere.
        let backend_only = ["s3_", "azure_", "gcs_"]
            .iter()
            .any(|b| p.id.starts_with(b));
        if p.severity != Severity::Info && !backend_only {
            assert_eq!(p.verdict, Verdict::Pass, "{}: {}", p.id, report.to_table());
        }
    }
    assert!(report.safe_for_leases, "{}", report.to_table());
    assert_eq!(report.verdict, RunVerdict::Safe, "{}", report.to_table());
    assert_eq!(report.summary, "SAFE FOR LEASES", "{}", report.to_table());
    assert_eq!(verdict(report, "identical_rewrite"), Verdict::Pass);
    assert_eq!(verdict(report, "clock_skew"), Verdict::Unsupported);
    assert!(report.cleanup.leftovers.is_empty(), "{:?}", report.cleanup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_is_safe_and_untouched_outside_the_prefix() {
    let memory = MemoryStore::new();
    let outside = memory
        .create("outside/key", Bytes::from_static(b"keep"))
        .await
        .unwrap();
    let store: Arc<dyn CasStore> = Arc::new(memory.clone());
    let report = run(store, Suite::standard()).await;
    assert_safe(&report);
    // Everything the run wrote is gone; the foreign key is untouched.
    let left = memory.list("").await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].key, "outside/key");
    assert_eq!(left[0].version, outside);
    assert!(report.cleanup.deleted > 50, "{:?}", report.cleanup);
    assert!(report.backend.prefix.starts_with("casaas-conformance/"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_is_safe() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CasStore> = Arc::new(FileStore::open(dir.path()).await.unwrap());
    let report = run(store, Suite::standard()).await;
    assert_safe(&report);
}

/// A store that accepts every write: conditions are ignored.
#[derive(Debug)]
struct LyingStore(MemoryStore);

impl LyingStore {
    async fn put(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        match self.0.get(key).await? {
            Some(current) => self.0.replace(key, &current.version, body).await,
            None => self.0.create(key, body).await,
        }
    }
}

#[async_trait]
impl CasStore for LyingStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.0.get(key).await
    }
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.put(key, body).await
    }
    async fn replace(
        &self,
        key: &str,
        _expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.put(key, body).await
    }
    async fn delete(&self, key: &str, _expected: &Version) -> Result<(), CasError> {
        match self.0.get(key).await? {
            Some(current) => self.0.delete(key, &current.version).await,
            None => Ok(()),
        }
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.0.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::full()
    }
    fn describe(&self) -> String {
        "lying".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_that_ignores_conditions_is_not_safe() {
    let store: Arc<dyn CasStore> = Arc::new(LyingStore(MemoryStore::new()));
    let report = run(store, Suite::standard()).await;
    assert!(!report.safe_for_leases, "{}", report.to_table());
    assert_eq!(report.verdict, RunVerdict::NotSafe);
    assert!(
        report.summary.starts_with("NOT SAFE: "),
        "{}",
        report.summary
    );
    for id in [
        "create_conflict",
        "replace_stale",
        "missing_key",
        "race_create",
        "race_replace",
    ] {
        assert_eq!(
            verdict(&report, id),
            Verdict::Fail,
            "{id}: {}",
            report.to_table()
        );
        assert!(
            report.summary.contains(&format!("{id} failed")),
            "{}",
            report.summary
        );
    }
    assert_eq!(verdict(&report, "conditional_delete"), Verdict::Fail);
    assert_eq!(verdict(&report, "create_if_absent"), Verdict::Pass);
    assert_eq!(verdict(&report, "replace_if_match"), Verdict::Pass);
    let overwrite = report
        .probes
        .iter()
        .find(|p| p.id == "create_conflict")
        .unwrap();
    assert!(
        overwrite.detail.contains("silent overwrite"),
        "{}",
        overwrite.detail
    );
    assert!(!overwrite.explanation.is_empty());
}

#[derive(Debug)]
struct AheadClock(Duration);

impl ServerClock for AheadClock {
    fn last_server_date(&self) -> Option<SystemTime> {
        // Date headers have whole seconds.
        let t = SystemTime::now() + self.0;
        let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    }
}

#[tokio::test]
async fn clock_skew_uses_the_server_clock_hook() {
    let suite = || Suite::standard().only(&["clock_skew".into()]).unwrap();
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    for (ahead, expected) in [(0, Verdict::Pass), (30, Verdict::Note)] {
        let target = Target::new(store.clone(), "memory://clock")
            .with_clock(Arc::new(AheadClock(Duration::from_secs(ahead))));
        let report = suite()
            .run(&target, &settings(), Arc::new(NoProgress))
            .await
            .unwrap();
        let probe = &report.probes[0];
        assert_eq!(probe.verdict, expected, "{}", report.to_table());
        let skew = probe
            .evidence
            .get("median_skew_s")
            .unwrap()
            .as_f64()
            .unwrap();
        assert!((skew - ahead as f64).abs() <= 1.0, "{skew}");
        // An info probe never changes the verdict.
        assert!(report.safe_for_leases);
    }
}

#[test]
fn only_rejects_unknown_probes_and_keeps_order() {
    let err = Suite::standard().only(&["nope".into()]).unwrap_err();
    assert!(err.to_string().contains("unknown probe 'nope'"), "{err}");
    assert!(err.to_string().contains("race_create"), "{err}");
    let suite = Suite::standard()
        .only(&["race_create".into(), "create_if_absent".into()])
        .unwrap();
    assert_eq!(suite.ids(), vec!["create_if_absent", "race_create"]);
}

#[tokio::test]
async fn json_report_has_the_documented_fields() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let suite = Suite::standard()
        .only(&["create_conflict".into(), "s3_etag_forms".into()])
        .unwrap();
    let report = run(store, suite).await;
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["schema_version"], 2);
    assert_eq!(json["safe_for_leases"], true);
    assert!(json["recommended_options"].is_array());
    assert!(json["backend"]["description"].is_string());
    assert!(json["backend"]["capabilities"]["create_if_absent"].is_boolean());
    let probes = json["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 2);
    for field in [
        "id",
        "title",
        "severity",
        "verdict",
        "evidence",
        "explanation",
        "detail",
    ] {
        assert!(!probes[0][field].is_null(), "missing {field}");
    }
    assert_eq!(probes[0]["severity"], "critical");
    assert_eq!(probes[1]["verdict"], "unsupported");
    assert!(probes[0]["evidence"]["second_create"]["kind"] == "precondition_failed");
    // The markdown rendering carries the verdict and a table row per probe.
    let md = report.to_markdown();
    assert!(md.contains("**SAFE FOR LEASES**"), "{md}");
    assert!(md.contains("| `create_conflict`"), "{md}");
}
