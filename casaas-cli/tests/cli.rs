//! `casaas` end to end on the embedded file backend: mutual exclusion
//! across processes, the stop sequence when a paused holder loses its lease,
//! exit statuses, signals, status and elect output, and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

/// A lock in `DIR/locks`, which exists (no command creates a missing
/// directory unless asked).
fn lock_url(dir: &Path, name: &str) -> String {
    std::fs::create_dir_all(dir.join("locks")).unwrap();
    format!("file://{}/locks/{name}", dir.display())
}

#[test]
fn four_lockers_never_overlap_and_every_child_runs() {
    let dir = tempfile::tempdir().unwrap();
    four_lockers(dir.path(), &lock_url(dir.path(), "shared"));
}

#[test]
fn four_lockers_never_overlap_in_the_create_only_layout() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?layout=epochs", lock_url(dir.path(), "shared"));
    four_lockers(dir.path(), &url);
    // The lock is listed once, in its layout, and its parts are not.
    let out = casaas()
        .args([
            "ls",
            "--json",
            &format!("file://{}/locks", dir.path().display()),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["key"], "shared");
    assert_eq!(listed[0]["layout"], "epochs");
    assert_eq!(listed[0]["state"], "released");
    // A record-layout process is refused by name, and changes nothing.
    let plain = lock_url(dir.path(), "shared");
    let out = casaas()
        .args(["lock", "--no-wait", &plain, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("layout=epochs"),
        "{}",
        text(&out.stderr)
    );
}

/// Four processes run `casaas lock URL` 50 times in all; their commands'
/// intervals never overlap and every one runs.
fn four_lockers(dir: &Path, url: &str) {
    let url = url.to_string();
    let log = dir.join("intervals.log");
    // Each child appends "start ID T" and "end ID T" (T: CLOCK_BOOTTIME,
    // a monotonic clock shared by all processes); 50 runs in all.
    let script = format!(
        "echo \"start $ID $(cut -d' ' -f1 /proc/uptime)\" >> {log}; sleep 0.03; \
         echo \"end $ID $(cut -d' ' -f1 /proc/uptime)\" >> {log}",
        log = log.display()
    );
    let runs = [13, 13, 12, 12];
    let workers: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(worker, &count)| {
            let (url, script) = (url.clone(), script.clone());
            std::thread::spawn(move || {
                for run in 0..count {
                    let out = casaas()
                        .args([
                            "lock",
                            "--ttl",
                            "1s",
                            "--wait=60s",
                            &url,
                            "--",
                            "sh",
                            "-c",
                            &script,
                        ])
                        .env("ID", format!("w{worker}r{run}"))
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{}", text(&out.stderr));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<(String, String, f64)> = text
        .lines()
        .map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (
                parts[0].to_string(),
                parts[1].to_string(),
                parts[2].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(lines.len(), 100, "{text}");
    let mut last_end = 0.0;
    for pair in lines.chunks(2) {
        let (start, end) = (&pair[0], &pair[1]);
        assert_eq!(start.0, "start", "two intervals overlap:\n{text}");
        assert_eq!(end.0, "end", "two intervals overlap:\n{text}");
        assert_eq!(start.1, end.1, "two intervals overlap:\n{text}");
        assert!(
            start.2 >= last_end && end.2 >= start.2,
            "times go back:\n{text}"
        );
        last_end = end.2;
    }
    for (worker, &count) in runs.iter().enumerate() {
        for run in 0..count {
            let id = format!("w{worker}r{run}");
            assert!(lines.iter().any(|l| l.1 == id), "{id} never ran:\n{text}");
        }
    }
}

#[test]
fn a_paused_holder_is_fenced_out_then_stopped_within_grace() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "paused");
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let data = format!("file://{}/data", dir.path().display());
    let append = fenced_append();
    let refused = dir.path().join("refused");
    let child_pid = dir.path().join("child.pid");
    // The old holder's command: a fenced write, then (after the takeover) a
    // second one with its now stale token, then it keeps running.
    let old_script = format!(
        "echo $$ > {pid}; {append} {data} journal old-1 || exit 9; \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         {append} {data} journal old-2; echo $? > {refused}; sleep 60",
        pid = child_pid.display(),
        append = append.display(),
        go = dir.path().join("go").display(),
        refused = refused.display(),
    );
    let mut old = spawn(&[
        "lock",
        "--ttl",
        "1s",
        "--grace",
        "300ms",
        &url,
        "--",
        "sh",
        "-c",
        &old_script,
    ]);
    wait_until(Duration::from_secs(20), "the first fenced write", || {
        child_pid.exists() && status_code(&url) == 0
    });
    std::thread::sleep(Duration::from_millis(200));
    pause_outside_writes(old.id());

    // A contender takes over once the record is unchanged for a TTL.
    let started = Instant::now();
    let new = run(&[
        "lock",
        "--ttl",
        "1s",
        "--wait=20s",
        &url,
        "--",
        append.to_str().unwrap(),
        &data,
        "journal",
        "new-1",
    ]);
    assert!(new.status.success(), "{}", text(&new.stderr));
    assert!(
        text(&new.stdout).contains("token 2"),
        "{}",
        text(&new.stdout)
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "took over too early"
    );

    // The old command, still running, writes with token 1: refused.
    std::fs::write(dir.path().join("go"), "").unwrap();
    wait_until(Duration::from_secs(10), "the stale write", || {
        refused.exists()
    });
    assert_eq!(std::fs::read_to_string(&refused).unwrap().trim(), "3");

    // On SIGCONT the old casaas notices, stops its command, exits 76.
    let resumed = Instant::now();
    signal(old.id(), Signal::SIGCONT);
    let status = wait_with_limit(&mut old, Duration::from_secs(5));
    let took = resumed.elapsed();
    let stderr = {
        use std::io::Read;
        let mut s = String::new();
        old.stderr.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(took < Duration::from_secs(2), "stopping took {took:?}");
    assert!(stderr.contains("lost the lock"), "{stderr}");
    let pid: i32 = std::fs::read_to_string(&child_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(Duration::from_secs(2), "the old command to be gone", || {
        !alive(pid)
    });

    let journal = read_journal(dir.path());
    assert_eq!(journal, ["old-1", "new-1"]);
}

fn read_journal(dir: &Path) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = casaas_core::open_store(&format!("file://{}/data", dir.display()))
            .await
            .unwrap();
        casaas_core::lease::FencedResource::<Vec<String>>::new(store, "journal")
            .unwrap()
            .read()
            .await
            .unwrap()
            .unwrap()
            .value
    })
}

#[test]
fn the_commands_exit_status_propagates() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "status");
    for (script, code) in [
        ("exit 0", 0),
        ("exit 7", 7),
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
    ] {
        let out = run(&["lock", "--ttl", "1s", &url, "--", "sh", "-c", script]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{script}: {}",
            text(&out.stderr)
        );
        // Released each time: the next run does not wait.
        assert_eq!(status_code(&url), 4);
    }
    let out = run(&["lock", &url, "--", "/nonexistent/command"]);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("command not found"));
    assert_eq!(status_code(&url), 4);
}

#[test]
fn the_command_sees_token_url_and_owner() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "env");
    let script = "echo \"$CASAAS_FENCING_TOKEN|$CASAAS_LOCK_URL|$CASAAS_OWNER\"";
    for token in 1..=2 {
        let out = run(&["lock", "--owner", "job-7", &url, "--", "sh", "-c", script]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), format!("{token}|{url}|job-7"));
    }
}

#[test]
fn no_wait_on_a_held_lock_exits_with_the_conflict_code_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "busy");
    let mut holder = spawn(&["lock", "--owner", "holder", &url, "--", "sleep", "30"]);
    wait_held(&url);
    let start = Instant::now();
    let out = run(&["lock", "-n", &url, "--", "true"]);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("held by \"holder\" (token 1)"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let out = run(&[
        "lock",
        "-n",
        "--conflict-exit-code",
        "9",
        &url,
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(9));
    let out = run(&["lock", "--wait=300ms", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    signal(holder.id(), Signal::SIGTERM);
    let status = wait_with_limit(&mut holder, Duration::from_secs(5));
    assert_eq!(status.code(), Some(143));
}

#[test]
fn sigterm_reaches_the_commands_group_and_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "term");
    let marker = dir.path().join("grandchild-got-term");
    // The grandchild proves that the whole group gets the signal.
    let script = format!(
        "sh -c 'trap \"echo term > {m}; exit 0\" TERM; sleep 30 & wait' & wait; exit 5",
        m = marker.display()
    );
    let mut locker = spawn(&["lock", &url, "--", "sh", "-c", &script]);
    wait_held(&url);
    std::thread::sleep(Duration::from_millis(200));
    signal(locker.id(), Signal::SIGTERM);
    let status = wait_with_limit(&mut locker, Duration::from_secs(5));
    assert!(marker.exists(), "the grandchild did not get SIGTERM");
    // The command was killed by the forwarded SIGTERM.
    assert_eq!(status.code(), Some(143));
    assert_eq!(status_code(&url), 4, "the lock was not released");
}

/// SIGQUIT (Ctrl-\\) goes to the command as the other signals do: casaas
/// does not dump core and leave the command running without its lock.
#[test]
fn sigquit_reaches_the_command_and_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "quit");
    let marker = dir.path().join("got-quit");
    let script = format!(
        "trap 'echo quit > {m}; exit 9' QUIT; sleep 30 & wait",
        m = marker.display()
    );
    let mut locker = spawn(&["lock", &url, "--", "sh", "-c", &script]);
    wait_held(&url);
    std::thread::sleep(Duration::from_millis(200));
    signal(locker.id(), Signal::SIGQUIT);
    let status = wait_with_limit(&mut locker, Duration::from_secs(5));
    assert!(marker.exists(), "the command did not get SIGQUIT");
    // casaas itself was not killed by the signal: it reports the
    // command's status and releases the lock.
    assert_eq!(status.code(), Some(9));
    assert_eq!(status_code(&url), 4, "the lock was not released");
}

#[test]
fn a_daemon_forked_by_the_command_does_not_keep_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "daemon");
    let pidfile = dir.path().join("daemon.pid");
    let script = format!(
        "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}",
        pidfile.display()
    );
    let start = Instant::now();
    let out = run(&["lock", "--ttl", "1s", &url, "--", "sh", "-c", &script]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(start.elapsed() < Duration::from_secs(5));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid), "the daemon should outlive the command");
    // It inherited nothing of casaas: besides its own stdin, stdout and
    // stderr, only what this test process itself passes on to children
    // (e.g. a build tool's jobserver pipe).
    let passed_on: Vec<u32> = open_fds("self")
        .into_iter()
        .filter(|fd| !close_on_exec(*fd))
        .collect();
    // A descriptor the daemon opens itself while it starts (sleep reading
    // the locale's files) is closed again; an inherited one stays.
    let inherited = || -> Vec<(u32, std::io::Result<std::path::PathBuf>)> {
        open_fds(&pid.to_string())
            .into_iter()
            .filter(|fd| *fd > 2 && !passed_on.contains(fd))
            .map(|fd| (fd, std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))))
            .collect()
    };
    let settled = Instant::now() + Duration::from_secs(3);
    let mut found = inherited();
    while !found.is_empty() && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(100));
        found = inherited();
    }
    assert!(found.is_empty(), "the daemon inherited {found:?}");
    // The lock is released at once, and nothing renews it afterwards.
    let out = run(&["status", "--json", &url]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stdout).contains("\"released\""),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["lock", "-n", &url, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL).unwrap();
}

fn open_fds(pid: &str) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn close_on_exec(fd: u32) -> bool {
    // /proc/self/fdinfo/N: "flags:\t0NNNNNNN" (octal); O_CLOEXEC is 02000000.
    std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .ok()
        .and_then(|info| {
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
            u32::from_str_radix(flags.trim(), 8).ok()
        })
        .is_none_or(|flags| flags & 0o2000000 != 0)
}

fn status_json(url: &str) -> (i32, serde_json::Value) {
    let out = run(&["status", "--json", url]);
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
    (out.status.code().unwrap(), value)
}

#[test]
fn status_json_reports_held_released_and_free() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "report");
    let (code, free) = status_json(&url);
    assert_eq!(code, 4);
    assert_eq!(free["url"].as_str(), Some(url.as_str()));
    insta::assert_json_snapshot!("status_free", free, {".url" => "[url]", ".observed_for_ms" => "[ms]"});

    let mut holder = spawn(&[
        "lock",
        "--ttl",
        "2s",
        "--owner",
        "snapshot-holder",
        &url,
        "--",
        "sleep",
        "30",
    ]);
    wait_held(&url);
    let (code, held) = status_json(&url);
    assert_eq!(code, 0);
    assert!(held["takeover_possible_in_ms"].as_u64().unwrap() > 1000);
    let redactions = |name: &str, v: serde_json::Value| {
        insta::assert_json_snapshot!(name, v, {
            ".url" => "[url]",
            ".acquired_at" => "[time]",
            ".renewed_at" => "[time]",
            ".version" => "[version]",
            ".observed_for_ms" => "[ms]",
            ".observed_unchanged_ms" => "[ms]",
            ".takeover_possible_in_ms" => "[ms]",
        })
    };
    redactions("status_held", held.clone());
    signal(holder.id(), Signal::SIGTERM);
    wait_with_limit(&mut holder, Duration::from_secs(5));
    let (code, released) = status_json(&url);
    assert_eq!(code, 4);
    assert_eq!(released["takeover_possible_in_ms"], 0);
    redactions("status_released", released);

    // Watching a record nobody renews shows it expire.
    let out = run(&[
        "lock",
        "--ttl",
        "1s",
        &url,
        "--",
        "sh",
        "-c",
        "kill -KILL $PPID",
    ]);
    assert_eq!(out.status.code(), None, "casaas itself was killed");
    let (code, report) = {
        let out = run(&["status", "--json", "--observe-for", "1.5s", &url]);
        (
            out.status.code().unwrap(),
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
        )
    };
    assert_eq!(
        (code, report["state"].as_str()),
        (4, Some("expired")),
        "{report}"
    );
}

#[test]
fn elect_observe_prints_leader_changes_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "election");
    let out = run(&[
        "elect",
        &url,
        "--id",
        "node-a",
        "--ttl",
        "1s",
        "--observe",
        "--",
        "sh",
        "-c",
        "echo \"leading with $CASAAS_FENCING_TOKEN\" >&2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("leading with 1"));
    insta::assert_snapshot!("elect_observe_one_term", text(&out.stdout));

    // An observer sees another candidate's term start and end.
    let mut observer = spawn(&["elect", &url, "--observe", "--ttl", "1s"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = run(&[
        "elect", &url, "--id", "node-b", "--ttl", "1s", "--", "sleep", "0.5",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_millis(500));
    signal(observer.id(), Signal::SIGTERM);
    wait_with_limit(&mut observer, Duration::from_secs(5));
    let mut stdout = String::new();
    use std::io::Read;
    observer
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    insta::assert_snapshot!("elect_observe_watcher", stdout);
}

#[test]
fn status_and_release_force_in_the_create_only_layout() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?layout=epochs", lock_url(dir.path(), "stale"));
    let out = run(&[
        "lock",
        "--ttl",
        "30s",
        "--owner",
        "crashed",
        &url,
        "--",
        "sh",
        "-c",
        "kill -KILL $PPID",
    ]);
    assert_eq!(out.status.code(), None);
    assert_eq!(status_code(&url), 0);
    let out = run(&["release", "--force", "--yes", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (code, report) = status_json(&url);
    assert_eq!(
        (code, report["state"].as_str(), report["token"].as_u64()),
        (4, Some("released"), Some(1))
    );
    let out = run(&[
        "lock",
        "-n",
        &url,
        "--",
        "sh",
        "-c",
        "test \"$CASAAS_FENCING_TOKEN\" = 2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn release_force_breaks_a_stale_lock_keeping_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "stale");
    // A holder killed outright leaves its lock held.
    let out = run(&[
        "lock",
        "--ttl",
        "30s",
        "--owner",
        "crashed",
        &url,
        "--",
        "sh",
        "-c",
        "kill -KILL $PPID",
    ]);
    assert_eq!(out.status.code(), None);
    assert_eq!(status_code(&url), 0);
    // Without --yes, and no terminal to ask on: refused, nothing written.
    let before = std::fs::read(dir.path().join("locks/stale~obj")).unwrap();
    let out = run(&["release", "--force", &url]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("pass --yes"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read(dir.path().join("locks/stale~obj")).unwrap(),
        before
    );
    // Without --force: a usage error.
    assert_eq!(run(&["release", &url]).status.code(), Some(2));

    let out = run(&["release", "--force", "--yes", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stderr);
    assert!(
        shown.contains("crashed") && shown.contains("token    1"),
        "{shown}"
    );
    let (code, report) = status_json(&url);
    assert_eq!(
        (code, report["state"].as_str(), report["token"].as_u64()),
        (4, Some("released"), Some(1))
    );
    let out = run(&[
        "lock",
        "-n",
        &url,
        "--",
        "sh",
        "-c",
        "echo $CASAAS_FENCING_TOKEN",
    ]);
    assert_eq!(text(&out.stdout).trim(), "2", "the token must not restart");
}

/// Bad input on the command line exits 2; a store URL whose configuration
/// the store (or its provider) refuses, 78. Either way one line, and
/// nothing written.
#[test]
fn bad_input_gets_one_line_and_exit_2_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("untouched");
    let base = format!("file://{}", root.display());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "lock".into(),
                "not a url".into(),
                "--".into(),
                "true".into(),
            ],
            "not a valid lock URL",
        ),
        (
            vec![
                "lock".into(),
                format!("{base}/locks/"),
                "--".into(),
                "true".into(),
            ],
            "names a directory",
        ),
        (
            vec![
                "lock".into(),
                format!("{base}/x?bogus=1"),
                "--".into(),
                "true".into(),
            ],
            "unknown option 'bogus'",
        ),
        (
            vec![
                "lock".into(),
                "--bogus".into(),
                format!("{base}/x"),
                "--".into(),
                "true".into(),
            ],
            "--bogus",
        ),
        (
            vec![
                "lock".into(),
                "--ttl".into(),
                "soon".into(),
                format!("{base}/x"),
                "--".into(),
                "true".into(),
            ],
            "invalid value 'soon' for '--ttl",
        ),
        (
            vec![
                "lock".into(),
                "--ttl".into(),
                "1s".into(),
                "--grace".into(),
                "1s".into(),
                format!("{base}/x"),
                "--".into(),
                "true".into(),
            ],
            "--grace 1s is not shorter",
        ),
        (vec!["lock".into(), format!("{base}/x")], "CMD"),
        (
            vec!["status".into(), "ftp://host/x".into()],
            "no backend for scheme 'ftp'",
        ),
        (
            vec![
                "elect".into(),
                format!("{base}/x"),
                "--".into(),
                "true".into(),
            ],
            "--id is required",
        ),
    ];
    for (args, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        let stderr = text(&out.stderr);
        let store_configuration = ["unknown option 'bogus'", "no backend for scheme 'ftp'"];
        let want = if store_configuration.contains(&says) {
            78
        } else {
            2
        };
        assert_eq!(out.status.code(), Some(want), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!root.exists(), "{args:?} wrote something");
    }
}

#[test]
fn a_foreign_object_at_the_key_is_reported_and_never_touched() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "foreign");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(async {
        let store = casaas_core::open_store(&format!("file://{}/locks", dir.path().display()))
            .await
            .unwrap();
        store
            .create("foreign", bytes_of("not a lock"))
            .await
            .unwrap();
        store
    });
    let before = runtime.block_on(store.get("foreign")).unwrap().unwrap();
    for args in [
        vec!["lock", url.as_str(), "--", "true"],
        vec!["lock", "-n", url.as_str(), "--", "true"],
        vec!["status", url.as_str()],
        vec!["release", "--force", "--yes", url.as_str()],
        vec!["elect", url.as_str(), "--id", "a", "--", "true"],
    ] {
        let out = run(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("not a casaas"), "{args:?}: {stderr}");
    }
    let after = runtime.block_on(store.get("foreign")).unwrap().unwrap();
    assert_eq!((after.version, after.body), (before.version, before.body));
}

fn bytes_of(text: &str) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(text.as_bytes())
}

#[test]
fn help_has_examples_and_completions_are_generated() {
    for command in ["lock", "status", "elect", "release"] {
        let out = run(&[command, "--help"]);
        assert!(out.status.success());
        assert!(text(&out.stdout).contains("Example"), "{command}");
    }
    let out = run(&["completions", "bash"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("casaas"));
    let out = casaas()
        .args(["conformance", "--list-probes"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).lines().count() > 5);
}

#[test]
fn a_leader_that_loses_its_term_stops_its_command_and_exits_76() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "term");
    let mut old = spawn(&[
        "elect", &url, "--id", "node-a", "--ttl", "1s", "--grace", "200ms", "--", "sleep", "60",
    ]);
    wait_held(&url);
    pause_outside_writes(old.id());
    let out = run(&[
        "elect",
        &url,
        "--id",
        "node-b",
        "--ttl",
        "1s",
        "--",
        "sh",
        "-c",
        "echo $CASAAS_FENCING_TOKEN",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "2");
    let resumed = Instant::now();
    signal(old.id(), Signal::SIGCONT);
    let status = wait_with_limit(&mut old, Duration::from_secs(5));
    assert_eq!(status.code(), Some(76));
    assert!(
        resumed.elapsed() < Duration::from_secs(2),
        "{:?}",
        resumed.elapsed()
    );
}

#[test]
fn json_logs_carry_errors_as_json_lines() {
    let out = run(&["--log-format", "json", "lock", "not a url", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let line: serde_json::Value = serde_json::from_slice(&out.stderr)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert_eq!(line["level"], "ERROR");
    assert!(
        line["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("not a valid lock URL"),
        "{line}"
    );
}

/// `casaas conformance` opens adapter URLs exactly as `casaas-conformance`
/// does: on every adapter URL that needs no server, the command's verdict
/// and backend are those of the library suite the standalone binary runs
/// (`casaas_conformance::Suite` on `open_store_with`, in this process).
#[test]
fn casaas_conformance_and_the_standalone_suite_agree_on_adapter_urls() {
    let dir = tempfile::tempdir().unwrap();
    let urls = [
        "object_store+memory:///agree".to_string(),
        "opendal+memory:///agree".to_string(),
        format!("object_store+file://{}/os", dir.path().display()),
        format!("opendal+fs://{}/od", dir.path().display()),
    ];
    let only = "create_if_absent,create_conflict,replace_if_match,replace_stale";
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for url in &urls {
        let out = run(&[
            "conformance",
            url,
            "--quick",
            "--format",
            "json",
            "--only",
            only,
        ]);
        let command: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{url}: {e}: {}", text(&out.stderr)));
        let library = runtime.block_on(async {
            casaas_object_store::register();
            casaas_opendal::register();
            let store = casaas_core::open_store_with(url, [("capability_profile", "none")])
                .await
                .unwrap();
            let suite = casaas_conformance::Suite::standard()
                .only(&only.split(',').map(String::from).collect::<Vec<_>>())
                .unwrap();
            suite
                .run(
                    &casaas_conformance::Target::new(store, url.as_str()),
                    &casaas_conformance::Settings::quick(),
                    std::sync::Arc::new(casaas_conformance::NoProgress),
                )
                .await
                .unwrap()
        });
        assert_eq!(
            command["verdict"],
            library.verdict.as_str(),
            "{url}: {}",
            library.to_table()
        );
        assert_eq!(
            command["backend"]["scheme"], library.backend.scheme,
            "{url}"
        );
        assert_eq!(
            out.status.code(),
            Some(i32::from(library.exit_code())),
            "{url}"
        );
        let blockers: Vec<&str> = command["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["severity"] == "critical" && p["verdict"] != "pass")
            .map(|p| p["id"].as_str().unwrap())
            .collect();
        let library_blockers: Vec<&str> =
            library.blockers().iter().map(|p| p.id.as_str()).collect();
        assert_eq!(blockers, library_blockers, "{url}");
    }
}

/// A credential typed into a lock URL is refused and never echoed: the
/// refusal names the option and where it goes, with the value masked.
#[test]
fn a_credential_in_a_url_is_refused_and_never_echoed() {
    let secret = "SEKRET-in-the-url-0123456789";
    for url in [
        format!("s3://bucket/locks/x?region=x&aws_secret_access_key={secret}"),
        format!("az://acct/container/x?azure_storage_key={secret}"),
    ] {
        let out = run(&["lock", "-n", &url, "--", "true"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{stderr}");
        assert!(stderr.contains("never goes in the URL"), "{stderr}");
        assert!(!stderr.contains(secret), "{stderr}");
        assert!(!text(&out.stdout).contains(secret));
    }
}

/// Every command through the adapters' local-directory URLs, no server
/// needed: `object_store+file://DIR/KEY` and `opendal+fs://DIR/KEY`. A
/// held lock reads as held (exit 0), `-n` on it gives the conflict code,
/// `ls` lists it, `release --force` breaks it (its holder exits 76), and a
/// missing directory is refused by every command, creating nothing.
#[test]
fn adapter_file_urls_work_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    for (adapter, scheme) in [("object_store", "file"), ("opendal", "fs")] {
        let root = dir.path().join(adapter);
        std::fs::create_dir(&root).unwrap();
        let prefix = format!("{adapter}+{scheme}://{}", root.display());
        let lock = format!("{prefix}/job");
        let out = run(&[
            "lock",
            "-n",
            "--ttl",
            "3s",
            &lock,
            "--",
            "sh",
            "-c",
            "echo $CASAAS_FENCING_TOKEN",
        ]);
        assert!(out.status.success(), "{adapter}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), "1", "{adapter}");
        assert_eq!(status_code(&lock), 4, "{adapter}: released is free");

        let mut holder = spawn(&[
            "lock", "--ttl", "3s", "--owner", "holder", &lock, "--", "sleep", "30",
        ]);
        wait_held(&lock);
        let out = run(&["status", "--json", &lock]);
        assert_eq!(out.status.code(), Some(0), "{adapter}: held");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (report["state"].as_str(), report["holder"].as_str()),
            (Some("held"), Some("holder")),
            "{adapter}: {report}"
        );
        assert_eq!(report["token"].as_u64(), Some(2), "{adapter}: {report}");
        let out = run(&["lock", "-n", &lock, "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(75),
            "{adapter}: {}",
            text(&out.stderr)
        );
        let out = run(&["ls", "--json", &prefix]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{adapter}: {}",
            text(&out.stderr)
        );
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let listed = listed.as_array().unwrap();
        assert_eq!(listed.len(), 1, "{adapter}: {listed:?}");
        assert_eq!(
            (listed[0]["key"].as_str(), listed[0]["state"].as_str()),
            (Some("job"), Some("held")),
            "{adapter}: {listed:?}"
        );
        let out = run(&["release", "--force", "--yes", &lock]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{adapter}: {}",
            text(&out.stderr)
        );
        let status = wait_with_limit(&mut holder, Duration::from_secs(10));
        assert_eq!(status.code(), Some(76), "{adapter}: the holder lost it");
        let (code, report) = status_json(&lock);
        assert_eq!(
            (code, report["state"].as_str(), report["token"].as_u64()),
            (4, Some("released"), Some(2)),
            "{adapter}: {report}"
        );

        let leader = format!("{prefix}/leader");
        let out = run(&[
            "elect",
            &leader,
            "--id",
            "node-a",
            "--ttl",
            "3s",
            "--",
            "sh",
            "-c",
            "echo $CASAAS_FENCING_TOKEN",
        ]);
        assert!(out.status.success(), "{adapter}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), "1", "{adapter}");

        // A typo in the directory: refused, nothing created.
        let typo = dir.path().join(format!("{adapter}-typo"));
        let missing = format!("{adapter}+{scheme}://{}/job", typo.display());
        for args in [
            vec!["lock", missing.as_str(), "--", "true"],
            vec!["elect", missing.as_str(), "--id", "a", "--", "true"],
            vec!["release", "--force", "--yes", missing.as_str()],
            vec!["status", missing.as_str()],
        ] {
            let out = run(&args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {stderr}");
            assert!(stderr.contains("does not exist"), "{args:?}: {stderr}");
            assert!(!typo.exists(), "{args:?} created {}", typo.display());
        }
    }
}

/// The owner id's host is the one the operating system reports (`uname
/// -n`), whatever `$HOSTNAME` says (a shell variable, often not exported,
/// and not the system's answer).
#[test]
fn the_default_owner_names_the_host_the_system_reports() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "owner");
    let out = casaas()
        .env("HOSTNAME", "not-this-host")
        .env_remove("CASAAS_OWNER")
        .args(["lock", &url, "--", "sh", "-c", "echo $CASAAS_OWNER"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let uname = std::process::Command::new("uname")
        .arg("-n")
        .output()
        .unwrap();
    let host = text(&uname.stdout).trim().to_string();
    let owner = text(&out.stdout).trim().to_string();
    let (owner_host, pid) = owner.rsplit_once('/').unwrap();
    assert_eq!(owner_host, host, "{owner}");
    assert!(pid.parse::<u32>().is_ok(), "{owner}");
}
