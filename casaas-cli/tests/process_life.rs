//! What outlives `casaas lock`: nothing of its command when casaas is
//! SIGKILLed (Linux), and colour in its logs only on a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

fn lock_url(dir: &Path, name: &str) -> String {
    format!("file://{}/{name}", dir.display())
}

/// The live (not zombie) processes whose process group is `group`.
#[cfg(target_os = "linux")]
fn group_members(group: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        // After the command name: state, ppid, pgrp.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == group.to_string() {
            members.push(pid);
        }
    }
    members
}

#[cfg(target_os = "linux")]
#[test]
fn sigkill_of_casaas_takes_its_whole_command_group_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "killed");
    let pids = dir.path().join("pids");
    let second_ran = dir.path().join("second-ran");
    // A shell with a grandchild (and a great-grandchild), all in the
    // command's group; the shell records its pid once they run.
    let script = format!(
        "sleep 60 & sh -c 'sleep 60 & wait' & echo $$ > {pids}.tmp; mv {pids}.tmp {pids}; wait",
        pids = pids.display()
    );
    let mut first = spawn(&["lock", "--ttl", "1s", &url, "--", "sh", "-c", &script]);
    wait_until(Duration::from_secs(20), "the first command to run", || {
        pids.exists()
    });
    let group: i32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(Duration::from_secs(5), "the grandchildren", || {
        // The shell, two sleeps, the inner shell and the watchdog.
        group_members(group).len() >= 5
    });

    signal(first.id(), Signal::SIGKILL);
    let killed = Instant::now();
    first.wait().unwrap();
    // A second locker starts at once; it must not run its command while
    // anything of the first one's is alive.
    let mut second = spawn(&[
        "lock",
        "--ttl",
        "1s",
        "--wait=20s",
        &url,
        "--",
        "sh",
        "-c",
        &format!("touch {}", second_ran.display()),
    ]);
    loop {
        let left = group_members(group);
        if left.is_empty() {
            break;
        }
        assert!(
            !second_ran.exists(),
            "the second command ran beside {left:?}"
        );
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "the command group outlived casaas by a second: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = wait_with_limit(&mut second, Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    assert!(second_ran.exists());
    // It could take over only after the first's TTL, long after the group died.
    assert!(killed.elapsed() >= Duration::from_millis(900));
}

#[test]
fn a_normal_exit_leaves_no_watchdog_and_spares_the_commands_daemons() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "normal");
    let pidfile = dir.path().join("daemon.pid");
    let script = format!(
        "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}",
        pidfile.display()
    );
    let out = run(&["lock", "--ttl", "1s", &url, "--", "sh", "-c", &script]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let daemon: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        alive(daemon),
        "the watchdog killed a daemon after a normal exit"
    );
    #[cfg(target_os = "linux")]
    {
        let group = std::fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap();
        let group: i32 = group
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(group_members(group), [daemon], "a watchdog was left behind");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon), Signal::SIGKILL).unwrap();
}

/// stderr of `casaas -v lock` (info logs) with the given extra environment,
/// on a pipe.
fn logs_on_a_pipe(envs: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "colour");
    let mut cmd = casaas();
    cmd.env_remove("NO_COLOR")
        .args(["-v", "lock", &url, "--", "true"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stderr)
}

#[test]
fn no_colour_in_logs_on_a_pipe_or_under_no_color() {
    let piped = logs_on_a_pipe(&[]);
    assert!(piped.contains("lock acquired"), "{piped}");
    assert!(!piped.contains('\x1b'), "escape codes on a pipe: {piped:?}");
    let plain = on_a_terminal(&[("NO_COLOR", "1")]);
    assert!(plain.contains("lock acquired"), "{plain}");
    assert!(
        !plain.contains('\x1b'),
        "escape codes under NO_COLOR: {plain:?}"
    );
}

#[test]
fn colour_in_logs_on_a_terminal() {
    let shown = on_a_terminal(&[]);
    assert!(shown.contains("lock acquired"), "{shown}");
    assert!(
        shown.contains("\x1b["),
        "no colour on a terminal: {shown:?}"
    );
    // An empty NO_COLOR does not count (no-color.org).
    let shown = on_a_terminal(&[("NO_COLOR", "")]);
    assert!(shown.contains("\x1b["), "{shown:?}");
}

/// stderr of `casaas -v lock` written to a pseudo-terminal.
fn on_a_terminal(envs: &[(&str, &str)]) -> String {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "tty");
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut cmd = casaas();
    cmd.env_remove("NO_COLOR")
        .args(["-v", "lock", &url, "--", "true"])
        .stderr(std::process::Stdio::from(pty.slave));
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    // Dropping our copy of the terminal's end lets the read below end once
    // casaas and its children have closed theirs.
    drop(cmd);
    let status = wait_with_limit(&mut child, Duration::from_secs(20));
    assert!(status.success());
    let mut master = std::fs::File::from(pty.master);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // Linux answers EIO once no process has the terminal open.
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    text(&out)
}
