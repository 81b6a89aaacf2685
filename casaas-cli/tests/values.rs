//! `casaas elect --value`: the value published with each term, shown by
//! `--observe` and `casaas status`, and refused over its bound. Embedded
//! file backend.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

fn lock_url(dir: &Path, name: &str) -> String {
    std::fs::create_dir_all(dir.join("locks")).unwrap();
    format!("file://{}/locks/{name}", dir.display())
}

#[test]
fn a_leaders_value_is_shown_by_observe_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "db");
    let out = run(&[
        "elect",
        &url,
        "--id",
        "node-a",
        "--value",
        "10.0.0.7:5432",
        "--observe",
        "--ttl",
        "1s",
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(r#"{"leader":{"id":"node-a","token":1,"value":"10.0.0.7:5432"}}"#),
        "{stdout}"
    );

    let mut leader = spawn(&[
        "elect",
        &url,
        "--id",
        "node-b",
        "--value",
        "10.0.0.8:5432",
        "--",
        "sleep",
        "30",
    ]);
    wait_held(&url);
    let out = run(&["status", "--json", &url]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["value"], "10.0.0.8:5432", "{report}");
    assert_eq!(report["holder"], "node-b");
    let out = run(&["status", &url]);
    assert!(
        text(&out.stdout).contains("value      \"10.0.0.8:5432\"\n"),
        "{}",
        text(&out.stdout)
    );
    signal(leader.id(), Signal::SIGTERM);
    wait_with_limit(&mut leader, Duration::from_secs(5));

    // A lock that publishes nothing shows no value line.
    let out = run(&["lock", &url, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["status", "--json", &url]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.get("value").is_none(), "{report}");
}

#[test]
fn a_value_over_the_bound_is_a_usage_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "big");
    let big = "x".repeat(4097);
    let out = run(&["elect", &url, "--id", "a", "--value", &big, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--value") && stderr.contains("4097 bytes"),
        "{stderr}"
    );
    assert!(!dir.path().join("locks/big").exists());
}
