//! N-way races: exactly one winner per round, repeated.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use casaas_core::{CasError, CasStore, ErrorKind, Version};
use tokio::sync::Barrier;

use super::{answer_label, nonce};
use crate::model::{Outcome, StepError, StepExt};
use crate::probe::ProbeContext;

#[derive(Default)]
struct Tally {
    rounds: usize,
    one_winner: usize,
    no_winner: usize,
    multiple_winners: usize,
    max_winners: usize,
    ambiguous: u64,
    ambiguous_won: u64,
    phantom_writes: u64,
    wrong_stored: u64,
    answers: BTreeMap<String, u64>,
    violations: Vec<String>,
}

impl Tally {
    fn violation(&mut self, text: String) {
        if self.violations.len() < 5 {
            self.violations.push(text);
        }
    }

    fn outcome(self, what: &str, concurrency: usize, started: Instant) -> Outcome {
        let unsafe_rounds = self.multiple_winners as u64 + self.phantom_writes + self.wrong_stored;
        let outcome = if unsafe_rounds == 0 {
            Outcome::pass(format!(
                "{} rounds of {concurrency} concurrent {what}: never more than one winner{}",
                self.rounds,
                if self.no_winner > 0 {
                    format!(" ({} rounds had none)", self.no_winner)
                } else {
                    String::new()
                }
            ))
        } else {
            Outcome::fail(format!(
                "{} of {} rounds of {concurrency} concurrent {what} broke mutual exclusion: {}",
                unsafe_rounds,
                self.rounds,
                self.violations.join("; ")
            ))
        };
        outcome
            .with("rounds", self.rounds)
            .with("concurrency", concurrency)
            .with("rounds_one_winner", self.one_winner)
            .with("rounds_no_winner", self.no_winner)
            .with("rounds_multiple_winners", self.multiple_winners)
            .with("max_winners", self.max_winners)
            .with("ambiguous_answers", self.ambiguous)
            .with("ambiguous_resolved_as_won", self.ambiguous_won)
            .with("phantom_writes", self.phantom_writes)
            .with("loser_answers", self.answers)
            .with("duration_ms", started.elapsed().as_millis() as u64)
    }
}

/// Runs one round: `concurrency` tasks released together by a barrier,
/// each running `op(store, task)`. Returns each task's result.
async fn race<F, Fut>(
    store: &Arc<dyn CasStore>,
    concurrency: usize,
    op: F,
) -> Result<Vec<Result<Version, CasError>>, StepError>
where
    F: Fn(Arc<dyn CasStore>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<Version, CasError>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(concurrency));
    let mut handles = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let barrier = barrier.clone();
        let fut = op(store.clone(), task);
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            fut.await
        }));
    }
    let mut results = Vec::with_capacity(concurrency);
    for handle in handles {
        let result = handle.await.map_err(|e| StepError {
            step: "race task".to_string(),
            source: Box::new(CasError::new(
                ErrorKind::Ambiguous,
                format!("task failed: {e}"),
            )),
        })?;
        results.push(result);
    }
    Ok(results)
}

/// Judges one round from the tasks' answers and what the key holds now.
async fn judge(
    store: &Arc<dyn CasStore>,
    key: &str,
    round: usize,
    bodies: &[Bytes],
    results: Vec<Result<Version, CasError>>,
    tally: &mut Tally,
) -> Result<(), StepError> {
    let stored = store.get(key).await.step("read the race's result")?;
    let stored_task = stored
        .as_ref()
        .and_then(|o| bodies.iter().position(|b| *b == o.body));
    let mut winners: Vec<(usize, Version)> = Vec::new();
    for (task, result) in results.into_iter().enumerate() {
        match result {
            Ok(v) => winners.push((task, v)),
            Err(e) => {
                *tally.answers.entry(answer_label(&e)).or_default() += 1;
                if e.may_have_taken_effect() {
                    tally.ambiguous += 1;
                    // The protocol re-reads: the write took effect if the
                    // stored body is this task's.
                    if stored_task == Some(task) {
                        tally.ambiguous_won += 1;
                        if let Some(o) = &stored {
                            winners.push((task, o.version.clone()));
                        }
                    }
                } else if stored_task == Some(task) {
                    tally.phantom_writes += 1;
                    tally.violation(format!(
                        "round {round}: task {task} was told {} yet its write is stored",
                        e.evidence()
                    ));
                }
            }
        }
    }
    tally.rounds += 1;
    tally.max_winners = tally.max_winners.max(winners.len());
    match winners.len() {
        0 => tally.no_winner += 1,
        1 => {
            tally.one_winner += 1;
            let (task, version) = &winners[0];
            let matches = stored
                .as_ref()
                .is_some_and(|o| o.body == bodies[*task] && &o.version == version);
            if !matches {
                tally.wrong_stored += 1;
                tally.violation(format!(
                    "round {round}: task {task} won but the key holds another write"
                ));
            }
        }
        n => {
            tally.multiple_winners += 1;
            tally.violation(format!("round {round}: {n} winners"));
        }
    }
    Ok(())
}

pub(super) async fn race_create(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let concurrency = cx.settings().concurrency.max(2);
    let rounds = cx.settings().race_rounds();
    let started = Instant::now();
    let mut tally = Tally::default();
    let run = nonce();
    for round in 0..rounds {
        let key = format!("create/{round}");
        let bodies: Vec<Bytes> = (0..concurrency)
            .map(|t| Bytes::from(format!("round {round} task {t} {run}")))
            .collect();
        let results = race(store, concurrency, |store, task| {
            let (key, body) = (key.clone(), bodies[task].clone());
            async move { store.create(&key, body).await }
        })
        .await?;
        judge(store, &key, round, &bodies, results, &mut tally).await?;
        cx.step(round as u64 + 1, rounds as u64);
    }
    Ok(tally.outcome("creates of one key", concurrency, started))
}

pub(super) async fn race_replace(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let concurrency = cx.settings().concurrency.max(2);
    let rounds = cx.settings().race_rounds();
    let started = Instant::now();
    let mut tally = Tally::default();
    let run = nonce();
    for round in 0..rounds {
        // A fresh key per round, so stores with a per-key write limit are
        // not throttled by the probe's own pace.
        let key = format!("replace/{round}");
        let start = store
            .create(&key, Bytes::from(format!("round {round} start {run}")))
            .await
            .step("create the object to race on")?;
        cx.pace(&key).await;
        let bodies: Vec<Bytes> = (0..concurrency)
            .map(|t| Bytes::from(format!("round {round} task {t} {run}")))
            .collect();
        let results = race(store, concurrency, |store, task| {
            let (key, body, from) = (key.clone(), bodies[task].clone(), start.clone());
            async move { store.replace(&key, &from, body).await }
        })
        .await?;
        judge(store, &key, round, &bodies, results, &mut tally).await?;
        cx.step(round as u64 + 1, rounds as u64);
    }
    Ok(tally.outcome("replaces from one version", concurrency, started))
}
