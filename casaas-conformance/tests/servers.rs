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
    probe_endpoints(name, only, edit, false)
}

/// As [`probe_url`]; with `gateways`, the server's other gateways (its
/// env file's `CASAAS_TEST_GATEWAY_URLS`) are given with `--gateway`.
fn probe_endpoints(
    name: &str,
    only: &str,
    edit: impl Fn(&str) -> String,
    gateways: bool,
) -> (i32, Value) {
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
    if gateways {
        for url in server.var("CASAAS_TEST_GATEWAY_URLS").split_whitespace() {
            command.arg("--gateway").arg(url);
        }
    }
    for (k, v) in &server.env {
        command.env(k, v);
    }
    let mut out = command.output().unwrap();
    if emulator_did_not_answer_the_open(&out) {
        out = command.output().unwrap();
    }
    let code = out.status.code().unwrap();
    assert_ne!(code, 2, "{name}: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (code, report)
}

/// The run could not open the store because the emulator did not answer
/// its first request in time (a single-process emulator that other tests
/// of this file keep busy). Such a run says nothing about the store or the
/// binary and is made once more; any other failure stands.
fn emulator_did_not_answer_the_open(out: &std::process::Output) -> bool {
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.status.code() == Some(2)
        && stderr.contains("cannot open")
        && stderr.contains("timed out after the request was sent")
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

/// Every critical probe but the races and the lease protocol (whose
/// acquirers race): moto's conditional writes are not atomic, so a race
/// there may have two winners whatever the client does
/// (casaas-testkit/tests/server_races.rs).
#[test]
fn moto_passes_all_but_the_races() {
    let (code, report) = probe(
        "moto",
        "create_if_absent,create_conflict,replace_if_match,replace_stale,missing_key,\
         s3_etag_forms,clock_skew",
    );
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["verdict"], "safe");
    assert_eq!(report["summary"], "SAFE FOR LEASES");
    assert_eq!(verdict(&report, "s3_etag_forms"), "pass");
    // The S3 backend exposes the Date header.
    assert_eq!(verdict(&report, "clock_skew"), "pass");
}

/// SeaweedFS behind a proxy that answers 501 to every If-Match: safe in
/// the create-only layout, judged by the lease probe run on that layout.
#[test]
fn a_create_only_store_is_safe_in_the_create_only_layout() {
    let (code, report) = probe(
        "createonly",
        &format!("create_if_absent,replace_if_match,{CORE}"),
    );
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["verdict"], "safe");
    assert_eq!(report["summary"], "SAFE FOR LEASES (create-only layout)");
    assert_eq!(report["layout"], "epochs");
    assert_eq!(verdict(&report, "lease_protocol"), "pass");
    assert_eq!(verdict(&report, "race_create"), "pass");
    assert_eq!(verdict(&report, "replace_if_match"), "note");
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

/// SeaweedFS through both of its S3 gateways: every critical probe passes,
/// races included with writers spread over the gateways, and so do the
/// multipart, copy and versioning probes.
#[test]
fn seaweedfs_is_safe_across_its_two_gateways() {
    let (code, report) = probe_endpoints(
        "seaweedfs",
        &format!(
            "{CORE},race_across_endpoints,s3_etag_forms,s3_multipart_if_none_match,\
             s3_multipart_if_match,s3_copy_conditional,s3_versioning_states"
        ),
        |url| url.to_string(),
        true,
    );
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["summary"], "SAFE FOR LEASES");
    let across = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "race_across_endpoints")
        .unwrap();
    assert_eq!(across["severity"], "critical");
    assert_eq!(across["verdict"], "pass");
    let winners = across["evidence"]["winners_by_endpoint"]
        .as_object()
        .unwrap();
    assert_eq!(winners.len(), 2, "{across:#}");
    for id in [
        "s3_multipart_if_none_match",
        "s3_multipart_if_match",
        "s3_copy_conditional",
        "s3_versioning_states",
    ] {
        assert_eq!(verdict(&report, id), "pass", "{id}");
    }
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

/// The multipart and copy probes fail on a store that ignores conditions:
/// proof that they can.
#[test]
fn s3rver_fails_the_multipart_and_copy_probes() {
    let (_, report) = probe(
        "s3rver",
        "s3_multipart_if_none_match,s3_multipart_if_match,s3_copy_conditional",
    );
    for id in [
        "s3_multipart_if_none_match",
        "s3_multipart_if_match",
        "s3_copy_conditional",
    ] {
        assert_eq!(verdict(&report, id), "fail", "{id}");
    }
}

/// s3rver takes `PUT /bucket?versioning` for a second CreateBucket (409
/// BucketAlreadyExists): the versioning probe says it could not run, and
/// why, instead of passing on a bucket that never had versioning.
#[test]
fn s3rver_cannot_run_the_versioning_states() {
    let (_, report) = probe("s3rver", "s3_versioning_states");
    let probe = find(&report, "s3_versioning_states");
    assert_eq!(probe["verdict"], "unsupported", "{probe:#}");
    let detail = probe["detail"].as_str().unwrap();
    assert!(
        detail.contains("Enabled not run (PutBucketVersioning answered 409"),
        "{detail}"
    );
    assert!(detail.contains("Suspended not run"), "{detail}");
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

/// Azurite honours both conditions of Put Block List: a losing commit is
/// refused (409 `BlobAlreadyExists` to `If-None-Match: *`, 412
/// `ConditionNotMet` to a stale `If-Match`) and leaves the blob as it was.
#[test]
fn azurite_honours_block_list_conditions() {
    let (code, report) = probe("azurite", "azure_block_list_conditional");
    assert_eq!(code, 0, "{report:#}");
    let probe = find(&report, "azure_block_list_conditional");
    assert_eq!(probe["verdict"], "pass", "{probe:#}");
    let checks = &probe["evidence"]["checks"];
    assert_eq!(
        checks["absent_onto_existing"]["refused"]["answer"], "409 BlobAlreadyExists",
        "{probe:#}"
    );
    assert_eq!(
        checks["stale_version"]["refused"]["answer"], "412 ConditionNotMet",
        "{probe:#}"
    );
    for check in ["absent_onto_existing", "stale_version"] {
        assert_eq!(checks[check]["object_kept"], true, "{check}: {probe:#}");
    }
    for check in ["absent_to_fresh_key", "current_version"] {
        assert_eq!(checks[check]["holds_parts"], true, "{check}: {probe:#}");
    }
}

/// fake-gcs-server composes whatever `ifGenerationMatch` says: the probe
/// fails (a warning: the run stays safe, casaas never composes).
#[test]
fn fake_gcs_ignores_compose_preconditions() {
    let (code, report) = probe("fake-gcs", "gcs_compose_preconditions");
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["safe_for_leases"], true, "{report:#}");
    let probe = find(&report, "gcs_compose_preconditions");
    assert_eq!(probe["verdict"], "fail", "{probe:#}");
    let checks = &probe["evidence"]["checks"];
    for check in ["absent_onto_existing", "stale_version"] {
        assert_eq!(checks[check]["accepted"], true, "{check}: {probe:#}");
        assert_eq!(checks[check]["object_kept"], false, "{check}: {probe:#}");
    }
    for check in ["absent_to_fresh_key", "current_version"] {
        assert_eq!(checks[check]["holds_parts"], true, "{check}: {probe:#}");
    }
}

fn find<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no probe {id}"))
}

#[test]
fn gcs_liar_is_not_safe() {
    // gcp-storage-emulator sends no generation headers, so casaas cannot
    // make its writes conditional: every critical probe is unsupported.
    let (code, report) = probe("gcs-liar", CORE);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(verdict(&report, "create_conflict"), "unsupported");
}

/// Credentials no output may contain: a distinctive AWS key pair and session
/// token for moto (which accepts any), and Azurite's account key (which it
/// checks, so the run proves the key was used).
const MOTO_SECRETS: [&str; 2] = [
    "conformance-trace-secret-never-printed-5b1e",
    "conformance-trace-session-token-never-printed-77c0",
];

/// A quick run against `name` with `RUST_LOG=trace` and `env` as the only
/// credential variables: exit status, stdout, stderr and the JSON report
/// as written.
fn traced_run(name: &str, env: &[(String, String)]) -> (i32, String, String, String) {
    let server = test_server(name);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_casaas-conformance"));
    command
        .arg(&server.url)
        // Few race rounds: the run is about what the trace prints, and the
        // thousands of writes of a full race plan leave a single-process
        // emulator (Azurite) collecting garbage for minutes afterwards,
        // unresponsive to the tests that follow.
        .args(["--quick", "--rounds", "3", "--concurrency", "6"])
        .args(["--format", "json", "--output"])
        .arg(&json)
        .env("RUST_LOG", "trace")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") || k.starts_with("AZURE_") {
            command.env_remove(k);
        }
    }
    command.env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in env {
        command.env(k, v);
    }
    let mut out = command.output().unwrap();
    if emulator_did_not_answer_the_open(&out) {
        out = command.output().unwrap();
    }
    let report = std::fs::read_to_string(&json).unwrap_or_default();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        report,
    )
}

/// Every occurrence of `marker` in `text` is followed by a redaction, never
/// by a value.
fn only_redacted_after(text: &str, marker: &str) -> bool {
    text.match_indices(marker).all(|(at, _)| {
        let rest = &text[at + marker.len()..];
        rest.is_empty() || rest.starts_with('[') || rest.starts_with('*') || rest.starts_with('&')
    })
}

fn assert_no_credential(name: &str, outputs: &[(&str, &str)], secrets: &[&str]) {
    for (what, text) in outputs {
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{name}: a credential appears in {what}"
            );
        }
        for marker in ["sig=", "Signature=", "x-amz-security-token: "] {
            assert!(
                only_redacted_after(text, marker),
                "{name}: a signature appears in {what} after '{marker}'"
            );
        }
        if let Some(at) = text.find("SharedKey devstoreaccount1:") {
            let start = text[..at]
                .rfind("Z \u{1b}")
                .or_else(|| text[..at].rfind("TRACE"))
                .unwrap_or(0);
            let before: String = text[start..at].chars().rev().take(3000).collect();
            let before: String = before.chars().rev().collect();
            panic!("{name}: an Authorization header appears in {what}, after: {before}");
        }
    }
}

#[test]
fn a_traced_run_against_moto_prints_no_credential() {
    let server = test_server("moto");
    let mut env: Vec<(String, String)> = server
        .env
        .iter()
        .filter(|(k, _)| !k.starts_with("AWS_ACCESS_KEY") && !k.starts_with("AWS_SECRET"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.push(("AWS_ACCESS_KEY_ID".into(), "AKIACONFORMANCETRACE".into()));
    env.push(("AWS_SECRET_ACCESS_KEY".into(), MOTO_SECRETS[0].into()));
    env.push(("AWS_SESSION_TOKEN".into(), MOTO_SECRETS[1].into()));
    let (code, stdout, stderr, report) = traced_run("moto", &env);
    let parsed: Value = serde_json::from_str(&report).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); exit {code}; stderr tail: {}",
            tail(&stderr)
        )
    });
    // Any verdict will do (a loaded machine can make a probe inconclusive):
    // what matters is that the run got that far.
    assert!(
        parsed["verdict"].is_string(),
        "the run ran to a verdict: {code}"
    );
    assert!(
        stderr.len() > 10_000,
        "trace logging was on: {} bytes",
        stderr.len()
    );
    assert_no_credential(
        "moto",
        &[
            ("stdout", &stdout),
            ("stderr", &stderr),
            ("the report", &report),
        ],
        &MOTO_SECRETS,
    );
}

#[test]
fn a_traced_run_against_azurite_prints_no_credential() {
    let server = test_server("azurite");
    let key = server.var("AZURE_STORAGE_KEY").to_string();
    let env: Vec<(String, String)> = server
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let (code, stdout, stderr, report) = traced_run("azurite", &env);
    let parsed: Value = serde_json::from_str(&report).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); exit {code}; stderr tail: {}",
            tail(&stderr)
        )
    });
    // Azurite checks the shared-key signature of every request: a safe
    // verdict means the key was used throughout.
    // Any verdict will do (a loaded machine can make a probe inconclusive):
    // what matters is that the run got that far.
    assert!(
        parsed["verdict"].is_string(),
        "the run ran to a verdict: {code}"
    );
    assert!(
        stderr.len() > 10_000,
        "trace logging was on: {} bytes",
        stderr.len()
    );
    assert_no_credential(
        "azurite",
        &[
            ("stdout", &stdout),
            ("stderr", &stderr),
            ("the report", &report),
        ],
        &[&key],
    );
}

/// The last 2000 characters of `text` (for failure messages).
fn tail(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    chars[chars.len().saturating_sub(2000)..].iter().collect()
}

/// Stores with conditional replace can be judged on the create-only layout
/// too when it is chosen (`layout=epochs`): the lease probe runs on it.
#[test]
fn the_create_only_layout_is_safe_on_ceph_and_fake_gcs() {
    // Azurite's own epoch-layout contract runs in casaas-azure; here it would
    // add load to the one emulator process the other tests of this file use.
    for name in ["ceph", "fake-gcs"] {
        let (code, report) = probe_url(
            name,
            "create_if_absent,create_conflict,race_create,lease_protocol",
            |url| {
                // A generous timeout: this runs beside the other tests on
                // the same single-process emulators.
                let separator = if url.contains('?') { '&' } else { '?' };
                let url = format!("{url}{separator}layout=epochs");
                if url.contains("timeout=") {
                    url
                } else {
                    format!("{url}&timeout=120")
                }
            },
        );
        assert_eq!(code, 0, "{name}: {report:#}");
        assert_eq!(
            report["summary"], "SAFE FOR LEASES (create-only layout)",
            "{name}"
        );
        assert_eq!(report["layout"], "epochs", "{name}");
        assert_eq!(verdict(&report, "lease_protocol"), "pass", "{name}");
    }
}
