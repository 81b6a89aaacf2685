//! Lock URLs: the store URL of the directory plus the key of the lock object.

use std::sync::Arc;

use casaas_core::provider::split_adapter;
use casaas_core::{CasStore, StoreUrl};

use crate::exit::Failure;
use crate::logging;

/// A parsed lock URL.
#[derive(Debug, Clone)]
pub struct LockTarget {
    /// The store URL (the lock object's directory), as given.
    pub store_url: String,
    /// The lock object's key in that store.
    pub key: String,
    /// The lock URL without user-info, for output and `CASAAS_LOCK_URL`.
    pub display: String,
}

const EXAMPLES: &str = "expected e.g. s3://bucket/locks/NAME, gs://bucket/locks/NAME, \
az://account/container/locks/NAME or file:///var/lib/app/locks/NAME";

/// Splits `url` into the store URL of its directory and the key of the
/// object it names. User-info in the URL is registered as a secret first,
/// so that no message can show it.
pub fn parse(url: &str) -> Result<LockTarget, Failure> {
    register_userinfo(url);
    let shown = logging::redact(&strip_userinfo_text(url));
    // The split is the library's (the same for Python and Rust callers);
    // its message never echoes the URL, so it is named here.
    let (store_url, key) = StoreUrl::split_lock_url(url)
        .map_err(|e| Failure::usage(format!("{shown:?}: {}; {EXAMPLES}", e.message())))?;
    Ok(LockTarget {
        store_url,
        key,
        display: display(url),
    })
}

/// `url` without user-info and with registered secrets redacted, for
/// output (an adapter's prefix kept).
fn display(url: &str) -> String {
    if let Some((adapter, inner)) = split_adapter(url) {
        return format!("{adapter}+{}", display(inner));
    }
    match StoreUrl::parse(url) {
        Ok(parsed) => logging::redact(parsed.without_credentials().as_unredacted_str()),
        Err(_) => logging::redact(&strip_userinfo_text(url)),
    }
}

/// Parses a lock URL for a command that may write. Without `root`, as
/// [`parse`]: the store is the lock's directory. With `root` (`--root`), the
/// store is opened at `root`, a directory above the lock's, and the key is
/// the lock's path below it: `--root s3://b/locks` with `s3://b/locks/shards/7`
/// gives the key `shards/7`, so a heartbeat the lock names outside its own
/// directory (`../sessions/worker-1`) is within reach.
pub fn parse_with_root(url: &str, root: Option<&str>) -> Result<LockTarget, Failure> {
    let lock = parse(url)?;
    let Some(root) = root else {
        return Ok(lock);
    };
    register_userinfo(root);
    let root_shown = logging::redact(&strip_userinfo_text(root));
    let not_above = || {
        Failure::usage(format!(
            "--root {root_shown:?} is not a directory above the lock {:?}: give the lock URL \
             cut after one of its directories, with the same scheme, bucket and options \
             (e.g. --root s3://bucket/locks for s3://bucket/locks/shards/7)",
            lock.display
        ))
    };
    let (root_adapter, root_inner) = match split_adapter(root) {
        Some((adapter, inner)) => (Some(adapter), inner),
        None => (None, root),
    };
    let (lock_adapter, lock_inner) = match split_adapter(&lock.store_url) {
        Some((adapter, inner)) => (Some(adapter), inner),
        None => (None, lock.store_url.as_str()),
    };
    if root_adapter != lock_adapter {
        return Err(not_above());
    }
    let root_url = StoreUrl::parse(root_inner).map_err(|_| {
        Failure::usage(format!(
            "--root {root_shown:?} is not a valid prefix URL; expected e.g. s3://bucket/locks or file:///var/lib/app/locks"
        ))
    })?;
    let mut dir = StoreUrl::parse(lock_inner).map_err(|_| not_above())?;
    let mut key = lock.key.clone();
    loop {
        if same_directory(&dir, &root_url) {
            return Ok(LockTarget {
                store_url: root.to_string(),
                key,
                display: lock.display,
            });
        }
        match dir.parent_and_name() {
            Ok(Some((parent, name))) if !name.is_empty() => {
                key = format!("{name}/{key}");
                dir = parent;
            }
            _ => return Err(not_above()),
        }
    }
}

/// Do `a` and `b` name the same directory of the same store, opened with
/// the same options? A trailing slash makes no difference.
fn same_directory(a: &StoreUrl, b: &StoreUrl) -> bool {
    let options = |u: &StoreUrl| {
        u.as_unredacted_str()
            .split_once('?')
            .map(|(_, query)| query.to_string())
    };
    a.scheme() == b.scheme()
        && a.authority() == b.authority()
        && a.path().trim_end_matches('/') == b.path().trim_end_matches('/')
        && options(a) == options(b)
}

/// Parses a prefix URL (a store URL: the directory that holds locks), for
/// `ls`; its `key` is empty.
pub fn parse_prefix(url: &str) -> Result<LockTarget, Failure> {
    register_userinfo(url);
    if let Some((adapter, inner)) = split_adapter(url) {
        let inner = parse_prefix(inner)?;
        return Ok(LockTarget {
            store_url: format!("{adapter}+{}", inner.store_url),
            key: String::new(),
            display: format!("{adapter}+{}", inner.display),
        });
    }
    let shown = logging::redact(&strip_userinfo_text(url));
    let parsed = StoreUrl::parse(url).map_err(|_| {
        Failure::usage(format!(
            "{shown:?} is not a valid prefix URL; expected e.g. s3://bucket/locks or file:///var/lib/app/locks"
        ))
    })?;
    Ok(LockTarget {
        store_url: url.to_string(),
        key: String::new(),
        display: logging::redact(parsed.without_credentials().as_unredacted_str()),
    })
}

/// Opens the store of `target`, for a command that may write (`lock`,
/// `elect`, `release`): a missing `file://` directory is created only with
/// `create_dirs=true`.
pub async fn open(target: &LockTarget) -> Result<Arc<dyn CasStore>, Failure> {
    refuse_missing_adapter_directory(target, "; create it first")?;
    let store = open_url(&target.store_url, &target.display).await?;
    let no_cache = NO_GUARD_CACHE.load(std::sync::atomic::Ordering::Relaxed);
    // A cron line of `casaas lock` pays the store guard once an hour, not
    // once a run; a cache it cannot use only costs that saving. With
    // `--no-cache` the guard runs whatever is recorded, and a failure
    // still withdraws the recorded pass.
    match casaas_core::guard::cache::GuardCache::open_default() {
        Ok(cache) if no_cache => cache.attach_without_lookup(store.as_ref()),
        Ok(cache) => {
            cache.attach(store.as_ref());
        }
        Err(e) if no_cache => tracing::debug!("{e}"),
        Err(e) => tracing::warn!("{e}; the store guard runs without its cache"),
    }
    Ok(store)
}

/// Set by `--no-cache` (or `CASAAS_NO_CACHE`): the store guard runs and
/// records nothing (a failure still withdraws a recorded pass).
static NO_GUARD_CACHE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the store-guard cache off for this process.
pub fn disable_guard_cache() {
    NO_GUARD_CACHE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// An adapter URL on a local directory (`object_store+file://`,
/// `opendal+fs://`) whose directory does not exist is refused: those
/// libraries would create it on the first write, so a typo in the path
/// would be a different, empty lock. They have no `create_dirs` option.
fn refuse_missing_adapter_directory(target: &LockTarget, advice: &str) -> Result<(), Failure> {
    match adapter_directory(&target.store_url) {
        Some(dir) if !dir.is_dir() => Err(Failure::with_code(
            crate::exit::CONFIG,
            format!(
                "cannot open {}: directory {} does not exist{advice}",
                target.display,
                dir.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// The local directory of an `object_store+file://` or `opendal+fs://`
/// (`opendal+file://`) store URL.
fn adapter_directory(store_url: &str) -> Option<std::path::PathBuf> {
    let (_, inner) = split_adapter(store_url)?;
    StoreUrl::parse(inner).ok()?.local_path()
}

/// Opens the store of `target` for reading only (`status`, `ls`): nothing
/// is created, whatever the URL says, and a missing `file://` directory is
/// an error (a typo in the path would otherwise read as "free").
pub async fn open_read_only(target: &LockTarget) -> Result<Arc<dyn CasStore>, Failure> {
    refuse_missing_adapter_directory(target, " (status and ls create nothing: check the path)")?;
    let url = without_create_dirs(&target.store_url);
    open_url(&url, &target.display).await.map_err(|failure| {
        let message = failure.message().replace(
            "; create it or add ?create_dirs=true",
            " (status and ls create nothing: check the path)",
        );
        Failure::with_code(failure.code(), message)
    })
}

async fn open_url(url: &str, display: &str) -> Result<Arc<dyn CasStore>, Failure> {
    casaas_core::open_store(url).await.map_err(|e| {
        Failure::store(
            &e,
            format!("cannot open {display}: {}", explain_open_error(&e)),
        )
    })
}

/// The store error, with what a command-line user can do about a scheme
/// this build cannot open (the library's own text names `register()`,
/// which is for programs, not for people at a shell).
fn explain_open_error(e: &casaas_core::CasError) -> String {
    let text = e.to_string();
    let Some((head, _)) = text.split_once(". Provider crates register") else {
        return text;
    };
    format!("{head}. {}", crate::providers::missing_scheme_hint())
}

/// `url` without a `create_dirs` option (file URLs only have that one).
fn without_create_dirs(url: &str) -> String {
    if split_adapter(url).is_some() {
        return url.to_string();
    }
    match StoreUrl::parse(url) {
        Ok(parsed) if parsed.scheme() == "file" => {
            parsed.without_option("create_dirs").map_or_else(
                |_| url.to_string(),
                |(kept, _)| kept.as_unredacted_str().to_string(),
            )
        }
        _ => url.to_string(),
    }
}

/// Registers the secrets of `url` with the log writer: its user-info (as
/// text, so also of a URL that does not parse) and the values of
/// credential-looking options (`?aws_secret_access_key=…`, refused when the
/// store is opened, but typed all the same and echoed in that refusal).
pub fn register_userinfo(url: &str) {
    if let Some(userinfo) = casaas_core::provider::userinfo(url) {
        casaas_conformance::register_secret(userinfo);
        for part in userinfo.split(':') {
            casaas_conformance::register_secret(part);
        }
    }
    let inner = split_adapter(url).map_or(url, |(_, rest)| rest);
    casaas_conformance::register_url_secrets(inner);
}

fn strip_userinfo_text(url: &str) -> String {
    casaas_core::provider::replace_userinfo(url, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_directory_and_key() {
        let t = parse("s3://bucket/locks/nightly?endpoint=http://127.0.0.1:9000&path_style=true")
            .unwrap();
        assert_eq!(
            t.store_url,
            "s3://bucket/locks?endpoint=http://127.0.0.1:9000&path_style=true"
        );
        assert_eq!(t.key, "nightly");
        let t = parse("file:///var/lib/app/locks/x").unwrap();
        assert_eq!(t.store_url, "file:///var/lib/app/locks");
        assert_eq!(t.key, "x");
        let t = parse("s3://bucket/my%20lock").unwrap();
        assert_eq!(
            (t.store_url.as_str(), t.key.as_str()),
            ("s3://bucket/", "my lock")
        );
    }

    /// The table the library's and the Python package's tests read too.
    #[test]
    fn every_lock_url_of_the_shared_table_names_the_same_object() {
        let table = include_str!("../../casaas/tests/lock_urls.tsv");
        for line in table
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let fields: Vec<&str> = line.split('\t').collect();
            let (url, store, key) = (fields[0], fields[1], fields[2]);
            match parse(url) {
                Ok(t) if store != "!refused" => {
                    assert_eq!(
                        (t.store_url.as_str(), t.key.as_str()),
                        (store, key),
                        "{url}"
                    );
                }
                Ok(t) => panic!("{url}: {key}, yet split into {t:?}"),
                Err(e) => assert_eq!(store, "!refused", "{url}: {}", e.message()),
            }
        }
    }

    #[test]
    fn adapter_urls_keep_their_prefix() {
        let t =
            parse("object_store+s3://bucket/locks/x?aws_endpoint=http://127.0.0.1:9000").unwrap();
        assert_eq!(
            t.store_url,
            "object_store+s3://bucket/locks?aws_endpoint=http://127.0.0.1:9000"
        );
        assert_eq!(t.key, "x");
        let t = parse("opendal+file:///var/lib/locks/y").unwrap();
        assert_eq!(
            (t.store_url.as_str(), t.key.as_str(), t.display.as_str()),
            (
                "opendal+file:///var/lib/locks",
                "y",
                "opendal+file:///var/lib/locks/y"
            )
        );
    }

    #[test]
    fn adapter_urls_on_local_directories_name_them() {
        let dir = |url: &str| adapter_directory(url).map(|p| p.display().to_string());
        assert_eq!(
            dir("object_store+file:///var/lib/locks?x=1").as_deref(),
            Some("/var/lib/locks")
        );
        assert_eq!(
            dir("opendal+fs:///var/lib/my%20locks").as_deref(),
            Some("/var/lib/my locks")
        );
        assert_eq!(dir("opendal+s3://bucket/locks"), None);
        assert_eq!(dir("file:///var/lib/locks"), None);
    }

    #[test]
    fn read_only_opening_drops_create_dirs() {
        assert_eq!(
            without_create_dirs("file:///a/b?create_dirs=true"),
            "file:///a/b"
        );
        assert_eq!(
            without_create_dirs("s3://b/p?create_dirs=true"),
            "s3://b/p?create_dirs=true"
        );
    }

    #[test]
    fn a_root_above_the_lock_keeps_the_path_below_it_in_the_key() {
        let t = parse_with_root("file:///srv/locks/shards/7", Some("file:///srv/locks")).unwrap();
        assert_eq!(
            (t.store_url.as_str(), t.key.as_str(), t.display.as_str()),
            (
                "file:///srv/locks",
                "shards/7",
                "file:///srv/locks/shards/7"
            )
        );
        let t = parse_with_root("file:///srv/locks/shards/7", Some("file:///srv/locks/")).unwrap();
        assert_eq!(t.key, "shards/7");
        let t = parse_with_root(
            "file:///srv/locks/shards/7",
            Some("file:///srv/locks/shards"),
        )
        .unwrap();
        assert_eq!(t.key, "7");
        let q = "?endpoint=http://127.0.0.1:9000&path_style=true";
        let t =
            parse_with_root(&format!("s3://b/l/a%20b/7{q}"), Some(&format!("s3://b{q}"))).unwrap();
        assert_eq!(
            (t.store_url, t.key),
            (format!("s3://b{q}"), "l/a b/7".to_string())
        );
        let t = parse_with_root(
            "opendal+file:///srv/locks/shards/7",
            Some("opendal+file:///srv/locks"),
        )
        .unwrap();
        assert_eq!(t.key, "shards/7");
        let t = parse_with_root("file:///srv/locks/shards/7", None).unwrap();
        assert_eq!(
            (t.store_url.as_str(), t.key.as_str()),
            ("file:///srv/locks/shards", "7")
        );
    }

    #[test]
    fn a_root_not_above_the_lock_is_refused_by_name() {
        for root in [
            "file:///srv/other",
            "file:///srv/locks/shards/7",
            "file:///srv/lock",
            "s3://srv/locks",
            "opendal+file:///srv/locks",
            "file:///srv/locks?create_dirs=true",
        ] {
            let err = parse_with_root("file:///srv/locks/shards/7", Some(root)).unwrap_err();
            assert!(
                err.message().contains("is not a directory above the lock"),
                "{root}: {}",
                err.message()
            );
        }
        let err = parse_with_root("s3://b/l/7", Some("s3://KEY:sup3r-secret@other/")).unwrap_err();
        assert!(!err.message().contains("sup3r-secret"), "{}", err.message());
    }

    #[test]
    fn rejects_what_names_no_object() {
        for url in [
            "not a url",
            "s3://bucket/",
            "s3://bucket",
            "file:///var/locks/",
            "mailto:x",
        ] {
            assert!(parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn userinfo_never_shows() {
        let t = parse("s3://AKIDUSER:sup3r-secret@bucket/locks/x").unwrap();
        assert_eq!(t.display, "s3://bucket/locks/x");
        let err = parse("s3://AKIDUSER:sup3r-secret@bucket:notaport/x").unwrap_err();
        assert!(!err.message().contains("sup3r-secret"), "{}", err.message());
    }
}
