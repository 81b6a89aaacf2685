//! N-way races: exactly one winner per round, repeated.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use casaas_core::{CasError, CasStore, ErrorKind, StoredObject, Version};
use futures::StreamExt;
use tokio::sync::Barrier;

use super::performance::percentiles;
use super::{answer_label, nonce};
use crate::model::{Outcome, StepError, StepExt};
use crate::probe::{ProbeContext, detectable_race_rate};

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
    /// Racers still throttled when their retry budget ran out: they did not
    /// take part in the round.
    throttled_out: u64,
    /// Rounds without a winner that were run again on a fresh key.
    reruns: usize,
    answers: BTreeMap<String, u64>,
    violations: Vec<String>,
    /// Winners per endpoint (index as in `ProbeContext::racing_stores`).
    winners_by_endpoint: BTreeMap<usize, u64>,
    /// Rounds with several winners on different endpoints.
    multiple_winners_across: usize,
    /// How long each winner's write took under contention (ms).
    winner_ms: Vec<f64>,
    /// How long each refused racer's write took under contention (ms).
    loser_ms: Vec<f64>,
}

impl Tally {
    fn violation(&mut self, text: String) {
        if self.violations.len() < 5 {
            self.violations.push(text);
        }
    }

    fn merge(&mut self, other: Tally) {
        self.rounds += other.rounds;
        self.one_winner += other.one_winner;
        self.no_winner += other.no_winner;
        self.multiple_winners += other.multiple_winners;
        self.max_winners = self.max_winners.max(other.max_winners);
        self.ambiguous += other.ambiguous;
        self.ambiguous_won += other.ambiguous_won;
        self.phantom_writes += other.phantom_writes;
        self.wrong_stored += other.wrong_stored;
        self.throttled_out += other.throttled_out;
        self.reruns += other.reruns;
        for (answer, n) in other.answers {
            *self.answers.entry(answer).or_default() += n;
        }
        for v in other.violations {
            self.violation(v);
        }
        for (endpoint, n) in other.winners_by_endpoint {
            *self.winners_by_endpoint.entry(endpoint).or_default() += n;
        }
        self.multiple_winners_across += other.multiple_winners_across;
        self.winner_ms.extend(other.winner_ms);
        self.loser_ms.extend(other.loser_ms);
    }

    /// Rounds that broke exclusion: two winners, a write stored although
    /// its writer was refused, or a winner whose write is not the one kept.
    fn unsafe_rounds(&self) -> u64 {
        self.multiple_winners as u64 + self.phantom_writes + self.wrong_stored
    }

    /// Whether more rounds cannot change the verdict: a round broke
    /// exclusion (fail), or a round never had a winner (no pass is possible
    /// any more, so at best an error).
    fn settles_the_verdict(&self) -> bool {
        self.unsafe_rounds() > 0 || self.no_winner > 0
    }

    /// Winners per endpoint, by label, when there is more than one.
    fn winners_by_label(&self, labels: &[String]) -> BTreeMap<String, u64> {
        labels
            .iter()
            .enumerate()
            .map(|(i, label)| {
                let n = self.winners_by_endpoint.get(&i).copied().unwrap_or(0);
                (format!("{i}: {label}"), n)
            })
            .collect()
    }

    /// `winners p50/p99 A/B ms, losers C/D ms`, for the detail line.
    fn contended_line(&self) -> String {
        let pair = |samples: &[f64]| match percentile_pair(samples) {
            Some((p50, p99)) => format!("{p50:.1}/{p99:.1}"),
            None => "-".to_string(),
        };
        format!(
            "under contention a write took p50/p99 {} ms when it won, {} ms when refused",
            pair(&self.winner_ms),
            pair(&self.loser_ms)
        )
    }

    fn outcome(
        self,
        what: &str,
        concurrency: usize,
        started: Instant,
        labels: &[String],
    ) -> Outcome {
        let unsafe_rounds = self.unsafe_rounds();
        // Only rounds with one winner are evidence of exclusion.
        let detectable = detectable_race_rate(self.one_winner);
        let reruns = if self.reruns > 0 {
            format!(
                " ({} rounds without a winner were run again on a fresh key)",
                self.reruns
            )
        } else {
            String::new()
        };
        let outcome = if unsafe_rounds == 0 && self.no_winner == 0 {
            Outcome::pass(format!(
                "{} rounds of {concurrency} concurrent {what}{}: exactly one winner each{reruns}; \
                 a race in {:.2}% of rounds or more would have shown with 99% probability; {}",
                self.rounds,
                spread(labels),
                detectable * 100.0,
                self.contended_line()
            ))
        } else if unsafe_rounds == 0 {
            // No winner is no evidence of exclusion: every racer was refused,
            // throttled or lost its answer.
            let answers: Vec<String> = self
                .answers
                .iter()
                .map(|(a, n)| format!("{n}x {a}"))
                .collect();
            Outcome::error(format!(
                "{} of {} rounds of {concurrency} concurrent {what} had no winner even when run again, so exclusion was not shown (racers were answered: {})",
                self.no_winner,
                self.rounds,
                answers.join(", ")
            ))
        } else {
            Outcome::fail(format!(
                "{} of {} rounds of {concurrency} concurrent {what}{} broke mutual exclusion: {}",
                unsafe_rounds,
                self.rounds,
                spread(labels),
                self.violations.join("; ")
            ))
        };
        let outcome = if labels.len() > 1 {
            outcome
                .with("endpoints", labels.len())
                .with("winners_by_endpoint", self.winners_by_label(labels))
                .with(
                    "rounds_multiple_winners_across_endpoints",
                    self.multiple_winners_across,
                )
        } else {
            outcome
        };
        outcome
            .with(
                "contended_latency_ms",
                serde_json::json!({
                    "winners": percentiles(self.winner_ms.clone()),
                    "losers": percentiles(self.loser_ms.clone()),
                }),
            )
            .with("rounds", self.rounds)
            .with("concurrency", concurrency)
            .with("rounds_one_winner", self.one_winner)
            .with("rounds_no_winner", self.no_winner)
            .with("rounds_multiple_winners", self.multiple_winners)
            .with("max_winners", self.max_winners)
            .with("ambiguous_answers", self.ambiguous)
            .with("ambiguous_resolved_as_won", self.ambiguous_won)
            .with("phantom_writes", self.phantom_writes)
            .with("racers_throttled_out", self.throttled_out)
            .with("rounds_run_again", self.reruns)
            .with("detectable_race_rate_99", (detectable * 1e4).round() / 1e4)
            .with("loser_answers", self.answers)
            .with("duration_ms", started.elapsed().as_millis() as u64)
    }
}

/// One racer's answer: through which endpoint, how long it took, and what
/// it was told.
struct Answer {
    endpoint: usize,
    elapsed_ms: f64,
    result: Result<Version, CasError>,
}

/// Runs one round: `concurrency` tasks released together by a barrier,
/// task `i` running `op(store, i)` through endpoint `i % stores.len()`.
/// Returns each task's answer, timed from its release.
async fn race<F, Fut>(
    stores: &[Arc<dyn CasStore>],
    concurrency: usize,
    op: F,
) -> Result<Vec<Answer>, StepError>
where
    F: Fn(Arc<dyn CasStore>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<Version, CasError>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(concurrency));
    let mut handles = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let endpoint = task % stores.len().max(1);
        let barrier = barrier.clone();
        let fut = op(stores[endpoint].clone(), task);
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let started = Instant::now();
            let result = fut.await;
            Answer {
                endpoint,
                elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
                result,
            }
        }));
    }
    let mut answers = Vec::with_capacity(concurrency);
    for handle in handles {
        let answer = handle.await.map_err(|e| StepError {
            step: "race task".to_string(),
            source: Box::new(CasError::new(
                ErrorKind::Ambiguous,
                format!("task failed: {e}"),
            )),
        })?;
        answers.push(answer);
    }
    Ok(answers)
}

/// A round's answers sorted: who won, and through which endpoint each
/// racer wrote and how long it took.
struct RoundAnswers {
    /// Each winner's task and version (a write whose answer was lost counts
    /// when its body is the one stored).
    winners: Vec<(usize, Version)>,
    /// Each task's endpoint.
    endpoints: Vec<usize>,
    winner_ms: Vec<f64>,
    loser_ms: Vec<f64>,
}

impl Tally {
    /// Sorts round `round`'s answers into winners and losers, counting the
    /// losers' answers; `stored` is what the key holds now, written by task
    /// `stored_task` if any.
    fn sort_answers(
        &mut self,
        round: usize,
        answers: Vec<Answer>,
        stored: Option<&StoredObject>,
        stored_task: Option<usize>,
    ) -> RoundAnswers {
        let mut sorted = RoundAnswers {
            winners: Vec::new(),
            endpoints: Vec::with_capacity(answers.len()),
            winner_ms: Vec::new(),
            loser_ms: Vec::new(),
        };
        for (task, answer) in answers.into_iter().enumerate() {
            sorted.endpoints.push(answer.endpoint);
            match answer.result {
                Ok(v) => {
                    sorted.winner_ms.push(answer.elapsed_ms);
                    sorted.winners.push((task, v));
                }
                Err(e) => {
                    if e.kind() == ErrorKind::PreconditionFailed {
                        sorted.loser_ms.push(answer.elapsed_ms);
                    }
                    let stored_here = stored.filter(|_| stored_task == Some(task));
                    if let Some(version) = self.refusal(round, task, &e, stored_here) {
                        sorted.winners.push((task, version));
                    }
                }
            }
        }
        sorted
    }

    /// Counts task `task`'s refusal `e` in round `round`; `stored_here` is
    /// what the key holds if it is this task's write. The stored version
    /// when the answer may have been lost and the write is the one stored:
    /// a win.
    fn refusal(
        &mut self,
        round: usize,
        task: usize,
        e: &CasError,
        stored_here: Option<&StoredObject>,
    ) -> Option<Version> {
        *self.answers.entry(answer_label(e)).or_default() += 1;
        if e.kind() == ErrorKind::Throttled {
            // Never counted as a refusal: this racer did not take part.
            self.throttled_out += 1;
        }
        if e.may_have_taken_effect() {
            self.ambiguous += 1;
            // The protocol re-reads: the write took effect if the
            // stored body is this task's.
            if let Some(won) = stored_here {
                self.ambiguous_won += 1;
                return Some(won.version.clone());
            }
            return None;
        }
        if stored_here.is_some() {
            self.phantom_writes += 1;
            self.violation(format!(
                "round {round}: task {task} was told {} yet its write is stored",
                e.evidence()
            ));
        }
        None
    }

    /// Counts round `round` with its winners: per endpoint, across
    /// endpoints, and whether exclusion held (one winner, whose write is
    /// the one `stored`).
    fn count_round(
        &mut self,
        round: usize,
        sorted: RoundAnswers,
        stored: Option<&StoredObject>,
        bodies: &[Bytes],
    ) {
        let RoundAnswers {
            winners,
            endpoints,
            winner_ms,
            loser_ms,
        } = sorted;
        self.rounds += 1;
        self.winner_ms.extend(winner_ms);
        self.loser_ms.extend(loser_ms);
        for (task, _) in &winners {
            *self
                .winners_by_endpoint
                .entry(endpoints[*task])
                .or_default() += 1;
        }
        let mut winning_endpoints: Vec<usize> =
            winners.iter().map(|(t, _)| endpoints[*t]).collect();
        winning_endpoints.sort_unstable();
        winning_endpoints.dedup();
        if winning_endpoints.len() > 1 {
            self.multiple_winners_across += 1;
        }
        self.max_winners = self.max_winners.max(winners.len());
        match winners.len() {
            0 => self.no_winner += 1,
            1 => {
                self.one_winner += 1;
                let (task, version) = &winners[0];
                let matches =
                    stored.is_some_and(|o| o.body == bodies[*task] && &o.version == version);
                if !matches {
                    self.wrong_stored += 1;
                    self.violation(format!(
                        "round {round}: task {task} won but the key holds another write"
                    ));
                }
            }
            n if winning_endpoints.len() > 1 => {
                self.multiple_winners += 1;
                self.violation(format!(
                    "round {round}: {n} winners, through endpoints {winning_endpoints:?}"
                ));
            }
            n => {
                self.multiple_winners += 1;
                self.violation(format!("round {round}: {n} winners"));
            }
        }
    }
}

/// Judges one round from the tasks' answers and what the key holds now.
/// A round without a winner that is not the `last` attempt is counted as a
/// re-run, not as a round: the caller runs it again on a fresh key.
async fn judge(
    store: &Arc<dyn CasStore>,
    key: &str,
    round: usize,
    bodies: &[Bytes],
    answers: Vec<Answer>,
    last: bool,
    tally: &mut Tally,
) -> Result<(), StepError> {
    let stored = store.get(key).await.step("read the race's result")?;
    let stored_task = stored
        .as_ref()
        .and_then(|o| bodies.iter().position(|b| *b == o.body));
    let sorted = tally.sort_answers(round, answers, stored.as_ref(), stored_task);
    if sorted.winners.is_empty() && !last {
        tally.reruns += 1;
        return Ok(());
    }
    tally.count_round(round, sorted, stored.as_ref(), bodies);
    Ok(())
}

/// Attempts per round: a round without a winner is run again on a fresh
/// key this many times in all before it counts as "no winner".
const ATTEMPTS: usize = 3;

/// Rounds run at once: one at a time, unless writes to one key are paced,
/// when rounds run on several keys at once so that the pace does not
/// multiply the run time.
fn parallel_rounds(cx: &ProbeContext) -> usize {
    if cx.min_write_interval().is_some() {
        20
    } else {
        1
    }
}

/// Runs rounds of `round(round_number)` as the settings' [`RacePlan`]
/// says, merging tallies: the plan's minimum, then more while its budget
/// lasts, unless a round broke exclusion or failed.
async fn run_rounds<F, Fut>(cx: &ProbeContext, round: F) -> Result<Tally, StepError>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Tally, StepError>>,
{
    let plan = cx.settings().race_plan();
    let started = Instant::now();
    let settled = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let results: Vec<Result<Tally, StepError>> = futures::stream::iter(0..plan.max_rounds)
        .take_while(|r| {
            let go = plan.should_start(*r, started.elapsed(), settled.load(Ordering::Relaxed));
            std::future::ready(go)
        })
        .map(|r| {
            let fut = round(r);
            let (done, settled) = (&done, &settled);
            async move {
                let result = fut.await;
                if result.as_ref().map_or(true, Tally::settles_the_verdict) {
                    settled.store(true, Ordering::Relaxed);
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                cx.step(n, n.max(plan.min_rounds as u64));
                result
            }
        })
        .buffer_unordered(parallel_rounds(cx))
        .collect()
        .await;
    let mut tally = Tally::default();
    for result in results {
        tally.merge(result?);
    }
    Ok(tally)
}

/// " spread over N endpoints" when there is more than one.
fn spread(labels: &[String]) -> String {
    if labels.len() > 1 {
        format!(" spread over {} endpoints", labels.len())
    } else {
        String::new()
    }
}

/// p50 and p99 of `samples`, if any.
fn percentile_pair(samples: &[f64]) -> Option<(f64, f64)> {
    let p = percentiles(samples.to_vec());
    Some((p["p50_ms"].as_f64()?, p["p99_ms"].as_f64()?))
}

/// What every round of a race shares.
struct Race<'a> {
    racers: Vec<Arc<dyn CasStore>>,
    store: &'a Arc<dyn CasStore>,
    cx: &'a ProbeContext,
    concurrency: usize,
    run: String,
}

impl Race<'_> {
    fn new(cx: &ProbeContext) -> Race<'_> {
        let racers = cx.racing_stores();
        Race {
            concurrency: cx.settings().concurrency.max(2).max(racers.len()),
            racers,
            store: cx.store(),
            cx,
            run: nonce(),
        }
    }

    /// One round of concurrent creates of a fresh key (run again on a
    /// fresh key while nobody wins, up to [`ATTEMPTS`]).
    async fn create_round(&self, name: &str, round: usize) -> Result<Tally, StepError> {
        let (concurrency, run) = (self.concurrency, &self.run);
        let mut tally = Tally::default();
        for attempt in 0..ATTEMPTS {
            let key = if attempt == 0 {
                format!("{name}/{round}")
            } else {
                format!("{name}/{round}-again-{attempt}")
            };
            let bodies: Vec<Bytes> = (0..concurrency)
                .map(|t| Bytes::from(format!("round {round}.{attempt} task {t} {run}")))
                .collect();
            let answers = race(&self.racers, concurrency, |store, task| {
                let (key, body) = (key.clone(), bodies[task].clone());
                async move { store.create(&key, body).await }
            })
            .await?;
            let last = attempt + 1 == ATTEMPTS;
            let reruns = tally.reruns;
            judge(self.store, &key, round, &bodies, answers, last, &mut tally).await?;
            if tally.reruns == reruns {
                break;
            }
        }
        Ok(tally)
    }

    /// One round of concurrent replaces from the version of a fresh object.
    async fn replace_round(&self, name: &str, round: usize) -> Result<Tally, StepError> {
        let (concurrency, run) = (self.concurrency, &self.run);
        let mut tally = Tally::default();
        for attempt in 0..ATTEMPTS {
            // A fresh key per round, so stores with a per-key write limit
            // are not throttled by the probe's own pace.
            let key = if attempt == 0 {
                format!("{name}/{round}")
            } else {
                format!("{name}/{round}-again-{attempt}")
            };
            let start = self
                .store
                .create(
                    &key,
                    Bytes::from(format!("round {round}.{attempt} start {run}")),
                )
                .await
                .step("create the object to race on")?;
            self.cx.pace(&key).await;
            let bodies: Vec<Bytes> = (0..concurrency)
                .map(|t| Bytes::from(format!("round {round}.{attempt} task {t} {run}")))
                .collect();
            let answers = race(&self.racers, concurrency, |store, task| {
                let (key, body, from) = (key.clone(), bodies[task].clone(), start.clone());
                async move { store.replace(&key, &from, body).await }
            })
            .await?;
            let last = attempt + 1 == ATTEMPTS;
            let reruns = tally.reruns;
            judge(self.store, &key, round, &bodies, answers, last, &mut tally).await?;
            if tally.reruns == reruns {
                break;
            }
        }
        Ok(tally)
    }
}

pub(super) async fn race_create(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let started = Instant::now();
    let race = Race::new(cx);
    let tally = run_rounds(cx, |round| race.create_round("create", round)).await?;
    Ok(tally.outcome(
        "creates of one key",
        race.concurrency,
        started,
        &cx.endpoint_labels(),
    ))
}

pub(super) async fn race_replace(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let started = Instant::now();
    let race = Race::new(cx);
    let tally = run_rounds(cx, |round| race.replace_round("replace", round)).await?;
    Ok(tally.outcome(
        "replaces from one version",
        race.concurrency,
        started,
        &cx.endpoint_labels(),
    ))
}

/// Creates and replaces (alternate rounds) with the racers spread over
/// every endpoint, judged as the other races are, reporting the winners
/// per endpoint. With one endpoint there is nothing to compare: a note.
pub(super) async fn race_across_endpoints(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let labels = cx.endpoint_labels();
    if labels.len() < 2 {
        return Ok(Outcome::note(
            "one endpoint given: a store whose conditional writes are serialized within each \
             gateway but not across gateways cannot be seen from one endpoint; name the others \
             with --gateway",
        )
        .with("endpoints", 1));
    }
    let started = Instant::now();
    let race = Race::new(cx);
    let tally = run_rounds(cx, |round| {
        let race = &race;
        async move {
            if round % 2 == 0 {
                race.create_round("create", round).await
            } else {
                race.replace_round("replace", round).await
            }
        }
    })
    .await?;
    let by_endpoint = tally.winners_by_label(&labels);
    let outcome = tally.outcome("creates and replaces", race.concurrency, started, &labels);
    let winners: Vec<String> = by_endpoint
        .iter()
        .map(|(l, n)| format!("{l} won {n}"))
        .collect();
    Ok(Outcome {
        detail: format!("{}; {}", outcome.detail, winners.join(", ")),
        ..outcome
    })
}
