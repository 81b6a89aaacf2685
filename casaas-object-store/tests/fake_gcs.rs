//! object_store against fake-gcs (`cargo xtask servers up fake-gcs`).
//!
//! object_store's GCS client writes through the XML API (`PUT
//! /bucket/object` with `x-goog-if-generation-match`); its multipart path is
//! XML too (`POST ?uploads`) and cannot carry a condition at all.
//! fake-gcs-server emulates reads and listings of the XML API but no XML
//! writes: every PUT answers 400 "invalid uploadType". So the contract
//! suite cannot run on it; these tests pin what does hold, and that the
//! refusal reaches the caller as `Unsupported` with its evidence rather
//! than as a lost race.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::testkit::contract::{Check, run_check};
use casaas_core::{CasStore, ErrorKind};

async fn fresh_store() -> Arc<dyn CasStore> {
    common::server_store("fake-gcs", "object-store-fake-gcs").await
}

#[test]
fn reads_and_key_checks_hold() {
    run_check(Check::GetAbsent, fresh_store, 1, 1);
    run_check(Check::InvalidKeyRejected, fresh_store, 1, 1);
}

/// When this fails, fake-gcs accepts XML writes: run the whole contract
/// suite on it.
#[tokio::test]
async fn xml_api_writes_are_refused_as_unsupported() {
    let store = fresh_store().await;
    let err = store
        .create("k", Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert_eq!(err.status(), Some(400), "{err}");
    assert!(err.to_string().contains("invalid uploadType"), "{err}");
    assert!(store.list("").await.unwrap().is_empty());
}
