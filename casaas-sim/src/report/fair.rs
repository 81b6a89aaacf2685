//! `fair`: the lease's checkers over the lock (fair turns decide only who
//! asks, so exclusion, token order and fencing are the lease's to keep),
//! plus a check that turns were really taken.

use crate::config::{PrimitiveReport, SimConfig};
use crate::history::lease::History;
use crate::network::World;

/// From this many requests on, a run must show turns taken (below it, the
/// waiters' polls can use up the run before a second client's turn).
const MIN_OPS_FOR_TURNS: u64 = 5_000;

/// The lease report of the run, and `work_happened`: a run long enough
/// whose clients took no turns, or whose turns all went to one client, or
/// whose holders never wrote through the fence, proves nothing about fair
/// turns.
pub fn report(config: &SimConfig, seed: u64, world: &World, h: &History) -> PrimitiveReport {
    let mut report = super::lease::report(config, crate::Primitive::Fair, seed, 1, world, h);
    let context = format!("seed {} fair", config.seed);
    let found = if world.ops() >= MIN_OPS_FOR_TURNS {
        work_happened(h, world.rates.len(), &context)
    } else {
        Vec::new()
    };
    report.by_property.push(("work_happened", found.len()));
    report.violations.extend(found);
    report
}

/// What a run with `clients` clients must show to count: turns taken by
/// at least two clients (one if there is one), and a fenced write.
fn work_happened(h: &History, clients: usize, context: &str) -> Vec<String> {
    let mut holders: Vec<usize> = h.guards.iter().map(|g| g.client).collect();
    holders.sort_unstable();
    holders.dedup();
    let mut found = Vec::new();
    if holders.len() < clients.min(2) {
        found.push(format!(
            "{context}: inconclusive: {} acquisitions by {} of {clients} clients",
            h.guards.len(),
            holders.len()
        ));
    }
    if h.fenced_ok == 0 {
        found.push(format!(
            "{context}: inconclusive: no fenced write succeeded in {} acquisitions",
            h.guards.len()
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::lease::GuardRec;

    fn guard(client: usize) -> GuardRec {
        GuardRec {
            client,
            task: 0,
            token: 1,
            acquired_at: std::time::Duration::ZERO,
            beliefs: Vec::new(),
        }
    }

    #[test]
    fn a_run_without_turns_or_fenced_writes_is_inconclusive() {
        let empty = History::default();
        assert_eq!(work_happened(&empty, 3, "t").len(), 2);
        let one_client = History {
            guards: vec![guard(0), guard(0)],
            fenced_ok: 2,
            ..History::default()
        };
        assert_eq!(work_happened(&one_client, 3, "t").len(), 1);
        let turns = History {
            guards: vec![guard(0), guard(2)],
            fenced_ok: 2,
            ..History::default()
        };
        assert!(work_happened(&turns, 3, "t").is_empty());
    }
}
