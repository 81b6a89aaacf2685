//! `casaas` against real servers started by `cargo xtask servers up moto
//! fake-gcs`: a lock's life on S3, secrets kept out of every output, and a
//! TTL too short for GCS's write rate refused before anything is written.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use casaas_core::testkit::{TestServer, test_server, unique_prefix};
use common::*;
use nix::sys::signal::Signal;

/// A secret no output may contain (moto does not check signatures).
const SECRET: &str = "casaas-test-SECRET-wJalrXUtnFEMI";
const SESSION_TOKEN: &str = "casaas-test-SESSION-FQoGZXIvYXdzEJr";

fn lock_url(server: &TestServer, name: &str) -> String {
    let mut url = url::Url::parse(&server.url).unwrap();
    url.set_path(&format!("/{}/{name}", unique_prefix("cli")));
    url.to_string()
}

fn with_env(server: &TestServer, mut cmd: Command) -> Command {
    for (name, value) in &server.env {
        cmd.env(name, value);
    }
    cmd
}

fn moto() -> (TestServer, impl Fn(&[&str]) -> std::process::Output) {
    let server = test_server("moto");
    let env_server = server.clone();
    let run = move |args: &[&str]| {
        let mut cmd = with_env(&env_server, casaas());
        cmd.env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_SESSION_TOKEN", SESSION_TOKEN)
            .args(args)
            .output()
            .unwrap()
    };
    (server, run)
}

#[test]
fn a_lock_on_s3_runs_releases_and_keeps_its_token() {
    let (server, run) = moto();
    let url = lock_url(&server, "nightly");
    let script = "echo $CASAAS_FENCING_TOKEN; exit 7";
    for token in ["1", "2"] {
        let out = run(&["lock", "--ttl", "2s", &url, "--", "sh", "-c", script]);
        assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), token);
    }
    let out = run(&["status", "--json", &url]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["state"].as_str(), report["token"].as_u64()),
        (Some("released"), Some(2))
    );

    // Held elsewhere: -n answers at once with the conflict code.
    let mut holder = with_env(&server, casaas());
    let mut holder = holder
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .args(["lock", "--ttl", "2s", &url, "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), "the S3 lock to be held", || {
        run(&["status", &url]).status.code() == Some(0)
    });
    let start = Instant::now();
    let out = run(&["lock", "-n", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    signal(holder.id(), Signal::SIGTERM);
    let status = wait_with_limit(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(143));
    assert_eq!(run(&["status", &url]).status.code(), Some(3));
}

#[test]
fn secrets_never_appear_in_any_output() {
    let (server, run) = moto();
    let url = lock_url(&server, "secret");
    let mut outputs = Vec::new();
    // Everything logged, at the most verbose level, on a real request path.
    let mut cmd = with_env(&server, casaas());
    let out = cmd
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_SESSION_TOKEN", SESSION_TOKEN)
        .env("RUST_LOG", "trace")
        .args([
            "lock",
            "--ttl",
            "2s",
            &url,
            "--",
            "sh",
            "-c",
            "echo $CASAAS_LOCK_URL",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    outputs.push(out);
    outputs.push(run(&["-vv", "status", "--json", &url]));
    outputs.push(run(&["--log-format", "json", "-vv", "status", &url]));
    // Credentials in the URL: refused, and not echoed.
    let in_url = url.replacen("s3://", "s3://AKIDINURL:url-pa55word-0451@", 1);
    let out = run(&["lock", &in_url, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    outputs.push(out);
    outputs.push(run(&["status", "--json", &in_url]));
    outputs.push(run(&["lock", "--bogus", &in_url, "--", "true"]));
    let broken = "s3://AKIDINURL:url-pa55word-0451@bucket:notaport/locks/x";
    outputs.push(run(&["status", broken]));
    for out in &outputs {
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        for secret in [SECRET, SESSION_TOKEN, "url-pa55word-0451", "AKIDINURL"] {
            assert!(!all.contains(secret), "{secret} leaked:\n{all}");
        }
    }
}

#[test]
fn a_ttl_below_the_stores_write_interval_is_refused_and_nothing_written() {
    let server = test_server("fake-gcs");
    let url = lock_url(&server, "fast");
    let run = |args: &[&str]| with_env(&server, casaas()).args(args).output().unwrap();
    let out = run(&["lock", "--ttl", "2s", &url, "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--ttl 2s is too short"), "{stderr}");
    assert_eq!(
        run(&["status", &url]).status.code(),
        Some(3),
        "something was written"
    );
    // A TTL the store can sustain works.
    let out = run(&[
        "lock",
        "--ttl",
        "6s",
        &url,
        "--",
        "sh",
        "-c",
        "echo $CASAAS_FENCING_TOKEN",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "1");
}
