//! The contract suite on the embedded backends, plus cross-process races on
//! the file backend.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use casaas_core::testkit::contract::Check;
use casaas_core::testkit::{FaultConfig, FaultyStore};
use casaas_core::{CasStore, ErrorKind, FileStore, MemoryStore, Version};
use rstest::rstest;

#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    File,
    /// The fault wrapper with every probability at zero must be transparent.
    QuietFaulty,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

async fn fresh(backend: Backend) -> (Arc<dyn CasStore>, Option<tempfile::TempDir>) {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    match backend {
        Backend::Memory => (
            Arc::new(
                MemoryStore::named("contract")
                    .with_prefix(&format!("t{n}"))
                    .unwrap(),
            ),
            None,
        ),
        Backend::File => {
            let dir = tempfile::tempdir().unwrap();
            let store = FileStore::open(dir.path()).await.unwrap();
            (Arc::new(store), Some(dir))
        }
        Backend::QuietFaulty => (
            Arc::new(FaultyStore::new(
                MemoryStore::new(),
                n,
                FaultConfig::default(),
            )),
            None,
        ),
    }
}

#[rstest]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract(
    #[values(Backend::Memory, Backend::File, Backend::QuietFaulty)] backend: Backend,
    #[values(
        Check::GetAbsent,
        Check::CreateThenGet,
        Check::CreateConflictLeavesObject,
        Check::LosingCreate,
        Check::ReplaceCurrent,
        Check::ReplaceStaleRejected,
        Check::ReplaceMissing,
        Check::ConditionalDelete,
        Check::IdenticalRewriteNewVersion,
        Check::ListPrefix,
        Check::InvalidKeyRejected,
        Check::RaceCreate,
        Check::RaceReplace
    )]
    check: Check,
) {
    let (store, _dir) = fresh(backend).await;
    check.run(store, 8, 100).await;
}

#[test]
fn rstest_matrix_covers_every_check() {
    // Keeps the #[values] list above in step with Check::ALL.
    let source = include_str!("contract.rs");
    for check in Check::ALL {
        assert!(
            source.contains(&format!("Check::{check:?},"))
                || source.contains(&format!("Check::{check:?}\n")),
            "{check:?} is missing from the rstest matrix"
        );
    }
}

// ---- Cross-process races on the file backend --------------------------------
//
// The test re-executes its own binary as N children; each child runs
// `file_race_child`, which does nothing unless CASAAS_RACE_DIR is set.

const PROCESSES: usize = 6;
const ROUNDS: usize = 100;

#[test]
fn file_race_child() {
    let Ok(dir) = std::env::var("CASAAS_RACE_DIR") else {
        return;
    };
    let me: usize = std::env::var("CASAAS_RACE_ID").unwrap().parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = FileStore::open(&dir).await.unwrap();
        let versions: Vec<Version> =
            serde_json::from_slice(&std::fs::read(format!("{dir}/versions.json")).unwrap())
                .unwrap();
        let mut won = Vec::new();
        for (round, version) in versions.iter().enumerate() {
            let body = Bytes::from(format!("{me}"));
            match store.create(&format!("create/{round}"), body.clone()).await {
                Ok(_) => won.push(format!("create/{round}")),
                Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}"),
            }
            match store
                .replace(&format!("replace/{round}"), version, body)
                .await
            {
                Ok(_) => won.push(format!("replace/{round}")),
                Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}"),
            }
        }
        std::fs::write(
            format!("{dir}/won-{me}.json"),
            serde_json::to_vec(&won).unwrap(),
        )
        .unwrap();
    });
}

#[tokio::test]
async fn file_backend_cross_process_races_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let store = FileStore::open(dir.path()).await.unwrap();
    let mut versions = Vec::new();
    for round in 0..ROUNDS {
        versions.push(
            store
                .create(&format!("replace/{round}"), Bytes::from_static(b"start"))
                .await
                .unwrap(),
        );
    }
    std::fs::write(
        dir.path().join("versions.json"),
        serde_json::to_vec(&versions).unwrap(),
    )
    .unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|id| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "file_race_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("CASAAS_RACE_DIR", &path)
                .env("CASAAS_RACE_ID", id.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a racing process failed");
    }
    let mut winners: std::collections::HashMap<String, Vec<usize>> = Default::default();
    for id in 0..PROCESSES {
        let won: Vec<String> = serde_json::from_slice(
            &std::fs::read(dir.path().join(format!("won-{id}.json"))).unwrap(),
        )
        .unwrap();
        for key in won {
            winners.entry(key).or_default().push(id);
        }
    }
    for round in 0..ROUNDS {
        for kind in ["create", "replace"] {
            let key = format!("{kind}/{round}");
            let who = winners.get(&key).cloned().unwrap_or_default();
            assert_eq!(who.len(), 1, "{key}: winners {who:?}");
            let stored = store.get(&key).await.unwrap().unwrap();
            assert_eq!(stored.body, Bytes::from(format!("{}", who[0])), "{key}");
        }
    }
}

// ---- Crash safety of the file backend ---------------------------------------
//
// A child process rewrites one key in a loop with large bodies, each made of
// one repeated byte; the parent kills it with SIGKILL at a random moment. The
// object must then read back whole: present, and one uniform body.

#[test]
fn file_crash_child() {
    let Ok(dir) = std::env::var("CASAAS_CRASH_DIR") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = FileStore::open(&dir).await.unwrap();
        let mut version = store.get("victim").await.unwrap().unwrap().version;
        for i in 0u64.. {
            let body = Bytes::from(vec![(i % 251) as u8; 256 * 1024]);
            version = store.replace("victim", &version, body).await.unwrap();
        }
    });
}

#[tokio::test]
async fn file_backend_survives_sigkill_mid_write() {
    use rand::Rng;
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).await.unwrap();
    store
        .create("victim", Bytes::from(vec![0u8; 256 * 1024]))
        .await
        .unwrap();
    let exe = std::env::current_exe().unwrap();
    for attempt in 0..5 {
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "file_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CASAAS_CRASH_DIR", dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let wait = rand::rng().random_range(50..400);
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        let object = store
            .get("victim")
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("attempt {attempt}: object missing after a crash"));
        assert_eq!(
            object.body.len(),
            256 * 1024,
            "attempt {attempt}: torn object"
        );
        let first = object.body[0];
        assert!(
            object.body.iter().all(|b| *b == first),
            "attempt {attempt}: body mixes two writes"
        );
        // The store is still writable from the version it reports.
        store
            .replace("victim", &object.version, object.body.clone())
            .await
            .unwrap();
    }
}
