//! Deterministic simulation of the lease protocol under faults, clock drift
//! and pauses, with a checker of its safety properties in true time.
//!
//! ```text
//! cargo run --release -p casaas-core --example simulate -- --ops 100000 --seed 1
//! ```
//!
//! Prints a summary (with a digest of the history: the same seed gives the
//! same digest), then exactly one line `ops=N violations=V`, and exits with
//! status 1 if any property was violated. See docs/simulation.md.

#[path = "simulate/harness.rs"]
mod harness;

use std::process::ExitCode;

/// How many violations to print in full.
const SHOWN: usize = 20;

fn usage() -> ExitCode {
    eprintln!(
        "usage: simulate [--ops N] [--seed S] [--wall-clock] [--broken-drift] [--broken-skew] [--no-safety-margin]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut ops = 100_000u64;
    let mut seed = 1u64;
    let mut broken = false;
    let mut no_safety_margin = false;
    let mut wall_clock = false;
    let mut broken_skew = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--ops" | "--seed" => args.next().and_then(|v| v.parse::<u64>().ok()),
            "--broken-drift" => {
                broken = true;
                continue;
            }
            "--no-safety-margin" => {
                no_safety_margin = true;
                continue;
            }
            "--wall-clock" => {
                wall_clock = true;
                continue;
            }
            "--broken-skew" => {
                broken_skew = true;
                continue;
            }
            _ => None,
        };
        match (arg.as_str(), value) {
            ("--ops", Some(v)) => ops = v,
            ("--seed", Some(v)) => seed = v,
            _ => return usage(),
        }
    }
    let mut config = if broken {
        harness::SimConfig::drift_beyond_bound(ops, seed)
    } else {
        harness::SimConfig::new(ops, seed)
    };
    if wall_clock || broken_skew {
        config = config.wall_clock();
    }
    if broken_skew {
        // Declared skew 1 s; wall clocks up to 8 s apart.
        config.wall_skew = std::time::Duration::from_secs(8);
    }
    if no_safety_margin {
        config.lease.safety_margin = std::time::Duration::ZERO;
    }
    let started = std::time::Instant::now();
    let report = match harness::run(&config) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("simulation failed to run: {err}");
            return ExitCode::from(2);
        }
    };
    println!("{}", report.summary);
    let flags: String = [
        (wall_clock, " --wall-clock"),
        (broken, " --broken-drift"),
        (broken_skew, " --broken-skew"),
        (no_safety_margin, " --no-safety-margin"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, flag)| *flag)
    .collect();
    println!(
        "replay: cargo run --release -p casaas-core --example simulate -- --ops {ops} --seed {seed}{flags} (took {:.1?})",
        started.elapsed()
    );
    for violation in report.violations.iter().take(SHOWN) {
        println!("VIOLATION {violation}");
    }
    if report.violations.len() > SHOWN {
        println!("... and {} more", report.violations.len() - SHOWN);
    }
    println!("ops={} violations={}", report.ops, report.violations.len());
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
