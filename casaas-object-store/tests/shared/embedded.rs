// The embedded-store tests of one object_store line, included by
// `embedded.rs` (0.14) and `embedded_0_13.rs` (0.13), so both lines run the
// same checks. The including file names the line (`os`: its object_store;
// `ObjectStoreCas`: its adapter) and imports `Arc`, `Bytes`, `CasStore` and
// `ErrorKind`. (An included file can hold no inner attributes or `//!`
// docs.)

async fn fresh_store() -> Arc<dyn CasStore> {
    let client: Arc<dyn os::ObjectStore> = Arc::new(os::memory::InMemory::new());
    Arc::new(ObjectStoreCas::new(client, "tables/t1/_locks").unwrap())
}

casaas_core::contract_suite!(fresh_store, tasks = 8, rounds = 50);

#[tokio::test]
async fn local_file_system_has_no_conditional_replace_and_leases_take_the_create_only_layout() {
    let dir = tempfile::tempdir().unwrap();
    let client: Arc<dyn os::ObjectStore> =
        Arc::new(os::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let store = ObjectStoreCas::new(client, "locks").unwrap();
    let caps = store.capabilities();
    assert!(caps.create_if_absent, "{caps:?}");
    assert!(!caps.replace_if_match, "{caps:?}");
    assert!(!caps.conditional_delete, "{caps:?}");

    // Create-if-absent works (the Delta commit-file pattern needs no more).
    let v1 = store
        .create("00001.json", Bytes::from_static(b"a"))
        .await
        .unwrap();
    let err = store
        .create("00001.json", Bytes::from_static(b"b"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    let stored = store.get("00001.json").await.unwrap().unwrap();
    assert_eq!(
        (stored.body, stored.version.clone()),
        (Bytes::from_static(b"a"), v1)
    );
    let listed = store.list("").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, "00001.json");

    // Replace is refused before any request, and says why.
    let err = store
        .replace("00001.json", &stored.version, Bytes::from_static(b"c"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("PutMode::Update"), "{err}");

    // A lease on such a store takes the create-only layout: every write a
    // new object, created only if absent.
    assert_eq!(
        casaas_core::layout::layout_of(&store),
        casaas_core::layout::LeaseLayout::Epochs
    );
    let lease = casaas_core::lease::Lease::new(
        Arc::new(store),
        "leader",
        "me",
        casaas_core::lease::LeaseConfig::default(),
    )
    .unwrap();
    let guard = lease.acquire(Default::default()).await.unwrap();
    assert_eq!(guard.token(), 1);
    guard.release().await.unwrap();
    let guard = lease.acquire(Default::default()).await.unwrap();
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
    assert!(dir.path().join("locks/leader.epochs").is_dir());
}

#[tokio::test]
async fn keys_with_reserved_characters_round_trip() {
    let store = fresh_store().await;
    for key in ["a b", "é/ü", "100%", "x#y", "sub/[1]"] {
        let v = store
            .create(key, Bytes::from(key.to_string()))
            .await
            .unwrap();
        let got = store.get(key).await.unwrap().unwrap();
        assert_eq!((got.body, got.version), (Bytes::from(key.to_string()), v));
    }
    let mut keys: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    keys.sort();
    assert_eq!(keys, ["100%", "a b", "sub/[1]", "x#y", "é/ü"]);
}

#[tokio::test]
async fn list_matches_partial_segments() {
    let store = fresh_store().await;
    for key in ["log", "logs/a", "logsx", "other"] {
        store.create(key, Bytes::new()).await.unwrap();
    }
    let keys: Vec<String> = store
        .list("log")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["log", "logs/a", "logsx"]);
}

#[tokio::test]
async fn declared_limits_are_reported_and_enforced() {
    let client: Arc<dyn os::ObjectStore> = Arc::new(os::memory::InMemory::new());
    let store = ObjectStoreCas::new(client.clone(), "p")
        .unwrap()
        .conditional_replace(false);
    let caps = store.capabilities();
    assert!(caps.create_if_absent && !caps.replace_if_match, "{caps:?}");
    let v = store.create("k", Bytes::from_static(b"x")).await.unwrap();
    let err = store
        .replace("k", &v, Bytes::from_static(b"y"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");

    let store = ObjectStoreCas::new(client, "p")
        .unwrap()
        .conditional_put(false);
    let caps = store.capabilities();
    assert!(!caps.create_if_absent && !caps.replace_if_match, "{caps:?}");
    let err = store.create("new", Bytes::new()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
}

#[test]
fn capabilities_name_the_line() {
    let client: Arc<dyn os::ObjectStore> = Arc::new(os::memory::InMemory::new());
    let caps = ObjectStoreCas::new(client, "p").unwrap().capabilities();
    let line = format!("through object_store {LINE}");
    assert!(caps.notes.contains(&line), "{caps:?}");
}
