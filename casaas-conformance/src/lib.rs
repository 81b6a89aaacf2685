//! Probes that tell whether an object store honours conditional writes well
//! enough to build leases on.
//!
//! A [probe](Probe) is a named check with a [`Severity`] (critical = unsafe
//! to build leases on; warning; info), a [`Verdict`] (pass / fail /
//! unsupported / error), the [`Evidence`] behind it (statuses, provider
//! error codes, counts, timings) and one sentence on what a failure means
//! for a lock on the store. Probes are written once against
//! [`casaas_core::CasStore`], so they run on every backend.
//!
//! A [`Suite`] runs probes under a fresh key prefix, removes what it wrote
//! and produces a [`Report`], rendered as a table, JSON (schema in
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
//! assert!(report.safe_for_leases, "{}", report.to_table());
//! # Ok(())
//! # }
//! ```

pub mod cli;
mod model;
mod prefixed;
mod probe;
mod probes;
mod report;
#[cfg(feature = "s3")]
pub mod s3;
mod suite;

pub use model::{
    Evidence, Outcome, ProbeResult, Recommendation, Severity, StepError, StepExt, Verdict,
    error_evidence,
};
pub use prefixed::PrefixedStore;
pub use probe::{NoProgress, Probe, ProbeContext, Progress, ServerClock, Settings};
pub use probes::{S3_ONLY_PROBES, UnavailableProbe};
pub use report::{
    BackendReport, CleanupReport, Report, SCHEMA_VERSION, SettingsReport, ToolInfo, judge, rfc3339,
};
pub use suite::{ConformanceError, Suite, Target, redact_url};
