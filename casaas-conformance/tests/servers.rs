#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The binary against the real servers xtask starts (`cargo xtask servers
//! up`): known verdicts stay known. A store that breaks the contract is a
//! finding recorded here and in docs/vendors.md, not a test to skip.

use std::process::Command;

use casaas_core::testkit::test_server;
use serde_json::Value;

/// Quick run of a subset of probes against server `name`: exit status and
/// the JSON report.
fn probe(name: &str, only: &str) -> (i32, Value) {
    probe_url(name, only, |url| url.to_string())
}

/// As [`probe`], with the server's URL changed by `edit`.
fn probe_url(name: &str, only: &str, edit: impl Fn(&str) -> String) -> (i32, Value) {
    let server = test_server(name);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_casaas-conformance"));
    command
        .arg(edit(&server.url))
        .args([
            "--quick",
            "--rounds",
            "3",
            "--concurrency",
            "6",
            "--format",
            "json",
        ])
        .args(["--only", only, "--output"])
        .arg(&json)
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in &server.env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    let code = out.status.code().unwrap();
    assert_ne!(code, 2, "{name}: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (code, report)
}

fn verdict<'a>(report: &'a Value, id: &str) -> &'a str {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .and_then(|p| p["verdict"].as_str())
        .unwrap_or_else(|| panic!("no probe {id}"))
}

const CORE: &str =
    "create_conflict,replace_stale,missing_key,race_create,race_replace,lease_protocol";

#[test]
fn moto_is_safe() {
    let (code, report) = probe("moto", &format!("{CORE},s3_etag_forms,clock_skew"));
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["verdict"], "safe");
    assert_eq!(report["summary"], "SAFE FOR LEASES");
    assert_eq!(verdict(&report, "s3_etag_forms"), "pass");
    // The S3 backend exposes the Date header.
    assert_eq!(verdict(&report, "clock_skew"), "pass");
}

#[test]
fn ceph_is_safe_with_its_options() {
    let (code, report) = probe("ceph", &format!("{CORE},s3_etag_forms"));
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["safe_for_leases"], true);
    // The URL xtask writes carries etag_unquoted=true, which Ceph 16 needs.
    assert_eq!(verdict(&report, "s3_etag_forms"), "pass");
}

#[test]
fn ceph_without_its_option_is_safe_once_the_option_is_proven() {
    // Without etag_unquoted=true Ceph 16 refuses every renew; the binary
    // finds the option, runs what it affects again with it, and only then
    // recommends it.
    let (code, report) = probe_url(
        "ceph",
        &format!("{CORE},replace_if_match,s3_etag_forms"),
        |url| url.replace("&etag_unquoted=true", ""),
    );
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["verdict"], "safe");
    let summary = report["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("SAFE WITH OPTIONS: etag_unquoted=true (proven"),
        "{summary}"
    );
    assert_eq!(report["options_applied"][0], "etag_unquoted=true");
}

#[test]
fn s3rver_ignores_conditions_and_is_not_safe() {
    let (code, report) = probe("s3rver", CORE);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["safe_for_leases"], false);
    for id in ["create_conflict", "replace_stale", "race_create"] {
        assert_eq!(verdict(&report, id), "fail", "{id}");
    }
}

#[test]
fn azurite_is_safe() {
    let (code, report) = probe("azurite", CORE);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["verdict"], "safe");
    assert_eq!(report["summary"], "SAFE FOR LEASES");
}

#[test]
fn fake_gcs_is_safe() {
    let (code, report) = probe("fake-gcs", CORE);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["verdict"], "safe");
    assert_eq!(report["summary"], "SAFE FOR LEASES");
}

#[test]
fn gcs_liar_is_not_safe() {
    // gcp-storage-emulator sends no generation headers, so casaas cannot
    // make its writes conditional: every critical probe is unsupported.
    let (code, report) = probe("gcs-liar", CORE);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(verdict(&report, "create_conflict"), "unsupported");
}
