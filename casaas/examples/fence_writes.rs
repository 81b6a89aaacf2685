//! Fence writes to a resource: every update of the resource carries the
//! writer's fencing token, and a writer whose token is lower than one
//! already accepted is refused, so a paused former holder cannot overwrite
//! a newer holder's write. Runs on the in-memory store; pass a store URL to
//! use another.
//!
//! ```text
//! cargo run -p casaas --example fence_writes [STORE_URL]
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use casaas::{FencedResource, Lease, LeaseConfig, LeaseError, WaitOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://fence-example/app".to_string());
    let store = casaas::open_store(&url).await?;
    let config = LeaseConfig::from_ttl(Duration::from_secs(5));
    let lease_a = Lease::new(store.clone(), "locks/config", "writer-a", config.clone())?;
    let lease_b = Lease::new(store.clone(), "locks/config", "writer-b", config)?;
    let resource = FencedResource::<String>::new(store, "config/current")?;

    // writer-a holds the lock and writes.
    let held_a = lease_a.acquire(WaitOptions::default()).await?;
    let token_a = held_a.token();
    resource
        .update(token_a, |_| "written by a".to_string())
        .await?;
    held_a.release().await?;

    // writer-b takes the lock over and writes with a higher token.
    let held_b = lease_b
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(10)))
        .await?;
    resource
        .update(held_b.token(), |_| "written by b".to_string())
        .await?;

    // writer-a, paused through all that, wakes up and tries to write.
    match resource
        .update(token_a, |_| "late write by a".to_string())
        .await
    {
        Err(LeaseError::FencedOut {
            presented,
            recorded,
        }) => {
            println!("late write refused: token {presented} < {recorded}");
        }
        other => return Err(format!("the late write was not refused: {other:?}").into()),
    }
    let current = resource.read().await?.ok_or("the resource is missing")?;
    println!(
        "resource holds {:?} under token {}",
        current.value, current.token
    );
    held_b.release().await?;
    Ok(())
}
