//! The vocabulary of a conformance run: severities, verdicts, evidence and
//! the result of one probe.

use std::collections::BTreeMap;
use std::fmt;

use casaas_core::CasError;
use serde::{Deserialize, Serialize};

/// How much a failing probe matters for building leases on the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A failure makes the store unsafe to build leases on.
    Critical,
    /// A failure costs availability or performance, or breaks a feature
    /// other than the lease itself.
    Warning,
    /// A measurement or a fact worth knowing; never changes the verdict.
    Info,
}

impl Severity {
    /// The stable lowercase name used in JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a probe concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The store behaved as the contract requires.
    Pass,
    /// The store broke the contract; the evidence says how.
    Fail,
    /// An informational probe found something worth knowing (an info
    /// probe never fails: what would be a failure is a note).
    Note,
    /// The store (or this backend) does not offer what the probe checks.
    Unsupported,
    /// The probe could not reach a conclusion (unexpected error, timeout,
    /// throttling beyond the retry budget, races without a winner).
    Error,
}

impl Verdict {
    /// The stable lowercase name used in JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Note => "note",
            Verdict::Unsupported => "unsupported",
            Verdict::Error => "error",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Named facts a probe observed: statuses, provider error codes, counts,
/// timings. Serialized as a JSON object with keys in sorted order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Evidence(pub BTreeMap<String, serde_json::Value>);

impl Evidence {
    /// Records `value` under `name`, replacing an earlier value.
    pub fn insert(&mut self, name: &str, value: impl Serialize) {
        let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.0.insert(name.to_string(), value);
    }

    /// The value recorded under `name`.
    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.0.get(name)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A compact one-line rendering for tables: `a=1, b={"412":3}`.
    pub fn summary(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A casaas option that makes the store usable, found by a probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The option as it is written in a store URL, e.g. `etag_unquoted=true`.
    pub option: String,
    /// Why it is needed, for people.
    pub reason: String,
    /// Ids of failing probes this option makes pass.
    #[serde(default)]
    pub fixes: Vec<String>,
}

/// What a probe's run produced; the runner adds id, title and severity.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The conclusion.
    pub verdict: Verdict,
    /// One or two sentences on what was observed.
    pub detail: String,
    /// The facts behind the conclusion.
    pub evidence: Evidence,
    /// Options that make the store usable despite a failure.
    pub recommendations: Vec<Recommendation>,
}

impl Outcome {
    fn new(verdict: Verdict, detail: impl Into<String>) -> Self {
        Outcome {
            verdict,
            detail: detail.into(),
            evidence: Evidence::default(),
            recommendations: Vec::new(),
        }
    }

    /// The store behaved as required.
    pub fn pass(detail: impl Into<String>) -> Self {
        Self::new(Verdict::Pass, detail)
    }

    /// The store broke the contract.
    pub fn fail(detail: impl Into<String>) -> Self {
        Self::new(Verdict::Fail, detail)
    }

    /// The store or backend lacks what the probe checks.
    pub fn unsupported(detail: impl Into<String>) -> Self {
        Self::new(Verdict::Unsupported, detail)
    }

    /// Something worth knowing that is no failure (an info probe's
    /// finding).
    pub fn note(detail: impl Into<String>) -> Self {
        Self::new(Verdict::Note, detail)
    }

    /// No conclusion could be reached.
    pub fn error(detail: impl Into<String>) -> Self {
        Self::new(Verdict::Error, detail)
    }

    /// Pass when `ok`, fail otherwise, with the matching detail.
    pub fn check(ok: bool, pass: impl Into<String>, fail: impl Into<String>) -> Self {
        if ok {
            Self::pass(pass)
        } else {
            Self::fail(fail)
        }
    }

    /// Adds one piece of evidence.
    pub fn with(mut self, name: &str, value: impl Serialize) -> Self {
        self.evidence.insert(name, value);
        self
    }

    /// Replaces the evidence.
    pub fn with_evidence(mut self, evidence: Evidence) -> Self {
        let mut merged = evidence;
        merged.0.append(&mut self.evidence.0);
        self.evidence = merged;
        self
    }

    /// Adds a recommended option.
    pub fn recommend(mut self, recommendation: Recommendation) -> Self {
        self.recommendations.push(recommendation);
        self
    }
}

/// A step of a probe that did not go as planned, with the store's error.
///
/// Probes return it with `?`; the runner turns it into an
/// [`Verdict::Error`] (or [`Verdict::Unsupported`] when the store answered
/// that the operation is unsupported) with the error as evidence.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct StepError {
    /// What the probe was doing, e.g. `create "k"`.
    pub step: String,
    /// What the store answered.
    #[source]
    pub source: Box<CasError>,
}

/// Adds the failing step's name to a store result.
pub trait StepExt<T> {
    /// Wraps an error with the step that produced it.
    fn step(self, step: &str) -> Result<T, StepError>;
}

impl<T> StepExt<T> for Result<T, CasError> {
    fn step(self, step: &str) -> Result<T, StepError> {
        self.map_err(|source| StepError {
            step: step.to_string(),
            source: Box::new(source),
        })
    }
}

/// Evidence of one store error: its kind, HTTP status and provider code.
pub fn error_evidence(err: &CasError) -> serde_json::Value {
    serde_json::json!({
        "kind": err.kind().as_str(),
        "status": err.status(),
        "code": err.code(),
        "answer": err.evidence(),
        "message": err.message(),
    })
}

/// The verdict of a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunVerdict {
    /// Every critical probe passed (possibly with options, proven by
    /// running the probes they affect again with them). Exit status 0.
    Safe,
    /// A critical probe failed, or the store lacks an operation leases
    /// need. Exit status 1.
    NotSafe,
    /// No critical probe failed, but some could not be completed
    /// (throttled beyond the budget, races without a winner, errors).
    /// Exit status 3.
    Inconclusive,
}

impl RunVerdict {
    /// The stable snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Safe => "safe",
            RunVerdict::NotSafe => "not_safe",
            RunVerdict::Inconclusive => "inconclusive",
        }
    }

    /// The binary's exit status for this verdict: 0, 1 or 3 (2 is kept for
    /// usage, configuration and connection errors).
    pub fn exit_code(self) -> u8 {
        match self {
            RunVerdict::Safe => 0,
            RunVerdict::NotSafe => 1,
            RunVerdict::Inconclusive => 3,
        }
    }
}

impl fmt::Display for RunVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The full result of one probe, as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Stable identifier, e.g. `create_conflict`.
    pub id: String,
    /// A short title for people.
    pub title: String,
    /// How much a failure matters.
    pub severity: Severity,
    /// The conclusion.
    pub verdict: Verdict,
    /// What was observed, in a sentence or two.
    pub detail: String,
    /// The facts behind the verdict.
    pub evidence: Evidence,
    /// What a failure of this probe means for a lock on the store.
    pub explanation: String,
    /// Options that make the store usable despite a failure.
    #[serde(default)]
    pub recommended_options: Vec<Recommendation>,
    /// Wall time the probe took, in milliseconds.
    pub duration_ms: u64,
    /// The casaas options the store was opened with for this result, when
    /// the probe was run again to prove recommended options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl ProbeResult {
    /// The evidence read through a typed view of [`crate::evidence`];
    /// `None` if it does not fit the view.
    pub fn evidence_as<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::to_value(&self.evidence)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
    }

    /// Whether this result makes the store unsafe for leases on its own:
    /// a critical probe that did not pass.
    pub fn blocks_leases(&self) -> bool {
        self.severity == Severity::Critical && self.verdict != Verdict::Pass
    }
}
