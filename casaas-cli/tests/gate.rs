//! `casaas doctor URL || exit 1` is a deploy gate: it must never succeed
//! without having judged the store. Against a store that ignores
//! conditional writes (s3rver: `cargo xtask servers up s3rver`), every
//! spelling of every global option a person types, before or after the
//! subcommand, reaches the real check, and the gate fails; `conformance`
//! likewise. One parse reads them all: nothing falls to a stub.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use casaas_core::testkit::{TestServer, test_server, unique_prefix};
use common::*;

fn store_url(server: &TestServer) -> String {
    let mut url = url::Url::parse(&server.url).unwrap();
    url.set_path(&format!("/{}", unique_prefix("gate")));
    url.to_string()
}

fn run_against(server: &TestServer, args: &[&str]) -> std::process::Output {
    let mut cmd = casaas();
    for (name, value) in &server.env {
        cmd.env(name, value);
    }
    cmd.env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("CASAAS_LOG_FORMAT")
        .args(args)
        .output()
        .unwrap()
}

/// The global options as people write them: short, long, repeated,
/// `=value` and separate value, before the subcommand and after it.
fn spellings() -> Vec<(Vec<&'static str>, Vec<&'static str>)> {
    vec![
        (vec![], vec![]),
        (vec!["-v"], vec![]),
        (vec!["-vv"], vec![]),
        (vec!["-vvv"], vec![]),
        (vec!["-v", "-v"], vec![]),
        (vec!["--verbose"], vec![]),
        (vec!["--verbose", "--verbose"], vec![]),
        (vec!["--log-format=json"], vec![]),
        (vec!["--log-format", "json"], vec![]),
        (vec!["--log-format=text"], vec![]),
        (vec!["--log-format", "text", "-v"], vec![]),
        (vec!["-v", "--log-format=json"], vec![]),
        (vec![], vec!["-v"]),
        (vec![], vec!["--verbose"]),
        (vec![], vec!["--log-format=json"]),
        (vec![], vec!["--log-format", "json"]),
        (vec!["-v"], vec!["--log-format", "json"]),
    ]
}

#[test]
fn every_spelling_of_the_global_options_runs_the_doctor() {
    let server = test_server("s3rver");
    let url = store_url(&server);
    for (before, after) in spellings() {
        let mut args: Vec<&str> = before.clone();
        args.extend(["doctor", url.as_str()]);
        args.extend(&after);
        let out = run_against(&server, &args);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "casaas {args:?} did not fail the gate: {stdout} {}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains("NOT SAFE: the store guard failed"),
            "casaas {args:?} did not run the check: {stdout}"
        );
    }
}

#[test]
fn every_spelling_of_the_global_options_runs_conformance() {
    let server = test_server("s3rver");
    let url = store_url(&server);
    for (before, after) in spellings() {
        let mut args: Vec<&str> = before.clone();
        args.extend([
            "conformance",
            url.as_str(),
            "--quick",
            "--only",
            "create_conflict",
        ]);
        args.extend(&after);
        let out = run_against(&server, &args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "casaas {args:?} did not fail: {} {}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("create_conflict"),
            "casaas {args:?} did not run the probe: {}",
            text(&out.stdout)
        );
    }
}

/// A lock on the same store runs nothing and exits 1, the code of an
/// unsafe store for every command.
#[test]
fn a_lock_on_an_unsafe_store_exits_not_safe() {
    let server = test_server("s3rver");
    let url = format!("{}/job", store_url(&server).trim_end_matches('/'));
    let dir = tempfile::tempdir().unwrap();
    let touch = format!("touch {}/ran", dir.path().display());
    let out = run_against(&server, &["lock", "-n", &url, "--", "sh", "-c", &touch]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!dir.path().join("ran").exists());
}

/// No spelling reaches a subcommand that exits 0 without a store: a
/// doctor without a URL, or with an option it does not know, is a usage
/// error; `--help` and `--version` answer as every command's do.
#[test]
fn the_doctor_without_a_store_is_a_usage_error_and_never_success() {
    for args in [
        &["doctor"][..],
        &["-v", "doctor"],
        &["--log-format=json", "doctor"],
        &["doctor", "--format", "json"],
        &[
            "doctor",
            "file:///nonexistent-dir-for-casaas",
            "--no-such-flag",
        ],
        &["conformance", "--no-such-flag"],
        &["doctor", "--log-format", "yaml", "file:///x"],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    for args in [&["doctor", "--version"][..], &["conformance", "--version"]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(
            text(&out.stdout).trim(),
            format!("casaas {}", env!("CARGO_PKG_VERSION"))
        );
    }
    for args in [&["doctor", "--help"][..], &["-v", "conformance", "--help"]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(text(&out.stdout).contains("Exit status"), "{args:?}");
    }
}
