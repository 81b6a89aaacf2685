//! casaas-s3 against raw aws-sdk-s3 calls with the same conditions, on a
//! running moto (`cargo xtask servers up moto`).
//!
//! Each iteration, in alternating order: a casaas `create` and a raw
//! `PutObject If-None-Match: *` on fresh keys, then a casaas `replace` and
//! a raw `PutObject If-Match` on those keys. Prints p50/p90 per operation
//! and the casaas/raw ratio of the medians.
//!
//! ```text
//! cargo run --release -p casaas-s3 --example bench_vs_raw -- [ITERATIONS]
//! ```

use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_types::retry::RetryConfig;
use bytes::Bytes;
use casaas_core::CasStore;
use casaas_core::testkit::{test_server, unique_prefix};
use casaas_s3::S3Store;
use url::Url;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let seconds: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(casaas_core::provider::percentile(&seconds, p).max(0.0))
}

/// A plain client with the same settings casaas uses (retries off,
/// path-style, checksums only when required), without casaas on top.
fn raw_client(endpoint: &str, key: &str, secret: &str) -> Client {
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(key, secret, None, None, "bench"))
        .force_path_style(true)
        .retry_config(RetryConfig::disabled())
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .build();
    Client::from_conf(config)
}

#[tokio::main]
async fn main() -> Result<()> {
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(300);
    let server = test_server("moto");
    let key = server.var("AWS_ACCESS_KEY_ID");
    let secret = server.var("AWS_SECRET_ACCESS_KEY");
    let url = Url::parse(&server.url)?;
    let endpoint = url
        .query_pairs()
        .find(|(k, _)| k == "endpoint")
        .map(|(_, v)| v.into_owned())
        .ok_or("the moto URL has no endpoint")?;
    let bucket = url
        .host_str()
        .ok_or("the moto URL has no bucket")?
        .to_string();
    let prefix = unique_prefix("bench");

    let store = S3Store::builder()
        .url(&server.url)?
        .static_credentials(key, secret)
        .prefix(format!("{prefix}/casaas"))
        .build()
        .await?;
    let raw = raw_client(&endpoint, key, secret);
    let body = Bytes::from(vec![b'x'; 256]);

    // Warm both connection pools.
    for i in 0..10 {
        store.create(&format!("warm/{i}"), body.clone()).await?;
        raw.put_object()
            .bucket(&bucket)
            .key(format!("{prefix}/raw/warm/{i}"))
            .if_none_match("*")
            .body(ByteStream::from(body.clone()))
            .send()
            .await?;
    }

    let (mut c_create, mut c_replace, mut r_create, mut r_replace) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations {
        let k = format!("k/{i}");
        let raw_key = format!("{prefix}/raw/k/{i}");
        let next = Bytes::from(format!("iteration {i}").into_bytes());
        let casaas_first = i % 2 == 0;
        for turn in 0..2 {
            if (turn == 0) == casaas_first {
                let t = Instant::now();
                let v = store.create(&k, body.clone()).await?;
                c_create.push(t.elapsed());
                let t = Instant::now();
                store.replace(&k, &v, next.clone()).await?;
                c_replace.push(t.elapsed());
            } else {
                let t = Instant::now();
                let out = raw
                    .put_object()
                    .bucket(&bucket)
                    .key(&raw_key)
                    .if_none_match("*")
                    .body(ByteStream::from(body.clone()))
                    .send()
                    .await?;
                r_create.push(t.elapsed());
                let etag = out.e_tag().ok_or("no ETag")?.to_string();
                let t = Instant::now();
                raw.put_object()
                    .bucket(&bucket)
                    .key(&raw_key)
                    .if_match(etag)
                    .body(ByteStream::from(next.clone()))
                    .send()
                    .await?;
                r_replace.push(t.elapsed());
            }
        }
    }

    println!("{iterations} iterations per operation against moto at {endpoint}");
    println!(
        "{:<10} {:>12} {:>12} {:>12} {:>12} {:>8}",
        "op", "casaas p50", "raw p50", "casaas p90", "raw p90", "ratio"
    );
    for (name, c, r) in [
        ("create", &mut c_create, &mut r_create),
        ("replace", &mut c_replace, &mut r_replace),
    ] {
        let (c50, r50) = (percentile(c, 50.0), percentile(r, 50.0));
        let (c90, r90) = (percentile(c, 90.0), percentile(r, 90.0));
        println!(
            "{name:<10} {:>12.3?} {:>12.3?} {:>12.3?} {:>12.3?} {:>8.3}",
            c50,
            r50,
            c90,
            r90,
            c50.as_secs_f64() / r50.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}
