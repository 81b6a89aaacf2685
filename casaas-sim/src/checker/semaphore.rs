//! `semaphore`: never more believed holders than slots, across slots; the
//! lease's own checkers run per slot (see `report/semaphore.rs`).

use std::time::Duration;

use crate::history::semaphore::History;
use crate::secs;

/// Every belief interval of every slot, as `(start, end, slot, guard)`.
fn beliefs(h: &History) -> Vec<(Duration, Duration, usize, usize)> {
    h.slots
        .iter()
        .enumerate()
        .flat_map(|(s, slot)| {
            slot.guards.iter().enumerate().flat_map(move |(g, r)| {
                r.beliefs
                    .iter()
                    .map(move |&(start, end)| (start, end, s, g))
            })
        })
        .collect()
}

/// The most holders that believed at one true time, and the first time
/// each count above `capacity` was reached (belief intervals are
/// `[start, end)`: one ending as another starts does not overlap it).
fn sweep(h: &History, capacity: usize) -> (usize, Vec<(Duration, usize)>) {
    let mut events: Vec<(Duration, i8)> = beliefs(h)
        .into_iter()
        .flat_map(|(start, end, ..)| [(start, 1), (end, -1)])
        .collect();
    events.sort();
    let (mut now, mut most, mut over) = (0usize, 0usize, Vec::new());
    for (at, delta) in events {
        if delta > 0 {
            now += 1;
            if now > capacity {
                over.push((at, now));
            }
            most = most.max(now);
        } else {
            now = now.saturating_sub(1);
        }
    }
    (most, over)
}

/// The capacity: at no true time do more holders believe they hold a slot
/// than the semaphore has slots, whichever slots they hold.
pub fn at_most_capacity(h: &History, context: &str) -> Vec<String> {
    let (_, over) = sweep(h, h.capacity);
    over.into_iter()
        .map(|(at, holders)| {
            format!(
                "{context}: capacity: {holders} holders believed they held a slot at {} (the semaphore has {})",
                secs(at),
                h.capacity
            )
        })
        .collect()
}

/// The most holders that believed at once.
pub fn most_at_once(h: &History) -> usize {
    sweep(h, usize::MAX).0
}

/// Guards handed out for a key that is no slot of the semaphore.
pub fn no_stray_guards(h: &History, context: &str) -> Vec<String> {
    h.strays
        .iter()
        .map(|key| format!("{context}: a guard for '{key}', which is no slot"))
        .collect()
}

/// From this many requests on, a run must show the semaphore at work.
pub const MIN_OPS_FOR_WORK: u64 = 10_000;

/// A run long enough must show what it claims to test: several holders at
/// once, every counting client served, and the miscounting client refused.
pub fn exercised(h: &History, ops: u64, context: &str) -> Vec<String> {
    if ops < MIN_OPS_FOR_WORK {
        return Vec::new();
    }
    let mut found = Vec::new();
    if most_at_once(h) < 2.min(h.capacity) {
        found.push(format!(
            "{context}: inconclusive: never two holders at once in {} acquisitions",
            h.acquired.iter().sum::<u64>()
        ));
    }
    // The last client counts one slot more and is never served.
    let counting = h.acquired.len().saturating_sub(1);
    for (client, n) in h.acquired.iter().take(counting).enumerate() {
        if *n == 0 {
            found.push(format!(
                "{context}: starvation: client {client} never took a slot ({} acquisitions by the others)",
                h.acquired.iter().sum::<u64>()
            ));
        }
    }
    if h.refused == 0 {
        found.push(format!(
            "{context}: inconclusive: the client that counts {} slots was never refused",
            h.capacity + 1
        ));
    }
    found
}

/// Jain's fairness index of the acquisitions per client: 1 when every
/// client took as many, `1/n` when one took them all.
pub fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|c| *c as f64).sum();
    let squares: f64 = counts.iter().map(|c| (*c as f64).powi(2)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (n * squares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::lease::{GuardRec, History as SlotHistory};

    fn slot(beliefs: &[(u64, u64)]) -> SlotHistory {
        SlotHistory {
            guards: beliefs
                .iter()
                .map(|&(s, e)| GuardRec {
                    client: 0,
                    task: 0,
                    token: 1,
                    acquired_at: Duration::from_secs(s),
                    beliefs: vec![(Duration::from_secs(s), Duration::from_secs(e))],
                })
                .collect(),
            ..SlotHistory::default()
        }
    }

    #[test]
    fn holders_beyond_the_count_are_found_and_handovers_are_not() {
        let h = History {
            capacity: 2,
            slots: vec![
                slot(&[(0, 10)]),
                slot(&[(0, 5), (5, 10)]),
                slot(&[(10, 12)]),
            ],
            ..History::default()
        };
        assert!(at_most_capacity(&h, "t").is_empty());
        assert_eq!(most_at_once(&h), 2);
        let over = History {
            capacity: 2,
            slots: vec![slot(&[(0, 10)]), slot(&[(0, 5)]), slot(&[(4, 6)])],
            ..History::default()
        };
        let found = at_most_capacity(&over, "t");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("3 holders"), "{found:?}");
    }

    #[test]
    fn jain_is_one_when_even_and_one_over_n_when_one_takes_all() {
        assert!((jain(&[5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[9, 0, 0]) - 1.0 / 3.0).abs() < 1e-9);
    }
}
