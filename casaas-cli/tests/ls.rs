//! `casaas ls` on the file backend: held, expired, released and foreign
//! objects, the store guard's probes left out, nothing written; and the
//! read-only commands on a directory that does not exist.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

/// Every file under `dir` with its bytes.
fn snapshot_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.insert(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// `text` with each RFC 3339 time (`2026-01-02T03:04:05.678Z`) replaced.
fn redact_times(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let candidate = &bytes[i..bytes.len().min(i + 24)];
        let is_time = candidate.len() == 24
            && candidate.iter().enumerate().all(|(at, b)| match at {
                4 | 7 => *b == b'-',
                10 => *b == b'T',
                13 | 16 => *b == b':',
                19 => *b == b'.',
                23 => *b == b'Z',
                _ => b.is_ascii_digit(),
            });
        if is_time {
            out.push_str("[time]");
            i += 24;
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

#[test]
fn ls_lists_held_expired_released_and_foreign_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let lock = |name: &str| format!("{prefix}/{name}");

    let empty = run(&["ls", &prefix]);
    assert_eq!(empty.status.code(), Some(0), "{}", text(&empty.stderr));
    insta::assert_snapshot!("ls_empty", text(&empty.stdout));

    let mut holder = spawn(&[
        "lock",
        "--ttl",
        "30s",
        "--owner",
        "web-1/41",
        &lock("a-held"),
        "--",
        "sleep",
        "30",
    ]);
    wait_held(&lock("a-held"));
    // Killed outright: nobody renews, and its TTL passes.
    let out = run(&[
        "lock",
        "--ttl",
        "1s",
        "--owner",
        "web-2/7",
        &lock("b-expired"),
        "--",
        "sh",
        "-c",
        "kill -KILL $PPID",
    ]);
    assert_eq!(out.status.code(), None);
    let out = run(&[
        "lock",
        "--owner",
        "web-3/9",
        &lock("c-released"),
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = casaas_core::open_store(&prefix).await.unwrap();
        let body = |s: &'static str| bytes::Bytes::from_static(s.as_bytes());
        store.create("d-foreign", body("not a lock")).await.unwrap();
        // The store guard's probe objects are not locks.
        store
            .create(".casaas-guard/probe-1", body("probe"))
            .await
            .unwrap();
    });
    std::thread::sleep(Duration::from_millis(1100));

    let before = snapshot_dir(dir.path());
    let table = run(&["ls", &prefix]);
    assert_eq!(table.status.code(), Some(0), "{}", text(&table.stderr));
    assert!(table.stderr.is_empty(), "{}", text(&table.stderr));
    insta::assert_snapshot!("ls_table", redact_times(&text(&table.stdout)));

    let json = run(&["ls", "--json", &prefix]);
    assert_eq!(json.status.code(), Some(0), "{}", text(&json.stderr));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    // A foreign object is no lock: it has no layout.
    for entry in value.as_array().unwrap() {
        let layout = &entry["layout"];
        match entry["state"].as_str().unwrap() {
            "foreign" => assert!(layout.is_null(), "{entry}"),
            _ => assert_eq!(layout, "record", "{entry}"),
        }
    }
    insta::assert_json_snapshot!("ls_json", value, {
        "[].acquired_at" => "[time]",
        "[].renewed_at" => "[time]",
        "[].version" => "[version]",
    });
    assert_eq!(snapshot_dir(dir.path()), before, "ls wrote something");

    signal(holder.id(), Signal::SIGTERM);
    wait_with_limit(&mut holder, Duration::from_secs(5));
}

#[test]
fn read_only_commands_on_a_missing_directory_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("lokcs");
    for args in [
        vec!["status".to_string(), format!("file://{}/x", typo.display())],
        vec![
            "status".to_string(),
            format!("file://{}/x?create_dirs=true", typo.display()),
        ],
        vec!["ls".to_string(), format!("file://{}", typo.display())],
        vec![
            "ls".to_string(),
            format!("file://{}?create_dirs=true", typo.display()),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("directory {} does not exist", typo.display()))
                && stderr.contains("status and ls create nothing"),
            "{args:?}: {stderr}"
        );
        assert!(!typo.exists(), "{args:?} created the directory");
    }
}

#[test]
fn lock_refuses_a_missing_directory_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("lokcs").join("deeper");
    let url = format!("file://{}/x", typo.display());
    for args in [
        vec!["lock", url.as_str(), "--", "true"],
        vec!["elect", url.as_str(), "--id", "a", "--", "true"],
        vec!["release", "--force", "--yes", url.as_str()],
    ] {
        let out = run(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "directory {} does not exist; create it or add ?create_dirs=true",
                typo.display()
            )),
            "{args:?}: {stderr}"
        );
        assert!(!dir.path().join("lokcs").exists(), "{args:?} created it");
    }
    let asked = format!("{url}?create_dirs=true");
    let out = run(&["lock", &asked, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(typo.is_dir());
}

/// A fair-mode queue ticket (`KEY.queue/` and twenty digits) is a waiter:
/// listed as `waiting` for its lock, never as a held lock.
#[test]
fn ls_shows_queue_tickets_as_waiters() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let guard = runtime.block_on(async {
        let store = casaas_core::open_store(&prefix).await.unwrap();
        let ticket = casaas_core::lease::Lease::new(
            store,
            "job.queue/00000000000000000001",
            "waiter-1",
            casaas_core::lease::LeaseConfig::from_ttl(Duration::from_secs(30)),
        )
        .unwrap();
        ticket.try_acquire().await.unwrap()
    });
    let out = run(&["ls", "--json", &prefix]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ticket = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "job.queue/00000000000000000001")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(ticket["state"], "waiting", "{ticket}");
    assert_eq!(ticket["waiting_for"], "job", "{ticket}");
    assert_eq!(ticket["holder"], "waiter-1", "{ticket}");
    let table = text(&run(&["ls", &prefix]).stdout);
    assert!(
        table
            .lines()
            .any(|l| l.contains("job.queue/") && l.contains("waiting")),
        "{table}"
    );
    drop(guard);
}
