//! Probes that tell whether an object store honours conditional writes well
//! enough to build leases on.
//!
//! A [probe](Probe) is a named check with a [`Severity`] (critical = unsafe
//! to build leases on; warning; info), a [`Verdict`] (pass / fail / note /
//! unsupported / error), the [`Evidence`] behind it (statuses, provider
//! error codes, counts, timings) and one sentence on what a failure means
//! for a lock on the store. Probes are written once against
//! [`casaas_core::CasStore`], so they run on every backend.
//!
//! A [`Suite`] runs probes under a fresh key prefix, pacing and retrying
//! their writes (see [`Pacer`]), proves recommended options by running the
//! probes they affect again with them, removes what it wrote and produces a
//! [`Report`] with one of three [`RunVerdict`]s, rendered as a table, JSON (schema in
//! `docs/conformance.md`) or Markdown. The `casaas-conformance` binary wraps
//! all of this.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use casaas_core::{CasStore, MemoryStore};
//! use casaas_conformance::{NoProgress, Settings, Suite, Target};
//!
//! let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
//! let suite = Suite::standard().only(&["create_conflict".into(), "race_create".into()])?;
//! let report = suite
//!     .run(&Target::new(store, "memory://doc"), &Settings::quick(), Arc::new(NoProgress))
//!     .await?;
//! assert_eq!(report.verdict, casaas_conformance::RunVerdict::Safe, "{}", report.to_table());
//! # Ok(())
//! # }
//! ```

#[cfg(any(feature = "azure", feature = "gcs"))]
mod assembled;
pub mod check;
pub mod cli;
pub mod evidence;
mod model;
mod paced;
mod prefixed;
mod probe;
mod probes;
mod redact;
mod report;
#[cfg(feature = "s3")]
pub mod s3;
mod suite;

pub use model::{
    Evidence, Outcome, ProbeResult, Recommendation, RunVerdict, Severity, StepError, StepExt,
    Verdict, error_evidence,
};
pub use paced::{IntervalSource, Pacer, PacingReport};
pub use prefixed::PrefixedStore;
pub use probe::{
    NoProgress, Probe, ProbeContext, Progress, RacePlan, ServerClock, Settings,
    detectable_race_rate,
};
pub use probes::{S3_ONLY_PROBES, UnavailableProbe};
pub use redact::{
    REDACTED, redact_text, redact_url, register_secret, register_secrets_from_env,
    register_url_secrets,
};
pub use report::{
    BackendReport, CleanupReport, Compared, Incomplete, Judgement, Report, SCHEMA_VERSION,
    SettingsReport, ToolInfo, comparison_markdown, comparison_table, judge, rfc3339,
};
pub use suite::{ConformanceError, Gateway, Reopen, Reopened, Suite, Target, url_with_options};

/// The README's example, compiled (and run where it needs no server) as a
/// doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
