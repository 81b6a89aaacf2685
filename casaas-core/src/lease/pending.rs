//! The one rule for conditional writes whose outcome is unknown.
//!
//! Every write the protocols make carries a fresh nonce and a condition: the
//! object must be absent, or at one exact version. When the answer is lost
//! (a timeout, a reset, a 5xx) or is a precondition failure that may be our
//! own duplicate, the writer reads the object and settles each of its
//! unresolved writes against what it finds:
//!
//! - **landed**: the object (or the history it carries) holds the write's
//!   nonce;
//! - **dead**: the object is no longer in the state the write was
//!   conditioned on, and does not hold the nonce. A conditional write is
//!   evaluated when the store applies it, and versions never repeat (every
//!   body carries a fresh nonce), so a write whose condition no longer holds
//!   can never land later;
//! - **live**: the object is still in the state the write was conditioned
//!   on. The write may still be in flight and land at any moment, so it must
//!   be remembered. Any new write made meanwhile is conditioned on the same
//!   state, so at most one of them can land, and the next read tells which.
//!
//! A [`PendingWrites`] belongs to exactly one participant at a time: an
//! attempt owns the writes it sent, and hands those still live to its
//! [`Lease`](super::Lease)'s shared memory only when it returns, where a
//! later attempt can claim each one exactly once. Two concurrent attempts
//! therefore never claim each other's writes.

use std::time::Duration;

use crate::Version;

/// The state a conditional write requires: absent, or at this version.
pub(crate) type Condition = Option<Version>;

/// A write whose outcome is not known yet.
#[derive(Debug, Clone)]
pub(crate) struct PendingWrite<P> {
    /// The nonce in its body.
    pub(crate) nonce: String,
    /// When it was sent, on the writer's clock.
    pub(crate) sent_at: Duration,
    /// The state it was conditioned on.
    pub(crate) condition: Condition,
    /// What the writer needs to know if it landed.
    pub(crate) payload: P,
}

/// What reading the object told about a set of unresolved writes.
#[derive(Debug)]
pub(crate) enum Settled<P> {
    /// This write landed (it is removed from the set).
    Landed(PendingWrite<P>),
    /// None landed; the live ones are kept and the dead ones dropped.
    NotLanded,
}

/// Unresolved writes of one participant.
#[derive(Debug)]
pub(crate) struct PendingWrites<P> {
    writes: Vec<PendingWrite<P>>,
}

impl<P> Default for PendingWrites<P> {
    fn default() -> Self {
        PendingWrites { writes: Vec::new() }
    }
}

impl<P> PendingWrites<P> {
    /// Remembers a write about to be sent.
    pub(crate) fn push(&mut self, write: PendingWrite<P>) {
        // Nonces are fresh per write: a repeat would let one answer settle
        // two writes.
        debug_assert!(
            !self.contains(&write.nonce),
            "write {} is already pending",
            write.nonce
        );
        self.writes.push(write);
    }

    /// Forgets the write with `nonce` (its answer said nothing was written,
    /// or it succeeded).
    pub(crate) fn forget(&mut self, nonce: &str) {
        self.writes.retain(|w| w.nonce != nonce);
    }

    /// Moves every write of `other` into this set.
    pub(crate) fn absorb(&mut self, other: PendingWrites<P>) {
        // A write has one owner at a time: handing it over twice would let
        // two attempts each settle it as theirs.
        debug_assert!(
            other.writes.iter().all(|w| !self.contains(&w.nonce)),
            "a pending write was handed over twice"
        );
        self.writes.extend(other.writes);
    }

    /// Is the write with `nonce` among these?
    pub(crate) fn contains(&self, nonce: &str) -> bool {
        self.writes.iter().any(|w| w.nonce == nonce)
    }

    /// Keeps at most `max` writes, forgetting the oldest.
    pub(crate) fn truncate_oldest(&mut self, max: usize) {
        let excess = self.writes.len().saturating_sub(max);
        self.writes.drain(..excess);
    }

    /// The writes, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &PendingWrite<P>> {
        self.writes.iter()
    }

    /// No write is unresolved.
    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Forgets everything (the object now holds a write of ours that
    /// supersedes them all, so none of them can land any more).
    pub(crate) fn clear(&mut self) {
        self.writes.clear();
    }

    /// Settles every write against the object just read: `current` is its
    /// version (`None` if absent) and `holds` tells whether a nonce is in
    /// it. Returns the landed write, if any (at most one can have landed
    /// among writes that share a condition; if several are found, the first
    /// sent wins and the rest are dropped as superseded).
    pub(crate) fn settle(
        &mut self,
        current: Option<&Version>,
        holds: impl Fn(&str) -> bool,
    ) -> Settled<P> {
        let mut landed = None;
        let mut kept = Vec::with_capacity(self.writes.len());
        for write in self.writes.drain(..) {
            if holds(&write.nonce) {
                if landed.is_none() {
                    landed = Some(write);
                }
            } else if write.condition.as_ref() == current {
                kept.push(write);
            }
        }
        match landed {
            Some(write) => {
                // Everything else was conditioned on a state our write has
                // since replaced: none of it can land any more.
                Settled::Landed(write)
            }
            None => {
                self.writes = kept;
                Settled::NotLanded
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(nonce: &str, condition: Condition) -> PendingWrite<u32> {
        PendingWrite {
            nonce: nonce.to_string(),
            sent_at: Duration::ZERO,
            condition,
            payload: 0,
        }
    }

    #[test]
    fn a_write_found_in_the_object_has_landed() {
        let mut pending = PendingWrites::default();
        pending.push(write("a", None));
        let v = Version::Generation(1);
        assert!(matches!(
            pending.settle(Some(&v), |n| n == "a"),
            Settled::Landed(w) if w.nonce == "a"
        ));
        assert!(pending.is_empty());
    }

    #[test]
    fn a_write_whose_condition_still_holds_stays_live() {
        let mut pending = PendingWrites::default();
        let v = Version::Generation(1);
        pending.push(write("a", Some(v.clone())));
        assert!(matches!(
            pending.settle(Some(&v), |_| false),
            Settled::NotLanded
        ));
        assert!(pending.contains("a"));
    }

    #[test]
    fn a_write_whose_condition_no_longer_holds_can_never_land() {
        let mut pending = PendingWrites::default();
        pending.push(write("a", Some(Version::Generation(1))));
        pending.push(write("b", None));
        let now = Version::Generation(2);
        assert!(matches!(
            pending.settle(Some(&now), |_| false),
            Settled::NotLanded
        ));
        assert!(pending.is_empty());
    }

    #[test]
    fn an_absent_object_keeps_creates_live_and_drops_replaces() {
        let mut pending = PendingWrites::default();
        pending.push(write("create", None));
        pending.push(write("replace", Some(Version::Generation(1))));
        assert!(matches!(
            pending.settle(None, |_| false),
            Settled::NotLanded
        ));
        assert!(pending.contains("create"));
        assert!(!pending.contains("replace"));
    }
}
