//! OpenDAL against fake-gcs (`cargo xtask servers up fake-gcs`).
//!
//! OpenDAL's GCS service sends every conditional write as a resumable
//! upload with `ifGenerationMatch` on the initiating request. fake-gcs-server
//! (as installed by xtask) ignores preconditions on resumable uploads — it
//! honours them on multipart uploads only — so the race and stale-version
//! checks cannot pass on it; real GCS honours them. What does not depend on
//! the emulator enforcing conditions runs here: versions (generation and
//! ETag) survive create, get, replace and list through the JSON API.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::testkit::contract::{Check, run_check};

async fn fresh_store() -> Arc<dyn CasStore> {
    common::server_store("fake-gcs", "opendal-fake-gcs", |store| {
        store.conditional_delete(false)
    })
    .await
}

#[test]
fn versions_survive_create_get_replace_and_list() {
    for check in [
        Check::GetAbsent,
        Check::CreateThenGet,
        Check::ReplaceCurrent,
        Check::ListPrefix,
        Check::InvalidKeyRejected,
        Check::ConditionalDelete,
    ] {
        run_check(check, fresh_store, 1, 1);
    }
}

#[tokio::test]
async fn versions_carry_the_generation() {
    let store = fresh_store().await;
    let v = store.create("k", Bytes::from_static(b"x")).await.unwrap();
    let text = v.to_string();
    let generation = text.rsplit_once(";version=").unwrap().1;
    assert!(generation.parse::<i64>().is_ok(), "{text}");
}

/// Pins the emulator deviation that keeps the full suite off fake-gcs:
/// when this fails, fake-gcs enforces the condition and the suite can run
/// here in full.
#[tokio::test]
async fn fake_gcs_ignores_preconditions_on_resumable_uploads() {
    let store = fresh_store().await;
    store
        .create("k", Bytes::from_static(b"first"))
        .await
        .unwrap();
    let second = store.create("k", Bytes::from_static(b"second")).await;
    assert!(
        second.is_ok(),
        "fake-gcs now refuses the second create ({second:?}): run the whole contract suite \
         on it"
    );
}
