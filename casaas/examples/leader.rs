//! A leader that commits through a fenced resource: the shape of a table
//! format's commit path. Runs on the embedded file backend; pass a URL
//! (`memory://`, `file:///…`) to use another store.
//!
//! ```sh
//! cargo run -p casaas --example leader
//! ```
#![allow(clippy::print_stdout)]

use std::time::Duration;

use casaas::{FencedResource, Lease, LeaseConfig, WaitOptions, default_owner_id, open_store};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("casaas-leader-{}", std::process::id()));
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| format!("file://{}?create_dirs=true", dir.display()));
    let store = open_store(&url).await?;

    let lease = Lease::new(
        store.clone(),
        "locks/commit",
        default_owner_id(),
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )?;
    let held = lease
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(30)))
        .await?;
    println!("leader with fencing token {}", held.token());

    // The commit pointer refuses any writer whose token is below the highest
    // it has accepted: a paused former leader cannot overwrite our commit.
    let pointer = FencedResource::<u64>::new(store, "table/_commit")?;
    for _ in 0..3 {
        // Stop before a side effect if the lease might expire during it.
        held.ensure_held_for(Duration::from_secs(2))?;
        let committed = pointer
            .update(held.token(), |current| current.copied().unwrap_or(0) + 1)
            .await?;
        println!(
            "committed version {} under token {}",
            committed.value, committed.token
        );
    }
    held.release().await?;
    println!("released");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
