//! Elect a leader: two candidates campaign for the same key; the first
//! leads, the second waits and leads once the first resigns. Observers see
//! who leads. Runs on the in-memory store; pass a store URL to use another.
//!
//! ```text
//! cargo run -p casaas --example elect_leader [STORE_URL]
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use casaas::{CancellationToken, Election, Lease, LeaseConfig, WaitOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://elect-example/app".to_string());
    let store = casaas::open_store(&url).await?;
    let config = LeaseConfig::from_ttl(Duration::from_secs(5));
    let node_a = Election::new(Lease::new(
        store.clone(),
        "election/db",
        "node-a",
        config.clone(),
    )?);
    let node_b = Election::new(Lease::new(store, "election/db", "node-b", config)?);

    let cancel = CancellationToken::new();
    let leading_a = node_a
        .campaign(WaitOptions::default().with_cancel(cancel.clone()))
        .await?;
    println!("node-a leads with token {}", leading_a.token());

    // node-b campaigns in the background; it cannot lead while node-a does.
    let candidate_b = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            node_b
                .campaign(WaitOptions::default().with_cancel(cancel))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    if let Some(leader) = node_a.leader().await? {
        println!("observed leader: {} (token {})", leader.owner, leader.token);
    }

    leading_a.resign().await?;
    let leading_b = candidate_b.await??;
    println!("node-b leads with token {}", leading_b.token());
    leading_b.resign().await?;
    Ok(())
}
