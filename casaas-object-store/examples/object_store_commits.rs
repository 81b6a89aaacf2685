//! A table writer's commit loop over the `Arc<dyn ObjectStore>` it already
//! has: one writer at a time holds a lease, and every commit is the next
//! entry of a fenced log (create-if-absent, the Delta-Lake commit-file
//! pattern), so a paused former writer can never commit over the new one.
//!
//! ```text
//! cargo run -p casaas-object-store --example object_store_commits
//! ```
//!
//! Replace `InMemory` with the client your table format builds (S3, GCS,
//! Azure); nothing else changes.

use std::sync::Arc;
use std::time::Duration;

use casaas_core::CasStore;
use casaas_core::lease::{FencedLog, Lease, LeaseConfig, LeaseError, WaitOptions};
use casaas_object_store::ObjectStoreCas;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use serde::{Deserialize, Serialize};

/// What one commit records (a table format's actions).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Commit {
    add: Vec<String>,
    remove: Vec<String>,
}

/// Commits `commits` to the table at `table_root` as writer `writer`.
async fn run_writer(
    client: Arc<dyn ObjectStore>,
    table_root: &str,
    writer: &str,
    commits: Vec<Commit>,
) -> Result<(), Box<dyn std::error::Error>> {
    // The adapter shares the client (connection pool, credentials, retries).
    let store: Arc<dyn CasStore> = Arc::new(ObjectStoreCas::new(client, table_root)?);
    let lease = Lease::new(
        store.clone(),
        "_casaas/writer",
        writer,
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )?;
    let log = FencedLog::<Commit>::new(store, "_commits")?;

    let guard = lease
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(30)))
        .await?;
    // A new writer appends first, so that its predecessor is fenced out
    // from here on.
    log.append(
        guard.token(),
        Commit {
            add: vec![],
            remove: vec![],
        },
    )
    .await?;
    for commit in commits {
        // Before each side effect: still the writer, with time to spare?
        guard.ensure_held_for(Duration::from_secs(2))?;
        let entry = log.append(guard.token(), commit).await?;
        println!(
            "{writer}: committed version {} ({:?})",
            entry.seq, entry.value.add
        );
    }
    guard.release().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let table = "warehouse/sales";
    run_writer(
        client.clone(),
        table,
        "writer-a",
        vec![Commit {
            add: vec!["part-0001.parquet".into()],
            remove: vec![],
        }],
    )
    .await?;
    run_writer(
        client.clone(),
        table,
        "writer-b",
        vec![Commit {
            add: vec!["part-0002.parquet".into()],
            remove: vec!["part-0001.parquet".into()],
        }],
    )
    .await?;

    // A zombie holding writer-a's old token is refused.
    let store: Arc<dyn CasStore> = Arc::new(ObjectStoreCas::new(client, table)?);
    let log = FencedLog::<Commit>::new(store, "_commits")?;
    let zombie = log
        .append(
            1,
            Commit {
                add: vec!["stale.parquet".into()],
                remove: vec![],
            },
        )
        .await;
    match zombie {
        Err(LeaseError::FencedOut {
            presented,
            recorded,
        }) => {
            println!("zombie refused: token {presented} < {recorded}")
        }
        other => return Err(format!("the zombie was not fenced out: {other:?}").into()),
    }
    for entry in log.entries(1).await? {
        println!("log {}: token {} {:?}", entry.seq, entry.token, entry.value);
    }
    Ok(())
}
