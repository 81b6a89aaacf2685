//! Several `casaas lock --wait` processes started together on a lock that
//! does not exist yet: every one must run its command, in both layouts. On
//! the file backend always; on SeaweedFS and on the create-only server
//! (SeaweedFS behind a proxy that refuses If-Match) from `cargo xtask
//! servers up seaweedfs createonly`. Losing the race for the first write
//! (the lock object, or the create-only layout's marker or first epoch) is
//! "someone else got there first": wait for the turn, never fail.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::{Command, Output, Stdio};

use casaas_core::testkit::{TestServer, test_server, unique_prefix};

/// Rounds per store and layout, each on a fresh key.
const ROUNDS: usize = 20;
/// Processes racing in each round.
const RACERS: usize = 4;

/// `casaas lock URL --ttl 3s --wait=60s -- sh -c 'echo $CASAAS_FENCING_TOKEN'`
/// with the server's environment and nothing else of casaas's.
fn lock_command(url: &str, env: &[(String, String)]) -> Command {
    let mut cmd = common::casaas();
    cmd.envs(env.iter().map(|(k, v)| (k, v)))
        .args([
            "lock",
            url,
            "--ttl",
            "3s",
            "--wait=60s",
            "--",
            "sh",
            "-c",
            "echo $CASAAS_FENCING_TOKEN",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `RACERS` processes on `url` at once: each exits 0, and each held the
/// lock once (tokens 1..=RACERS).
fn race(url: &str, env: &[(String, String)], what: &str) {
    let children: Vec<_> = (0..RACERS)
        .map(|_| lock_command(url, env).spawn().expect("casaas starts"))
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    let mut tokens = Vec::new();
    for (n, out) in outputs.iter().enumerate() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{what}: racer {n} did not run its command: {stderr}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        tokens.push(stdout.trim().parse::<u64>().unwrap_or_else(|e| {
            panic!("{what}: racer {n} printed {stdout:?} ({e}); stderr: {stderr}")
        }));
    }
    tokens.sort_unstable();
    let expected: Vec<u64> = (1..=RACERS as u64).collect();
    assert_eq!(tokens, expected, "{what}: each racer held the lock once");
}

fn rounds(lock_url: impl Fn(usize) -> String, env: &[(String, String)], what: &str) {
    for round in 0..ROUNDS {
        race(&lock_url(round), env, &format!("{what}, round {round}"));
    }
}

fn on_file(layout: &str) {
    let dir = tempfile::tempdir().unwrap();
    let base = url::Url::from_directory_path(dir.path()).unwrap();
    let url = |round: usize| format!("{base}fresh-{round}?layout={layout}");
    rounds(url, &[], &format!("file, {layout} layout"));
}

fn on_server(server: &TestServer, name: &str, layout: &str) {
    let prefix = unique_prefix("first-use");
    let url = |round: usize| {
        let mut url = url::Url::parse(&server.url).unwrap();
        url.set_path(&format!("/{prefix}/fresh-{round}"));
        url.query_pairs_mut().append_pair("layout", layout);
        url.to_string()
    };
    let env: Vec<(String, String)> = server
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    rounds(url, &env, &format!("{name}, {layout} layout"));
}

#[test]
fn racing_locks_all_run_on_the_file_store_in_the_record_layout() {
    on_file("record");
}

#[test]
fn racing_locks_all_run_on_the_file_store_in_the_create_only_layout() {
    on_file("epochs");
}

#[test]
fn racing_locks_all_run_on_seaweedfs_in_the_record_layout() {
    on_server(&test_server("seaweedfs"), "seaweedfs", "record");
}

#[test]
fn racing_locks_all_run_on_seaweedfs_in_the_create_only_layout() {
    on_server(&test_server("seaweedfs"), "seaweedfs", "epochs");
}

/// The create-only server refuses every conditional replace, so only the
/// create-only layout can hold a lock there (the record layout is refused
/// by the store guard before anything is written).
#[test]
fn racing_locks_all_run_on_the_create_only_server() {
    on_server(&test_server("createonly"), "createonly", "epochs");
}
