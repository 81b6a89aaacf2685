//! A semaphore under contention: eight workers, three slots, each worker
//! taking a slot, working 10 ms and releasing, over and over.
//!
//! ```text
//! cargo run --release -p casaas-core --example semaphore_turns
//! cargo run --release -p casaas-core --example semaphore_turns -- --backend file
//! ```
//!
//! Prints one line: acquisitions per second, store requests per
//! acquisition (acquire, wait and release, counted by `CountingStore`),
//! Jain's fairness index over the acquisitions per worker, and the most
//! workers seen inside at once (never more than the slots).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use casaas_core::lease::{Lease, LeaseConfig, LeaseError, Semaphore, WaitOptions};
use casaas_core::testkit::CountingStore;
use casaas_core::{CasStore, FileStore, MemoryStore};

const NAME: &str = "locks/semaphore-example";
const WORKERS: usize = 8;
const SLOTS: u32 = 3;
const RUN: Duration = Duration::from_secs(5);
const WORK: Duration = Duration::from_millis(10);
/// How often a waiter at the head of the queue reads the slots.
const POLL: Duration = Duration::from_millis(20);

fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|c| *c as f64).sum();
    let squares: f64 = counts.iter().map(|c| (*c as f64).powi(2)).sum();
    if squares == 0.0 {
        1.0
    } else {
        sum * sum / (n * squares)
    }
}

async fn run(backend: &str, store: Arc<dyn CasStore>) -> Result<bool, LeaseError> {
    let counting = CountingStore::new(store);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let lease = Lease::new(
            Arc::new(counting.clone()),
            NAME,
            format!("worker-{w}"),
            LeaseConfig::from_ttl(Duration::from_secs(5)).with_poll_period(POLL),
        )?;
        let semaphore = Semaphore::new(lease, SLOTS)?;
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut count = 0u64;
            while started.elapsed() < RUN {
                let left = RUN.saturating_sub(started.elapsed());
                let guard = match semaphore
                    .acquire(WaitOptions::default().with_deadline(left))
                    .await
                {
                    Ok(guard) => guard,
                    Err(LeaseError::DeadlineExceeded(_)) => break,
                    Err(err) => return Err(err),
                };
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(WORK).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await?;
                count += 1;
            }
            Ok(count)
        }));
    }
    let mut counts = Vec::new();
    for task in tasks {
        match task.await {
            Ok(count) => counts.push(count?),
            Err(err) => {
                return Err(LeaseError::InvalidConfig(format!("a worker failed: {err}")));
            }
        }
    }
    let acquisitions: u64 = counts.iter().sum();
    let c = counting.counts();
    let requests = c.get + c.create + c.replace + c.delete + c.list;
    let most = most.load(Ordering::SeqCst);
    println!(
        "semaphore {backend} workers={WORKERS} slots={SLOTS}: {:.0} acquisitions/s, {:.2} requests per acquisition (get {} create {} replace {} delete {} list {}), jain={:.3}, per_worker={counts:?}, most_at_once={most}",
        acquisitions as f64 / started.elapsed().as_secs_f64(),
        requests as f64 / acquisitions.max(1) as f64,
        c.get,
        c.create,
        c.replace,
        c.delete,
        c.list,
        jain(&counts),
    );
    Ok(most <= SLOTS as usize)
}

#[tokio::main]
async fn main() -> ExitCode {
    let backend = std::env::args().skip_while(|a| a != "--backend").nth(1);
    let directory = match tempfile::tempdir() {
        Ok(d) => d,
        Err(err) => {
            eprintln!("cannot make a temporary directory: {err}");
            return ExitCode::FAILURE;
        }
    };
    let (name, store): (&str, Arc<dyn CasStore>) = match backend.as_deref() {
        Some("file") => match FileStore::open(directory.path()).await {
            Ok(store) => ("file", Arc::new(store)),
            Err(err) => {
                eprintln!("cannot open the file store: {err}");
                return ExitCode::FAILURE;
            }
        },
        _ => ("memory", Arc::new(MemoryStore::new())),
    };
    match run(name, store).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("more workers inside than slots");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}
