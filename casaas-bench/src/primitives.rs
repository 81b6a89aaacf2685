//! The semaphore and the read-write lock under contention: workers taking
//! a slot (or the lock, shared or exclusive), working a moment and giving
//! it back, over and over. Per store: acquisitions per second, store
//! requests per acquisition (acquire, wait and release, counted by
//! `CountingStore`), Jain's fairness index over the acquisitions per
//! worker, and the most inside at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use casaas_core::CasStore;
use casaas_core::lease::{Lease, LeaseConfig, LeaseError, RwLock, Semaphore, WaitOptions};
use casaas_core::testkit::CountingStore;

use crate::section::Section;

/// Workers contending in each run.
pub const WORKERS: usize = 8;
/// The semaphore's slots.
pub const SLOTS: u32 = 3;
/// How long a worker keeps what it took.
const WORK: Duration = Duration::from_millis(10);
/// The TTL of the slots and the lock.
const TTL: Duration = Duration::from_secs(5);
/// How often a waiter reads what it waits for.
const POLL: Duration = Duration::from_millis(20);
/// With the read-write lock: one acquisition in this many is exclusive
/// (the worker's n-th, for n a multiple), so that every worker writes.
const WRITE_EVERY: u64 = 4;

/// Which primitive a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    /// [`Semaphore`] of [`SLOTS`] slots.
    Semaphore,
    /// [`RwLock`], one acquisition in [`WRITE_EVERY`] exclusive.
    RwLock,
}

impl Primitive {
    /// Both, in the order of the table.
    pub const ALL: [Primitive; 2] = [Primitive::Semaphore, Primitive::RwLock];

    fn label(self) -> String {
        match self {
            Primitive::Semaphore => format!("semaphore, {SLOTS} slots"),
            Primitive::RwLock => format!("rwlock, 1 in {WRITE_EVERY} writes"),
        }
    }

    fn headline(self) -> &'static str {
        match self {
            Primitive::Semaphore => "semaphore",
            Primitive::RwLock => "rwlock",
        }
    }
}

/// One (store, primitive) run.
#[derive(Debug)]
pub struct PrimitiveRow {
    /// Backend.
    pub system: String,
    /// What was measured.
    pub primitive: Primitive,
    /// Acquisitions per worker.
    pub per_worker: Vec<u64>,
    /// Store requests per acquisition.
    pub requests_per_acquisition: f64,
    /// Acquisitions per second, all workers together.
    pub per_second: f64,
    /// The most workers inside at once (readers, for the lock).
    pub most_at_once: usize,
    /// Writers inside while anyone else was (must be 0).
    pub writer_overlaps: usize,
}

/// Jain's fairness index: 1 when every worker took as many, `1/n` when one
/// took them all.
pub fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|c| *c as f64).sum();
    let squares: f64 = counts.iter().map(|c| (*c as f64).powi(2)).sum();
    if squares == 0.0 {
        1.0
    } else {
        sum * sum / (n * squares)
    }
}

/// Who is inside: readers (or slot holders) and writers.
#[derive(Default)]
struct Inside {
    shared: AtomicUsize,
    writers: AtomicUsize,
    most: AtomicUsize,
    writer_overlaps: AtomicUsize,
}

/// What one worker takes each time.
enum Taker {
    Semaphore(Box<Semaphore>),
    RwLock(Box<RwLock>),
}

/// Runs [`WORKERS`] workers on one fresh name of `store` for `duration`.
pub async fn run(
    system: &str,
    store: Arc<dyn CasStore>,
    primitive: Primitive,
    duration: Duration,
) -> Result<PrimitiveRow> {
    let name = format!(
        "bench/{}/{:08x}",
        primitive.headline(),
        rand::random::<u32>()
    );
    let counting = CountingStore::new(store);
    let inside = Arc::new(Inside::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let lease = Lease::new(
            Arc::new(counting.clone()),
            name.as_str(),
            format!("worker-{w}"),
            LeaseConfig::from_ttl(TTL).with_poll_period(POLL),
        )?;
        let taker = match primitive {
            Primitive::Semaphore => Taker::Semaphore(Box::new(Semaphore::new(lease, SLOTS)?)),
            Primitive::RwLock => Taker::RwLock(Box::new(RwLock::new(lease)?)),
        };
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let mut count = 0u64;
            while started.elapsed() < duration {
                let options = WaitOptions::default()
                    .with_deadline(duration.saturating_sub(started.elapsed()));
                let write = (count + 1).is_multiple_of(WRITE_EVERY);
                let taken = match &taker {
                    Taker::Semaphore(semaphore) => semaphore.acquire(options).await,
                    Taker::RwLock(lock) if write => lock.write(options).await,
                    Taker::RwLock(lock) => lock.read(options).await,
                };
                let guard = match taken {
                    Ok(guard) => guard,
                    Err(LeaseError::DeadlineExceeded(_)) => break,
                    Err(err) => return Err(err),
                };
                let exclusive = matches!(taker, Taker::RwLock(_)) && write;
                if exclusive {
                    let others = inside.writers.fetch_add(1, Ordering::SeqCst)
                        + inside.shared.load(Ordering::SeqCst);
                    if others > 0 {
                        inside.writer_overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                } else {
                    let now = inside.shared.fetch_add(1, Ordering::SeqCst) + 1;
                    inside.most.fetch_max(now, Ordering::SeqCst);
                    if inside.writers.load(Ordering::SeqCst) > 0 {
                        inside.writer_overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(WORK).await;
                if exclusive {
                    inside.writers.fetch_sub(1, Ordering::SeqCst);
                } else {
                    inside.shared.fetch_sub(1, Ordering::SeqCst);
                }
                guard.release().await?;
                count += 1;
            }
            Ok(count)
        }));
    }
    let mut per_worker = Vec::new();
    for task in tasks {
        match task.await {
            Ok(count) => per_worker.push(count?),
            Err(err) => bail!("a {} worker failed: {err}", primitive.headline()),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let acquisitions: u64 = per_worker.iter().sum();
    let c = counting.counts();
    let requests = c.get + c.create + c.replace + c.delete + c.list;
    Ok(PrimitiveRow {
        system: system.to_string(),
        primitive,
        per_worker,
        requests_per_acquisition: requests as f64 / acquisitions.max(1) as f64,
        per_second: acquisitions as f64 / elapsed,
        most_at_once: inside.most.load(Ordering::SeqCst),
        writer_overlaps: inside.writer_overlaps.load(Ordering::SeqCst),
    })
}

/// The section: one row per (store, primitive), and `name=value`
/// headlines for the S3 server's rows (the first store's if none).
pub fn section(rows: &[PrimitiveRow], duration: Duration) -> Section {
    let mut markdown = format!(
        "## Semaphore and read-write lock\n\n\
         {WORKERS} workers on one semaphore of {SLOTS} slots, or on one \
         read-write lock (each worker's every {WRITE_EVERY}th acquisition \
         exclusive, the others shared), each taking, working {} ms and \
         giving back, for {} s per row; TTL {} s, waiters polling every {} ms. \
         Requests per acquisition count every store request of acquiring, \
         waiting and releasing; Jain's index is over the acquisitions per \
         worker (1: all took as many); the most inside at once counts slot \
         holders, or readers for the lock.\n\n\
         | store | primitive | acquisitions/s | requests per acquisition | Jain | most inside at once | writer beside anyone |\n\
         |---|---|---|---|---|---|---|\n",
        WORK.as_millis(),
        duration.as_secs(),
        TTL.as_secs(),
        POLL.as_millis()
    );
    for row in rows {
        markdown.push_str(&format!(
            "| {} | {} | {:.1} | {:.2} | {:.3} | {} | {} |\n",
            row.system,
            row.primitive.label(),
            row.per_second,
            row.requests_per_acquisition,
            jain(&row.per_worker),
            row.most_at_once,
            row.writer_overlaps
        ));
    }
    markdown.push('\n');
    let headline_store = rows
        .iter()
        .find(|r| r.system != "file")
        .or(rows.first())
        .map(|r| r.system.clone());
    let headlines = rows
        .iter()
        .filter(|r| Some(&r.system) == headline_store.as_ref())
        .flat_map(|r| {
            let name = r.primitive.headline();
            [
                format!(
                    "{name}_requests_per_acquisition_{}={:.2}",
                    r.system, r.requests_per_acquisition
                ),
                format!("{name}_jain_{}={:.3}", r.system, jain(&r.per_worker)),
            ]
        })
        .collect();
    Section {
        markdown,
        svgs: Vec::new(),
        headlines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_when_even_and_one_over_n_when_one_takes_all() {
        assert!((jain(&[5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[9, 0, 0]) - 1.0 / 3.0).abs() < 1e-9);
    }

    #[tokio::test]
    async fn a_row_on_memory_counts_requests_and_keeps_writers_alone() {
        for primitive in Primitive::ALL {
            let store: Arc<dyn CasStore> = Arc::new(casaas_core::MemoryStore::new());
            let row = run("memory", store, primitive, Duration::from_millis(500))
                .await
                .unwrap();
            assert!(row.per_worker.iter().sum::<u64>() > 0, "{row:?}");
            assert!(row.requests_per_acquisition >= 1.0, "{row:?}");
            assert_eq!(row.writer_overlaps, 0, "{row:?}");
            if primitive == Primitive::Semaphore {
                assert!(row.most_at_once <= SLOTS as usize, "{row:?}");
            }
        }
    }
}
