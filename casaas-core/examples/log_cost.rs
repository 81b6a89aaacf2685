//! What one append to a long fenced log costs, in requests and time.
//!
//! ```text
//! cargo run --release -p casaas-core --example log_cost -- --entries 100000
//! cargo run --release -p casaas-core --example log_cost -- --entries 100000 --backend file
//! ```
//!
//! Fills a log with `--entries` entries, then opens a new handle on it (as a
//! restarted writer would) and appends `--appends` more through a
//! `CountingStore`, one at a time. Prints the requests and wall time per
//! append, and ends with the line
//! `entries=N requests_per_append_p50=A requests_per_append_max=B`.
//! The maximum includes the new handle's first append, which finds the end
//! of the log: it must not grow with the log's length.

use casaas_core::provider::percentile;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use casaas_core::lease::FencedLog;
use casaas_core::testkit::CountingStore;
use casaas_core::{CasStore, FileStore, MemoryStore};

struct Args {
    entries: u64,
    appends: u64,
    backend: String,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        entries: 100_000,
        appends: 1_000,
        backend: "memory".to_string(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--entries" => args.entries = value.parse().map_err(|e| format!("--entries: {e}"))?,
            "--appends" => args.appends = value.parse().map_err(|e| format!("--appends: {e}"))?,
            "--backend" if value == "memory" || value == "file" => args.backend = value,
            _ => {
                return Err(format!(
                    "unknown argument {flag} {value}; usage: log_cost [--entries N] [--appends M] [--backend memory|file]"
                ));
            }
        }
    }
    if args.appends == 0 {
        return Err("--appends must be at least 1".to_string());
    }
    Ok(args)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("log_cost: {message}");
            return ExitCode::from(2);
        }
    };
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => {
            eprintln!("log_cost: cannot make a temporary directory: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = match args.backend.as_str() {
        "file" => match FileStore::open(dir.path()).await {
            Ok(store) => run(&args, Arc::new(CountingStore::new(store))).await,
            Err(err) => Err(err.into()),
        },
        _ => run(&args, Arc::new(CountingStore::new(MemoryStore::new()))).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("log_cost: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run<S: CasStore + 'static>(
    args: &Args,
    counting: Arc<CountingStore<S>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let fill = FencedLog::<u64>::new(counting.clone(), "table/_log")?;
    let started = Instant::now();
    for n in 0..args.entries {
        fill.append(1, n).await?;
    }
    eprintln!(
        "filled {} entries on the {} backend in {:.1?}",
        args.entries,
        args.backend,
        started.elapsed()
    );
    // A restarted writer: a new handle that knows nothing of the log.
    let log = FencedLog::<u64>::new(counting.clone(), "table/_log")?;
    let mut requests = Vec::with_capacity(args.appends as usize);
    let mut times = Vec::with_capacity(args.appends as usize);
    for n in 0..args.appends {
        let before = counting.counts().total();
        let t = Instant::now();
        log.append(2, n).await?;
        times.push(t.elapsed());
        requests.push(counting.counts().total() - before);
    }
    let first = requests[0];
    let requests: Vec<f64> = requests.iter().map(|&r| r as f64).collect();
    let times: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    let (p50, max) = (percentile(&requests, 50.0), percentile(&requests, 100.0));
    let time = |p| Duration::from_secs_f64(percentile(&times, p));
    println!(
        "backend={} first_append_requests={first} wall_per_append_p50_us={} wall_per_append_p99_us={}",
        args.backend,
        time(50.0).as_micros(),
        time(99.0).as_micros()
    );
    println!(
        "entries={} requests_per_append_p50={p50} requests_per_append_max={max}",
        args.entries
    );
    Ok(())
}
