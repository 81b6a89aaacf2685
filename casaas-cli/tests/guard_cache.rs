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
