#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

//! FileStore promises that hold within one process: several store instances
//! and threads on one directory exclude each other, and a stopped lock
//! holder costs other writers a bounded wait, never a hang.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use casaas_core::{CasStore, ErrorKind, FileStore, Version};

const ROUNDS: usize = 40;
/// Writers per round: tasks on a multi-threaded runtime, half on each of
/// two store instances, plus OS threads with runtimes of their own.
const TASKS: usize = 6;
const THREADS: usize = 4;

/// One contender's attempt at round `round`: the keys it won.
async fn contend(store: &FileStore, round: usize, start: &Version, me: usize) -> Vec<String> {
    let body = Bytes::from(me.to_string());
    let mut won = Vec::new();
    let create = format!("create/{round}");
    match store.create(&create, body.clone()).await {
        Ok(_) => won.push(create),
        Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}"),
    }
    let replace = format!("replace/{round}");
    match store.replace(&replace, start, body).await {
        Ok(_) => won.push(replace),
        Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}"),
    }
    won
}

/// Adds one to the counter at `key` by read, then conditional replace.
async fn increment(store: &FileStore, key: &str) {
    loop {
        let current = store.get(key).await.unwrap().unwrap();
        let n: u64 = std::str::from_utf8(&current.body).unwrap().parse().unwrap();
        match store
            .replace(key, &current.version, Bytes::from((n + 1).to_string()))
            .await
        {
            Ok(_) => return,
            Err(e) => assert_eq!(e.kind(), ErrorKind::PreconditionFailed, "{e}"),
        }
    }
}

#[test]
fn two_store_instances_and_threads_in_one_process_exclude_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let first = runtime.block_on(FileStore::open(dir.path())).unwrap();
    let second = runtime.block_on(FileStore::open(dir.path())).unwrap();
    let stores = [first.clone(), second.clone()];
    let mut starts = Vec::new();
    for round in 0..ROUNDS {
        starts.push(
            runtime
                .block_on(first.create(&format!("replace/{round}"), Bytes::from_static(b"start")))
                .unwrap(),
        );
    }
    runtime
        .block_on(first.create("counter", Bytes::from_static(b"0")))
        .unwrap();
    let starts = Arc::new(starts);
    const INCREMENTS: usize = 10;

    // OS threads, each with its own runtime and alternating instances.
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, starts) = (stores[t % 2].clone(), starts.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let me = TASKS + t;
                    let mut won = Vec::new();
                    for (round, start) in starts.iter().enumerate() {
                        won.extend(contend(&store, round, start, me).await);
                        if round < INCREMENTS {
                            increment(&store, "counter").await;
                        }
                    }
                    (me, won)
                })
            })
        })
        .collect();
    let tasks: Vec<_> = (0..TASKS)
        .map(|me| {
            let (store, starts) = (stores[me % 2].clone(), starts.clone());
            runtime.spawn(async move {
                let mut won = Vec::new();
                for (round, start) in starts.iter().enumerate() {
                    won.extend(contend(&store, round, start, me).await);
                    if round < INCREMENTS {
                        increment(&store, "counter").await;
                    }
                }
                (me, won)
            })
        })
        .collect();

    let mut results: Vec<(usize, Vec<String>)> = threads
        .into_iter()
        .map(|t| t.join().expect("a contending thread panicked"))
        .collect();
    for task in tasks {
        results.push(runtime.block_on(task).expect("a contending task panicked"));
    }
    let mut winners: HashMap<String, Vec<usize>> = HashMap::new();
    for (me, won) in results {
        for key in won {
            winners.entry(key).or_default().push(me);
        }
    }
    runtime.block_on(async {
        for round in 0..ROUNDS {
            for kind in ["create", "replace"] {
                let key = format!("{kind}/{round}");
                let who = winners.get(&key).cloned().unwrap_or_default();
                assert_eq!(who.len(), 1, "{key}: winners {who:?}");
                let stored = second.get(&key).await.unwrap().unwrap();
                assert_eq!(stored.body, Bytes::from(who[0].to_string()), "{key}");
            }
        }
        let counter = second.get("counter").await.unwrap().unwrap();
        assert_eq!(
            counter.body,
            Bytes::from(((TASKS + THREADS) * INCREMENTS).to_string()),
            "increments were lost: two writers held the lock at once"
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_lock_holder_gets_writers_a_retryable_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).await.unwrap();
    let v1 = store
        .create("held", Bytes::from_static(b"1"))
        .await
        .unwrap();
    // A second open file description holding the key's lock, as a process
    // stopped with SIGSTOP in the middle of a write would.
    let holder = std::fs::File::create(dir.path().join("held~lock")).unwrap();
    holder.lock().unwrap();
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        store.replace("held", &v1, Bytes::from_static(b"2")),
    )
    .await;
    let waited = started.elapsed();
    // Release a writer stuck on the lock, so that a failure does not hang.
    drop(holder);
    let err = outcome
        .expect("the writer waited for the lock holder without bound")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConcurrentRequest, "{err}");
    assert!(err.is_retryable() && !err.may_have_taken_effect());
    assert!(err.to_string().contains("held~lock"), "{err}");
    assert!(waited < Duration::from_secs(15), "waited {waited:?}");
    assert_eq!(
        store.get("held").await.unwrap().unwrap().body,
        Bytes::from_static(b"1")
    );
}
