//! `status`, `ls` and `release --force` on locks held under a session, on
//! the file backend. A lock under a session is never rewritten while held,
//! so each command must judge it by its session's heartbeat: held while the
//! session is alive (long after the lock's own TTL), free once the session
//! was closed or stopped renewing, and never broken behind a live session.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use casaas_core::CasStore;
use casaas_core::lease::{Lease, LeaseConfig, LeaseGuard, LostReason, Session};
use common::*;

/// The heartbeat's TTL (and so the TTL recorded in every lock of the
/// session): short, so that waiting past it is cheap.
const TTL: Duration = Duration::from_secs(1);

/// The TTL of a session that must stay alive throughout a test: long
/// enough that renewals (every third of it) keep up on a loaded machine.
const LIVE_TTL: Duration = Duration::from_secs(6);

/// A runtime whose workers keep renewing the heartbeat while the test's
/// thread waits for the binary.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The store at the prefix, as the session's holder opens it: the session
/// key `sessions/worker-1` and the lock key `shards/7` are relative to it,
/// while `casaas status PREFIX/shards/7` opens `PREFIX/shards`.
async fn store(prefix: &str) -> Arc<dyn CasStore> {
    casaas_core::open_store(prefix).await.unwrap()
}

/// Opens the session `sessions/worker-1` with `ttl` and takes `shards/7`
/// under it.
async fn session_with_lock(prefix: &str, ttl: Duration) -> (Session, LeaseGuard) {
    let heartbeat = Lease::new(
        store(prefix).await,
        "sessions/worker-1",
        "worker-1",
        LeaseConfig::from_ttl(ttl),
    )
    .unwrap();
    let session = Session::open(heartbeat, Default::default()).await.unwrap();
    let guard = session
        .lease("shards/7")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .into_result()
        .expect("the lock is free");
    (session, guard)
}

fn status_json(args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["status", "--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", text(&out.stdout), text(&out.stderr)));
    (out.status.code().unwrap(), value)
}

/// The `ls --json` entry of `key`.
fn ls_entry(prefix: &str, key: &str) -> serde_json::Value {
    let out = run(&["ls", "--json", prefix]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == key)
        .cloned()
        .unwrap_or_else(|| panic!("{key} not listed: {listed}"))
}

/// The lock object's version, read through the store.
fn lock_version(rt: &tokio::runtime::Runtime, prefix: &str) -> String {
    rt.block_on(async { store(prefix).await.get("shards/7").await })
        .unwrap()
        .expect("the lock object exists")
        .version
        .to_string()
}

#[test]
fn a_lock_under_a_live_session_stays_held_long_after_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let lock = format!("{prefix}/shards/7");
    let heartbeat_url = format!("{prefix}/sessions/worker-1");
    let rt = runtime();
    let (session, guard) = rt.block_on(session_with_lock(&prefix, LIVE_TTL));
    assert_eq!(session.term(), 1);

    // Past the lock's recorded TTL: the lock object was written once.
    std::thread::sleep(LIVE_TTL + LIVE_TTL / 4);
    assert!(
        session.is_held(),
        "{:?} {:?}",
        session.health(),
        session.lost_reason()
    );
    let (code, report) = status_json(&[&lock]);
    assert_eq!(
        (code, report["state"].as_str()),
        (0, Some("held")),
        "{report}"
    );
    // Named from the lock's directory: the status opened `shards/`, and the
    // heartbeat is one directory above it.
    assert_eq!(report["session"], "../sessions/worker-1", "{report}");
    assert_eq!(report["session_term"], 1, "{report}");
    assert_eq!(report["session_state"], "alive", "{report}");
    assert_eq!(report["session_url"], heartbeat_url.as_str(), "{report}");

    // Watched for longer than a TTL: the lock object never changes, the
    // heartbeat does, and the heartbeat is what counts.
    let (code, report) = status_json(&["--observe-for", "7s", &lock]);
    assert!(
        session.is_held(),
        "{:?} {:?}",
        session.health(),
        session.lost_reason()
    );
    assert_eq!(
        (code, report["state"].as_str()),
        (0, Some("held")),
        "{report}"
    );
    assert_eq!(report["session_state"], "alive", "{report}");
    assert!(
        report["takeover_possible_in_ms"].as_u64().unwrap() > 0,
        "{report}"
    );
    let table = run(&["status", &lock]);
    assert_eq!(table.status.code(), Some(0), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert!(
        table.contains("state      held")
            && table.contains("session    ../sessions/worker-1 (term 1): alive"),
        "{table}"
    );

    let entry = ls_entry(&prefix, "shards/7");
    assert_eq!(entry["state"], "held", "{entry}");
    assert_eq!(entry["session"], "sessions/worker-1", "{entry}");
    assert_eq!(entry["session_term"], 1, "{entry}");
    assert_eq!(entry["session_state"], "alive", "{entry}");
    // The heartbeat itself is an ordinary lease.
    let beat = ls_entry(&prefix, "sessions/worker-1");
    assert_eq!(beat["state"], "held", "{beat}");
    assert!(beat.get("session").is_none(), "{beat}");
    let listing = run(&["ls", &prefix]);
    let listing = text(&listing.stdout);
    assert!(
        listing.contains("SESSION") && listing.contains("sessions/worker-1 (term 1, alive)"),
        "{listing}"
    );

    // Breaking the lock behind a live session is refused, naming the
    // command that breaks the session instead; nothing is written.
    let before = lock_version(&rt, &prefix);
    let out = run(&["release", "--force", "--yes", &lock]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains("which is alive")
            && stderr.contains(&format!("`casaas release --force {heartbeat_url}`"))
            && stderr.contains("nothing was written"),
        "{stderr}"
    );
    assert_eq!(lock_version(&rt, &prefix), before, "the lock was written");
    assert!(guard.is_held());

    // Releasing the heartbeat works as for any lease, and its holder
    // learns at its next heartbeat that every lock of the session ended.
    let out = run(&["release", "--force", "--yes", &heartbeat_url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    wait_until(
        Duration::from_secs(5),
        "the session to learn it ended",
        || session.lost_reason().is_some(),
    );
    assert!(
        matches!(guard.lost_reason(), Some(LostReason::SessionLost { .. })),
        "{:?}",
        guard.lost_reason()
    );
    let (code, report) = status_json(&[&lock]);
    assert_eq!(
        (code, report["state"].as_str()),
        (4, Some("released")),
        "{report}"
    );
    assert_eq!(report["session_state"], "released", "{report}");
    drop(guard);
    drop(session);
}

#[test]
fn a_closed_session_frees_its_locks_and_release_then_works() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let lock = format!("{prefix}/shards/7");
    let rt = runtime();
    let (session, guard) = rt.block_on(session_with_lock(&prefix, TTL));
    rt.block_on(session.close()).unwrap();
    assert!(!guard.is_held());

    let (code, report) = status_json(&[&lock]);
    assert_eq!(
        (code, report["state"].as_str()),
        (4, Some("released")),
        "{report}"
    );
    assert_eq!(report["session_state"], "released", "{report}");
    assert_eq!(report["takeover_possible_in_ms"], 0, "{report}");
    let entry = ls_entry(&prefix, "shards/7");
    assert_eq!(
        (entry["state"].as_str(), entry["session_state"].as_str()),
        (Some("released"), Some("released")),
        "{entry}"
    );

    // The term is over: the lock is broken as a plain one.
    let out = run(&["release", "--force", "--yes", &lock]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (code, report) = status_json(&[&lock]);
    assert_eq!(
        (code, report["released"].as_bool()),
        (4, Some(true)),
        "{report}"
    );
    drop(guard);
}

#[test]
fn an_abandoned_session_expires_and_is_broken_through_its_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let lock = format!("{prefix}/shards/7");
    let heartbeat_url = format!("{prefix}/sessions/worker-1");
    let rt = runtime();
    let (session, guard) = rt.block_on(session_with_lock(&prefix, TTL));
    // As a crashed holder: nothing renews the heartbeat any more.
    session.abandon();

    let (code, report) = status_json(&["--observe-for", "1.5s", &lock]);
    assert_eq!(
        (code, report["state"].as_str()),
        (4, Some("expired")),
        "{report}"
    );
    assert_eq!(report["session_state"], "expired", "{report}");
    let entry = ls_entry(&prefix, "shards/7");
    assert_eq!(
        (entry["state"].as_str(), entry["session_state"].as_str()),
        (Some("expired"), Some("expired")),
        "{entry}"
    );

    // The heartbeat still names the lock's term unreleased: a paused holder
    // would renew it and never learn of a broken lock, so the lock is not
    // broken; breaking the heartbeat is the way.
    let out = run(&["release", "--force", "--yes", &lock]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains(&format!("casaas release --force {heartbeat_url}")),
        "{stderr}"
    );
    let out = run(&["release", "--force", "--yes", &heartbeat_url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (code, report) = status_json(&[&lock]);
    assert_eq!(
        (code, report["session_state"].as_str()),
        (4, Some("released")),
        "{report}"
    );
    let out = run(&["release", "--force", "--yes", &lock]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // And `casaas lock` takes it at once, with the next token.
    let out = run(&[
        "lock",
        "-n",
        &lock,
        "--",
        "sh",
        "-c",
        "test \"$CASAAS_FENCING_TOKEN\" = 2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    drop(guard);
}

#[test]
fn a_later_term_frees_the_lock_and_a_missing_heartbeat_does_not_yet() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let lock = format!("{prefix}/shards/7");
    let rt = runtime();
    let (session, guard) = rt.block_on(session_with_lock(&prefix, TTL));
    rt.block_on(session.close()).unwrap();
    // The session opened again: its heartbeat is in term 2, the lock names 1.
    let reopened = rt.block_on(async {
        let heartbeat = Lease::new(
            store(&prefix).await,
            "sessions/worker-1",
            "worker-1",
            LeaseConfig::from_ttl(TTL),
        )
        .unwrap();
        Session::open(heartbeat, Default::default()).await.unwrap()
    });
    assert_eq!(reopened.term(), 2);
    let (code, report) = status_json(&[&lock]);
    assert_eq!(
        (code, report["state"].as_str()),
        (4, Some("expired")),
        "{report}"
    );
    assert_eq!(report["session_state"], "superseded", "{report}");
    rt.block_on(reopened.close()).unwrap();

    // The heartbeat object deleted: the term is not in it, and a contender
    // waits the lock's TTL before taking the lock, so it is not free yet.
    rt.block_on(async {
        let store = store(&prefix).await;
        let beat = store.get("sessions/worker-1").await?.expect("a heartbeat");
        store.delete("sessions/worker-1", &beat.version).await
    })
    .unwrap();
    let (code, report) = status_json(&[&lock]);
    assert_eq!(
        (code, report["state"].as_str()),
        (0, Some("held")),
        "{report}"
    );
    assert_eq!(report["session_state"], "missing", "{report}");
    let entry = ls_entry(&prefix, "shards/7");
    assert_eq!(
        (entry["state"].as_str(), entry["session_state"].as_str()),
        (Some("held"), Some("missing")),
        "{entry}"
    );
    let (code, report) = status_json(&["--observe-for", "1.5s", &lock]);
    assert_eq!(
        (code, report["state"].as_str()),
        (4, Some("expired")),
        "{report}"
    );
    // A holder with no heartbeat object learns at its next renewal that it
    // lost: breaking the lock is as safe as breaking a plain one.
    let out = run(&["release", "--force", "--yes", &lock]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("heartbeat is missing"), "{stderr}");
    drop(guard);
}

/// `casaas lock` on a lock held under a session whose heartbeat lies
/// outside the lock's directory: without `--root` it refuses by name and
/// writes nothing; with `--root` it judges the session like any contender:
/// held while the heartbeat lives, taken once the session stopped renewing.
#[test]
fn lock_reaches_a_heartbeat_outside_the_locks_directory_through_root() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}", dir.path().display());
    let lock = format!("{prefix}/shards/7");
    let rt = runtime();
    let (session, guard) = rt.block_on(session_with_lock(&prefix, LIVE_TTL));
    let before = lock_version(&rt, &prefix);

    let out = run(&["lock", "-n", &lock, "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("outside this store's prefix") && stderr.contains("--root"),
        "{stderr}"
    );
    assert_eq!(lock_version(&rt, &prefix), before, "the lock was written");

    // Within reach and alive: held (exit 75), nothing written.
    let out = run(&["lock", "-n", "--root", &prefix, &lock, "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert_eq!(lock_version(&rt, &prefix), before, "the lock was written");
    assert!(guard.is_held() && session.is_held());

    // A root that is not above the lock is refused before anything runs.
    let out = run(&[
        "lock",
        "-n",
        "--root",
        "file:///elsewhere",
        &lock,
        "--",
        "true",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not a directory above the lock"),
        "{stderr}"
    );

    // The session's holder stops renewing: the lock is taken after the
    // session's TTL, with the next token, and the command sees the lock's
    // own URL.
    session.abandon();
    drop(guard);
    let out = casaas()
        .args(["lock", "--wait=30s", &lock, "--", "sh", "-c"])
        .arg("echo \"$CASAAS_FENCING_TOKEN $CASAAS_LOCK_URL\"")
        .env("CASAAS_ROOT", &prefix)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), format!("2 {lock}"));
}
