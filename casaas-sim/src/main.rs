//! Deterministic simulation of every public primitive (`lease`,
//! `shared_lease`, `election`, `fenced_resource`, `fenced_log`) under
//! faults, late writes, clock drift and pauses, with one checker per
//! safety property.
//!
//! ```text
//! cargo run --release -p casaas-sim -- --ops 100000 --seed 1
//! ```
//!
//! Prints a summary per primitive (with a digest of its history: the same
//! seed gives the same digest), the first violations, one line
//! `primitive=NAME ops=N violations=V` per primitive, and last the line
//! `ops=N violations=V` with the totals; exits with status 1 if any property
//! was violated. See docs/simulation.md.

use std::process::ExitCode;

/// How many violations to print in full, per primitive, by default.
const SHOWN: u64 = 5;

fn usage() -> ExitCode {
    eprintln!(
        "usage: casaas-sim [--ops N] [--seed S] [--primitive NAME]... [--show N] [--wall-clock] [--broken-drift] [--broken-skew] [--no-safety-margin] [--explore-configs]\n\
         NAME: {}",
        casaas_sim::Primitive::ALL.map(|p| p.name()).join(", ")
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
    let mut explore = false;
    let mut only = Vec::new();
    let mut shown = SHOWN;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--ops" | "--seed" | "--show" => args.next().and_then(|v| v.parse::<u64>().ok()),
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
            "--explore-configs" => {
                explore = true;
                continue;
            }
            "--primitive" => {
                match args
                    .next()
                    .as_deref()
                    .and_then(casaas_sim::Primitive::from_name)
                {
                    Some(p) => only.push(p),
                    None => return usage(),
                }
                continue;
            }
            _ => None,
        };
        match (arg.as_str(), value) {
            ("--ops", Some(v)) => ops = v,
            ("--seed", Some(v)) => seed = v,
            ("--show", Some(v)) => shown = v,
            _ => return usage(),
        }
    }
    let mut config = if broken {
        casaas_sim::SimConfig::drift_beyond_bound(ops, seed)
    } else {
        casaas_sim::SimConfig::new(ops, seed)
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
    if !only.is_empty() {
        config = config.only(&only);
    }
    if explore {
        config = config.explore();
    }
    let started = std::time::Instant::now();
    let report = match casaas_sim::run(&config) {
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
        (explore, " --explore-configs"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, flag)| *flag)
    .collect();
    let primitives: String = only
        .iter()
        .map(|p| format!(" --primitive {}", p.name()))
        .collect();
    println!(
        "replay: cargo run --release -p casaas-sim -- --ops {ops} --seed {seed}{primitives}{flags} (took {:.1?}, {:.0} ops/s)",
        started.elapsed(),
        report.ops as f64 / started.elapsed().as_secs_f64().max(1e-9)
    );
    for p in report
        .primitives
        .iter()
        .filter(|p| !p.violations.is_empty())
    {
        let shown = usize::try_from(shown).unwrap_or(usize::MAX);
        for violation in p.violations.iter().take(shown) {
            println!("VIOLATION {violation}");
        }
        if p.violations.len() > shown {
            println!("... and {} more", p.violations.len() - shown);
        }
        let by_property: Vec<String> = p
            .by_property
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(property, n)| format!("{property}={n}"))
            .collect();
        println!(
            "violations of {}: {}",
            p.primitive.name(),
            by_property.join(" ")
        );
    }
    for p in &report.primitives {
        println!(
            "primitive={} ops={} violations={}",
            p.primitive.name(),
            p.ops,
            p.violations.len()
        );
    }
    println!("ops={} violations={}", report.ops, report.violations.len());
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
