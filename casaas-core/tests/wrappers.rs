#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Every wrapper of a store forwards every method of the contract: a
//! wrapper that drops one (`create_bucket` falling back to "unsupported",
//! `identity` to the wrapper's description) fails here.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::testkit::{CountingStore, FaultConfig, FaultyStore};
use casaas_core::{
    Capabilities, CasError, CasStore, ForwardingStore, ListEntry, MemoryStore, StoredObject,
    Version,
};

/// Every method of the contract, by name.
const METHODS: [&str; 11] = [
    "get",
    "create",
    "replace",
    "delete",
    "list",
    "capabilities",
    "describe",
    "identity",
    "create_bucket",
    "delete_unconditionally",
    "lease_layout",
];

/// A store that records which of its methods were called.
#[derive(Debug, Default)]
struct Probe {
    store: MemoryStore,
    called: Mutex<Vec<&'static str>>,
}

impl Probe {
    fn saw(&self, method: &'static str) {
        self.called.lock().unwrap().push(method);
    }
}

#[async_trait]
impl CasStore for Probe {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        self.saw("get");
        self.store.get(key).await
    }
    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.saw("create");
        self.store.create(key, body).await
    }
    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.saw("replace");
        self.store.replace(key, expected, body).await
    }
    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.saw("delete");
        self.store.delete(key, expected).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        self.saw("list");
        self.store.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.saw("capabilities");
        self.store.capabilities()
    }
    fn describe(&self) -> String {
        self.saw("describe");
        "probe".into()
    }
    fn identity(&self) -> String {
        self.saw("identity");
        "probe-identity".into()
    }
    async fn create_bucket(&self) -> Result<(), CasError> {
        self.saw("create_bucket");
        Ok(())
    }
    async fn delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        self.saw("delete_unconditionally");
        self.store.delete_unconditionally(key).await
    }
    fn lease_layout(&self) -> Option<casaas_core::layout::LeaseLayout> {
        self.saw("lease_layout");
        None
    }
}

/// A wrapper that changes nothing but its description.
#[derive(Debug)]
struct Renamed(Arc<Probe>);

impl ForwardingStore for Renamed {
    type Inner = Probe;
    fn inner(&self) -> &Probe {
        &self.0
    }
    fn wrap_describe(&self) -> String {
        "renamed".into()
    }
}

/// Calls every method once through `store`.
async fn call_everything(store: &dyn CasStore) {
    let v = store.create("k", Bytes::from_static(b"a")).await.unwrap();
    let v = store
        .replace("k", &v, Bytes::from_static(b"b"))
        .await
        .unwrap();
    store.get("k").await.unwrap().unwrap();
    store.list("").await.unwrap();
    store.delete("k", &v).await.unwrap();
    store.capabilities();
    store.describe();
    assert!(
        store.identity().contains("probe-identity"),
        "{} hides the inner identity",
        store.identity()
    );
    store.create_bucket().await.unwrap();
    store.create("u", Bytes::from_static(b"u")).await.unwrap();
    store.delete_unconditionally("u").await.unwrap();
    store.lease_layout();
}

async fn check(name: &str, wrap: impl FnOnce(Arc<Probe>) -> Box<dyn CasStore>) {
    let probe = Arc::new(Probe::default());
    let store = wrap(probe.clone());
    call_everything(store.as_ref()).await;
    let called = probe.called.lock().unwrap().clone();
    let dropped: Vec<_> = METHODS.iter().filter(|m| !called.contains(m)).collect();
    // `describe` may be replaced by a wrapper's own; everything else must
    // reach the inner store.
    let dropped: Vec<_> = dropped.into_iter().filter(|m| **m != "describe").collect();
    assert!(dropped.is_empty(), "{name} drops {dropped:?}");
}

#[tokio::test]
async fn every_wrapper_forwards_every_method() {
    check("Arc", |p| Box::new(p)).await;
    check("Box", |p| Box::new(Box::new(p) as Box<dyn CasStore>)).await;
    check("CountingStore", |p| Box::new(CountingStore::new(p))).await;
    check("FaultyStore", |p| {
        Box::new(FaultyStore::new(p, 1, FaultConfig::default()))
    })
    .await;
    check("a ForwardingStore", |p| Box::new(Renamed(p))).await;
}

#[tokio::test]
async fn pointers_keep_the_inner_identity_and_wrappers_make_their_own() {
    let probe = Arc::new(Probe::default());
    assert_eq!(probe.identity(), "probe-identity");
    let boxed: Box<dyn CasStore> = Box::new(probe.clone());
    assert_eq!(boxed.identity(), "probe-identity");
    let renamed = Renamed(probe.clone());
    assert_ne!(renamed.identity(), "probe-identity");
    let counting = CountingStore::new(probe);
    assert_ne!(counting.identity(), "probe-identity");
}

/// The stores that implement `CasStore` by hand, outside tests: the
/// backends and the epoch view. A wrapper of another store is a
/// `ForwardingStore`, which cannot drop a method; a new hand-written
/// `impl CasStore` fails here until it is one, or is a backend added to
/// this list.
#[test]
fn only_backends_implement_the_contract_by_hand() {
    const BACKENDS: [&str; 8] = [
        "MemoryStore",
        "FileStore",
        "EpochStore",
        "S3Store",
        "GcsStore",
        "AzureBlobStore",
        "ObjectStoreCas",
        "OpendalCas",
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for line in text.lines() {
                    let line = line.trim_start();
                    let Some(rest) = line
                        .strip_prefix("impl CasStore for ")
                        .or_else(|| line.strip_prefix("impl casaas_core::CasStore for "))
                    else {
                        continue;
                    };
                    let name = rest.trim_end_matches(" {").to_string();
                    found.push((path.display().to_string(), name));
                }
            }
        }
    }
    assert!(
        found.len() >= BACKENDS.len(),
        "the scan found too little: {found:?}"
    );
    let by_hand: Vec<_> = found
        .iter()
        .filter(|(_, name)| !BACKENDS.contains(&name.as_str()))
        .collect();
    assert!(
        by_hand.is_empty(),
        "these implement CasStore by hand; make them ForwardingStores: {by_hand:?}"
    );
}

/// `METHODS` names every method of the trait, so a method added to the
/// contract is checked above too.
#[test]
fn the_method_list_is_the_whole_contract() {
    let source = include_str!("../src/store.rs");
    let start = source.find("pub trait CasStore").unwrap();
    let end = start + source[start..].find("\n}\n").unwrap();
    let mut declared: Vec<&str> = source[start..end]
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("async ").unwrap_or(l);
            l.strip_prefix("fn ")?.split(['(', '<']).next()
        })
        .collect();
    declared.sort_unstable();
    let mut listed = METHODS.to_vec();
    listed.sort_unstable();
    assert_eq!(declared, listed);
}
