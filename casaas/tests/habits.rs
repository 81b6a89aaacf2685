//! flock(1) and etcdctl habits: `-c`, `-w`, `-E`, the command right after
//! the URL, settings from the environment (flags win), the TTL floor, the
//! messages that used to mislead, and the exit-code table of docs/cli.md,
//! each row run.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

fn lock_url(dir: &Path, name: &str) -> String {
    format!("file://{}/{name}", dir.display())
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)))
}

#[test]
fn flock_style_flags() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "flock");
    // -c runs a shell command; the command may follow the URL without `--`.
    let out = run(&[
        "lock",
        "-c",
        "echo token $CASAAS_FENCING_TOKEN; exit 4",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "token 1");
    let out = run(&["lock", &url, "echo", "-n", "no", "dashes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no dashes");
    let out = run(&["lock", "-c", "true", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "-c and CMD together");

    let mut holder = spawn(&["lock", &url, "--", "sleep", "30"]);
    wait_held(&url);
    for (args, code) in [
        (vec!["lock", "-w", "0", &url, "true"], 75),
        (vec!["lock", "--wait=0s", &url, "true"], 75),
        (vec!["lock", "-w", "0.3", &url, "true"], 75),
        (vec!["lock", "-n", "-E", "9", &url, "true"], 9),
        (
            vec!["lock", "-w", "0", "--conflict-exit-code", "8", &url, "true"],
            8,
        ),
    ] {
        let start = Instant::now();
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(start.elapsed() < Duration::from_secs(3), "{args:?}");
        assert_eq!(
            text(&out.stderr).lines().count(),
            1,
            "{}",
            text(&out.stderr)
        );
    }
    signal(holder.id(), Signal::SIGTERM);
    wait_with_limit(&mut holder, Duration::from_secs(5));

    // `--wait 5s` (a space) says what to type.
    let out = run(&["lock", "--wait", "5s", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("write --wait=5s (or -w SECONDS)"),
        "{}",
        text(&out.stderr)
    );
    for args in [vec!["--version"], vec!["lock", "--version"]] {
        let out = run(&args);
        assert!(out.status.success());
        assert_eq!(
            text(&out.stdout).trim(),
            format!("casaas {}", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn the_readme_one_liner_still_works() {
    // `casaas lock URL -- ./backup.sh`, as in the README.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("backup.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho backed up with $CASAAS_FENCING_TOKEN\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir(dir.path().join("locks")).unwrap();
    let url = format!("file://{}/locks/nightly", dir.path().display());
    let out = casaas()
        .current_dir(dir.path())
        .args(["lock", &url, "--", "./backup.sh"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "backed up with 1");
}

#[test]
fn settings_come_from_the_environment_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "env");
    let status = |url: &str| json_of(&run(&["status", "--json", url]));
    let out = casaas()
        .env("CASAAS_TTL", "7s")
        .env("CASAAS_OWNER", "from-env")
        .args(["lock", &url, "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = status(&url);
    assert_eq!(
        (report["ttl_ms"].as_u64(), report["holder"].as_str()),
        (Some(7000), Some("from-env"))
    );
    let out = casaas()
        .env("CASAAS_TTL", "7s")
        .env("CASAAS_OWNER", "from-env")
        .args(["lock", "--ttl", "3s", "--owner", "from-flag", &url, "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = status(&url);
    assert_eq!(
        (report["ttl_ms"].as_u64(), report["holder"].as_str()),
        (Some(3000), Some("from-flag"))
    );

    // The conflict code and the log format.
    let mut holder = spawn(&["lock", &url, "--", "sleep", "30"]);
    wait_held(&url);
    let conflict = |flag: Option<&str>| {
        let mut cmd = casaas();
        cmd.env("CASAAS_CONFLICT_EXIT_CODE", "9")
            .args(["lock", "-n"]);
        if let Some(flag) = flag {
            cmd.args(["-E", flag]);
        }
        cmd.args([url.as_str(), "true"])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(conflict(None), Some(9));
    assert_eq!(conflict(Some("8")), Some(8));
    let out = casaas()
        .env("CASAAS_LOG_FORMAT", "json")
        .env("CASAAS_WAIT", "0")
        .args(["lock", &url, "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let line: serde_json::Value = serde_json::from_slice(&out.stderr)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert!(
        line["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("held by"),
        "{line}"
    );
    let out = casaas()
        .env("CASAAS_LOG_FORMAT", "json")
        .args(["--log-format", "text", "lock", "-n", &url, "true"])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).starts_with("casaas: "),
        "{}",
        text(&out.stderr)
    );
    signal(holder.id(), Signal::SIGTERM);
    wait_with_limit(&mut holder, Duration::from_secs(5));
}

#[test]
fn a_ttl_under_the_floor_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let url = lock_url(dir.path(), "short");
    let touch = format!("touch {}", marker.display());
    for out in [
        run(&["lock", "--ttl=1ms", &url, "-c", &touch]),
        run(&["lock", "--ttl", "999ms", &url, "-c", &touch]),
        casaas()
            .env("CASAAS_TTL", "500ms")
            .args(["lock", &url, "-c", &touch])
            .output()
            .unwrap(),
        run(&[
            "elect", &url, "--id", "a", "--ttl", "100ms", "--", "sh", "-c", &touch,
        ]),
    ] {
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("use --ttl 1s or more"),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(!marker.exists(), "the command ran");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "something was written"
    );
    let out = run(&["lock", "--ttl", "1s", &url, "-c", &touch]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_forced_release_is_reported_once_as_what_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "forced");
    let mut holder = spawn(&[
        "lock", "--ttl", "3s", "--owner", "me", &url, "--", "sleep", "30",
    ]);
    wait_held(&url);
    let out = run(&["release", "--force", "--yes", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status = wait_with_limit(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(76));
    let mut stderr = String::new();
    holder
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("released by force by another process"),
        "{stderr}"
    );
    assert!(!stderr.contains("superseded"), "{stderr}");

    // Taken over by someone else: named with its token.
    let mut holder = spawn(&[
        "lock", "--ttl", "1s", "--owner", "old", &url, "--", "sleep", "30",
    ]);
    wait_held(&url);
    pause_outside_writes(holder.id());
    let out = run(&[
        "lock",
        "--ttl",
        "1s",
        "--owner",
        "new",
        "--wait=10s",
        &url,
        "--",
        "sleep",
        "1",
    ]);
    signal(holder.id(), Signal::SIGCONT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = wait_with_limit(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(76));
    let mut stderr = String::new();
    holder
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("taken over by \"new\" (token 3)")
            || stderr.contains("validity ended without a successful renewal"),
        "{stderr}"
    );
}

#[test]
fn url_mistakes_get_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "status",
        &format!("file://{}/x?create_dir=true", dir.path().display()),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("did you mean 'create_dirs'?"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["status", "s3://bucket/locks/x?pathstyle=true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("did you mean 'path_style'?"),
        "{}",
        text(&out.stderr)
    );
    // A scheme no build knows: no advice meant for library users.
    let out = run(&["status", "ftp://host/locks/x"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr.contains("register()"), "{stderr}");
    assert!(stderr.contains("This build of casaas"), "{stderr}");
}

/// The codes in the table under "## Exit codes" in docs/cli.md.
fn documented_codes() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"))
        .unwrap();
    let section = doc.split("## Exit codes").nth(1).unwrap();
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_string()
        })
        .collect()
}

/// `casaas release --force URL` on a pseudo-terminal, answering `answer`.
fn release_answering(url: &str, answer: &str) -> std::process::ExitStatus {
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut cmd = casaas();
    cmd.args(["release", "--force", url])
        .stdin(std::process::Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(std::process::Stdio::from(pty.slave));
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    master.write_all(answer.as_bytes()).unwrap();
    wait_with_limit(&mut child, Duration::from_secs(10))
}

#[test]
fn every_exit_code_in_the_docs_table_happens_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "codes");
    let mut seen = BTreeSet::new();
    let mut expect = |row: &str, code: Option<i32>, out: &std::process::Output, want: i32| {
        assert_eq!(code, Some(want), "{row}: {}", text(&out.stderr));
        seen.insert(row.to_string());
    };
    let out = run(&["lock", &url, "-c", "exit 7"]);
    expect("the command's", out.status.code(), &out, 7);
    let out = run(&["status", &url]);
    expect("3", out.status.code(), &out, 3);
    let out = run(&["release", "--force", "--yes", &lock_url(dir.path(), "none")]);
    expect("3", out.status.code(), &out, 3);
    let out = run(&["ls", &format!("file://{}", dir.path().display())]);
    expect("0", out.status.code(), &out, 0);
    let out = run(&["lock", "--ttl", "1ms", &url, "true"]);
    expect("2", out.status.code(), &out, 2);
    let out = run(&["ls", &format!("file://{}/missing", dir.path().display())]);
    expect("2", out.status.code(), &out, 2);
    let out = run(&["lock", &url, "/nonexistent/command"]);
    expect("126, 127", out.status.code(), &out, 127);
    let out = run(&["lock", &url, "/dev/null"]);
    expect("126, 127", out.status.code(), &out, 126);

    let mut holder = spawn(&["lock", "--ttl", "3s", &url, "--", "sleep", "30"]);
    wait_held(&url);
    let out = run(&["status", &url]);
    expect("0", out.status.code(), &out, 0);
    let out = run(&["lock", "-n", &url, "true"]);
    expect("75", out.status.code(), &out, 75);
    // Interrupted while waiting, before its command started.
    let mut waiter = spawn(&["lock", &url, "--", "true"]);
    std::thread::sleep(Duration::from_millis(500));
    signal(waiter.id(), Signal::SIGTERM);
    let status = wait_with_limit(&mut waiter, Duration::from_secs(5));
    assert_eq!(status.code(), Some(143));
    seen.insert("128+N".to_string());
    // Declined on a terminal: 1; accepted: 0, and the holder loses its lease.
    assert_eq!(release_answering(&url, "n\n").code(), Some(1));
    seen.insert("1".to_string());
    assert_eq!(release_answering(&url, "y\n").code(), Some(0));
    let status = wait_with_limit(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(76));
    seen.insert("76".to_string());

    assert_eq!(seen, documented_codes(), "the table and the cases differ");
}
