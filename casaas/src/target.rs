//! Lock URLs: the store URL of the directory plus the key of the lock object.

use std::sync::Arc;

use casaas_core::CasStore;
use url::Url;

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
    let parsed = Url::parse(url).map_err(|e| {
        Failure::usage(format!(
            "{shown:?} is not a valid lock URL ({e}); {EXAMPLES}"
        ))
    })?;
    if parsed.cannot_be_a_base() {
        return Err(Failure::usage(format!(
            "{shown:?} is not a valid lock URL; {EXAMPLES}"
        )));
    }
    let path = parsed.path().to_string();
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
    let key = percent_encoding::percent_decode_str(name)
        .decode_utf8()
        .map_err(|_| Failure::usage(format!("the lock name in {shown:?} is not valid UTF-8")))?
        .to_string();
    if key.is_empty() {
        return Err(Failure::usage(format!(
            "{shown:?} names a directory, not a lock object: add the lock's name to the path; {EXAMPLES}"
        )));
    }
    let mut store = parsed.clone();
    store.set_path(if dir.is_empty() { "/" } else { dir });
    store.set_fragment(None);
    let mut display = parsed;
    // File URLs cannot carry user-info; the other schemes lose it here.
    let _ = display.set_username("");
    let _ = display.set_password(None);
    Ok(LockTarget {
        store_url: store.to_string(),
        key,
        display: logging::redact(display.as_str()),
    })
}

/// Opens the store of `target`.
pub async fn open(target: &LockTarget) -> Result<Arc<dyn CasStore>, Failure> {
    casaas_core::open_store(&target.store_url)
        .await
        .map_err(|e| Failure::usage(format!("cannot open {}: {e}", target.display)))
}

/// Registers the user-info of `url` (as text, so also of a URL that does
/// not parse) as secrets.
pub fn register_userinfo(url: &str) {
    if let Some(userinfo) = casaas_core::userinfo(url) {
        logging::add_secret(userinfo);
        for part in userinfo.split(':') {
            logging::add_secret(part);
        }
    }
}

fn strip_userinfo_text(url: &str) -> String {
    casaas_core::replace_userinfo(url, "")
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
