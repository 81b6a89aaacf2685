//! `first_use`: losing a race for a lock nobody used yet is never an error,
//! and the races happened.

use crate::history::first_use::{History, Layout, Told};

/// No call was told it lost a race (precondition failed, not found): a
/// contender that loses the first write of a fresh lock, in either layout,
/// is told the lock is held (`try_acquire`) or waits for its turn
/// (`acquire`).
pub fn lost_race_never_an_error(h: &History, context: &str) -> Vec<String> {
    h.calls
        .iter()
        .filter(|c| c.told == Told::LostRace)
        .map(|c| {
            format!(
                "{context}: round {} ({:?}): client {}'s {} of a fresh lock was told it lost the race: {}",
                c.round,
                c.layout,
                c.client,
                if c.blocking { "acquire" } else { "try_acquire" },
                c.error
            )
        })
        .collect()
}

/// From `MIN_OPS` requests on, in both layouts: locks were acquired, found
/// held by a losing `try_acquire`, and won by a waiter after another's
/// holding (a race with no contender proves nothing).
pub fn exercised(h: &History, ops: u64, context: &str) -> Vec<String> {
    const MIN_OPS: u64 = 20_000;
    if ops < MIN_OPS {
        return Vec::new();
    }
    let mut missing = Vec::new();
    for layout in [Layout::Record, Layout::Epochs] {
        let waited = h
            .rounds
            .iter()
            .any(|r| r.layout == Some(layout) && r.lock.guards.len() > 1);
        let checks = [
            (
                "a fresh lock was acquired",
                h.told(layout, Told::Acquired) > 0,
            ),
            (
                "a try_acquire lost the race and found the lock held",
                h.told(layout, Told::Held) > 0,
            ),
            (
                "a second contender took a fresh lock after the first",
                waited,
            ),
        ];
        for (what, happened) in checks {
            if !happened {
                missing.push(format!(
                    "{context}: inconclusive: in {ops} requests, never in the {layout:?} layout: {what}"
                ));
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::first_use::{Call, Round};
    use crate::history::lease::GuardRec;
    use std::time::Duration;

    fn call(round: usize, told: Told) -> Call {
        Call {
            client: 0,
            round,
            layout: if round == 0 {
                Layout::Record
            } else {
                Layout::Epochs
            },
            blocking: false,
            told,
            error: String::new(),
        }
    }

    fn round(layout: Layout, guards: usize) -> Round {
        let mut r = Round {
            layout: Some(layout),
            ..Round::default()
        };
        r.lock.guards = (0..guards)
            .map(|g| GuardRec {
                client: g,
                task: 0,
                token: g as u64 + 1,
                acquired_at: Duration::ZERO,
                beliefs: Vec::new(),
            })
            .collect();
        r
    }

    #[test]
    fn a_lost_race_told_as_an_error_is_reported() {
        let h = History {
            rounds: vec![round(Layout::Record, 1), round(Layout::Epochs, 1)],
            calls: vec![
                call(1, Told::Acquired),
                call(1, Told::Held),
                call(1, Told::LostRace),
                call(1, Told::Failed),
            ],
            ..History::default()
        };
        let found = lost_race_never_an_error(&h, "t");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("Epochs"), "{found:?}");
        let clean = History {
            calls: vec![call(0, Told::Acquired), call(0, Told::TimedOut)],
            ..h
        };
        assert!(lost_race_never_an_error(&clean, "t").is_empty());
    }

    #[test]
    fn races_that_never_happened_are_inconclusive() {
        let h = History {
            rounds: vec![round(Layout::Record, 2), round(Layout::Epochs, 1)],
            calls: vec![
                call(0, Told::Acquired),
                call(0, Told::Held),
                call(1, Told::Acquired),
            ],
            ..History::default()
        };
        assert!(exercised(&h, 1_000, "t").is_empty());
        // Epochs: nobody found it held, nobody took it second.
        assert_eq!(exercised(&h, 1_000_000, "t").len(), 2);
    }
}
