//! `casaas lock --slots 3`: eight processes started together on one
//! semaphore each run their command once, and the commands' own records of
//! when they ran never show more than three at once, nor two on one slot.
//! On the file backend always; on Ceph RGW and SeaweedFS from `cargo xtask
//! servers up ceph seaweedfs`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use casaas_core::testkit::{TestServer, test_server, unique_prefix};

/// Processes started together.
const PROCESSES: usize = 8;
/// The semaphore's slots.
const SLOTS: usize = 3;

/// One run of the command: when it started and ended (the clock of
/// /proc/uptime, shared by every process here), its slot and token.
#[derive(Debug)]
struct Run {
    start: f64,
    end: f64,
    slot: u32,
    token: u64,
}

/// `casaas lock --slots 3 URL -- sh -c SCRIPT`, the script writing its run
/// into `{dir}/{n}`.
fn lock_command(url: &str, env: &[(String, String)], dir: &Path, n: usize) -> Command {
    let script = format!(
        "s=$(cut -d' ' -f1 /proc/uptime); sleep 0.5; e=$(cut -d' ' -f1 /proc/uptime); \
         echo \"$s $e $CASAAS_SLOT $CASAAS_FENCING_TOKEN\" > {}/{n}",
        dir.display()
    );
    let mut cmd = common::casaas();
    cmd.envs(env.iter().map(|(k, v)| (k, v)))
        .args([
            "lock",
            "--slots",
            &SLOTS.to_string(),
            "--ttl",
            "5s",
            "--wait=120s",
            url,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Starts the processes together, checks every one ran, and returns the runs.
fn race(url: &str, env: &[(String, String)], what: &str) -> Vec<Run> {
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|n| {
            lock_command(url, env, dir.path(), n)
                .spawn()
                .expect("casaas starts")
        })
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    let mut runs = Vec::new();
    for (n, out) in outputs.iter().enumerate() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{what}: process {n} did not run its command: {stderr}"
        );
        let record = std::fs::read_to_string(dir.path().join(n.to_string()))
            .unwrap_or_else(|e| panic!("{what}: process {n} left no record ({e}): {stderr}"));
        let parts: Vec<&str> = record.split_whitespace().collect();
        assert_eq!(parts.len(), 4, "{what}: process {n} wrote {record:?}");
        runs.push(Run {
            start: parts[0].parse().unwrap(),
            end: parts[1].parse().unwrap(),
            slot: parts[2].parse().unwrap(),
            token: parts[3].parse().unwrap(),
        });
    }
    runs
}

/// The most runs at once (a run ending as another starts does not overlap
/// it), and per slot: runs in start order never overlap and their tokens
/// increase.
fn check(runs: &[Run], what: &str) -> usize {
    let mut events: Vec<(f64, i32)> = runs
        .iter()
        .flat_map(|r| [(r.start, 1), (r.end, -1)])
        .collect();
    events.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (mut now, mut most) = (0, 0);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    assert!(
        most <= SLOTS as i32,
        "{what}: {most} commands ran at once with {SLOTS} slots: {runs:?}"
    );
    for slot in 0..SLOTS as u32 {
        let mut on_slot: Vec<&Run> = runs.iter().filter(|r| r.slot == slot).collect();
        on_slot.sort_by(|a, b| a.start.partial_cmp(&b.start).unwrap());
        for pair in on_slot.windows(2) {
            assert!(
                pair[0].end <= pair[1].start && pair[0].token < pair[1].token,
                "{what}: slot {slot} held twice at once or its token did not increase: {pair:?}"
            );
        }
    }
    assert!(
        runs.iter().all(|r| (r.slot as usize) < SLOTS),
        "{what}: a slot past the count: {runs:?}"
    );
    usize::try_from(most).unwrap()
}

fn on_server(server: &TestServer, name: &str) {
    let prefix = unique_prefix("semaphore");
    let mut url = url::Url::parse(&server.url).unwrap();
    url.set_path(&format!("/{prefix}/jobs"));
    let env: Vec<(String, String)> = server
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let runs = race(url.as_str(), &env, name);
    let most = check(&runs, name);
    assert!(most >= 2, "{name}: never two commands at once: {runs:?}");
}

#[test]
fn eight_processes_on_three_slots_on_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let base = url::Url::from_directory_path(dir.path()).unwrap();
    let runs = race(&format!("{base}jobs"), &[], "file");
    let most = check(&runs, "file");
    assert!(most >= 2, "file: never two commands at once: {runs:?}");
}

#[test]
fn eight_processes_on_three_slots_on_ceph() {
    on_server(&test_server("ceph"), "ceph");
}

#[test]
fn eight_processes_on_three_slots_on_seaweedfs() {
    on_server(&test_server("seaweedfs"), "seaweedfs");
}

#[test]
fn a_process_that_counts_differently_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = url::Url::from_directory_path(dir.path()).unwrap();
    let url = format!("{base}jobs");
    let first = common::casaas()
        .args(["lock", "--slots", "3", "-n", &url, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        common::text(&first.stderr)
    );
    let other = common::casaas()
        .args(["lock", "--slots", "4", "-n", &url, "--", "true"])
        .output()
        .unwrap();
    let stderr = common::text(&other.stderr);
    assert_ne!(other.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("has 3 slots") && stderr.contains("--slots 3"),
        "{stderr}"
    );
}
