#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The torture run with credentials set and `RUST_LOG=trace`: no credential
//! appears in anything it or its workers print, while the run really ran
//! (moto accepts any key, so the secret here is one no log could contain by
//! chance).

use std::process::Command;

use casaas_core::testkit::{server_env, test_server};

const KEY_ID: &str = "AKIACHAOSLEAKCHECK01";
const SECRET: &str = "chaos-secret-never-printed-7f3a9c1e";

/// Runs a short chaos run against `url` with the credentials `vars` (the
/// env file's lines) at `RUST_LOG=trace`; returns every output stream and
/// worker file by name, after checking that the run ran and logged.
fn trace_level_chaos_run(url: &str, vars: &[(String, String)]) -> Vec<(String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("env");
    std::fs::write(&env_file, server_env::render(url, vars)).unwrap();
    let work = dir.path().join("work");
    let output = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args(["run", "--url", url])
        .arg("--env-file")
        .arg(&env_file)
        .args(["--seconds", "8", "--workers", "2", "--seed", "3"])
        .arg("--work-dir")
        .arg(&work)
        .env("RUST_LOG", "trace")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains("acquisitions="),
        "the run ran\nstdout: {stdout}\nstderr tail: {}",
        stderr.chars().rev().take(2000).collect::<String>()
    );
    assert!(
        stderr.len() > 1000,
        "trace logging was on: {} bytes",
        stderr.len()
    );
    let mut outputs = vec![
        ("stdout".to_string(), stdout.to_string()),
        ("stderr".to_string(), stderr.to_string()),
    ];
    for entry in std::fs::read_dir(&work).unwrap() {
        let path = entry.unwrap().path();
        outputs.push((
            path.display().to_string(),
            std::fs::read_to_string(&path).unwrap_or_default(),
        ));
    }
    outputs
}

#[test]
fn a_chaos_run_at_trace_level_prints_no_credential() {
    let server = test_server("moto");
    let vars = [
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "us-east-1"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    for (name, text) in &trace_level_chaos_run(&server.url, &vars) {
        assert!(!text.contains(SECRET), "the secret key appears in {name}");
    }
}

/// Azure's SDK prints each signed request at debug and trace, with its
/// `Authorization: SharedKey ACCOUNT:SIGNATURE` header: the chaos binary
/// caps it as the shipped binaries do. Azurite accepts only its own
/// (public) account key, so the check is for the key and for any signature.
#[test]
fn a_chaos_run_on_azure_at_trace_level_prints_no_key_or_signature() {
    let server = test_server("azurite");
    let vars: Vec<(String, String)> = server
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let key = server.var("AZURE_STORAGE_KEY");
    for (name, text) in &trace_level_chaos_run(&server.url, &vars) {
        assert!(!text.contains(key), "the account key appears in {name}");
        assert!(
            !text.contains("SharedKey "),
            "a signed Authorization header appears in {name}"
        );
    }
}
