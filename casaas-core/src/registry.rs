//! Choosing a backend by URL at run time.
//!
//! Core registers `memory://` and `file://`. Provider crates register their
//! own schemes (`s3://`, `gs://`, `az://`) with [`register_scheme`]; core
//! never depends on them. Adapter crates, which open a store through another
//! library's client, register a name with [`register_adapter`] and receive
//! the rest of URLs written `NAME+URL` (`object_store+s3://bucket/prefix`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock};

use std::path::Path;

use crate::failure::LARGE_CONDITIONAL_WRITES_OPTION;
use crate::layout::{LAYOUT_OPTION, LeaseLayout};
use crate::profile::{CapabilityProfile, PROFILE_OPTION};
use crate::{CasError, CasStore, FileStore, MemoryStore, StoreUrl};

/// The future a [`StoreFactory`] returns.
pub type StoreFuture = Pin<Box<dyn Future<Output = Result<Arc<dyn CasStore>, CasError>> + Send>>;

/// Opens a store from a parsed URL whose scheme it was registered for.
pub type StoreFactory = fn(StoreUrl) -> StoreFuture;

/// Opens a store from the URL text that follows `NAME+` in `NAME+URL`
/// (the adapter parses it with its library's own rules) and the options
/// given beside the URL (its library's configuration keys, credentials
/// among them).
pub type AdapterFactory = fn(String, Vec<(String, String)>) -> StoreFuture;

fn adapters() -> &'static RwLock<HashMap<String, AdapterFactory>> {
    static ADAPTERS: OnceLock<RwLock<HashMap<String, AdapterFactory>>> = OnceLock::new();
    ADAPTERS.get_or_init(|| RwLock::new(HashMap::new()))
}

/// Registers (or replaces) the adapter for URLs written `name+URL`, e.g.
/// `object_store+s3://bucket/prefix`. The name may contain characters a URL
/// scheme cannot (such as `_`): the text is split before URL parsing.
pub fn register_adapter(name: &str, factory: AdapterFactory) {
    adapters()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_ascii_lowercase(), factory);
}

/// The registered adapter that a `NAME+URL` names (`object_store` for
/// `object_store+s3://bucket/prefix`), or `None` for a URL that no adapter
/// takes. Such a URL is opened by [`open_store`], never by
/// [`StoreUrl::parse`]: `NAME` need not be a valid URL scheme.
///
/// ```
/// casaas_core::provider::register_adapter("doc_adapter", |inner, _given| {
///     Box::pin(async move { casaas_core::open_store(&inner).await })
/// });
/// assert_eq!(
///     casaas_core::provider::adapter_of("doc_adapter+memory://x/p").as_deref(),
///     Some("doc_adapter")
/// );
/// assert_eq!(casaas_core::provider::adapter_of("memory://x/p"), None);
/// ```
pub fn adapter_of(url: &str) -> Option<String> {
    adapter_for(url).map(|(name, _, _)| name)
}

/// `(NAME, URL)` of an adapter URL `NAME+URL`, whether or not an adapter
/// `NAME` is registered: the one place such a URL is split. `NAME+` is
/// before the scheme's colon (a URL scheme cannot contain `_`, so
/// `object_store+s3:` is not one).
///
/// ```
/// use casaas_core::provider::split_adapter;
/// assert_eq!(
///     split_adapter("object_store+s3://b/p?x=1"),
///     Some(("object_store", "s3://b/p?x=1"))
/// );
/// assert_eq!(split_adapter("s3://b/p+q"), None);
/// ```
pub fn split_adapter(url: &str) -> Option<(&str, &str)> {
    let scheme = &url[..url.find(':')?];
    let (name, _) = scheme.split_once('+')?;
    Some((name, &url[name.len() + 1..]))
}

/// The adapter's name, factory and inner URL of `NAME+URL`, if `NAME` is
/// registered.
fn adapter_for(url: &str) -> Option<(String, AdapterFactory, String)> {
    let (name, _) = split_adapter(url)?;
    let name = name.to_ascii_lowercase();
    let factory = adapters()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .copied()?;
    let inner = url[name.len() + 1..].to_string();
    Some((name, factory, inner))
}

fn registry() -> &'static RwLock<HashMap<String, StoreFactory>> {
    static REGISTRY: OnceLock<RwLock<HashMap<String, StoreFactory>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map: HashMap<String, StoreFactory> = HashMap::new();
        map.insert("memory".into(), open_memory);
        map.insert("file".into(), open_file);
        RwLock::new(map)
    })
}

/// Registers (or replaces) the factory for URLs with `scheme`.
pub fn register_scheme(scheme: &str, factory: StoreFactory) {
    registry()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(scheme.to_ascii_lowercase(), factory);
}

/// The schemes that can be opened now, sorted; adapters appear as `NAME+`.
pub fn registered_schemes() -> Vec<String> {
    let mut schemes: Vec<String> = registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .cloned()
        .collect();
    schemes.extend(
        adapters()
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .map(|name| format!("{name}+")),
    );
    schemes.sort();
    schemes
}

/// Opens the store a URL names.
///
/// - `memory://NAME/prefix` — the process-wide in-memory store `NAME`;
/// - `file:///absolute/dir` — the local-filesystem store rooted at that directory;
/// - `s3://`, `gs://`, `az://` — once the provider crate has registered itself;
/// - `NAME+URL` — once an adapter crate has registered `NAME` (for example
///   `object_store+s3://bucket/prefix`, `opendal+s3://bucket/prefix`).
///
/// Credentials never come from the URL. Every URL takes the option
/// `verify=false`, which turns the [store guard](crate::guard) off for the
/// store (logged at warn): only for a store proven by other means; and
/// `layout=record|epochs`, which chooses how leases lay out their objects
/// (see [`crate::layout`]; by default, from what the store honours).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// let store = casaas_core::open_store("memory://docs/app1").await?;
/// assert_eq!(store.describe(), "memory://docs/app1/");
/// let err = casaas_core::open_store("ftp://host/x").await.unwrap_err();
/// assert!(err.to_string().contains("no backend for scheme 'ftp'"));
/// # Ok(())
/// # }
/// ```
pub async fn open_store(url: &str) -> Result<Arc<dyn CasStore>, CasError> {
    open_store_with(url, std::iter::empty::<(&str, &str)>()).await
}

/// Opens the store a URL names, with `options` given beside the URL: the
/// one way in for every entry point, like object_store's `parse_url_opts`.
///
/// Options given here are read exactly as options in the URL's query (a
/// name the backend does not know is an error; one given both ways is an
/// error), with one difference: credentials go only here, never in the
/// URL. Their names are the provider's environment variables in lowercase
/// (`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
/// `azure_storage_key`, `azure_storage_sas_token`,
/// `azure_storage_connection_string`); a credential not given is read from
/// the environment. For `NAME+URL`, the options go to the adapter's library
/// as configuration keys.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), casaas_core::CasError> {
/// let store = casaas_core::open_store_with("memory://docs/with", [("verify", "true")]).await?;
/// assert_eq!(store.describe(), "memory://docs/with/");
/// // Unknown names are errors, wherever they come from.
/// let err = casaas_core::open_store_with("memory://docs/with", [("regoin", "x")])
///     .await
///     .unwrap_err();
/// assert!(err.to_string().contains("unknown option 'regoin'"), "{err}");
/// # Ok(())
/// # }
/// ```
pub async fn open_store_with<I, K, V>(url: &str, options: I) -> Result<Arc<dyn CasStore>, CasError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let (url, taken) = take_open_options(url)?;
    let mut verify = taken.verify;
    let mut profile = taken.profile;
    let mut layout = taken.layout;
    let mut given = Vec::new();
    for (name, value) in options {
        let (name, value) = (name.as_ref().to_ascii_lowercase(), value.as_ref());
        match name.as_str() {
            VERIFY_OPTION => verify = parse_verify(value)?,
            PROFILE_OPTION => profile = Some(value.to_string()),
            LAYOUT_OPTION => layout = Some(value.parse()?),
            _ => given.push((name, value.to_string())),
        }
    }
    // The URL as the guard's message shows it: redacted, for a command to
    // run on it (`casaas conformance URL`).
    let shown;
    let store = match adapter_for(&url) {
        Some((name, factory, inner)) => {
            shown = StoreUrl::parse(&inner).map_or_else(
                |_| format!("{name}+{}", crate::url::replace_userinfo(&inner, "")),
                |u| format!("{name}+{u}"),
            );
            // An adapter URL is parsed by its library, so its store has no
            // identity here: it takes a profile only by path, trusted to be
            // this store's.
            if let Some(path) = profile.as_deref().filter(|p| *p != "none") {
                let path = Path::new(path);
                let found = CapabilityProfile::load(path)?;
                found.judge(path, &shown)?;
                let named = |(name, _): &(String, String)| name == LARGE_CONDITIONAL_WRITES_OPTION;
                if found.proves_large_conditional_writes() && !given.iter().any(named) {
                    given.push((
                        LARGE_CONDITIONAL_WRITES_OPTION.to_string(),
                        "true".to_string(),
                    ));
                }
            }
            factory(inner, given).await?
        }
        None => {
            let mut parsed = StoreUrl::parse(&url)?.with_given_options(given)?;
            shown = parsed.to_string();
            let explicit = profile.as_deref().filter(|p| *p != "none").map(Path::new);
            if profile.as_deref() != Some("none")
                && let Some((path, found)) = CapabilityProfile::find(&parsed, explicit)?
            {
                parsed = found.apply(&path, parsed)?;
                // A profile may have proven the layout (`layout=epochs`).
                let (rest, proven) = parsed.without_option(LAYOUT_OPTION)?;
                parsed = rest;
                if layout.is_none() {
                    layout = proven.map(|p| p.parse()).transpose()?;
                }
            }
            open_store_url(parsed).await?
        }
    };
    crate::guard::remember_url(store.as_ref(), shown);
    if !verify {
        crate::guard::trust_store(store.as_ref(), "verify=false");
    }
    Ok(match layout {
        Some(layout) => crate::layout::with_layout(store, layout),
        None => store,
    })
}

/// The option every store URL takes and no backend sees.
const VERIFY_OPTION: &str = "verify";

fn parse_verify(value: &str) -> Result<bool, CasError> {
    crate::parse_bool(value).ok_or_else(|| {
        CasError::misconfigured(format!(
            "option verify={value} is not a boolean: use verify=true or verify=false"
        ))
    })
}

/// What `open_store_with` reads itself from a URL's query, before any
/// backend sees it.
#[derive(Debug)]
struct OpenOptions {
    /// `verify=false` turns the [store guard](crate::guard) off.
    verify: bool,
    /// `capability_profile=PATH|none` (see [`crate::profile`]).
    profile: Option<String>,
    /// `layout=record|epochs` (see [`crate::layout`]).
    layout: Option<LeaseLayout>,
}

/// Removes the options every store URL takes and no backend sees.
fn take_open_options(url: &str) -> Result<(String, OpenOptions), CasError> {
    let mut taken = OpenOptions {
        verify: true,
        profile: None,
        layout: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), taken));
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((VERIFY_OPTION, value)) => taken.verify = parse_verify(value)?,
            Some((LAYOUT_OPTION, value)) => taken.layout = Some(value.parse()?),
            Some((PROFILE_OPTION, value)) => {
                let decoded = percent_encoding::percent_decode_str(value)
                    .decode_utf8()
                    .map_err(|_| {
                        CasError::misconfigured(format!("{PROFILE_OPTION} is not UTF-8"))
                    })?;
                taken.profile = Some(decoded.into_owned());
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, taken))
}

/// Opens the store a parsed URL names; see [`open_store`].
pub async fn open_store_url(parsed: StoreUrl) -> Result<Arc<dyn CasStore>, CasError> {
    let factory = registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(parsed.scheme())
        .copied();
    match factory {
        Some(factory) => factory(parsed).await,
        None => Err(CasError::misconfigured(format!(
            "no backend for scheme '{}' is available; registered: {}. Provider crates \
             register theirs with their register() function (e.g. casaas_s3::register())",
            parsed.scheme(),
            registered_schemes().join(", ")
        ))),
    }
}

fn open_memory(url: StoreUrl) -> StoreFuture {
    Box::pin(async move {
        url.options(&[])?;
        let name = Some(url.authority())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                CasError::misconfigured("memory URL needs a store name: memory://NAME/prefix")
            })?;
        let store = MemoryStore::named(name).with_prefix(url.path())?;
        Ok(Arc::new(store) as Arc<dyn CasStore>)
    })
}

fn open_file(url: StoreUrl) -> StoreFuture {
    Box::pin(async move {
        let options = url.options(&["create_dirs"])?;
        if !url.authority().is_empty() && url.authority() != "localhost" {
            return Err(CasError::misconfigured(
                "file URL must name a local absolute directory: file:///abs/dir",
            ));
        }
        let path = url.file_path().ok_or_else(|| {
            CasError::misconfigured(format!("{url} does not name a local absolute directory"))
        })?;
        // A missing directory is created only when asked: otherwise a typo
        // in the path would silently open a different, empty store.
        let store = if options.get_bool("create_dirs", false)? {
            FileStore::open(path).await?
        } else {
            FileStore::open_existing(path).await?
        };
        Ok(Arc::new(store) as Arc<dyn CasStore>)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn malformed_and_unknown() {
        let err = open_store("not a url").await.unwrap_err();
        assert!(err.to_string().contains("not a valid store URL"), "{err}");
        let err = open_store("memory://x/p?bogus=1").await.unwrap_err();
        assert!(err.to_string().contains("unknown option 'bogus'"), "{err}");
        let err = open_store("memory:///p").await.unwrap_err();
        assert!(err.to_string().contains("needs a store name"), "{err}");
        let err = open_store("file://server/share").await.unwrap_err();
        assert!(
            err.to_string().contains("local absolute directory"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn named_memory_stores_are_shared() {
        let a = open_store("memory://shared-test/p").await.unwrap();
        let b = open_store("memory://shared-test/p").await.unwrap();
        a.create("k", bytes::Bytes::from_static(b"1"))
            .await
            .unwrap();
        assert!(b.get("k").await.unwrap().is_some());
        let other = open_store("memory://shared-test/q").await.unwrap();
        assert!(other.get("k").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn adapters_receive_the_inner_url() {
        fn open_inner(inner: String, given: Vec<(String, String)>) -> StoreFuture {
            Box::pin(async move {
                assert_eq!(inner, "memory://adapted/p");
                assert!(given.is_empty());
                open_store(&inner).await
            })
        }
        register_adapter("test_adapter", open_inner);
        let store = open_store("test_adapter+memory://adapted/p").await.unwrap();
        assert_eq!(store.describe(), "memory://adapted/p/");
        assert!(registered_schemes().contains(&"test_adapter+".to_string()));
        // An unregistered name is still an error that says what is known.
        let err = open_store("nothing_here+memory://x/p").await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Misconfigured, "{err}");
    }

    #[test]
    fn open_options_are_taken_out_of_the_url() {
        let (url, taken) = take_open_options("memory://x/p?verify=false").unwrap();
        assert_eq!((url.as_str(), taken.verify), ("memory://x/p", false));
        let (url, taken) = take_open_options(
            "s3://b/p?region=x&verify=no&path_style=1&capability_profile=%2Fp%20q",
        )
        .unwrap();
        assert_eq!(
            (url.as_str(), taken.verify),
            ("s3://b/p?region=x&path_style=1", false)
        );
        assert_eq!(taken.profile.as_deref(), Some("/p q"));
        let (url, taken) = take_open_options("s3://b/p?region=x").unwrap();
        assert_eq!((url.as_str(), taken.verify), ("s3://b/p?region=x", true));
        let err = take_open_options("s3://b/p?verify=maybe").unwrap_err();
        assert!(
            err.to_string().contains("verify=true or verify=false"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn prefixes_are_decoded_once() {
        let store = open_store("memory://decode-test/x%2541").await.unwrap();
        assert_eq!(store.describe(), "memory://decode-test/x%41/");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/x%2541?create_dirs=true", dir.path().display());
        let store = open_store(&url).await.unwrap();
        store
            .create("k", bytes::Bytes::from_static(b"1"))
            .await
            .unwrap();
        assert!(dir.path().join("x%41").is_dir());
        assert!(!dir.path().join("xA").exists());
    }
}
