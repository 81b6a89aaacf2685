//! Deterministic simulation of every public primitive (`lease`,
//! `shared_lease`, `election`, `fenced_resource`, `fenced_log`, `session`,
//! `fair`, `group_commit`, `create_once`, ...) under
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

/// The command line.
struct Args {
    ops: u64,
    seed: u64,
    broken: bool,
    no_safety_margin: bool,
    wall_clock: bool,
    broken_skew: bool,
    explore: bool,
    only: Vec<casaas_sim::Primitive>,
    shown: u64,
}

impl Args {
    /// Parses the arguments; `None` if they are not understood.
    fn parse(mut args: impl Iterator<Item = String>) -> Option<Args> {
        let mut parsed = Args {
            ops: 100_000,
            seed: 1,
            broken: false,
            no_safety_margin: false,
            wall_clock: false,
            broken_skew: false,
            explore: false,
            only: Vec::new(),
            shown: SHOWN,
        };
        while let Some(arg) = args.next() {
            let flag = match arg.as_str() {
                "--broken-drift" => &mut parsed.broken,
                "--no-safety-margin" => &mut parsed.no_safety_margin,
                "--wall-clock" => &mut parsed.wall_clock,
                "--broken-skew" => &mut parsed.broken_skew,
                "--explore-configs" => &mut parsed.explore,
                "--primitive" => {
                    let name = args.next();
                    parsed
                        .only
                        .push(casaas_sim::Primitive::from_name(name.as_deref()?)?);
                    continue;
                }
                "--ops" | "--seed" | "--show" => {
                    let value = args.next().and_then(|v| v.parse::<u64>().ok())?;
                    match arg.as_str() {
                        "--ops" => parsed.ops = value,
                        "--seed" => parsed.seed = value,
                        _ => parsed.shown = value,
                    }
                    continue;
                }
                _ => return None,
            };
            *flag = true;
        }
        Some(parsed)
    }

    /// The simulation the arguments ask for.
    fn config(&self) -> casaas_sim::SimConfig {
        let mut config = if self.broken {
            casaas_sim::SimConfig::drift_beyond_bound(self.ops, self.seed)
        } else {
            casaas_sim::SimConfig::new(self.ops, self.seed)
        };
        if self.wall_clock || self.broken_skew {
            config = config.wall_clock();
        }
        if self.broken_skew {
            // Declared skew 1 s; wall clocks up to 8 s apart.
            config.wall_skew = std::time::Duration::from_secs(8);
        }
        if self.no_safety_margin {
            config.lease.safety_margin = std::time::Duration::ZERO;
        }
        if !self.only.is_empty() {
            config = config.only(&self.only);
        }
        if self.explore {
            config = config.explore();
        }
        config
    }

    /// The command that replays this run.
    fn replay(&self) -> String {
        let flags: String = [
            (self.wall_clock, " --wall-clock"),
            (self.broken, " --broken-drift"),
            (self.broken_skew, " --broken-skew"),
            (self.no_safety_margin, " --no-safety-margin"),
            (self.explore, " --explore-configs"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, flag)| *flag)
        .collect();
        let primitives: String = self
            .only
            .iter()
            .map(|p| format!(" --primitive {}", p.name()))
            .collect();
        format!(
            "cargo run --release -p casaas-sim -- --ops {} --seed {}{primitives}{flags}",
            self.ops, self.seed
        )
    }
}

/// Prints the first `shown` violations of each primitive that has any, and
/// how many each property's checker found.
fn print_violations(report: &casaas_sim::Report, shown: u64) {
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
}

fn main() -> ExitCode {
    let Some(args) = Args::parse(std::env::args().skip(1)) else {
        return usage();
    };
    let config = args.config();
    let started = std::time::Instant::now();
    let report = match casaas_sim::run(&config) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("simulation failed to run: {err}");
            return ExitCode::from(2);
        }
    };
    println!("{}", report.summary);
    println!(
        "replay: {} (took {:.1?}, {:.0} ops/s)",
        args.replay(),
        started.elapsed(),
        report.ops as f64 / started.elapsed().as_secs_f64().max(1e-9)
    );
    print_violations(&report, args.shown);
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
