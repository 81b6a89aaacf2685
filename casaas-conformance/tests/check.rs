//! `casaas_conformance::check`: the doctor and the suite as library calls.

use std::time::Duration;

use casaas_conformance::check::{self, CheckedStore};
use casaas_conformance::{ConformanceError, RunVerdict, Settings};

fn file_store(dir: &tempfile::TempDir) -> CheckedStore {
    CheckedStore::new(format!("file://{}", dir.path().display()), Vec::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_on_a_file_store_is_safe_and_prints_the_commands_json() {
    let dir = tempfile::tempdir().unwrap();
    let report = check::doctor(&file_store(&dir), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(report.verdict, RunVerdict::Safe, "{}", report.summary);
    assert_eq!(report.exit_code(), 0);
    assert!(report.guard.as_ref().is_some_and(|g| g.passed()));
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["exit_code"], 0);
    assert_eq!(json["guard"]["passed"], true);
    assert_eq!(json["report"]["verdict"], "safe");
    let probes: Vec<&str> = json["report"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert!(probes.contains(&"lease_protocol"), "{probes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_creates_no_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let store = CheckedStore::new(
        format!("file://{}?create_dirs=true", missing.display()),
        Vec::new(),
    );
    let err = check::doctor(&store, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, ConformanceError::Setup { .. }), "{err}");
    assert!(!missing.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_runs_the_probes_named() {
    let dir = tempfile::tempdir().unwrap();
    let only = vec!["create_conflict".to_string(), "replace_stale".to_string()];
    let report = check::conformance(&file_store(&dir), &Settings::quick(), &only)
        .await
        .unwrap();
    assert_eq!(report.verdict, RunVerdict::Safe, "{}", report.to_table());
    let ids: Vec<&str> = report.probes.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["create_conflict", "replace_stale"]);
}

#[tokio::test]
async fn an_unknown_probe_is_refused_before_the_store_is_opened() {
    let store = CheckedStore::new("nosuchscheme://nowhere", Vec::new());
    let err = check::conformance(&store, &Settings::quick(), &["create_conflit".into()])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConformanceError::UnknownProbe { .. }),
        "{err}"
    );
}

#[test]
fn debug_names_options_without_their_values() {
    let store = CheckedStore::new(
        "s3://bucket/prefix",
        vec![(
            "aws_secret_access_key".into(),
            "very-secret-value-123".into(),
        )],
    );
    let shown = format!("{store:?}");
    assert!(shown.contains("aws_secret_access_key"), "{shown}");
    assert!(!shown.contains("very-secret-value-123"), "{shown}");
}
