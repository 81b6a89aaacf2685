#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! The store guard's verdict kept between processes: a later process on the
//! same store, opened the same way, sends no guard request within the
//! cache's maximum age; after it, or on another store or other options, or
//! after a failing verdict, the guard runs again; a cache others could write
//! is refused; a corrupt entry is replaced, never an error.
//!
//! A "later process" is this process with its in-memory verdict forgotten
//! (`forget_process_verdict`), which is what a new process starts with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use casaas_core::guard::StoreGuard;
use casaas_core::guard::cache::{DEFAULT_MAX_AGE, GuardCache, forget_process_verdict};
use casaas_core::layout::{LeaseLayout, with_layout};
use casaas_core::lease::{Clock, SleepFuture, SystemClock};
use casaas_core::testkit::{CountingStore, CreateOnlyStore};
use casaas_core::{CasStore, ErrorKind, MemoryStore, StoreUrl};

/// A clock whose wall time a test moves.
#[derive(Debug, Default)]
struct ShiftedClock {
    ahead_secs: AtomicU64,
}

impl ShiftedClock {
    fn advance(&self, d: Duration) {
        self.ahead_secs.fetch_add(d.as_secs(), Ordering::SeqCst);
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> Duration {
        SystemClock::new().now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now() + Duration::from_secs(self.ahead_secs.load(Ordering::SeqCst))
    }
    fn sleep(&self, d: Duration) -> SleepFuture {
        SystemClock::new().sleep(d)
    }
}

fn entries(cache: &GuardCache) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cache.dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect()
}

/// One "process": forget the in-memory verdict, attach the cache, run the
/// guard as the first lease would; returns the guard's requests.
async fn run_once(cache: &GuardCache, store: &CountingStore<MemoryStore>) -> (bool, u64) {
    forget_process_verdict(store);
    store.reset();
    let hit = cache.attach(store);
    StoreGuard::new().ensure(store).await.unwrap();
    (hit, store.counts().total())
}

#[tokio::test]
async fn a_later_process_sends_no_guard_request_within_the_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let cache = GuardCache::open(&dir.path().join("guard"))
        .unwrap()
        .with_clock(clock.clone());
    assert_eq!(cache.max_age(), DEFAULT_MAX_AGE);
    let store = CountingStore::new(MemoryStore::named("cache-later-process"));

    let (hit, first) = run_once(&cache, &store).await;
    assert!(!hit);
    assert!(first >= 8, "the first process runs the guard: {first}");
    assert_eq!(entries(&cache).len(), 1);

    let (hit, second) = run_once(&cache, &store).await;
    assert!(hit);
    assert_eq!(second, 0, "a cached pass sends no guard request");

    // Just inside the expiry: still used.
    clock.advance(DEFAULT_MAX_AGE - Duration::from_secs(60));
    assert_eq!(run_once(&cache, &store).await, (true, 0));

    // Past it: the guard runs again, and its pass is recorded afresh.
    clock.advance(Duration::from_secs(120));
    let (hit, third) = run_once(&cache, &store).await;
    assert!(!hit);
    assert!(third >= 8, "{third}");
    assert_eq!(run_once(&cache, &store).await, (true, 0));
}

#[tokio::test]
async fn a_shorter_max_age_and_a_date_in_the_future_are_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let cache = GuardCache::open(dir.path())
        .unwrap()
        .with_clock(clock.clone())
        .with_max_age(Duration::from_secs(10));
    assert_eq!(cache.max_age(), Duration::from_secs(10));
    let store = CountingStore::new(MemoryStore::named("cache-max-age"));
    run_once(&cache, &store).await;
    assert!(cache.lookup(&store));
    clock.advance(Duration::from_secs(11));
    assert!(!cache.lookup(&store), "older than its max age");
    // Written by a clock an hour ahead: in the future for the system clock,
    // so not trusted (the clock was set back since).
    clock.advance(Duration::from_secs(3600));
    cache.record_pass(&store);
    assert!(cache.lookup(&store));
    assert!(!GuardCache::open(dir.path()).unwrap().lookup(&store));
}

#[tokio::test]
async fn another_store_or_other_options_are_checked_again() {
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let url = "memory://cache-options/app";
    let plain = casaas_core::open_store(url).await.unwrap();
    cache.attach(plain.as_ref());
    StoreGuard::new().ensure(plain.as_ref()).await.unwrap();
    assert!(cache.lookup(plain.as_ref()));
    assert!(
        cache.lookup(casaas_core::open_store(url).await.unwrap().as_ref()),
        "the same store opened the same way finds its verdict"
    );

    for other in [
        // Another lease layout: another store as far as the guard goes.
        format!("{url}?layout=epochs"),
        // Another prefix, another store name.
        "memory://cache-options/other".to_string(),
        "memory://cache-options-2/app".to_string(),
    ] {
        let store = casaas_core::open_store(&other).await.unwrap();
        assert!(!cache.lookup(store.as_ref()), "{other}");
        assert!(!cache.attach(store.as_ref()), "{other}");
    }
}

#[tokio::test]
async fn a_store_that_fails_the_guard_is_never_cached() {
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    // A store that refuses If-Match, made to hold leases in the record
    // layout (which needs it): the guard fails it.
    let counting = Arc::new(CountingStore::new(CreateOnlyStore(MemoryStore::named(
        "cache-unsafe",
    ))));
    let store = with_layout(counting.clone(), LeaseLayout::Record);
    for _ in 0..2 {
        forget_process_verdict(store.as_ref());
        counting.reset();
        assert!(!cache.attach(store.as_ref()));
        let err = StoreGuard::new().ensure(store.as_ref()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeStore);
        assert!(counting.counts().total() > 0, "checked again every time");
        assert!(entries(&cache).is_empty());
    }
}

#[tokio::test]
async fn the_guard_off_leaves_the_cache_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let store = casaas_core::open_store("memory://cache-trusted/p?verify=false")
        .await
        .unwrap();
    assert!(!cache.attach(store.as_ref()));
    StoreGuard::new().ensure(store.as_ref()).await.unwrap();
    assert!(entries(&cache).is_empty());
}

#[tokio::test]
async fn a_corrupt_entry_is_ignored_with_a_warning_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let store = CountingStore::new(MemoryStore::named("cache-corrupt"));
    run_once(&cache, &store).await;
    let [entry] = entries(&cache).try_into().unwrap();
    std::fs::write(&entry, "{\"schema_version\": 1, \"key\": tru").unwrap();

    forget_process_verdict(&store);
    store.reset();
    let (hit, logs) = casaas_core::testkit::logged(async { cache.attach(&store) }).await;
    assert!(!hit);
    assert!(logs.contains("corrupt store-guard cache entry"), "{logs}");
    StoreGuard::new().ensure(&store).await.unwrap();
    assert!(store.counts().total() >= 8);
    assert!(cache.lookup(&store), "replaced by the new pass");
}

#[cfg(unix)]
#[tokio::test]
async fn a_cache_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = GuardCache::open(&open).unwrap_err();
    assert!(err.to_string().contains("chmod go-w"), "{err}");

    // Created by the cache: 0700, entries 0600.
    let private = dir.path().join("a/b");
    let cache = GuardCache::open(&private).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&private), 0o700);
    let store = CountingStore::new(MemoryStore::named("cache-modes"));
    run_once(&cache, &store).await;
    let [entry] = entries(&cache).try_into().unwrap();
    assert_eq!(mode(&entry), 0o600);

    // An entry others may write is not used.
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!cache.lookup(&store));
}

/// Another user's directory (needs root, to give it away).
#[cfg(unix)]
#[tokio::test]
async fn another_users_cache_is_refused() {
    if rustix_uid() != 0 {
        eprintln!("skipped: giving a directory to another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let err = GuardCache::open(&theirs).unwrap_err();
    assert!(
        err.to_string().contains("never shared between users"),
        "{err}"
    );
}

#[cfg(unix)]
fn rustix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // The owner of a file this process just created is its user.
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().metadata().unwrap().uid()
}

#[tokio::test]
async fn an_entry_holds_no_credential() {
    fn open_secretive(url: StoreUrl) -> casaas_core::provider::StoreFuture {
        Box::pin(async move {
            url.options(&["aws_secret_access_key", "region"])?;
            Ok(Arc::new(MemoryStore::named("cache-secretive")) as Arc<dyn CasStore>)
        })
    }
    casaas_core::provider::register_scheme("cachesecret", open_secretive);
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let store = casaas_core::open_store_with(
        "cachesecret://bucket/p?region=eu",
        [("aws_secret_access_key", "Sup3rS3cretValue")],
    )
    .await
    .unwrap();
    cache.attach(store.as_ref());
    StoreGuard::new().ensure(store.as_ref()).await.unwrap();
    let [entry] = entries(&cache).try_into().unwrap();
    let text = std::fs::read_to_string(entry).unwrap();
    assert!(text.contains("cachesecret://bucket/p"), "{text}");
    assert!(!text.contains("Sup3rS3cretValue"), "{text}");
    assert!(text.contains("\"verdict\": \"passed\""), "{text}");
}

/// A store that refuses If-Match, holding leases in the record layout
/// (which needs it): the guard fails it.
fn failing_store(
    name: &str,
) -> (
    Arc<CountingStore<CreateOnlyStore<MemoryStore>>>,
    Arc<dyn CasStore>,
) {
    let counting = Arc::new(CountingStore::new(CreateOnlyStore(MemoryStore::named(
        name,
    ))));
    let store = with_layout(counting.clone(), LeaseLayout::Record);
    (counting, store)
}

#[tokio::test]
async fn a_failing_verdict_withdraws_the_recorded_pass() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ShiftedClock::default());
    let cache = GuardCache::open(dir.path())
        .unwrap()
        .with_clock(clock.clone());
    let (_, store) = failing_store("cache-withdrawn");
    // A pass recorded when the endpoint still behaved.
    cache.record_pass(store.as_ref());
    assert_eq!(entries(&cache).len(), 1);
    // An hour later the guard runs again, and fails: the pass goes.
    clock.advance(DEFAULT_MAX_AGE + Duration::from_secs(1));
    forget_process_verdict(store.as_ref());
    assert!(!cache.attach(store.as_ref()));
    let err = StoreGuard::new().ensure(store.as_ref()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeStore);
    assert!(
        entries(&cache).is_empty(),
        "a failing run left the recorded pass in place"
    );
}

#[tokio::test]
async fn a_check_without_the_cache_withdraws_but_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let (counting, store) = failing_store("cache-no-cache");
    cache.record_pass(store.as_ref());
    assert!(cache.lookup(store.as_ref()));
    // `--no-cache`: the recorded pass is not used, the guard runs and
    // fails, and the pass is withdrawn.
    forget_process_verdict(store.as_ref());
    counting.reset();
    cache.attach_without_lookup(store.as_ref());
    let err = StoreGuard::new().ensure(store.as_ref()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeStore);
    assert!(counting.counts().total() > 0);
    assert!(entries(&cache).is_empty());

    // A store that passes records nothing that way.
    let good = CountingStore::new(MemoryStore::named("cache-no-cache-good"));
    forget_process_verdict(&good);
    cache.attach_without_lookup(&good);
    StoreGuard::new().ensure(&good).await.unwrap();
    assert!(entries(&cache).is_empty());
}

#[tokio::test]
async fn withdrawing_removes_every_opening_of_the_store_and_clear_removes_all() {
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let url = "memory://cache-withdraw-all/app";
    let plain = casaas_core::open_store(url).await.unwrap();
    let other = casaas_core::open_store("memory://cache-withdraw-other/app")
        .await
        .unwrap();
    cache.record_pass(plain.as_ref());
    // The same store opened another way (a capability profile's options,
    // say): an entry under another key, naming the same store.
    let [entry] = entries(&cache).try_into().unwrap();
    let text = std::fs::read_to_string(&entry).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["key"] = format!("{}?profile=x", json["key"].as_str().unwrap()).into();
    let opening = dir.path().join("00000000000000aa.json");
    std::fs::write(&opening, json.to_string()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&opening, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    cache.record_pass(other.as_ref());
    assert_eq!(entries(&cache).len(), 3);
    assert_eq!(
        cache.withdraw(plain.as_ref()).unwrap(),
        1,
        "the other opening"
    );
    assert!(!cache.lookup(plain.as_ref()));
    assert_eq!(
        entries(&cache).len(),
        1,
        "only the other store's pass is left"
    );
    assert!(!opening.exists());
    assert!(cache.lookup(other.as_ref()));
    // A leftover temporary file goes with `clear` too.
    std::fs::write(dir.path().join(".x.json.1.tmp"), "").unwrap();
    assert_eq!(cache.clear().unwrap(), 1);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[cfg(unix)]
#[tokio::test]
async fn a_fifo_at_the_entry_path_does_not_hang_the_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let store = Arc::new(CountingStore::new(MemoryStore::named("cache-fifo")));
    run_once(&cache, &store).await;
    let [entry] = entries(&cache).try_into().unwrap();
    std::fs::remove_file(&entry).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&entry)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let (looking, cache2) = (store.clone(), cache.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let looked = runtime.block_on(casaas_core::testkit::logged(async {
            cache2.lookup(looking.as_ref())
        }));
        let _ = tx.send(looked);
    });
    let (hit, logs) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the lookup hung on a FIFO at the entry path");
    assert!(!hit);
    assert!(logs.contains("not a plain entry"), "{logs}");
    // The guard runs, and its pass cannot replace a FIFO it did not make:
    // the FIFO is renamed over, as any entry is.
    forget_process_verdict(store.as_ref());
    assert!(!cache.attach(store.as_ref()));
    StoreGuard::new().ensure(store.as_ref()).await.unwrap();
    assert!(cache.lookup(store.as_ref()));
}

#[cfg(unix)]
#[tokio::test]
async fn a_cache_below_a_directory_others_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("shared");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = GuardCache::open(&open.join("mine")).unwrap_err();
    assert!(
        err.to_string().contains("another user could change"),
        "{err}"
    );
    // Sticky, as /tmp is: no one may rename what is not theirs.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    GuardCache::open(&open.join("mine")).unwrap();
}

#[tokio::test]
async fn an_entry_dated_in_the_future_is_ignored_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let ahead = Arc::new(ShiftedClock::default());
    ahead.advance(Duration::from_secs(600));
    let store = CountingStore::new(MemoryStore::named("cache-future"));
    GuardCache::open(dir.path())
        .unwrap()
        .with_clock(ahead)
        .record_pass(&store);
    let cache = GuardCache::open(dir.path()).unwrap();
    let (hit, logs) = casaas_core::testkit::logged(async { cache.lookup(&store) }).await;
    assert!(!hit);
    assert!(logs.contains("dated in the future"), "{logs}");
    let (hit, requests) = run_once(&cache, &store).await;
    assert!(!hit && requests >= 8);
    assert!(cache.lookup(&store), "replaced by the new pass");
}

/// docs/protocol.md's safety argument for the cache, held to the code: the
/// fields of an entry this version writes, the expiry, the size limit and
/// the ways an entry is removed are the ones the document lists.
#[tokio::test]
async fn the_protocol_document_describes_the_cache_as_it_is() {
    let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"));
    let start = doc
        .find("**Kept between processes")
        .expect("the cache's section");
    let section = &doc[start..];
    let section = &section[..section.find("**Capability profiles.**").unwrap()];

    let dir = tempfile::tempdir().unwrap();
    let cache = GuardCache::open(dir.path()).unwrap();
    let store = CountingStore::new(MemoryStore::named("cache-doc"));
    cache.record_pass(&store);
    let [entry] = entries(&cache).try_into().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&entry).unwrap()).unwrap();
    for field in json.as_object().unwrap().keys() {
        assert!(
            section.contains(&format!("`{field}`")),
            "the entry field {field} is not in docs/protocol.md"
        );
    }
    assert_eq!(DEFAULT_MAX_AGE, Duration::from_secs(3600));
    assert!(section.contains("*Expiry: one hour*"));
    for removal in [
        "resolved endpoint",
        "`--no-cache`",
        "`casaas doctor`",
        "`casaas cache clear`",
        "however it was opened",
        "a corrupt entry is removed when read",
        "at most 64\n  KiB",
    ] {
        assert!(
            section.contains(removal),
            "docs/protocol.md lacks {removal:?}"
        );
    }
    // The size limit the document names.
    std::fs::write(&entry, vec![b' '; 64 * 1024 + 1]).unwrap();
    let (hit, logs) = casaas_core::testkit::logged(async { cache.lookup(&store) }).await;
    assert!(!hit);
    assert!(logs.contains("not an entry"), "{logs}");
    std::fs::write(&entry, vec![b' '; 64 * 1024]).unwrap();
    let (_, logs) = casaas_core::testkit::logged(async { cache.lookup(&store) }).await;
    assert!(logs.contains("corrupt"), "{logs}");
}
