//! Hold a lock while doing work: acquire with a deadline, check that the
//! lease is still held before each side effect, release at the end.
//! Runs on a local directory store; pass a store URL to use another.
//!
//! ```text
//! cargo run -p casaas --example hold_lock [STORE_URL]
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use casaas::{Lease, LeaseConfig, WaitOptions, default_owner_id};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("casaas-hold-lock-{}", std::process::id()));
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| format!("file://{}?create_dirs=true", dir.display()));
    let store = casaas::open_store(&url).await?;

    let lease = Lease::new(
        store,
        "locks/nightly-backup",
        default_owner_id(),
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )?;
    // Wait up to 30 s for the current holder, if any, to release or expire.
    let held = lease
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(30)))
        .await?;
    println!("holding the lock with fencing token {}", held.token());
    for step in 1..=3 {
        // Stop before a side effect if the lease might expire during it.
        held.ensure_held_for(Duration::from_secs(2))?;
        println!("step {step} done under the lock");
    }
    held.release().await?;
    println!("released");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
