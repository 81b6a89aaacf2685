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
    assert_eq!(out.status.code(), Some(78));
    assert!(
        text(&out.stderr).contains("did you mean 'create_dirs'?"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["status", "s3://bucket/locks/x?pathstyle=true"]);
    assert_eq!(out.status.code(), Some(78));
    assert!(
        text(&out.stderr).contains("did you mean 'path_style'?"),
        "{}",
        text(&out.stderr)
    );
    // A scheme no build knows: no advice meant for library users.
    let out = run(&["status", "ftp://host/locks/x"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(78));
    assert!(!stderr.contains("register()"), "{stderr}");
    assert!(stderr.contains("This build of casaas"), "{stderr}");
}

/// The rows (code, meaning) of the table under "## Exit codes" in
/// docs/cli.md.
fn documented_rows() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"))
        .unwrap();
    let section = doc.split("## Exit codes").nth(1).unwrap();
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            (
                cells[1].trim().trim_matches('`').to_string(),
                cells[2].trim().to_string(),
            )
        })
        .collect()
}

/// The codes in the table under "## Exit codes" in docs/cli.md.
fn documented_codes() -> BTreeSet<String> {
    documented_rows()
        .into_iter()
        .map(|(code, _)| code)
        .collect()
}

/// `casaas --help` prints the exit codes, and they are the docs' table,
/// row for row.
#[test]
fn the_help_prints_the_exit_codes_of_the_docs() {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    // The help wraps long lines: compare the words.
    let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let table = words(
        &help
            .lines()
            .skip_while(|l| !l.starts_with("Exit status (one meaning per code"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    );
    let documented = words(
        &documented_rows()
            .iter()
            .map(|(code, meaning)| format!("{code} {meaning}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    assert_eq!(table, documented, "casaas --help and docs/cli.md differ");
    assert!(!help.contains("docs/cli.md explains"), "{help}");
    assert!(help.contains("https://github.com/casaas/casaas"), "{help}");
}

/// A loopback HTTP server that answers every request `503 Service
/// Unavailable` (an answer that may hide an applied write): a store that
/// never settles. Its port.
fn always_503() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let body = "<Error><Code>InternalError</Code></Error>";
                    let reply = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `casaas ARGS` with dummy S3 credentials and no metadata lookups.
fn run_s3(args: &[&str]) -> std::process::Output {
    casaas()
        .env("AWS_ACCESS_KEY_ID", "casaas-test")
        .env("AWS_SECRET_ACCESS_KEY", "casaas-test-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .args(args)
        .output()
        .unwrap()
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
    expect("4", out.status.code(), &out, 4);
    let out = run(&["release", "--force", "--yes", &lock_url(dir.path(), "none")]);
    expect("4", out.status.code(), &out, 4);
    let out = run(&["ls", &format!("file://{}", dir.path().display())]);
    expect("0", out.status.code(), &out, 0);
    let out = run(&["lock", "--ttl", "1ms", &url, "true"]);
    expect("2", out.status.code(), &out, 2);
    let out = run(&["lokc", &url, "true"]);
    expect("2", out.status.code(), &out, 2);
    let out = run(&["ls", &format!("file://{}/missing", dir.path().display())]);
    expect("78", out.status.code(), &out, 78);
    let out = run(&["lock", &url, "/nonexistent/command"]);
    expect("126, 127", out.status.code(), &out, 127);
    let out = run(&["lock", &url, "/dev/null"]);
    expect("126, 127", out.status.code(), &out, 126);
    // Not a casaas lock at the key: reported, left untouched.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = casaas_core::open_store(&format!("file://{}", dir.path().display()))
            .await
            .unwrap();
        store
            .create("foreign", bytes::Bytes::from_static(b"not a lock"))
            .await
            .unwrap();
    });
    let foreign = lock_url(dir.path(), "foreign");
    for command in [
        &["status", foreign.as_str()][..],
        &["lock", "-n", &foreign, "true"],
    ] {
        let out = run(command);
        expect("65", out.status.code(), &out, 65);
    }
    // A store nothing answers on: retryable, for every command and the
    // doctor alike.
    let refused = format!(
        "s3://bucket/locks/x?endpoint=http://127.0.0.1:{}&path_style=true",
        closed_port()
    );
    for command in [
        &["status", refused.as_str()][..],
        &["lock", "-n", &refused, "true"],
        &["doctor", &refused, "--guard-deadline", "2"],
    ] {
        let out = run_s3(command);
        expect("69", out.status.code(), &out, 69);
    }
    // A store whose every answer may hide a write: the doctor finds no
    // verdict.
    let unsettled = format!(
        "s3://bucket/locks?endpoint=http://127.0.0.1:{}&path_style=true",
        always_503()
    );
    let out = run_s3(&["doctor", &unsettled, "--guard-deadline", "2"]);
    expect("3", out.status.code(), &out, 3);

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
    // Declined on a terminal: 5; accepted: 0, and the holder loses its lease.
    assert_eq!(release_answering(&url, "n\n").code(), Some(5));
    seen.insert("5".to_string());
    assert_eq!(release_answering(&url, "y\n").code(), Some(0));
    let status = wait_with_limit(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(76));
    // The same row for `elect`: a leader whose term is broken by force.
    let term = lock_url(dir.path(), "term");
    let mut leader = spawn(&[
        "elect", &term, "--id", "node-a", "--ttl", "3s", "--", "sleep", "30",
    ]);
    wait_held(&term);
    let out = run(&["release", "--force", "--yes", &term]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status = wait_with_limit(&mut leader, Duration::from_secs(10));
    assert_eq!(status.code(), Some(76), "elect");
    seen.insert("76".to_string());
    // Exit 1 (a store that ignores conditions) needs such a store: the
    // gate tests run it against s3rver.
    seen.insert("1".to_string());

    assert_eq!(seen, documented_codes(), "the table and the cases differ");
}

/// `CASAAS_WAIT` is the lowest setting: `-n`, `-w` and `--wait=` on the
/// command line each win over it (clap would count the variable as given
/// and call them conflicting), and a bad value is named.
#[test]
fn the_wait_from_the_environment_loses_to_every_wait_flag() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "wait-env");
    let mut holder = spawn(&["lock", &url, "--", "sleep", "30"]);
    wait_held(&url);
    let timed = |env: &str, flags: &[&str]| {
        let start = Instant::now();
        let out = casaas()
            .env("CASAAS_WAIT", env)
            .arg("lock")
            .args(flags)
            .args([url.as_str(), "true"])
            .output()
            .unwrap();
        (out, start.elapsed())
    };
    for flags in [
        vec!["-n"],
        vec!["-w", "0.3"],
        vec!["--wait=0"],
        vec!["-w", "0"],
    ] {
        let (out, took) = timed("10m", &flags);
        assert_eq!(
            out.status.code(),
            Some(75),
            "CASAAS_WAIT=10m {flags:?}: {}",
            text(&out.stderr)
        );
        assert!(took < Duration::from_secs(3), "{flags:?}: {took:?}");
    }
    // The variable alone is read: one attempt.
    let (out, took) = timed("0", &[]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(took < Duration::from_secs(3), "{took:?}");
    // A flag's longer wait wins over the variable's single attempt.
    let (out, took) = timed("0", &["--wait=2s"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert!(
        text(&out.stderr).contains("the wait ran out"),
        "{}",
        text(&out.stderr)
    );
    let (out, _) = timed("soon", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("CASAAS_WAIT=\"soon\""),
        "{}",
        text(&out.stderr)
    );
    // Flags still conflict with each other.
    let out = run(&["lock", "-n", "--wait=5s", &url, "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    signal(holder.id(), Signal::SIGTERM);
    wait_with_limit(&mut holder, Duration::from_secs(5));
}

/// `CASAAS_GRACE` and `CASAAS_ID` are read, and `--grace` / `--id` win.
#[test]
fn grace_and_id_come_from_the_environment_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "grace-env");
    // A grace too long for the default 15s TTL is refused: the variable
    // was read; the flag's shorter one is taken instead.
    for command in [
        vec!["lock", url.as_str(), "true"],
        vec!["elect", url.as_str(), "--id", "a", "--", "true"],
    ] {
        let out = casaas()
            .env("CASAAS_GRACE", "10s")
            .args(&command)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{command:?}");
        assert!(
            text(&out.stderr).contains("--grace 10s is not shorter"),
            "{}",
            text(&out.stderr)
        );
        let mut with_flag = command.clone();
        with_flag.insert(1, "--grace=1s");
        let out = casaas()
            .env("CASAAS_GRACE", "10s")
            .args(&with_flag)
            .output()
            .unwrap();
        assert!(out.status.success(), "{with_flag:?}: {}", text(&out.stderr));
    }

    let elect = |flags: &[&str]| {
        let mut cmd = casaas();
        cmd.env("CASAAS_ID", "node-from-env")
            .args(["elect", "--json", &url])
            .args(flags)
            .args(["--", "true"]);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{flags:?}: {}", text(&out.stderr));
        json_of(&run(&["status", "--json", &url]))["holder"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(elect(&[]), "node-from-env");
    assert_eq!(elect(&["--id", "node-from-flag"]), "node-from-flag");
}

/// `lines` for a failure message: the first and the last few, without the
/// guard-off warning every lease of the probes repeats.
fn shown(lines: &[String]) -> String {
    let kept: Vec<&String> = lines
        .iter()
        .filter(|l| !l.contains("built with the store guard off"))
        .collect();
    let skipped = lines.len() - kept.len();
    let tail: Vec<&String> = if kept.len() > 40 {
        kept[..10]
            .iter()
            .chain(&kept[kept.len() - 30..])
            .copied()
            .collect()
    } else {
        kept
    };
    format!("({skipped} guard-off warnings left out) {tail:#?}")
}

/// `casaas conformance` and `casaas doctor` write their logs in the format
/// `--log-format` (before the subcommand) or `CASAAS_LOG_FORMAT` names.
#[test]
fn conformance_and_doctor_follow_the_log_format() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let logs = |env: Option<&str>, global: &[&str], command: &[&str]| {
        let mut cmd = casaas();
        // The lease probe's library logs at info: enough lines to look at.
        cmd.env("RUST_LOG", "info");
        if let Some(format) = env {
            cmd.env("CASAAS_LOG_FORMAT", format);
        }
        let out = cmd.args(global).args(command).output().unwrap();
        let lines: Vec<String> = text(&out.stderr)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        (out.status.code(), lines)
    };
    let is_json = |line: &str| serde_json::from_str::<serde_json::Value>(line).is_ok();
    let doctor = ["doctor", store.as_str()];
    let conformance = [
        "conformance",
        store.as_str(),
        "--quick",
        "--only",
        "lease_protocol",
        "--format",
        "json",
    ];
    for command in [&doctor[..], &conformance[..]] {
        for (env, global, json) in [
            (Some("json"), &[][..], true),
            (None, &["--log-format", "json"][..], true),
            (None, &["--log-format=json"][..], true),
            (Some("json"), &["--log-format", "text"][..], false),
            (None, &[][..], false),
        ] {
            let (code, lines) = logs(env, global, command);
            // The verdict is not what is tested here: on a loaded machine
            // the lease probe's short TTL may end it inconclusive (3). A
            // usage error (2) or a crash is a failure.
            assert!(
                matches!(code, Some(0 | 1 | 3)),
                "{command:?} {env:?} {global:?}: exit {code:?}: {}",
                shown(&lines)
            );
            // Log lines, not the verdict `conformance` prints on stderr:
            // a JSON object, or a text line that starts with its time.
            let log_lines: Vec<&String> = lines
                .iter()
                .filter(|l| is_json(l) || (l.starts_with("20") && l.contains(" WARN ")))
                .collect();
            assert!(
                !log_lines.is_empty(),
                "{command:?}: no log line: {}",
                shown(&lines)
            );
            assert!(
                log_lines.iter().all(|l| is_json(l) == json),
                "{command:?} {env:?} {global:?}: {}",
                shown(&lines)
            );
        }
        let (code, lines) = logs(Some("xml"), &[], command);
        assert_eq!(code, Some(2), "{lines:?}");
        assert!(
            lines.iter().any(|l| l.contains("CASAAS_LOG_FORMAT")),
            "{lines:?}"
        );
    }
    // An error of the doctor is a JSON line too.
    let missing = format!("{store}/missing");
    let (code, lines) = logs(Some("json"), &[], &["doctor", &missing]);
    assert_eq!(code, Some(78));
    assert!(lines.iter().all(|l| is_json(l)), "{lines:?}");
    let line: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(line["level"], "ERROR", "{line}");
    assert!(
        line["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{line}"
    );
}

/// The doctor creates no directory: not for a missing `file://` one, not
/// with `?create_dirs=true`, and not for the adapters' local directories.
#[test]
fn doctor_creates_no_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing").join("dir");
    for url in [
        format!("file://{}", missing.display()),
        format!("file://{}?create_dirs=true", missing.display()),
        format!("object_store+file://{}", missing.display()),
        format!("opendal+fs://{}", missing.display()),
    ] {
        for format in ["table", "json"] {
            let out = run(&["doctor", &url, "--format", format]);
            assert_eq!(out.status.code(), Some(78), "{url}: {}", text(&out.stdout));
            let stderr = text(&out.stderr);
            assert!(
                stderr.contains("does not exist") && stderr.contains("creates no directory"),
                "{url}: {stderr}"
            );
            assert!(!stderr.contains("add ?create_dirs=true"), "{url}: {stderr}");
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                0,
                "{url}: something was created"
            );
        }
    }
    // On a directory that exists the same URL is checked.
    std::fs::create_dir_all(&missing).unwrap();
    let out = run(&[
        "doctor",
        &format!("file://{}?create_dirs=true", missing.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `casaas lock` renews every TTL/3, the library's cadence (the cost in
/// the README assumes it): the holder's renewal times, read from outside,
/// are a third of the TTL apart.
#[test]
fn lock_renews_every_third_of_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let url = lock_url(dir.path(), "cadence");
    let mut holder = spawn(&["lock", "--ttl", "3s", &url, "--", "sleep", "30"]);
    wait_held(&url);
    let mut renewals: Vec<String> = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(4500) {
        let report = json_of(&run(&["status", "--json", &url]));
        let at = report["renewed_at"].as_str().unwrap().to_string();
        if renewals.last() != Some(&at) {
            renewals.push(at);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(holder.id(), Signal::SIGTERM);
    wait_with_limit(&mut holder, Duration::from_secs(5));
    let millis = |at: &str| {
        // 2026-11-24T03:21:54.020Z: the time of day, in milliseconds.
        let time = at.split('T').nth(1).unwrap().trim_end_matches('Z');
        let parts: Vec<f64> = time.split(':').map(|p| p.parse().unwrap()).collect();
        ((parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]) * 1000.0) as i64
    };
    let gaps: Vec<i64> = renewals
        .windows(2)
        .map(|w| millis(&w[1]) - millis(&w[0]))
        .collect();
    assert!(gaps.len() >= 3, "{renewals:?}");
    let shortest = *gaps.iter().min().unwrap();
    // 1s apart (TTL/3), plus the write itself; TTL/5 would be 600 ms.
    assert!(
        (950..1400).contains(&shortest),
        "renewals {gaps:?} ms apart: {renewals:?}"
    );
}
