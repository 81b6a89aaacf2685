//! A program that uses casaas as a library: open an `s3://` URL with
//! credentials given as options (no register call, no credential chain),
//! acquire a lease, print its fencing token, release it.
//!
//! Usage: `casaas-consumer S3_URL` with `CONSUMER_ACCESS_KEY_ID` and
//! `CONSUMER_SECRET_ACCESS_KEY` in the environment.

use std::time::Duration;

use casaas::{Lease, LeaseConfig, WaitOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: casaas-consumer S3_URL")?;
    let key_id = std::env::var("CONSUMER_ACCESS_KEY_ID")?;
    let secret = std::env::var("CONSUMER_SECRET_ACCESS_KEY")?;
    let store = casaas::open_store_with(
        &url,
        [
            ("aws_access_key_id", key_id.as_str()),
            ("aws_secret_access_key", secret.as_str()),
        ],
    )
    .await?;
    let lease = Lease::new(
        store,
        "consumer/lock",
        "consumer-1",
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )?;
    let held = lease
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(10)))
        .await?;
    println!("token {}", held.token());
    held.release().await?;
    println!("released");
    Ok(())
}
