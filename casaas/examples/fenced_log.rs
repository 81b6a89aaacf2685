//! Append to a fenced log: each append creates the next entry only if it is
//! absent, so exactly one writer wins each sequence number, and a writer
//! whose token is below the latest entry's is refused (the commit pattern
//! of table formats on object storage). Runs on the in-memory store; pass a
//! store URL to use another.
//!
//! ```text
//! cargo run -p casaas --example fenced_log [STORE_URL]
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use casaas::{FencedLog, Lease, LeaseConfig, LeaseError, WaitOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://log-example/table".to_string());
    let store = casaas::open_store(&url).await?;
    let lease = Lease::new(
        store.clone(),
        "locks/commit",
        "committer-1",
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )?;
    let log = FencedLog::<String>::new(store, "table/_log")?;

    let held = lease.acquire(WaitOptions::default()).await?;
    for commit in ["add file a", "add file b"] {
        held.ensure_held_for(Duration::from_secs(2))?;
        let entry = log.append(held.token(), commit.to_string()).await?;
        println!(
            "entry {} under token {}: {}",
            entry.seq, entry.token, entry.value
        );
    }
    // A writer with an older token is refused.
    match log.append(held.token() - 1, "stale".to_string()).await {
        Err(LeaseError::FencedOut { .. }) => println!("a stale writer's append was refused"),
        other => return Err(format!("a stale append was not refused: {other:?}").into()),
    }
    let entries = log.entries(1).await?;
    println!("the log has {} entries", entries.len());
    held.release().await?;
    Ok(())
}
