//! The deterministic simulation of every public primitive: clients,
//! drifting clocks, a faulty network and store, history recorders and one
//! checker per property.
//!
//! The dependencies run one way: `client` runs a primitive's clients and
//! returns the `history` they recorded; `report` runs the `checker` over
//! it and digests it. `history` imports none of them, and neither `client`
//! nor `checker` imports the other.
//!
//! Each primitive runs in a world of its own (its own store, clients and
//! seed), on a current-thread tokio runtime with paused time, so time
//! advances only when every task waits, and a run is a function of its
//! seed. See docs/simulation.md.

mod checker;
mod client;
mod clock;
mod config;
mod history;
mod network;
mod report;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use config::{Findings, Primitive, PrimitiveReport, Report, SimConfig, draw_lease};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs every selected primitive to completion, one after the other, each
/// with its share of the operations, and combines their reports.
pub fn run(config: &SimConfig) -> Result<Report, String> {
    let mut primitives = Vec::new();
    for primitive in Primitive::ALL {
        if !config.primitives.contains(&primitive) {
            continue;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| format!("cannot build the runtime: {e}"))?;
        let ops = config.ops_for(primitive);
        let seed = config.seed_for(primitive);
        let report = runtime.block_on(simulate(config, primitive, ops, seed))?;
        primitives.push(report);
    }
    Ok(Report::combine(config.seed, primitives))
}

/// Runs the clients of `primitive` (they record a history), then checks
/// and reports what they recorded.
async fn simulate(
    config: &SimConfig,
    primitive: Primitive,
    ops: u64,
    seed: u64,
) -> Result<PrimitiveReport, String> {
    let lease = |r: client::lease::Recorded| {
        report::lease::report(config, r.primitive, seed, r.tasks, &r.world, &r.history)
    };
    let election = |r: client::election::Recorded| {
        report::election::report(
            config,
            r.primitive,
            seed,
            &r.world,
            &r.history,
            r.end_of_run,
        )
    };
    Ok(match primitive {
        Primitive::Lease => {
            lease(client::lease::simulate(config, ops, seed, config.clients, 1).await?)
        }
        Primitive::SharedLease => {
            let clients = (config.clients / 2).max(2);
            lease(client::lease::simulate(config, ops, seed, clients, 3).await?)
        }
        Primitive::LeaseCreateOnly => {
            lease(client::lease::simulate(config, ops, seed, config.clients, 0).await?)
        }
        Primitive::Election => {
            election(client::election::simulate(config, ops, seed, false).await?)
        }
        Primitive::ElectionCreateOnly => {
            election(client::election::simulate(config, ops, seed, true).await?)
        }
        Primitive::FencedResource => {
            let r = client::fenced_resource::simulate(config, ops, seed).await?;
            report::fenced_resource::report(config, seed, &r.world, &r.history, r.final_value)
        }
        Primitive::FencedLog => {
            let r = client::fenced_log::simulate(config, ops, seed).await?;
            report::fenced_log::report(
                config, seed, &r.world, &r.history, &r.logs, r.entries, r.freezes,
            )
        }
        Primitive::Session => {
            let r = client::session::simulate(config, ops, seed).await?;
            report::session::report(config, seed, &r.world, &r.locks, &r.history)
        }
        Primitive::GroupCommit => {
            let r = client::group_commit::simulate(config, ops, seed).await?;
            report::group_commit::report(config, seed, &r.world, &r.history)
        }
        Primitive::Fair => {
            let r = client::fair::simulate(config, ops, seed).await?;
            report::fair::report(config, seed, &r.world, &r.history)
        }
        Primitive::CreateOnce => {
            let r = client::create_once::simulate(config, ops, seed).await?;
            report::create_once::report(config, seed, &r.world, &r.history)
        }
        Primitive::SwapOnce => {
            let r = client::swap_once::simulate(config, ops, seed).await?;
            report::swap_once::report(config, seed, &r.world, &r.history)
        }
        Primitive::FirstUse => {
            let r = client::first_use::simulate(config, ops, seed).await?;
            report::first_use::report(config, seed, &r.world, &r.history)
        }
        Primitive::RwLock => {
            let r = client::rwlock::simulate(config, ops, seed).await?;
            report::rwlock::report(config, seed, &r.world, &r.history)
        }
        Primitive::Semaphore => {
            let r = client::semaphore::simulate(config, ops, seed).await?;
            report::semaphore::report(config, seed, &r.world, &r.history)
        }
    })
}

/// FNV-1a, 64 bits: a stable digest of a history's text.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Seconds with millisecond precision, for messages.
fn secs(d: std::time::Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}
