#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! `casaas doctor`'s exit status when the store guard finds no verdict: a
//! store whose every write answers "outcome unknown" until the guard's
//! deadline is inconclusive (3), not an error (2); a store that refuses the
//! credentials is an error (2).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::{
    CasError, CasStore, ErrorKind, ForwardingStore, MemoryStore, StoredObject, Version,
};

/// Every write is answered as if the connection dropped after the body was
/// sent; reads answer `kind` too when it is not `Ambiguous`.
#[derive(Debug)]
struct Answering {
    inner: MemoryStore,
    kind: ErrorKind,
}

impl Answering {
    fn err(&self) -> CasError {
        CasError::new(self.kind, "doctor test: no usable answer")
    }
}

#[async_trait]
impl ForwardingStore for Answering {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.inner
    }
    async fn wrap_get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        if self.kind == ErrorKind::Ambiguous {
            return self.inner.get(key).await;
        }
        Err(self.err())
    }
    async fn wrap_create(&self, _key: &str, _body: Bytes) -> Result<Version, CasError> {
        Err(self.err())
    }
    async fn wrap_replace(
        &self,
        _key: &str,
        _expected: &Version,
        _body: Bytes,
    ) -> Result<Version, CasError> {
        Err(self.err())
    }
}

fn register() {
    casaas_core::provider::register_scheme("doctor-ambiguous", |_url| {
        Box::pin(async move {
            let store: Arc<dyn CasStore> = Arc::new(Answering {
                inner: MemoryStore::new(),
                kind: ErrorKind::Ambiguous,
            });
            Ok(store)
        })
    });
    casaas_core::provider::register_scheme("doctor-denied", |_url| {
        Box::pin(async move {
            let store: Arc<dyn CasStore> = Arc::new(Answering {
                inner: MemoryStore::new(),
                kind: ErrorKind::Unauthorized,
            });
            Ok(store)
        })
    });
}

fn doctor(url: &str) -> (u8, std::time::Duration) {
    register();
    let start = std::time::Instant::now();
    let code = casaas_conformance::cli::run_doctor_cli([
        "casaas doctor",
        url,
        "--format",
        "json",
        "--guard-deadline",
        "1",
    ]);
    // ExitCode has no accessor: find which status it is.
    let exit = (0..=u8::MAX)
        .find(|n| code == std::process::ExitCode::from(*n))
        .unwrap();
    (exit, start.elapsed())
}

#[test]
fn a_store_ambiguous_until_the_guards_deadline_is_inconclusive() {
    let (exit, elapsed) = doctor("doctor-ambiguous://b/p");
    assert_eq!(exit, 3);
    // It waited for the deadline it was given, not the default 30 s.
    assert!(
        elapsed >= std::time::Duration::from_millis(500) && elapsed.as_secs() < 20,
        "{elapsed:?}"
    );
}

#[test]
fn a_store_that_refuses_the_credentials_is_an_error() {
    // Refused as configured: retrying will not help (docs/cli.md).
    assert_eq!(
        doctor("doctor-denied://b/p").0,
        casaas_conformance::cli::EXIT_CONFIG
    );
}
