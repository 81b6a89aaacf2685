//! `casaas lock --shared`, `--exclusive` and `--fair` end to end on the
//! embedded file backend: shared holders overlap, an exclusive holder
//! overlaps nobody, `-n` answers at once, and fair waiters run.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

fn lock_url(dir: &Path, name: &str) -> String {
    std::fs::create_dir_all(dir.join("locks")).unwrap();
    format!("file://{}/locks/{name}", dir.display())
}

/// `(kind, id, start, end)` of every run, from the log the children wrote.
fn intervals(log: &Path) -> Vec<(String, String, f64, f64)> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (what, kind, id, at) = (
            parts[0],
            parts[1],
            parts[2],
            parts[3].parse::<f64>().unwrap(),
        );
        if what == "start" {
            starts.insert(id.to_string(), at);
        } else {
            out.push((kind.to_string(), id.to_string(), starts[id], at));
        }
    }
    out
}

#[test]
fn shared_holders_overlap_and_an_exclusive_holder_overlaps_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "table");
    let log = dir.path().join("intervals.log");
    let script = format!(
        "echo \"start $KIND $ID $(cut -d' ' -f1 /proc/uptime)\" >> {log}; sleep 0.4; \
         echo \"end $KIND $ID $(cut -d' ' -f1 /proc/uptime)\" >> {log}",
        log = log.display()
    );
    let workers: Vec<_> = [
        ("shared", 3),
        ("shared", 3),
        ("shared", 3),
        ("exclusive", 3),
        ("exclusive", 2),
    ]
    .into_iter()
    .enumerate()
    .map(|(worker, (kind, runs))| {
        let (url, script) = (url.clone(), script.clone());
        std::thread::spawn(move || {
            for run in 0..runs {
                let out = casaas()
                    .args([
                        "lock",
                        &format!("--{kind}"),
                        "--ttl",
                        "2s",
                        "--wait=60s",
                        &url,
                        "--",
                        "sh",
                        "-c",
                        &script,
                    ])
                    .env("KIND", kind)
                    .env("ID", format!("w{worker}r{run}"))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", text(&out.stderr));
            }
        })
    })
    .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let runs = intervals(&log);
    assert_eq!(runs.len(), 14, "{runs:?}");
    let mut shared_overlaps = 0;
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let overlap = a.2 < b.3 && b.2 < a.3;
            if overlap && (a.0 == "exclusive" || b.0 == "exclusive") {
                panic!("an exclusive holder overlapped another: {a:?} {b:?}");
            }
            if overlap {
                shared_overlaps += 1;
            }
        }
    }
    assert!(
        shared_overlaps > 0,
        "no two shared holders overlapped: {runs:?}"
    );
}

#[test]
fn no_wait_answers_at_once_in_each_mode_and_fair_waiters_run() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "busy");
    let mut writer = spawn(&[
        "lock",
        "--exclusive",
        "--owner",
        "writer",
        &url,
        "--",
        "sleep",
        "30",
    ]);
    wait_held(&url);
    for mode in ["--shared", "--exclusive"] {
        let start = Instant::now();
        let out = run(&["lock", mode, "-n", &url, "--", "true"]);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("not waiting (-n)"),
            "{}",
            text(&out.stderr)
        );
    }
    signal(writer.id(), Signal::SIGTERM);
    wait_with_limit(&mut writer, Duration::from_secs(5));

    // A shared holder: another shared one passes, an exclusive one does not.
    let mut reader = spawn(&["lock", "--shared", &url, "--", "sleep", "30"]);
    wait_until(Duration::from_secs(10), "the reader's slot", || {
        std::fs::read_dir(dir.path().join("locks/busy.readers")).is_ok_and(|d| d.count() > 0)
    });
    let out = run(&["lock", "--shared", "-n", &url, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["lock", "--exclusive", "-n", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    signal(reader.id(), Signal::SIGTERM);
    wait_with_limit(&mut reader, Duration::from_secs(5));

    let out = run(&["lock", "--fair", &url, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["lock", "--shared", "--exclusive", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}
