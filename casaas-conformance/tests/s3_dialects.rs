#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! A store that answers 501 to `If-None-Match` but honours a vendor's
//! forbid-overwrite header (Aliyun OSS, played by casaas-s3's
//! recorded-request server): the ETag-forms probe finds the header,
//! recommends `forbid_overwrite=oss`, and the suite proves it by running the
//! probe again with it.
#![cfg(feature = "s3")]

#[path = "../../casaas-s3/tests/support/recorded_s3.rs"]
mod recorded_s3;

use std::sync::Arc;

use casaas_conformance::s3::{S3Clock, S3Reopen, s3_probes};
use casaas_conformance::{NoProgress, Settings, Suite, Target, Verdict};
use casaas_core::{CasStore, StoreUrl};
use casaas_s3::S3Store;
use recorded_s3::{BUCKET, Vendor, start};

async fn probe_etag_forms(vendor: Vendor) -> (casaas_conformance::Report, Arc<recorded_s3::Fake>) {
    let (fake, endpoint) = start(vendor).await;
    let url = StoreUrl::parse(&format!(
        "s3://{BUCKET}/run?endpoint={endpoint}&path_style=true&region=us-east-1"
    ))
    .unwrap()
    // Explicit credentials: nothing consults instance metadata.
    .with_given_options([
        ("aws_access_key_id", "AKIDTEST"),
        ("aws_secret_access_key", "test-secret"),
    ])
    .unwrap();
    let store = S3Store::open_url(&url).await.unwrap();
    let mut suite = Suite::standard();
    for probe in s3_probes(&store) {
        suite = suite.with_probe(probe);
    }
    let suite = suite.only(&["s3_etag_forms".to_string()]).unwrap();
    let target = Target::new(
        Arc::new(store.clone()) as Arc<dyn CasStore>,
        url.to_string(),
    )
    .with_clock(Arc::new(S3Clock(store)))
    .with_reopen(Arc::new(S3Reopen::new(url)));
    let report = suite
        .run(&target, &Settings::quick(), Arc::new(NoProgress))
        .await
        .unwrap();
    (report, fake)
}

#[tokio::test]
async fn forbid_overwrite_is_found_recommended_and_proven() {
    let (report, fake) = probe_etag_forms(Vendor::Oss).await;
    let result = report
        .probes
        .iter()
        .find(|p| p.id == "s3_etag_forms")
        .unwrap();
    let options: Vec<&str> = result
        .recommended_options
        .iter()
        .map(|r| r.option.as_str())
        .collect();
    assert_eq!(options, ["forbid_overwrite=oss"], "{result:#?}");
    assert_eq!(report.options_applied, ["forbid_overwrite=oss".to_string()]);
    // Run again with the option, the probe checks the header and passes.
    assert_eq!(result.verdict, Verdict::Pass, "{result:#?}");
    assert!(
        result.detail.starts_with("with forbid_overwrite=oss:"),
        "{}",
        result.detail
    );
    let requests = fake.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.method == "PUT" && r.header("x-oss-forbid-overwrite") == Some("true")),
        "{requests:#?}"
    );
}

#[tokio::test]
async fn a_store_that_takes_if_none_match_gets_no_dialect() {
    let (report, fake) = probe_etag_forms(Vendor::S3).await;
    let result = report
        .probes
        .iter()
        .find(|p| p.id == "s3_etag_forms")
        .unwrap();
    assert_eq!(result.verdict, Verdict::Pass, "{result:#?}");
    assert!(result.recommended_options.is_empty(), "{result:#?}");
    assert!(report.options_applied.is_empty());
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.header("x-oss-forbid-overwrite").is_none()
                && r.header("x-cos-forbid-overwrite").is_none())
    );
}
