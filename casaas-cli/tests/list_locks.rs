//! The library's `list_locks` and `casaas ls`, which calls it and only
//! formats: the same states from both, on the file backend and on Ceph RGW
//! and SeaweedFS (`cargo xtask servers up ceph seaweedfs`); and `ls` of a
//! prefix below a session's heartbeat, which the command reads from the
//! directory above.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use casaas_core::CasStore;
use casaas_core::lease::{
    Lease, LeaseConfig, LeaseRecord, LockState, Session, SessionLiveness, list_locks,
};
use casaas_core::testkit::{TestServer, test_server, unique_prefix};
use common::*;

/// A runtime whose workers keep renewing while the test's thread waits for
/// the binary.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn lease(store: &Arc<dyn CasStore>, key: &str) -> Lease {
    Lease::new(
        store.clone(),
        key,
        "worker-1",
        LeaseConfig::from_ttl(Duration::from_secs(20)),
    )
    .unwrap()
}

/// `casaas ls --json` as key → (state, session_state).
fn ls_states(out: std::process::Output) -> BTreeMap<String, (String, Option<String>)> {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                (
                    e["state"].as_str().unwrap().to_string(),
                    e["session_state"].as_str().map(str::to_string),
                ),
            )
        })
        .collect()
}

/// Writes held, released, foreign, a queue ticket and a lock under a live
/// session, lists them through the library, and checks `casaas ls` (run by
/// `ls`) says the same of each. Returns what keeps the holdings alive.
fn both_agree(
    rt: &tokio::runtime::Runtime,
    store: Arc<dyn CasStore>,
    ls: impl Fn() -> std::process::Output,
) {
    let (session, held, session_lock) = rt.block_on(async {
        let held = lease(&store, "jobs/held")
            .acquire(Default::default())
            .await
            .unwrap();
        let released = lease(&store, "jobs/released")
            .acquire(Default::default())
            .await
            .unwrap();
        released.release().await.unwrap();
        store
            .create("jobs/notes.txt", b"not a lock".to_vec().into())
            .await
            .unwrap();
        let now_ms = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap();
        store
            .create(
                "jobs/held.queue/00000000000000000001",
                LeaseRecord::new("waiter", "n", 1, 60_000, now_ms).encode(),
            )
            .await
            .unwrap();
        let session = Session::open(lease(&store, "sessions/w"), Default::default())
            .await
            .unwrap();
        let session_lock = session
            .lease("jobs/shard")
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .into_result()
            .expect("free");
        (session, held, session_lock)
    });
    let listed = rt.block_on(list_locks(store.clone(), "")).unwrap();
    let by_key: BTreeMap<&str, _> = listed.iter().map(|e| (e.key.as_str(), e)).collect();
    let expect = [
        ("jobs/held", LockState::Held),
        ("jobs/released", LockState::Released),
        ("jobs/notes.txt", LockState::Foreign),
        ("jobs/held.queue/00000000000000000001", LockState::Waiting),
        ("jobs/shard", LockState::Held),
        ("sessions/w", LockState::Held),
    ];
    for (key, state) in expect {
        let e = by_key
            .get(key)
            .unwrap_or_else(|| panic!("{key}: {listed:#?}"));
        assert_eq!(e.state, state, "{e:#?}");
    }
    assert_eq!(
        by_key["jobs/shard"].session.as_ref().unwrap().liveness,
        Some(SessionLiveness::Alive)
    );
    assert!(listed.iter().all(|e| !e.key.starts_with(".casaas-guard/")));
    let shown = ls_states(ls());
    let from_library: BTreeMap<String, (String, Option<String>)> = listed
        .iter()
        .map(|e| {
            (
                e.key.clone(),
                (
                    e.state.as_str().to_string(),
                    e.session
                        .as_ref()
                        .and_then(|s| s.liveness)
                        .map(|l| l.as_str().to_string()),
                ),
            )
        })
        .collect();
    assert_eq!(shown, from_library);
    rt.block_on(async {
        session_lock.release().await.unwrap();
        session.close().await.unwrap();
        held.release().await.unwrap();
    });
}

#[test]
fn the_library_and_ls_agree_on_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let rt = runtime();
    let store = rt.block_on(casaas_core::open_store(&prefix)).unwrap();
    both_agree(&rt, store, || run(&["ls", "--json", &prefix]));
}

fn on_server(server: &TestServer) {
    let mut url = url::Url::parse(&server.url).unwrap();
    url.set_path(&format!("/{}", unique_prefix("list-locks")));
    let prefix = url.to_string();
    let rt = runtime();
    casaas_s3::register();
    let store = rt
        .block_on(casaas_core::open_store_with(
            &prefix,
            server.store_options(),
        ))
        .unwrap();
    both_agree(&rt, store, || {
        let mut cmd: Command = casaas();
        for (name, value) in &server.env {
            cmd.env(name, value);
        }
        cmd.args(["ls", "--json", &prefix]).output().unwrap()
    });
}

#[test]
fn the_library_and_ls_agree_on_ceph() {
    on_server(&test_server("ceph"));
}

#[test]
fn the_library_and_ls_agree_on_seaweedfs() {
    on_server(&test_server("seaweedfs"));
}

#[test]
fn ls_below_a_session_reads_its_heartbeat_from_above() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let rt = runtime();
    let store = rt.block_on(casaas_core::open_store(&prefix)).unwrap();
    let (session, guard) = rt.block_on(async {
        let session = Session::open(lease(&store, "sessions/w"), Default::default())
            .await
            .unwrap();
        let guard = session
            .lease("shards/7")
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .into_result()
            .expect("free");
        (session, guard)
    });
    // The store opened at `shards/` alone cannot reach the heartbeat.
    let below = rt
        .block_on(casaas_core::open_store(&format!("{prefix}/shards")))
        .unwrap();
    let listed = rt.block_on(list_locks(below, "")).unwrap();
    assert_eq!(listed[0].state, LockState::Unknown, "{listed:#?}");
    // The command opens the directory above for it.
    let out = run(&["ls", "--json", &format!("{prefix}/shards")]);
    let shown = ls_states(out);
    assert_eq!(
        shown.get("7"),
        Some(&("held".to_string(), Some("alive".to_string()))),
        "{shown:?}"
    );
    rt.block_on(async {
        guard.release().await.unwrap();
        session.close().await.unwrap();
    });
}
