//! Throughput of the embedded backends: create, replace and read, on one
//! thread and on four. Run with `cargo bench -p casaas-core`; divan prints
//! operations per second (`item/s`).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use casaas_core::{CasStore, FileStore, MemoryStore, Version};
use divan::Bencher;
use divan::counter::ItemsCount;

fn main() {
    divan::main();
}

const THREADS: &[usize] = &[1, 4];
const BODY: &[u8] = br#"{"kind":"casaas.lease","schema":1,"owner":"host/1","token":7}"#;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap()
    })
}

#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    File,
}

fn store(backend: Backend) -> Arc<dyn CasStore> {
    static MEMORY: OnceLock<Arc<dyn CasStore>> = OnceLock::new();
    static FILE: OnceLock<(tempfile::TempDir, Arc<dyn CasStore>)> = OnceLock::new();
    match backend {
        Backend::Memory => MEMORY.get_or_init(|| Arc::new(MemoryStore::new())).clone(),
        Backend::File => FILE
            .get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let store = runtime().block_on(FileStore::open(dir.path())).unwrap();
                (dir, Arc::new(store))
            })
            .1
            .clone(),
    }
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

fn fresh_key(prefix: &str) -> String {
    format!("{prefix}/{}", NEXT_KEY.fetch_add(1, Ordering::Relaxed))
}

fn create(bencher: Bencher, backend: Backend) {
    let store = store(backend);
    bencher.counter(ItemsCount::new(1usize)).bench(|| {
        runtime()
            .block_on(store.create(&fresh_key("create"), Bytes::from_static(BODY)))
            .unwrap()
    });
}

thread_local! {
    /// Per bench thread and backend: the key it replaces and its version.
    static OWN_KEYS: RefCell<Vec<(u8, String, Version)>> = const { RefCell::new(Vec::new()) };
}

fn replace(bencher: Bencher, backend: Backend) {
    let store = store(backend);
    bencher.counter(ItemsCount::new(1usize)).bench(|| {
        // Each bench thread replaces its own key, so every replace succeeds.
        OWN_KEYS.with(|own| {
            let mut own = own.borrow_mut();
            let id = backend as u8;
            if !own.iter().any(|(b, _, _)| *b == id) {
                let key = fresh_key("replace");
                let v = runtime()
                    .block_on(store.create(&key, Bytes::from_static(BODY)))
                    .unwrap();
                own.push((id, key, v));
            }
            let Some((_, key, version)) = own.iter_mut().find(|(b, _, _)| *b == id) else {
                unreachable!("inserted above");
            };
            *version = runtime()
                .block_on(store.replace(key, version, Bytes::from_static(BODY)))
                .unwrap();
        })
    });
}

fn read(bencher: Bencher, backend: Backend) {
    let store = store(backend);
    let key = fresh_key("read");
    runtime()
        .block_on(store.create(&key, Bytes::from_static(BODY)))
        .unwrap();
    bencher
        .counter(ItemsCount::new(1usize))
        .bench(|| runtime().block_on(store.get(&key)).unwrap());
}

mod memory {
    use super::*;

    #[divan::bench(threads = THREADS)]
    fn create(b: Bencher) {
        super::create(b, Backend::Memory)
    }

    #[divan::bench(threads = THREADS)]
    fn replace(b: Bencher) {
        super::replace(b, Backend::Memory)
    }

    #[divan::bench(threads = THREADS)]
    fn read(b: Bencher) {
        super::read(b, Backend::Memory)
    }
}

mod file {
    use super::*;

    // Every file write is two fsyncs: few samples keep the run short.
    #[divan::bench(threads = THREADS, sample_count = 20, sample_size = 5)]
    fn create(b: Bencher) {
        super::create(b, Backend::File)
    }

    #[divan::bench(threads = THREADS, sample_count = 20, sample_size = 5)]
    fn replace(b: Bencher) {
        super::replace(b, Backend::File)
    }

    #[divan::bench(threads = THREADS, sample_count = 50, sample_size = 20)]
    fn read(b: Bencher) {
        super::read(b, Backend::File)
    }
}
