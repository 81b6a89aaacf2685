//! Test support, behind the `testkit` feature and not part of the
//! library's API: the [`contract`] suite every backend passes, the lookup of
//! the real servers that `cargo xtask servers up` starts ([`server_env`],
//! which owns their env-file format), and wrappers that inject faults into
//! ([`FaultyStore`]) or count the requests of ([`CountingStore`]) any
//! backend.
//!
//! Enable it where tests need it:
//!
//! ```toml
//! [dev-dependencies]
//! casaas-core = { version = "0.1", features = ["testkit"] }
//! ```

pub mod contract;
mod counting_store;
mod create_only;
mod faulty_store;
pub mod server_env;

pub use counting_store::{CountingStore, RequestCounts};
pub use create_only::CreateOnlyStore;
pub use faulty_store::{Fault, FaultConfig, FaultCounts, FaultyStore};
pub use server_env::{TestServer, test_server, unique_prefix};

/// Runs `f` and returns its output with what was logged at warn or above on
/// this thread meanwhile (run it on a current-thread runtime), as plain
/// text: for tests that check a warning is given.
pub async fn logged<F: std::future::Future>(f: F) -> (F::Output, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let out = f.await;
    let bytes = buffer.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
    (out, String::from_utf8_lossy(&bytes).into_owned())
}

/// Runs the [store guard](crate::guard) on `store` now, so that the
/// requests a test scripts, injects faults into or counts afterwards are
/// the protocol's alone (the guard runs once per store per process, before
/// the first write).
pub async fn pass_store_guard(store: &dyn crate::CasStore) -> Result<(), crate::CasError> {
    crate::guard::StoreGuard::new().ensure(store).await
}

/// Checks that the adapter store `adapter_url` names (an in-memory one,
/// such as `object_store+memory:///p`) follows the capability profile it is
/// opened with (`capability_profile=PATH`): a NOT SAFE profile refuses it
/// before it is built; a SAFE profile that proves assembled writes lets a
/// conditional write above the single-part limit through; one that does not
/// leaves such a write refused. `dir` holds the profiles written.
pub async fn check_large_writes_follow_the_profile(adapter_url: &str, dir: &std::path::Path) {
    use crate::profile::{CapabilityProfile, ProfileVerdict};
    use crate::{ErrorKind, StoreUrl};
    let store_url = StoreUrl::parse("s3://profiled").unwrap_or_else(|e| panic!("{e}"));
    let save = |name: &str, verdict: ProfileVerdict, proven: bool| {
        let profile = CapabilityProfile::new(&store_url, verdict, "test", Vec::new(), Vec::new())
            .with_large_conditional_writes(proven);
        let path = dir.join(name);
        profile.save(Some(&path)).unwrap_or_else(|e| panic!("{e}"));
        path.display().to_string()
    };
    let big = bytes::Bytes::from(vec![
        b'x';
        crate::failure::CONDITIONAL_SINGLE_PART_LIMIT + 1
    ]);
    let open = |profile: String| async move {
        crate::open_store_with(adapter_url, [(crate::profile::PROFILE_OPTION, profile)]).await
    };

    let refused = open(save("not-safe.json", ProfileVerdict::NotSafe, true)).await;
    let err = refused
        .err()
        .unwrap_or_else(|| panic!("a NOT SAFE profile opened {adapter_url}"));
    assert_eq!(err.kind(), ErrorKind::UnsafeStore, "{err}");
    assert!(err.to_string().contains("NOT SAFE"), "{err}");

    let unproven = open(save("unproven.json", ProfileVerdict::Safe, false))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = unproven.create("big-unproven", big.clone()).await.err();
    let err = err.unwrap_or_else(|| panic!("an unproven large write went through"));
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("capability_profile"), "{err}");

    let proven = open(save("proven.json", ProfileVerdict::Safe, true))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let written = proven.create("big-proven", big.clone()).await;
    written.unwrap_or_else(|e| panic!("a proven large write was refused: {e}"));
    let read = proven
        .get("big-proven")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.map(|o| o.body.len()), Some(big.len()));
    // Its condition still holds (other bytes: equal ones would be read as
    // a retry of our own write that landed).
    let other = bytes::Bytes::from(vec![b'z'; big.len()]);
    let again = proven.create("big-proven", other).await.err();
    let again = again.unwrap_or_else(|| panic!("a second create of a large object succeeded"));
    assert_eq!(again.kind(), ErrorKind::PreconditionFailed, "{again}");
}
