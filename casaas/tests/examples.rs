//! Every example runs to success against the embedded stores: one per
//! task a user comes for. `cargo test` builds the examples before it runs
//! this test; it runs the built programs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

/// The examples directory of the build this test belongs to.
fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/examples-HASH → target/<profile>/examples
    exe.parent().unwrap().parent().unwrap().join("examples")
}

fn run(name: &str, expect: &[&str]) {
    let path = examples_dir().join(name);
    assert!(
        path.exists(),
        "example {name} is not built at {}: run `cargo test -p casaas` (which builds the examples)",
        path.display()
    );
    let output = Command::new(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{name} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for line in expect {
        assert!(
            stdout.contains(line),
            "{name} did not print {line:?}:\n{stdout}"
        );
    }
}

#[test]
fn hold_lock() {
    run(
        "hold_lock",
        &["holding the lock with fencing token 1", "released"],
    );
}

#[test]
fn elect_leader() {
    run(
        "elect_leader",
        &["node-a leads with token 1", "node-b leads with token 2"],
    );
}

#[test]
fn fence_writes() {
    run("fence_writes", &["late write refused: token 1 < 2"]);
}

#[test]
fn fenced_log() {
    run(
        "fenced_log",
        &[
            "entry 2 under token 1",
            "a stale writer's append was refused",
        ],
    );
}

#[test]
fn open_with_credentials() {
    run(
        "open_with_credentials",
        &["opened memory://credentials-example/app/", "unknown option"],
    );
}

#[test]
fn leader() {
    run("leader", &["committed version 3 under token 1", "released"]);
}
