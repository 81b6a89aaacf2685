//! Typed views of the evidence some probes record, for tools that read
//! reports (the vendor matrix): each struct names the keys its probe writes,
//! and [`ProbeResult::evidence_as`](crate::ProbeResult::evidence_as) reads
//! them. A test runs the probes and reads their evidence through these
//! views, so a renamed key fails it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Ids of the probes whose evidence has a typed view here.
pub mod probe_id {
    /// The per-key write rate probe.
    pub const THROTTLE: &str = "throttle";
    /// A second create of an existing key.
    pub const CREATE_CONFLICT: &str = "create_conflict";
    /// A replace from an old version.
    pub const REPLACE_STALE: &str = "replace_stale";
    /// Concurrent creates of one key.
    pub const RACE_CREATE: &str = "race_create";
    /// Concurrent replaces from one version.
    pub const RACE_REPLACE: &str = "race_replace";
    /// Latency of read, create and replace.
    pub const LATENCY: &str = "latency";
    /// The server clock's skew.
    pub const CLOCK_SKEW: &str = "clock_skew";
}

/// What the store answered to one request: `"succeeded"`, or the error
/// (see [`error_evidence`](crate::error_evidence)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    /// A word, such as `succeeded`.
    Word(String),
    /// The error the store answered with.
    Error(ErrorAnswer),
}

/// An error answer, as [`error_evidence`](crate::error_evidence) records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorAnswer {
    /// The casaas error kind.
    pub kind: String,
    /// The HTTP status, if any.
    pub status: Option<u16>,
    /// The provider's error code, if any.
    pub code: Option<String>,
    /// The answer in short (status and code), if the provider gave one.
    pub answer: Option<String>,
    /// The error message.
    pub message: String,
}

/// Evidence of `create_conflict`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CreateConflictEvidence {
    /// What the second create of an existing key got.
    pub second_create: Option<Answer>,
}

/// Evidence of `replace_stale`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplaceStaleEvidence {
    /// What the replace from an old version got.
    pub stale_replace: Option<Answer>,
}

/// Evidence of `race_create` and `race_replace`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RaceEvidence {
    /// How often each answer was given to the racers that lost.
    pub loser_answers: BTreeMap<String, u64>,
    /// How long a conditional write took under the race's contention.
    pub contended_latency_ms: ContendedLatency,
    /// Winners per endpoint (`INDEX: LABEL`), with more than one endpoint.
    pub winners_by_endpoint: BTreeMap<String, u64>,
}

/// Latency of the racers' writes, split by how they ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContendedLatency {
    /// The writes that won their round.
    pub winners: Option<Percentiles>,
    /// The writes refused because another won.
    pub losers: Option<Percentiles>,
}

/// Evidence of `throttle`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThrottleEvidence {
    /// Whether the store throttled writes to one key.
    pub throttled: bool,
    /// The rate (writes per second) at which it throttled.
    pub throttled_at_per_s: Option<f64>,
    /// What the throttled write got.
    pub throttle_answer: Option<Answer>,
    /// The highest rate sustained without throttling.
    pub max_sustained_per_s: Option<f64>,
    /// Why the probe stopped raising the rate.
    pub stopped_because: Option<String>,
}

/// Percentiles of one request's latency, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Percentiles {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

/// Evidence of `latency`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencyEvidence {
    /// Latency of a replace, if measured.
    pub replace: Option<Percentiles>,
}

/// Evidence of `clock_skew`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClockSkewEvidence {
    /// The median skew of the server's clock, in seconds.
    pub median_skew_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use casaas_core::{CasStore, MemoryStore};

    use super::*;
    use crate::{NoProgress, Settings, Suite, Target};

    /// The probes' evidence reads through every view: a key renamed in a
    /// probe breaks this test, not the vendor matrix.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_probes_evidence_reads_through_the_typed_views() {
        let ids = [
            probe_id::THROTTLE,
            probe_id::CREATE_CONFLICT,
            probe_id::REPLACE_STALE,
            probe_id::RACE_CREATE,
            probe_id::RACE_REPLACE,
            probe_id::LATENCY,
        ];
        let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
        let suite = Suite::standard().only(&ids.map(String::from)).unwrap();
        let report = suite
            .run(
                &Target::new(store, "memory://evidence"),
                &Settings::quick(),
                Arc::new(NoProgress),
            )
            .await
            .unwrap();
        let view = |id: &str| report.probe(id).unwrap();

        let throttle: ThrottleEvidence = view(probe_id::THROTTLE).evidence_as().unwrap();
        assert!(!throttle.throttled);
        assert!(throttle.max_sustained_per_s.is_some());
        assert!(throttle.stopped_because.is_some());
        for id in [probe_id::RACE_CREATE, probe_id::RACE_REPLACE] {
            let race: RaceEvidence = view(id).evidence_as().unwrap();
            assert!(!race.loser_answers.is_empty(), "{id}");
        }
        let conflict: CreateConflictEvidence =
            view(probe_id::CREATE_CONFLICT).evidence_as().unwrap();
        assert!(matches!(conflict.second_create, Some(Answer::Error(_))));
        let stale: ReplaceStaleEvidence = view(probe_id::REPLACE_STALE).evidence_as().unwrap();
        assert!(matches!(stale.stale_replace, Some(Answer::Error(_))));
        let latency: LatencyEvidence = view(probe_id::LATENCY).evidence_as().unwrap();
        assert!(latency.replace.is_some_and(|p| p.p99_ms >= p.p50_ms));
    }
}
