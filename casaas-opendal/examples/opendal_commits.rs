//! A table writer's commit loop over the OpenDAL `Operator` it already has:
//! one writer at a time holds a lease, and every commit is the next entry of
//! a fenced log (create-if-absent), so a paused former writer can never
//! commit over the new one.
//!
//! ```text
//! cargo run -p casaas-opendal --example opendal_commits                  # fs, commit files only
//! cargo run -p casaas-opendal --example opendal_commits -- 'opendal+s3://bucket/warehouse?region=...'
//! ```
//!
//! Leases need a conditional replace, which OpenDAL offers on S3, GCS and
//! Azure Blob but not on `fs` or `memory`: there the example shows the
//! capability check and commits with create-if-absent alone (safe against
//! two writers racing for one version, not against a paused writer).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{FencedLog, Lease, LeaseConfig, WaitOptions};
use casaas_core::{CasStore, ErrorKind};
use casaas_opendal::OpendalCas;
use opendal::{Operator, services};

/// Commits `actions` to the table with a lease and a fenced log.
async fn commit_with_lease(
    store: Arc<dyn CasStore>,
    writer: &str,
    actions: &[&str],
) -> Result<(), Box<dyn std::error::Error>> {
    let lease = Lease::new(
        store.clone(),
        "_casaas/writer",
        writer,
        LeaseConfig::from_ttl(Duration::from_secs(10)),
    )?;
    let log = FencedLog::<String>::new(store, "_commits")?;
    let guard = lease
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(30)))
        .await?;
    log.append(guard.token(), format!("{writer} takes over"))
        .await?;
    for action in actions {
        guard.ensure_held_for(Duration::from_secs(2))?;
        let entry = log.append(guard.token(), action.to_string()).await?;
        println!("{writer}: committed version {}: {action}", entry.seq);
    }
    guard.release().await?;
    Ok(())
}

/// Commits `actions` as numbered commit files, each created only if absent.
async fn commit_files(
    store: Arc<dyn CasStore>,
    actions: &[&str],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut version = store.list("_commits/").await?.len() as u64;
    for action in actions {
        loop {
            version += 1;
            let key = format!("_commits/{version:020}.json");
            match store.create(&key, Bytes::from(action.to_string())).await {
                Ok(_) => {
                    println!("committed version {version}: {action}");
                    break;
                }
                // Another writer took this version: rebase and try the next.
                Err(e) if e.kind() == ErrorKind::PreconditionFailed => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn CasStore> = match std::env::args().nth(1) {
        Some(url) => {
            casaas_opendal::register();
            casaas_core::open_store(&url).await?
        }
        None => {
            // This crate builds OpenDAL without its start-up constructor.
            opendal::install_default();
            let root =
                std::env::temp_dir().join(format!("casaas-opendal-example-{}", std::process::id()));
            let root = root
                .to_str()
                .ok_or("the temporary directory is not UTF-8")?;
            println!("table under {root}");
            let op = Operator::new(services::Fs::default().root(root))?;
            Arc::new(OpendalCas::new(op, "warehouse/sales")?)
        }
    };
    let caps = store.capabilities();
    println!("{}: {caps:?}", store.describe());
    if caps.replace_if_match {
        commit_with_lease(store.clone(), "writer-a", &["add part-0001"]).await?;
        commit_with_lease(store, "writer-b", &["remove part-0001", "add part-0002"]).await?;
    } else {
        commit_files(store, &["add part-0001", "add part-0002"]).await?;
    }
    Ok(())
}
