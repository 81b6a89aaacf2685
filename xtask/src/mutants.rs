//! `cargo xtask mutants`: the simulation's power, measured by breaking the
//! protocol on purpose.
//!
//! Each mutant is one small edit to `casaas-core/src/lease` (or the
//! pending-write memory and config it rests on) that removes one rule the
//! safety argument needs. The workspace is copied to
//! `target/mutants/workspace` (the working tree, ignored files aside), each
//! mutant is applied to the copy alone, and `casaas-sim` runs there with
//! the fixed timing and with `--explore-configs`. A mutant is *killed* when
//! the simulation reports a violation (exit status 1) or crashes, and
//! *survives* when both runs pass. The unmutated copy runs first and must
//! pass, so a kill always means the mutant.
//!
//! An edit whose original text is no longer in the file fails the run
//! ("refresh the mutant"): a mutant that silently stops applying would
//! count as killed by nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// One protocol mutant: replace `find` (which must occur exactly once) by
/// `replace` in `file`.
struct Mutant {
    name: &'static str,
    file: &'static str,
    find: &'static str,
    replace: &'static str,
}

const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "holder validity counted from the answer, not the send",
        file: "casaas-core/src/lease/handle.rs",
        find: "self.adopt(new_version, nonce, sent_at);",
        replace: "self.adopt(new_version, nonce, self.clock.now());",
    },
    Mutant {
        name: "holder believes the whole TTL (no drift margin on its side)",
        file: "casaas-core/src/lease/config.rs",
        find: "scale(self.ttl, 1.0 - drift_fraction(self.drift_margin))",
        replace: "scale(self.ttl, 1.0)",
    },
    Mutant {
        name: "takeover without the drift margin",
        file: "casaas-core/src/lease/acquire.rs",
        find: "(since + self.config.takeover_wait(ttl))",
        replace: "(since + ttl)",
    },
    Mutant {
        name: "contender takes an ambiguous write as its own without the nonce check",
        file: "casaas-core/src/lease/acquire.rs",
        find: "mine.writes.settle(Some(&version), |n| n == record.nonce)",
        replace: "mine.writes.settle(Some(&version), |_| true)",
    },
    Mutant {
        name: "holder takes an ambiguous renewal as its own without the nonce check",
        file: "casaas-core/src/lease/handle.rs",
        find: "state.pending.settle(Some(&version), |n| n == record.nonce)",
        replace: "state.pending.settle(Some(&version), |_| true)",
    },
    Mutant {
        name: "fenced update takes an ambiguous write as landed without the nonce check",
        file: "casaas-core/src/lease/fenced.rs",
        find: "pending.settle(Some(&fenced.version), |n| history.holds(n))",
        replace: "pending.settle(Some(&fenced.version), |_| true)",
    },
    Mutant {
        name: "fenced append takes an ambiguous create as landed without the nonce check",
        file: "casaas-core/src/lease/log.rs",
        find: "pending.settle(version, |n| n == nonce)",
        replace: "pending.settle(version, |_| true)",
    },
    Mutant {
        name: "acquiring again from our remembered release reuses its token",
        file: "casaas-core/src/lease/acquire.rs",
        find: "token: self.next_token(token)?,",
        replace: "token,",
    },
    Mutant {
        name: "acquiring again from our remembered release while our writes may still land",
        file: "casaas-core/src/lease/acquire.rs",
        find: "if !state.orphans.is_empty() {",
        replace: "if false && !state.orphans.is_empty() {",
    },
    Mutant {
        name: "a takeover reuses the token",
        file: "casaas-core/src/lease/acquire.rs",
        find: ".checked_add(1)",
        replace: ".checked_add(0)",
    },
    Mutant {
        name: "release resets the token",
        file: "casaas-core/src/lease/handle.rs",
        find: "record.released = released;\n",
        replace: "record.released = released;\n        if released {\n            record.token = 0;\n        }\n",
    },
    Mutant {
        name: "fenced resource without its fencing check",
        file: "casaas-core/src/lease/fenced.rs",
        find: "if fenced.token > token {",
        replace: "if false && fenced.token > token {",
    },
    Mutant {
        name: "fenced log without its fencing check",
        file: "casaas-core/src/lease/log.rs",
        find: "if head.token > token {",
        replace: "if false && head.token > token {",
    },
    Mutant {
        name: "a contender's write of unknown outcome forgotten as if refused",
        file: "casaas-core/src/lease/acquire.rs",
        find: "Err(err) if needs_resolution(&err) => self.resolve(err, mine, condition).await,",
        replace: "Err(err) if needs_resolution(&err) => {\n                mine.writes.clear();\n                Err(err.into())\n            }",
    },
    Mutant {
        name: "live pending writes dropped when settling",
        file: "casaas-core/src/lease/pending.rs",
        find: "} else if write.condition.as_ref() == current {",
        replace: "} else if false && write.condition.as_ref() == current {",
    },
    Mutant {
        name: "session lock taken over as a plain lease, its session unchecked",
        file: "casaas-core/src/lease/acquire.rs",
        find: "} else if let Some(session) = &record.session {",
        replace: "} else if let Some(session) = record.session.as_ref().filter(|_| false) {",
    },
    Mutant {
        name: "session term taken as over without the term-ending write",
        file: "casaas-core/src/lease/acquire.rs",
        find: "        let mut ended = beat;\n",
        replace: "        return Ok(TermVerdict::Ended);\n        let mut ended = beat;\n",
    },
    Mutant {
        name: "create-once takes a 412 as Taken without reading the key back",
        file: "casaas-core/src/lease/create_once.rs",
        find: "if let Some(version) = attempts.created(sent)? {",
        replace: "if let super::attempt::Sent::Unknown(err) = &sent\n                && err.kind() == crate::ErrorKind::PreconditionFailed\n            {\n                return Ok(Created::Taken(Version::Generation(0)));\n            }\n            if let Some(version) = attempts.created(sent)? {",
    },
    Mutant {
        name: "create-once takes any stored body as its own without the nonce check",
        file: "casaas-core/src/lease/create_once.rs",
        find: "let holds = |nonce: &str| stored_nonce.as_deref() == Some(nonce);",
        replace: "let holds = |nonce: &str| stored_nonce.is_some() || nonce.is_empty();",
    },
    Mutant {
        name: "group commit carries an update of an older token in a batch fenced by a newer one",
        file: "casaas-core/src/lease/group.rs",
        find: "if next.token != first.token || full {",
        replace: "if next.token > first.token || full {",
    },
    Mutant {
        name: "group commit answers a batch with the values of its last call, not of the call that landed",
        file: "casaas-core/src/lease/group.rs",
        find: "let steps = calls.into_iter().nth(call).ok_or_else(",
        replace: "let steps = calls.into_iter().last().filter(|_| call < usize::MAX).ok_or_else(",
    },
    Mutant {
        name: "group commit answers a batch's callers with one another's places",
        file: "casaas-core/src/lease/group.rs",
        find: "for (reply, done) in replies.into_iter().zip(done) {",
        replace: "for (reply, done) in replies.into_iter().zip(done.into_iter().rev()) {",
    },
    Mutant {
        name: "a failure while a write may still land reported as definite, not ambiguous",
        file: "casaas-core/src/lease/attempt.rs",
        find: "if self.pending.is_empty() {\n            return err;",
        replace: "if true || self.pending.is_empty() {\n            return err;",
    },
    Mutant {
        name: "observers report us as leader again after our term ended",
        file: "casaas-core/src/lease/election.rs",
        find: "if record.owner == self.lease.owner() && record.token <= ended {",
        replace: "if false && record.owner == self.lease.owner() && record.token <= ended {",
    },
    Mutant {
        name: "ensure_held_for checks only that the lease was not lost, not its validity left",
        file: "casaas-core/src/lease/handle.rs",
        find: "if remaining.is_zero() || remaining < min_remaining {",
        replace: "if false && (remaining.is_zero() || remaining < min_remaining) {",
    },
    Mutant {
        name: "try_acquire answers a race lost on a fresh lock as an error",
        file: "casaas-core/src/lease/acquire.rs",
        find: "Err(LeaseError::Store(err)) if lost_race(&err) => {",
        replace: "Err(LeaseError::Store(err)) if false && lost_race(&err) => {",
    },
    Mutant {
        name: "create-only layout: an epoch created in collected history taken as written",
        file: "casaas-core/src/layout.rs",
        find: ".get(&Self::collected_key(key, self.block_of(epoch)))",
        replace: ".get(&Self::epoch_key(key, u64::MAX))",
    },
    Mutant {
        name: "create-only layout: a reader takes an epoch in a collected block for the head",
        file: "casaas-core/src/layout.rs",
        find: "            if collected {\n                // Our candidate is in collected history",
        replace: "            if false && collected {\n                // Our candidate is in collected history",
    },
    Mutant {
        name: "election gives the lease up before the leader's work has finished",
        file: "casaas-core/src/lease/election.rs",
        find: "if !matches!(stop, Stop::WorkEnded)\n                && let Err(err) = work.await",
        replace: "if false\n                && let Err(err) = work.await",
    },
    Mutant {
        name: "holder never steps down at its renew deadline",
        file: "casaas-core/src/lease/handle.rs",
        find: "if now >= deadline {\n                self.lose(LostReason::RenewDeadlineExceeded);\n                break;",
        replace: "if false && now >= deadline {\n                self.lose(LostReason::RenewDeadlineExceeded);\n                break;",
    },
    Mutant {
        name: "swap-once takes a 412 as a conflict without reading the object back",
        file: "casaas-core/src/lease/swap_once.rs",
        find: "if let Some(version) = attempts.created(sent)? {",
        replace: "if let super::attempt::Sent::Unknown(err) = &sent\n                && err.kind() == crate::ErrorKind::PreconditionFailed\n            {\n                return Ok(Swapped::Conflict(None));\n            }\n            if let Some(version) = attempts.created(sent)? {",
    },
    Mutant {
        name: "swap-once never asks the lineage check (a write of ours built upon is a conflict)",
        file: "casaas-core/src/lease/swap_once.rs",
        find: "let moved_on = write.condition.as_ref() != Some(&object.version);",
        replace: "let moved_on = false && write.condition.as_ref() != Some(&object.version);",
    },
    Mutant {
        name: "fair turns: the head of the queue takes its ticket for the lock",
        file: "casaas-core/src/lease/fair.rs",
        find: "let acquired = at_head(budget.remaining()).await;",
        replace: "if true {\n                            return Ok(ticket.guard);\n                        }\n                        let acquired = at_head(budget.remaining()).await;",
    },
    Mutant {
        name: "fair turns: a ticket kept at the lock's own key",
        file: "casaas-core/src/lease/fair.rs",
        find: "            ticket_key(&self.queue, number),\n",
        replace: "            self.lease.key().to_string(),\n",
    },
    Mutant {
        name: "fair turns: a waiter ends its ticket at the lock's key",
        file: "casaas-core/src/lease/fair.rs",
        find: "let key = ticket_key(&self.queue, ticket.number);",
        replace: "let key = self.lease.key().to_string();",
    },
    Mutant {
        name: "session term judged over while its heartbeat is still at that term",
        file: "casaas-core/src/lease/acquire.rs",
        find: "Some((beat, _)) if beat.token > session.term => Ok(TermVerdict::Ended),",
        replace: "Some((beat, _)) if beat.token >= session.term => Ok(TermVerdict::Ended),",
    },
    Mutant {
        name: "create-once reports Taken when the read after an unanswered create finds the key absent",
        file: "casaas-core/src/lease/create_once.rs",
        find: "let Some(object) = found else {\n            return Ok(None);\n        };",
        replace: "let Some(object) = found else {\n            pending.settle(None, |_| false);\n            return Ok(Some(Created::Taken(Version::Generation(0))));\n        };",
    },
    Mutant {
        name: "fenced log appends one entry past the head, leaving a gap",
        file: "casaas-core/src/lease/log.rs",
        find: "            .checked_add(1)\n            .ok_or_else(|| LeaseError::Exhausted {",
        replace: "            .checked_add(2)\n            .ok_or_else(|| LeaseError::Exhausted {",
    },
    Mutant {
        name: "fenced update answers FencedOut before settling its unanswered writes",
        file: "casaas-core/src/lease/fenced.rs",
        find: "if let Some(landed) = self.settle(&mut attempts.pending, current.as_ref(), token)? {",
        replace: "if let Some((fenced, _)) = &current\n                    && fenced.token > token\n                {\n                    return Err(LeaseError::FencedOut {\n                        presented: token,\n                        recorded: fenced.token,\n                    });\n                }\n                if let Some(landed) = self.settle(&mut attempts.pending, current.as_ref(), token)? {",
    },
    Mutant {
        name: "swap-once writes on top of the version it finds now, not the one its caller read",
        file: "casaas-core/src/lease/swap_once.rs",
        find: "Some(version) => self.store.replace(key, version, bytes).await,",
        replace: "Some(version) => match self.store.get(key).await {\n                        Ok(Some(now)) => self.store.replace(key, &now.version, bytes).await,\n                        _ => self.store.replace(key, version, bytes).await,\n                    },",
    },
    Mutant {
        name: "rwlock: a reader does not check for a writer after taking its slot",
        file: "casaas-core/src/lease/rwlock.rs",
        find: "match self.writer_came(&seen).await {",
        replace: "match Ok::<bool, LeaseError>(false) {",
    },
    Mutant {
        name: "rwlock: a writer holds without waiting for the readers",
        file: "casaas-core/src/lease/rwlock.rs",
        find: "            if live.is_empty() {\n                return Ok(());",
        replace: "            if true {\n                return Ok(());",
    },
    Mutant {
        name: "rwlock: a reader takes a held writer's lease for expired at once",
        file: "casaas-core/src/lease/rwlock.rs",
        find: "if left.is_zero() {\n                        tracing::info!(writer",
        replace: "if true {\n                        tracing::info!(writer",
    },
    Mutant {
        name: "semaphore: one slot more than the count",
        file: "casaas-core/src/lease/semaphore.rs",
        find: "let slot_leases = (0..slots)",
        replace: "let slot_leases = (0..=slots)",
    },
    Mutant {
        name: "semaphore: a caller's count never checked against the recorded one",
        file: "casaas-core/src/lease/semaphore.rs",
        find: "if capacity.slots != self.slots() {",
        replace: "if false && capacity.slots != self.slots() {",
    },
];

/// What one simulation run of a mutant said.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// No violation.
    Survived,
    /// Violations, with the properties that caught them.
    Killed(String),
    /// The simulation ended some other way (a panic, a failure to run).
    Crashed(String),
}

/// Runs every mutant (or those whose name contains `only`, or any of its
/// `|`-separated parts) and prints the
/// table and the kill rate; fails if a mutant no longer applies.
pub fn mutants(root: &Path, ops: u64, seed: u64, only: Option<&str>) -> Result<()> {
    let chosen: Vec<&Mutant> = MUTANTS
        .iter()
        .filter(|m| only.is_none_or(|only| chosen_by(only, m.name)))
        .collect();
    if chosen.is_empty() {
        bail!("no mutant's name contains {only:?}; the names are in xtask/src/mutants.rs");
    }
    for mutant in &chosen {
        let text = std::fs::read_to_string(root.join(mutant.file))?;
        apply(&text, mutant)?;
    }
    let copy = root.join("target").join("mutants");
    let workspace = copy.join("workspace");
    copy_tracked_files(root, &workspace)?;
    let run = |label: &str| -> Result<(Verdict, Verdict)> {
        let started = Instant::now();
        let fixed = simulate(&workspace, &copy.join("target"), ops, seed, false)?;
        let explored = simulate(&workspace, &copy.join("target"), ops, seed, true)?;
        eprintln!(
            "xtask: {label}: {fixed:?} / {explored:?} ({:.0?})",
            started.elapsed()
        );
        Ok((fixed, explored))
    };
    let baseline = run("unmutated")?;
    if baseline != (Verdict::Survived, Verdict::Survived) {
        bail!("the unmutated protocol does not pass the simulation ({baseline:?}): fix that first");
    }
    let mut rows = Vec::new();
    for mutant in &chosen {
        let original = std::fs::read_to_string(root.join(mutant.file))?;
        let target = workspace.join(mutant.file);
        std::fs::write(&target, apply(&original, mutant)?)?;
        let verdicts = run(mutant.name);
        std::fs::write(&target, &original)?;
        rows.push((mutant.name, verdicts?));
    }
    println!("{}", table(&rows, ops, seed));
    Ok(())
}

/// Does `--only` choose the mutant named `name`? It names one or more
/// texts, separated by `|`; a name containing any of them is chosen.
fn chosen_by(only: &str, name: &str) -> bool {
    only.split('|')
        .map(str::trim)
        .any(|part| !part.is_empty() && name.contains(part))
}

/// `text` with the mutant's one edit made.
fn apply(text: &str, mutant: &Mutant) -> Result<String> {
    match text.matches(mutant.find).count() {
        1 => Ok(text.replacen(mutant.find, mutant.replace, 1)),
        0 => bail!(
            "mutant {:?} no longer applies: {} does not contain {:?}; refresh it in xtask/src/mutants.rs",
            mutant.name,
            mutant.file,
            mutant.find
        ),
        n => bail!(
            "mutant {:?} is ambiguous: {:?} occurs {n} times in {}; make it unique in xtask/src/mutants.rs",
            mutant.name,
            mutant.find,
            mutant.file
        ),
    }
}

/// Copies the files git tracks or would track (as they are in the working
/// tree) to `to`,
/// replacing what was there.
fn copy_tracked_files(root: &Path, to: &Path) -> Result<()> {
    let output = Command::new("git")
        // Untracked files that are not ignored too: a new module not yet
        // added must not leave the copy unable to build.
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .context("running git ls-files")?;
    if !output.status.success() {
        bail!("git ls-files failed: the mutants run needs a git checkout");
    }
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    for path in output.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(String::from_utf8_lossy(path).into_owned());
        let from = root.join(&path);
        if !from.is_file() {
            continue; // deleted in the working tree
        }
        let dest = to.join(&path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(&from, &dest).with_context(|| format!("copying {}", path.display()))?;
    }
    Ok(())
}

/// One simulation run in the copied workspace.
fn simulate(
    workspace: &Path,
    target: &Path,
    ops: u64,
    seed: u64,
    explore: bool,
) -> Result<Verdict> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let args = crate::sim_args(ops, seed, &[], explore);
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .context("running the simulation")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(match output.status.code() {
        Some(0) => Verdict::Survived,
        Some(1) => Verdict::Killed(caught_by(&stdout)),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            Verdict::Crashed(format!(
                "{}: {}",
                output.status,
                last.unwrap_or("no output")
            ))
        }
    })
}

/// The properties named by the simulation's `violations of P: prop=n …`
/// lines.
fn caught_by(stdout: &str) -> String {
    let mut properties: Vec<String> = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("violations of ")
            && let Some((primitive, props)) = rest.split_once(": ")
        {
            for prop in props.split_whitespace() {
                let name = prop.split('=').next().unwrap_or(prop);
                properties.push(format!("{primitive}/{name}"));
            }
        }
    }
    properties.dedup();
    properties.join(", ")
}

/// The Markdown table of verdicts, with the kill rate.
fn table(rows: &[(&str, (Verdict, Verdict))], ops: u64, seed: u64) -> String {
    let cell = |v: &Verdict| match v {
        Verdict::Survived => "survives".to_string(),
        Verdict::Killed(by) => format!("killed ({by})"),
        Verdict::Crashed(why) => format!("crashed ({why})"),
    };
    let mut out = format!(
        "Protocol mutants, `cargo xtask mutants --ops {ops} --seed {seed}`:\n\n\
         | mutant | fixed timing | explored timing |\n| --- | --- | --- |\n"
    );
    let mut killed = 0;
    for (name, (fixed, explored)) in rows {
        if *fixed != Verdict::Survived || *explored != Verdict::Survived {
            killed += 1;
        }
        out.push_str(&format!(
            "| {name} | {} | {} |\n",
            cell(fixed),
            cell(explored)
        ));
    }
    out.push_str(&format!(
        "\nkilled={killed} mutants={} kill_rate={:.0}%",
        rows.len(),
        100.0 * killed as f64 / rows.len().max(1) as f64
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mutant_applies_once_to_the_code_as_it_is() {
        let root = crate::workspace_root().unwrap();
        for mutant in MUTANTS {
            let text = std::fs::read_to_string(root.join(mutant.file)).unwrap();
            let mutated = apply(&text, mutant).unwrap();
            assert_ne!(mutated, text, "{}", mutant.name);
        }
    }

    #[test]
    fn a_mutant_that_no_longer_applies_is_an_error() {
        let mutant = Mutant {
            name: "gone",
            file: "f.rs",
            find: "x > y",
            replace: "false",
        };
        let err = apply("a < b", &mutant).unwrap_err().to_string();
        assert!(err.contains("no longer applies"), "{err}");
        assert!(apply("x > y; x > y", &mutant).is_err());
    }

    #[test]
    fn only_chooses_by_any_of_its_parts() {
        assert!(chosen_by("group commit", "group commit carries an update"));
        assert!(chosen_by(
            "session|fresh lock",
            "try_acquire answers a race lost on a fresh lock"
        ));
        assert!(!chosen_by("session|fresh lock", "release resets the token"));
        assert!(!chosen_by("|", "release resets the token"));
    }

    #[test]
    fn the_killing_properties_are_read_from_the_summary() {
        let out = "primitive=lease ops=1 violations=2\nviolations of lease: mutual_exclusion=2 fencing=1\n";
        assert_eq!(caught_by(out), "lease/mutual_exclusion, lease/fencing");
    }
}
