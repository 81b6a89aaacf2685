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
    let url = format!("file://{}/store", dir.path().display());
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
fn malformed_url_exits_two_with_a_helpful_message() {
    let out = conformance(&["not a url"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("not a valid store URL"), "{stderr}");
    assert!(stderr.contains("s3://bucket/prefix"), "{stderr}");
}

#[test]
fn unknown_scheme_exits_two_and_lists_the_known_ones() {
    let out = conformance(&["ftp://host/dir"]);
    assert_eq!(out.status.code(), Some(2));
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
