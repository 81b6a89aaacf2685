//! Running the `casaas` binary and the `fenced_append` example in tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `casaas` binary, with a clean log environment and stdin closed.
pub fn casaas() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_casaas"));
    // Settings from the environment would change what every test means.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CASAAS_") && name != "CASAAS_SERVERS_DIR" {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        // The store guard's verdicts are kept in the build's scratch space,
        // never in the user's own cache (a test may set its own).
        .env(
            "XDG_CACHE_HOME",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("cache"),
        )
        .stdin(Stdio::null());
    cmd
}

/// Runs `casaas ARGS` to completion.
pub fn run(args: &[&str]) -> Output {
    casaas().args(args).output().expect("casaas runs")
}

/// Starts `casaas ARGS` in the background (stdout and stderr piped).
pub fn spawn(args: &[&str]) -> Child {
    casaas()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("casaas starts")
}

/// The `fenced_append` example, built next to the tests by `cargo test`.
pub fn fenced_append() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let path = dir.join("examples").join("fenced_append");
    assert!(
        path.exists(),
        "{} is missing: `cargo test -p casaas-cli` builds it",
        path.display()
    );
    path
}

/// Text of an output stream.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Polls `check` every 20 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `casaas status URL` exit code.
pub fn status_code(url: &str) -> i32 {
    run(&["status", url]).status.code().unwrap_or(-1)
}

/// Waits until `url` is held (status exits 0).
pub fn wait_held(url: &str) {
    wait_until(Duration::from_secs(20), "the lock to be held", || {
        status_code(url) == 0
    });
}

/// Waits for `child` with a time limit, killing it on timeout.
pub fn wait_with_limit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("casaas did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).expect("kill");
}

/// Is process `pid` alive (not yet reaped or a zombie of someone else's)?
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Does process `pid` hold a `flock` (the file backend holds one per key
/// only while it writes)?
pub fn holds_flock(pid: u32) -> bool {
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.get(1) == Some(&"FLOCK") && fields.get(4) == Some(&pid.to_string().as_str())
        })
}

/// SIGSTOPs `pid` at a moment it is not inside a file-backend write: a
/// process paused mid-write keeps the key's flock and stalls every other
/// writer of that key until it resumes, which is not the pause under test.
pub fn pause_outside_writes(pid: u32) {
    for _ in 0..100 {
        signal(pid, nix::sys::signal::Signal::SIGSTOP);
        wait_until(Duration::from_secs(2), "the process to stop", || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('T'))
                })
                .unwrap_or(false)
        });
        if !holds_flock(pid) {
            return;
        }
        signal(pid, nix::sys::signal::Signal::SIGCONT);
        std::thread::sleep(Duration::from_millis(17));
    }
    panic!("process {pid} always holds a flock");
}
