//! A chaos proxy on its own, for clients in other languages (the Python
//! Iceberg example): forwards to a loopback S3 endpoint and lets a share of
//! the writes whose path contains a text land, then drops their answer.
//!
//! ```text
//! chaos_proxy --upstream http://127.0.0.1:PORT [--faults 0.2] [--only tables/] [--seed 1]
//! ```
//!
//! Prints `endpoint=http://127.0.0.1:PORT` once listening, then serves until
//! stdin closes, and prints `faults=N writes=M` (what it did) before exiting.

use std::io::Read;

use anyhow::{Context, Result, bail};
use casaas_testkit::chaos_proxy::{ChaosProxy, ProxyFault, RandomFaults};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut upstream = None;
    let mut faults = 0.2;
    let mut only = None;
    let mut seed = 1;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--upstream" => upstream = Some(value.clone()),
            "--faults" => faults = value.parse().context("--faults is a probability")?,
            "--only" => only = Some(value.clone()),
            "--seed" => seed = value.parse().context("--seed is a number")?,
            other => bail!(
                "unknown option {other}: chaos_proxy --upstream URL [--faults P] [--only TEXT] [--seed S]"
            ),
        }
    }
    let upstream = upstream.context("--upstream http://127.0.0.1:PORT is required")?;
    let runtime = tokio::runtime::Runtime::new()?;
    let proxy = runtime.block_on(ChaosProxy::start(&upstream))?;
    proxy.randomize(RandomFaults {
        seed,
        probability: faults,
        faults: vec![ProxyFault::DropAfterForward],
    });
    if let Some(only) = &only {
        proxy.only_paths_containing(only);
    }
    println!("endpoint={}", proxy.endpoint());
    // Serve (on the runtime's threads) until whoever started us closes stdin.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    let log = proxy.log();
    let dropped = log
        .iter()
        .filter(|r| r.fault == ProxyFault::DropAfterForward)
        .count();
    println!("faults={dropped} requests={}", log.len());
    drop(proxy);
    drop(runtime);
    Ok(())
}
