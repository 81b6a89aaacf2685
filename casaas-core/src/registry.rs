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

use crate::{CasError, CasStore, FileStore, MemoryStore, StoreUrl};

/// The future a [`StoreFactory`] returns.
pub type StoreFuture = Pin<Box<dyn Future<Output = Result<Arc<dyn CasStore>, CasError>> + Send>>;

/// Opens a store from a parsed URL whose scheme it was registered for.
pub type StoreFactory = fn(StoreUrl) -> StoreFuture;

/// Opens a store from the URL text that follows `NAME+` in `NAME+URL`
/// (the adapter parses it with its library's own rules).
pub type AdapterFactory = fn(String) -> StoreFuture;

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
/// casaas_core::register_adapter("doc_adapter", |inner| {
///     Box::pin(async move { casaas_core::open_store(&inner).await })
/// });
/// assert_eq!(
///     casaas_core::adapter_of("doc_adapter+memory://x/p").as_deref(),
///     Some("doc_adapter")
/// );
/// assert_eq!(casaas_core::adapter_of("memory://x/p"), None);
/// ```
pub fn adapter_of(url: &str) -> Option<String> {
    adapter_for(url).map(|(name, _, _)| name)
}

/// The adapter's name, factory and inner URL of `NAME+URL`, if `NAME` is
/// registered.
fn adapter_for(url: &str) -> Option<(String, AdapterFactory, String)> {
    let scheme = &url[..url.find(':')?];
    let (name, _) = scheme.split_once('+')?;
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
/// Credentials never come from the URL.
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
    if let Some((_, factory, inner)) = adapter_for(url) {
        return factory(inner).await;
    }
    open_store_url(StoreUrl::parse(url)?).await
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
        fn open_inner(inner: String) -> StoreFuture {
            Box::pin(async move {
                assert_eq!(inner, "memory://adapted/p");
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
