//! `casaas lock` remembers the store guard's verdict between runs: a second
//! run on the same store sends no guard request (the guard's probe
//! directory is not written again); `--no-cache` and `CASAAS_NO_CACHE` turn
//! that off; a corrupt entry or a cache others may write costs the saving,
//! never the lock.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

struct Setup {
    _dir: tempfile::TempDir,
    locks: PathBuf,
    cache_home: PathBuf,
    url: String,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().join("locks");
        std::fs::create_dir(&locks).unwrap();
        let cache_home = dir.path().join("cache");
        let url = format!("file://{}/job", locks.display());
        Setup {
            _dir: dir,
            locks,
            cache_home,
            url,
        }
    }

    fn guard_dir(&self) -> PathBuf {
        self.locks.join(".casaas-guard")
    }

    fn cache_dir(&self) -> PathBuf {
        self.cache_home.join("casaas").join("guard")
    }

    /// Runs `casaas [extra] lock URL true` with the cache under this setup;
    /// returns its output and whether the store guard wrote to the store.
    fn lock(&self, extra: &[&str], env: &[(&str, &str)]) -> (Output, bool) {
        let _ = std::fs::remove_dir_all(self.guard_dir());
        let out = casaas()
            .env("XDG_CACHE_HOME", &self.cache_home)
            .envs(env.iter().copied())
            .args(extra)
            .args(["-vv", "lock", &self.url, "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        (out, self.guard_dir().exists())
    }
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_second_run_sends_no_guard_request() {
    let s = Setup::new();
    let (_, guarded) = s.lock(&[], &[]);
    assert!(guarded, "the first run checks the store");
    let [entry] = entries(&s.cache_dir()).try_into().unwrap();
    assert_eq!(mode(&s.cache_dir()), 0o700);
    assert_eq!(mode(&entry), 0o600);

    let (out, guarded) = s.lock(&[], &[]);
    assert!(!guarded, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("store guard verdict taken from the cache"),
        "{}",
        text(&out.stderr)
    );
    // Another store is checked on its own.
    let other = Setup {
        url: format!("file://{}/sub/job", s.locks.display()),
        ..Setup::new()
    };
    std::fs::create_dir(s.locks.join("sub")).unwrap();
    let out = casaas()
        .env("XDG_CACHE_HOME", &s.cache_home)
        .args(["lock", "-c", "true", &other.url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(s.locks.join("sub/.casaas-guard").exists());
    assert_eq!(entries(&s.cache_dir()).len(), 2);
}

#[test]
fn no_cache_and_its_variable_check_the_store_every_run() {
    let s = Setup::new();
    s.lock(&[], &[]);
    assert!(s.lock(&["--no-cache"], &[]).1, "--no-cache runs the guard");
    for value in ["1", "true", "yes"] {
        assert!(s.lock(&[], &[("CASAAS_NO_CACHE", value)]).1, "{value}");
    }
    assert!(!s.lock(&[], &[("CASAAS_NO_CACHE", "0")]).1);
    let out = casaas()
        .env("XDG_CACHE_HOME", &s.cache_home)
        .env("CASAAS_NO_CACHE", "perhaps")
        .args(["lock", &s.url, "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // --no-cache records nothing either.
    let fresh = Setup::new();
    assert!(fresh.lock(&["--no-cache"], &[]).1);
    assert!(entries(&fresh.cache_dir()).is_empty());
    assert!(fresh.lock(&[], &[]).1);
}

#[test]
fn a_corrupt_entry_is_replaced_and_never_stops_the_lock() {
    let s = Setup::new();
    s.lock(&[], &[]);
    let [entry] = entries(&s.cache_dir()).try_into().unwrap();
    std::fs::write(&entry, "not json").unwrap();
    let (out, guarded) = s.lock(&[], &[]);
    assert!(guarded);
    assert!(
        text(&out.stderr).contains("corrupt store-guard cache entry"),
        "{}",
        text(&out.stderr)
    );
    assert!(!s.lock(&[], &[]).1, "replaced by the new pass");
}

#[test]
fn a_cache_others_may_write_is_not_used() {
    let s = Setup::new();
    s.lock(&[], &[]);
    std::fs::set_permissions(s.cache_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (out, guarded) = s.lock(&[], &[]);
    assert!(guarded, "the verdict of a shared directory is not trusted");
    assert!(
        text(&out.stderr).contains("chmod go-w"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn cache_clear_removes_every_recorded_pass() {
    let s = Setup::new();
    s.lock(&[], &[]);
    assert_eq!(entries(&s.cache_dir()).len(), 1);
    let out = casaas()
        .env("XDG_CACHE_HOME", &s.cache_home)
        .args(["cache", "clear"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("removed 1 store-guard verdict from"),
        "{}",
        text(&out.stdout)
    );
    assert!(entries(&s.cache_dir()).is_empty());
    assert!(s.lock(&[], &[]).1, "the next run checks the store");
}

/// A TCP forwarder on loopback whose target a test switches: the "gateway
/// replaced behind the same URL" of the cache's residual risk.
struct Gateway {
    port: u16,
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl Gateway {
    fn start(target: u16) -> Self {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicU16, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = std::sync::Arc::new(AtomicU16::new(target));
        let current = target.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", current.load(Ordering::SeqCst)))
                else {
                    continue;
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                };
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Gateway { port, target }
    }

    fn switch_to(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::SeqCst);
    }
}

fn server_port(name: &str) -> u16 {
    let server = casaas_core::testkit::test_server(name);
    let url = url::Url::parse(&server.url).unwrap();
    let endpoint = url
        .query_pairs()
        .find(|(k, _)| k == "endpoint")
        .unwrap()
        .1
        .into_owned();
    url::Url::parse(&endpoint).unwrap().port().unwrap()
}

/// A store that passed is replaced, behind the same URL, by one that
/// ignores conditional writes (moto, then s3rver: `cargo xtask servers up
/// moto s3rver`). A run that checks it (`--no-cache`, or `doctor`) and
/// finds it unsafe withdraws the recorded pass, so the next plain run is
/// refused instead of skipping the guard on the cached pass.
#[test]
fn a_failing_check_withdraws_the_pass_of_a_replaced_gateway() {
    let (moto, s3rver) = (server_port("moto"), server_port("s3rver"));
    let gateway = Gateway::start(moto);
    let cache_home = tempfile::tempdir().unwrap();
    let cache_dir = cache_home.path().join("casaas/guard");
    let prefix = casaas_core::testkit::unique_prefix("cache-gateway");
    let store = format!(
        "s3://casaas-test/{prefix}?endpoint=http://127.0.0.1:{}&path_style=true&region=us-east-1",
        gateway.port
    );
    let lock = store.replacen(&prefix, &format!("{prefix}/job"), 1);
    let run = |args: &[&str]| {
        casaas()
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("AWS_PROFILE")
            .env("AWS_ACCESS_KEY_ID", "S3RVER")
            .env("AWS_SECRET_ACCESS_KEY", "S3RVER")
            .env("XDG_CACHE_HOME", cache_home.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["lock", "-n", &lock, "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(entries(&cache_dir).len(), 1, "the pass is recorded");

    gateway.switch_to(s3rver);
    let out = run(&["--no-cache", "lock", "-n", &lock, "true"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        entries(&cache_dir).is_empty(),
        "a failing --no-cache run left the pass in place"
    );
    let out = run(&["lock", "-n", &lock, "true"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the next run used a withdrawn pass: {}",
        text(&out.stderr)
    );

    // The doctor on the same store: a pass is recorded afresh, a failure
    // withdraws it.
    gateway.switch_to(moto);
    assert!(run(&["lock", "-n", &lock, "true"]).status.success());
    assert_eq!(entries(&cache_dir).len(), 1);
    gateway.switch_to(s3rver);
    let out = run(&["doctor", &store]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        entries(&cache_dir).is_empty(),
        "a failing doctor left the pass in place"
    );
    gateway.switch_to(moto);
    let out = run(&["doctor", &store]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(entries(&cache_dir).len(), 1, "a passing doctor records");
}

/// Runs `casaas lock -n URL true` with `env` on top of a clean AWS
/// environment (s3rver's key pair, which moto accepts too) and the cache
/// in `cache_home`; its exit status.
fn lock_with_env(cache_home: &Path, url: &str, env: &[(&str, String)]) -> Option<i32> {
    let mut cmd = casaas();
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_ALLOW_HTTP",
    ] {
        cmd.env_remove(name);
    }
    let out = cmd
        .env("AWS_ACCESS_KEY_ID", "S3RVER")
        .env("AWS_SECRET_ACCESS_KEY", "S3RVER")
        .env("AWS_REGION", "us-east-1")
        .env("XDG_CACHE_HOME", cache_home)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["lock", "-n", url, "true"])
        .output()
        .unwrap();
    if !out.status.success() {
        eprintln!("{}", text(&out.stderr));
    }
    out.status.code()
}

/// The cache's key names the endpoint the client actually uses, from
/// wherever it came: a pass recorded for moto is not used when the same
/// URL, under another environment or profile, reaches s3rver (which
/// ignores conditional writes: `cargo xtask servers up moto s3rver`).
#[test]
fn a_pass_for_one_endpoint_is_not_used_for_another() {
    let moto = format!("http://127.0.0.1:{}", server_port("moto"));
    let s3rver = format!("http://127.0.0.1:{}", server_port("s3rver"));
    let prefix = casaas_core::testkit::unique_prefix("cache-endpoints");
    let url = format!("s3://casaas-test/{prefix}/job?path_style=true");
    let profiles = tempfile::tempdir().unwrap();
    let config = profiles.path().join("config");
    let profile_for = |endpoint: &str| {
        std::fs::write(
            &config,
            format!(
                "[profile casaas-test]\nregion = us-east-1\nservices = casaas-test-s3\n\n\
                 [services casaas-test-s3]\ns3 =\n  endpoint_url = {endpoint}\n"
            ),
        )
        .unwrap();
        vec![
            ("AWS_CONFIG_FILE", config.display().to_string()),
            ("AWS_PROFILE", "casaas-test".to_string()),
        ]
    };
    type Env = Vec<(&'static str, String)>;
    let cases: Vec<(&str, Env, Env)> = vec![
        (
            "AWS_ENDPOINT_URL_S3 beside AWS_ENDPOINT_URL",
            vec![
                ("AWS_ENDPOINT_URL", s3rver.clone()),
                ("AWS_ENDPOINT_URL_S3", moto.clone()),
            ],
            vec![
                ("AWS_ENDPOINT_URL", s3rver.clone()),
                ("AWS_ENDPOINT_URL_S3", s3rver.clone()),
            ],
        ),
        (
            "AWS_ENDPOINT_URL",
            vec![("AWS_ENDPOINT_URL", moto.clone())],
            vec![("AWS_ENDPOINT_URL", s3rver.clone())],
        ),
        (
            "a profile's [services] endpoint",
            profile_for(&moto),
            vec![],
        ),
    ];
    // The cases where s3rver was not checked: the pass recorded for moto
    // was used.
    let mut stale = Vec::new();
    for (what, good, bad) in cases {
        let cache_home = tempfile::tempdir().unwrap();
        assert_eq!(
            lock_with_env(cache_home.path(), &url, &good),
            Some(0),
            "{what}: moto passes"
        );
        let bad = if bad.is_empty() {
            profile_for(&s3rver)
        } else {
            bad
        };
        if lock_with_env(cache_home.path(), &url, &bad) != Some(1) {
            stale.push(what);
        }
    }

    // object_store's own environment (AWS_ENDPOINT).
    let cache_home = tempfile::tempdir().unwrap();
    let adapter = format!("object_store+s3://casaas-test/{prefix}/adapter-job");
    let env = |endpoint: &str| {
        vec![
            ("AWS_ENDPOINT", endpoint.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".to_string()),
        ]
    };
    assert_eq!(
        lock_with_env(cache_home.path(), &adapter, &env(&moto)),
        Some(0)
    );
    if lock_with_env(cache_home.path(), &adapter, &env(&s3rver)) != Some(1) {
        stale.push("object_store's AWS_ENDPOINT");
    }
    assert!(
        stale.is_empty(),
        "a pass for moto was used for s3rver: {stale:?}"
    );
}
