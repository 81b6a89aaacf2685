#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The binary's exit statuses and output formats.

use std::process::{Command, Output};

fn conformance(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_casaas-conformance"))
        .args(args)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn file_backend_quick_is_safe_and_exits_zero() {
    let out = conformance(&["--quick", "--rounds", "3"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("SAFE FOR LEASES"), "{stdout}");
    assert!(stdout.contains("race_create"), "{stdout}");
    assert!(stdout.contains("file://"), "{stdout}");
}

#[test]
fn json_output_parses_with_the_schema_fields() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/store?create_dirs=true", dir.path().display());
    let out = conformance(&[
        &url,
        "--format",
        "json",
        "--only",
        "create_conflict,race_create",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["safe_for_leases"], true);
    assert_eq!(json["verdict"], "safe");
    assert_eq!(json["schema_version"], 2);
    assert!(json["recommended_options"].as_array().unwrap().is_empty());
    assert_eq!(json["backend"]["scheme"], "file");
    let probes = json["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 2);
    for p in probes {
        for field in [
            "id",
            "title",
            "severity",
            "verdict",
            "evidence",
            "explanation",
        ] {
            assert!(!p[field].is_null(), "{field} in {p}");
        }
    }
    assert!(text(&out.stderr).contains("SAFE FOR LEASES"));
    // Cleanup left no object files behind in the directory.
    let objects = walk(dir.path());
    assert!(objects.iter().all(|p| !p.ends_with("~obj")), "{objects:?}");
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn markdown_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.md");
    let out = conformance(&[
        "memory://bin-test/p",
        "--format",
        "markdown",
        "--output",
        file.to_str().unwrap(),
        "--only",
        "replace_stale",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(&file).unwrap();
    assert!(md.contains("| `replace_stale`"), "{md}");
    // People still get the table.
    assert!(text(&out.stdout).contains("SAFE FOR LEASES"));
}

#[test]
fn malformed_url_exits_78_with_a_helpful_message() {
    let out = conformance(&["not a url"]);
    assert_eq!(out.status.code(), Some(78));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("not a valid store URL"), "{stderr}");
    assert!(stderr.contains("s3://bucket/prefix"), "{stderr}");
}

#[test]
fn unknown_scheme_exits_78_and_lists_the_known_ones() {
    let out = conformance(&["ftp://host/dir"]);
    assert_eq!(out.status.code(), Some(78));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no backend for scheme 'ftp'"), "{stderr}");
    assert!(stderr.contains("file"), "{stderr}");
}

#[test]
fn unknown_probe_and_bad_flags_exit_two() {
    let out = conformance(&["--only", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown probe 'nope'"));
    let out = conformance(&["--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = conformance(&["--output", "/nonexistent-dir/report.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot write the report"));
    let out = conformance(&["--concurrency", "1", "--only", "race_create"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("concurrency"));
}

#[test]
fn list_probes() {
    let out = conformance(&["--list-probes"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    for id in [
        "create_conflict",
        "race_replace",
        "lease_protocol",
        "throttle",
    ] {
        assert!(stdout.lines().any(|l| l == id), "{stdout}");
    }
}

/// Secrets given through every input: URL user part, query parameters and
/// credential environment variables.
const SECRETS: [&str; 5] = [
    "UrlPassw0rdSecret",
    "QuerySig0123Secret",
    "AKIAENVSECRET00001",
    "EnvSecretAccessKey0000000000001",
    "EnvSessionTokenSecret0000001",
];

fn with_secret_env(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_casaas-conformance"))
        .args(args)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", SECRETS[2])
        .env("AWS_SECRET_ACCESS_KEY", SECRETS[3])
        .env("AWS_SESSION_TOKEN", SECRETS[4])
        .env("RUST_LOG", "trace")
        .output()
        .unwrap()
}

fn assert_no_secret(out: &Output, what: &str) {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    for secret in SECRETS {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{what}: {secret} was echoed\nstdout: {stdout}\nstderr: {stderr}"
        );
    }
}

#[test]
fn no_secret_appears_in_any_output_even_at_trace_level() {
    // An unreachable endpoint with a password in it: a connection error
    // that names the endpoint.
    let url = format!(
        "s3://bucket/p?endpoint=http://user:{}@127.0.0.1:1&region=us-east-1&path_style=true",
        SECRETS[0]
    );
    let out = with_secret_env(&[&url, "--quick", "--only", "create_if_absent"]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("[redacted]"),
        "{}",
        text(&out.stderr)
    );
    assert_no_secret(&out, "userinfo");

    // A credential-looking query parameter (an unknown option, echoed in
    // the error).
    let url = format!(
        "s3://bucket/p?endpoint=http://127.0.0.1:1&region=us-east-1&sig={}",
        SECRETS[1]
    );
    let out = with_secret_env(&[&url, "--quick"]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));
    assert_no_secret(&out, "query");

    // A full run, in every format, with the secrets in the environment.
    for format in ["table", "json", "markdown"] {
        let out = with_secret_env(&[
            "--quick",
            "--format",
            format,
            "--only",
            "create_conflict,replace_stale",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // The logs were on: the probes' own debug lines are there.
        assert!(
            text(&out.stderr).contains("probe finished"),
            "{}",
            text(&out.stderr)
        );
        assert_no_secret(&out, format);
    }
}

#[test]
fn exit_status_three_is_documented_for_inconclusive_runs() {
    let out = conformance(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    // The help is wrapped to the terminal's width: compare words, not lines.
    let words = text(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(words.contains("3 inconclusive"), "{}", text(&out.stdout));
}

#[test]
fn no_bucket_hint_for_errors_that_are_not_about_a_bucket() {
    let out = conformance(&["s3://bucket/p?endpoint=http://127.0.0.1:1&no_such_option=1"]);
    assert_eq!(out.status.code(), Some(78));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("--create-bucket"), "{stderr}");
}

#[test]
fn min_write_interval_is_validated() {
    let out = conformance(&["--min-write-interval", "fast"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a duration"),
        "{}",
        text(&out.stderr)
    );
    let out = conformance(&[
        "--quick",
        "--min-write-interval",
        "20ms",
        "--only",
        "replace_if_match",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verdict"], "safe");
    assert_eq!(json["pacing"]["min_write_interval_ms"], 20);
    assert_eq!(json["pacing"]["interval_source"], "option");
}

/// `NAME+URL` adapter URLs are opened by the adapter, not parsed as store
/// URLs (`object_store` is no valid URL scheme): the binary probes the stack
/// a table format runs on.
#[test]
fn adapter_urls_are_probed_through_their_adapter() {
    for (url, scheme) in [
        ("object_store+memory:///conformance", "object_store+memory"),
        ("opendal+memory:///conformance", "opendal+memory"),
    ] {
        let out = conformance(&[
            url,
            "--quick",
            "--rounds",
            "3",
            "--format",
            "json",
            "--only",
            "create_if_absent,create_conflict",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{url}: {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["backend"]["scheme"], scheme, "{url}");
        assert_eq!(json["verdict"], "safe", "{url}: {json:#}");
    }
}

/// Several URLs: each store probed, one comparison table; the exit status
/// is the worst store's (a store that cannot be opened counts as 2).
#[test]
fn several_stores_make_one_comparison_table() {
    let dir = tempfile::tempdir().unwrap();
    // A file store's directory is created only when asked (a typo must
    // not silently become another lock).
    let file = format!("file://{}/store?create_dirs=true", dir.path().display());
    let only = ["--only", "create_conflict,race_create", "--rounds", "3"];
    let mut args = vec![
        "memory://compare-a/p",
        file.as_str(),
        "--format",
        "markdown",
    ];
    args.extend(only);
    let out = conformance(&args);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.starts_with("## Conformance comparison"), "{stdout}");
    assert!(stdout.contains("| store 1 | store 2 |"), "{stdout}");
    assert!(
        stdout.contains("| `race_create` | critical | pass | pass |"),
        "{stdout}"
    );
    assert!(stdout.contains("- store 2: `file://"), "{stdout}");

    let mut args = vec!["memory://compare-b/p", "nosuchscheme://x/p"];
    args.extend(only);
    let out = conformance(&args);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(78), "{stdout}");
    assert!(stdout.contains("NOT RUN"), "{stdout}");
    assert!(stdout.contains("store 2: nosuchscheme://x/p"), "{stdout}");
}

#[test]
fn a_gateway_needs_exactly_one_store_url() {
    let out = conformance(&["--gateway", "memory://g/p", "--quick"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--gateway"),
        "{}",
        text(&out.stderr)
    );
    let out = conformance(&["memory://a/p", "memory://b/p", "--gateway", "memory://g/p"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--gateway"),
        "{}",
        text(&out.stderr)
    );
}
