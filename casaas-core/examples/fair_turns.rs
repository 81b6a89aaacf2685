//! Fair turns: waiters queue for a lock and are served in arrival order.
//!
//! ```text
//! cargo run -p casaas-core --example fair_turns
//! cargo run -p casaas-core --example fair_turns -- --backend file
//! ```
//!
//! One worker holds the lock; five more arrive one after another and wait
//! with `FairLease::acquire`, each taking a ticket and watching only the
//! ticket before its own. The holder releases, the waiters take their
//! turns, and the program prints the order they held the lock in, with
//! their fencing tokens, then `served_in_order=true|false`.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use casaas_core::lease::{FairLease, Lease, LeaseConfig, LeaseError, WaitOptions};
use casaas_core::{CasStore, FileStore, MemoryStore};

const KEY: &str = "locks/fair-example";
const WAITERS: usize = 5;

/// A fair view of the lock for `owner`.
fn fair(store: &Arc<dyn CasStore>, owner: &str) -> Result<FairLease, LeaseError> {
    let config = LeaseConfig::from_ttl(Duration::from_secs(5));
    FairLease::new(Lease::new(store.clone(), KEY, owner, config)?)
}

async fn run(store: Arc<dyn CasStore>) -> Result<bool, LeaseError> {
    let holder = fair(&store, "holder")?
        .acquire(WaitOptions::default())
        .await?;
    println!("holder holds the lock (token {})", holder.token());

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 1..=WAITERS {
        let name = format!("waiter-{i}");
        let lease = fair(&store, &name)?;
        let served = served.clone();
        waiters.push(tokio::spawn(async move {
            let guard = lease.acquire(WaitOptions::default()).await?;
            println!("{name} holds the lock (token {})", guard.token());
            served.lock().unwrap_or_else(|p| p.into_inner()).push(name);
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.release().await
        }));
        // Arrive one after another, so that arrival order is defined.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    holder.release().await?;
    for waiter in waiters {
        match waiter.await {
            Ok(result) => result?,
            Err(err) => eprintln!("fair_turns: a waiter failed: {err}"),
        }
    }
    let served = served.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let arrived: Vec<String> = (1..=WAITERS).map(|i| format!("waiter-{i}")).collect();
    Ok(served == arrived)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Lives until the end of the program: the file store's directory.
    let directory = match tempfile::tempdir() {
        Ok(directory) => directory,
        Err(err) => {
            eprintln!("fair_turns: cannot make a temporary directory: {err}");
            return ExitCode::FAILURE;
        }
    };
    let store: Arc<dyn CasStore> = match args.as_slice() {
        [] => Arc::new(MemoryStore::new()),
        [flag, backend] if flag == "--backend" && backend == "file" => {
            match FileStore::open(directory.path()).await {
                Ok(store) => Arc::new(store),
                Err(err) => {
                    eprintln!("fair_turns: cannot open a file store: {err}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => {
            eprintln!("usage: fair_turns [--backend file]");
            return ExitCode::from(2);
        }
    };
    match run(store).await {
        Ok(in_order) => {
            println!("served_in_order={in_order}");
            if in_order {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("fair_turns: {err}");
            ExitCode::FAILURE
        }
    }
}
