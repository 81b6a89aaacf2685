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
const METHODS: [&str; 9] = [
    "get",
    "create",
    "replace",
    "delete",
    "list",
    "capabilities",
    "describe",
    "identity",
    "create_bucket",
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
