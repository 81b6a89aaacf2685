//! The watchdog of `casaas lock` (Linux: a fork of casaas, so a copy of its
//! memory, credentials included): no other process of the user may read
//! that memory (it is not dumpable), signals sent to the command's group
//! other than SIGKILL do not end it, and a stopped watchdog does not hold
//! casaas past the grace deadline once the lease is lost.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

/// `(state, ppid, pgrp)` of `pid`, from /proc.
fn stat(pid: i32) -> Option<(char, i32, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// The children of `parent` still alive.
fn children(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(s, ppid, _)| ppid == parent && s != 'Z'))
        .collect()
}

/// casaas's watchdog: its child in the command's group that is not the
/// command (the command is the group's leader).
fn watchdog_of(casaas: i32) -> i32 {
    let mut found = None;
    wait_until(Duration::from_secs(20), "the watchdog to start", || {
        found = children(casaas)
            .into_iter()
            .find(|&pid| stat(pid).is_some_and(|(_, _, pgrp)| pgrp != pid && pgrp != casaas));
        found.is_some()
    });
    found.unwrap()
}

#[test]
fn the_watchdog_is_not_dumpable() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let url = format!("file://{}/dump", dir.path().display());
    let mut cmd = casaas();
    cmd.args(["--no-cache", "lock", &url, "--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // The files of a process that is not dumpable belong to root: run
    // casaas as someone else, so that the owner tells.
    let me = std::fs::metadata("/proc/self").unwrap().uid();
    if me == 0 {
        cmd.uid(65534).gid(65534);
    }
    let mut child = cmd.spawn().unwrap();
    let casaas_pid = child.id() as i32;
    let watchdog = watchdog_of(casaas_pid);
    // Looked at once the fork has set itself up (it may be found the
    // moment after the fork): a file under /proc/PID keeps the owner it
    // had when first looked up.
    std::thread::sleep(Duration::from_millis(300));
    let owner = |pid: i32| {
        std::fs::metadata(format!("/proc/{pid}/status"))
            .unwrap()
            .uid()
    };
    assert_ne!(owner(casaas_pid), 0, "casaas itself runs as its user");
    let watchdog_owner = owner(watchdog);
    signal(child.id(), Signal::SIGTERM);
    wait_with_limit(&mut child, Duration::from_secs(20));
    assert_eq!(
        watchdog_owner, 0,
        "the watchdog (a copy of casaas's memory) is dumpable: its /proc files belong to its user"
    );
}

#[test]
fn a_stopped_watchdog_does_not_defeat_the_grace_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/stopped", dir.path().display());
    let mut child = spawn(&[
        "--no-cache",
        "lock",
        "--ttl",
        "1s",
        "--grace",
        "300ms",
        &url,
        "--",
        "sleep",
        "60",
    ]);
    let watchdog = watchdog_of(child.id() as i32);
    signal(watchdog as u32, Signal::SIGSTOP);
    wait_until(Duration::from_secs(5), "the watchdog to stop", || {
        stat(watchdog).is_some_and(|(s, _, _)| s == 'T')
    });
    // The lock object removed: the next renewal finds it gone, the lease
    // is lost and the command stopped, within the grace period.
    let lost = Instant::now();
    std::fs::remove_file(dir.path().join("stopped~obj")).unwrap();
    let status = wait_with_limit(&mut child, Duration::from_secs(15));
    let took = lost.elapsed();
    assert_eq!(status.code(), Some(76), "lost the lock");
    assert!(
        took < Duration::from_secs(5),
        "casaas waited {took:?} for a stopped watchdog"
    );
    wait_until(Duration::from_secs(5), "the watchdog to be gone", || {
        !alive(watchdog)
    });
}

#[test]
fn stray_signals_to_the_group_leave_the_watchdog_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/stray", dir.path().display());
    let mut child = spawn(&["--no-cache", "lock", &url, "--", "sleep", "60"]);
    let watchdog = watchdog_of(child.id() as i32);
    // Signals whose default is to end a process, sent to the command's
    // group by someone else (casaas forwards only INT, TERM, HUP, QUIT).
    for stray in [
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGTSTP,
    ] {
        signal(watchdog as u32, stray);
    }
    std::thread::sleep(Duration::from_millis(300));
    let state = stat(watchdog).map(|(s, _, _)| s);
    signal(child.id(), Signal::SIGTERM);
    wait_with_limit(&mut child, Duration::from_secs(20));
    assert!(
        matches!(state, Some('S' | 'R')),
        "a stray signal ended or stopped the watchdog: {state:?}"
    );
}
