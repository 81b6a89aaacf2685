//! Running probes against a store: preflight, probes, cleanup, report.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use casaas_core::{CasError, CasStore, ErrorKind};
use futures::StreamExt;

use crate::model::{Outcome, ProbeResult, error_evidence};
use crate::prefixed::PrefixedStore;
use crate::probe::{Probe, ProbeContext, Progress, ServerClock, Settings};
use crate::report::{BackendReport, CleanupReport, Report, SettingsReport, ToolInfo, rfc3339};

/// Why a run could not start or finish: the store cannot be used as
/// configured, or the request was malformed. Not a verdict on the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConformanceError {
    /// The store could not be used at all; `hint` says what to fix.
    #[error("cannot use the store: {source}. {hint}")]
    Setup {
        /// What to fix, for people.
        hint: String,
        /// What the store answered.
        #[source]
        source: Box<CasError>,
    },
    /// `--only` named a probe that does not exist.
    #[error("unknown probe '{id}'; known probes: {known}")]
    UnknownProbe {
        /// The id given.
        id: String,
        /// Every known id, comma separated.
        known: String,
    },
    /// The settings make no sense (e.g. zero concurrency).
    #[error("invalid settings: {0}")]
    InvalidSettings(String),
}

impl ConformanceError {
    /// The store error kind behind a setup failure, if any.
    pub fn store_kind(&self) -> Option<ErrorKind> {
        match self {
            ConformanceError::Setup { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

/// What to probe: a store plus optional backend hooks.
#[derive(Clone)]
pub struct Target {
    /// The store, opened on the location the user chose. Probes work only
    /// under a fresh prefix inside it.
    pub store: Arc<dyn CasStore>,
    /// The URL the store was opened from, for the report (never with
    /// credentials; see [`redact_url`]).
    pub url: String,
    /// The server clock hook, if the backend offers one.
    pub clock: Option<Arc<dyn ServerClock>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("store", &self.store.describe())
            .field("url", &self.url)
            .field("clock", &self.clock.is_some())
            .finish()
    }
}

impl Target {
    /// A target without hooks.
    pub fn new(store: Arc<dyn CasStore>, url: impl Into<String>) -> Self {
        Target {
            store,
            url: redact_url(&url.into()),
            clock: None,
        }
    }

    /// Adds the server clock hook.
    pub fn with_clock(mut self, clock: Arc<dyn ServerClock>) -> Self {
        self.clock = Some(clock);
        self
    }
}

/// Removes a `user:password@` part from a URL, should one be there.
///
/// ```
/// use casaas_conformance::redact_url;
/// assert_eq!(redact_url("s3://key:secret@bucket/p"), "s3://bucket/p");
/// assert_eq!(redact_url("file:///tmp/x"), "file:///tmp/x");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// An ordered set of probes.
pub struct Suite {
    probes: Vec<Box<dyn Probe>>,
}

impl Default for Suite {
    fn default() -> Self {
        Suite::standard()
    }
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite")
            .field("probes", &self.ids())
            .finish()
    }
}

impl Suite {
    /// Every built-in probe.
    pub fn standard() -> Self {
        Suite {
            probes: crate::probes::standard(),
        }
    }

    /// No probes; add some with [`Suite::with_probe`].
    pub fn empty() -> Self {
        Suite { probes: Vec::new() }
    }

    /// Adds a probe, replacing a probe with the same id in place. This is
    /// the extension point for backend-specific probes.
    pub fn with_probe(mut self, probe: Box<dyn Probe>) -> Self {
        match self.probes.iter().position(|p| p.id() == probe.id()) {
            Some(i) => self.probes[i] = probe,
            None => self.probes.push(probe),
        }
        self
    }

    /// The probes' ids, in run order.
    pub fn ids(&self) -> Vec<&'static str> {
        self.probes.iter().map(|p| p.id()).collect()
    }

    /// Keeps only the probes named in `ids` (in suite order).
    pub fn only(mut self, ids: &[String]) -> Result<Self, ConformanceError> {
        if let Some(unknown) = ids.iter().find(|id| !self.ids().contains(&id.as_str())) {
            return Err(ConformanceError::UnknownProbe {
                id: unknown.clone(),
                known: self.ids().join(", "),
            });
        }
        self.probes.retain(|p| ids.iter().any(|id| id == p.id()));
        Ok(self)
    }

    /// Number of probes.
    pub fn len(&self) -> usize {
        self.probes.len()
    }

    /// Whether the suite has no probes.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    /// Runs every probe against `target` under a fresh key prefix, then
    /// removes what the probes wrote, and reports.
    ///
    /// Fails only when the store cannot be used at all (unreachable, wrong
    /// credentials, missing bucket): a store that misbehaves gets a report
    /// that says so.
    pub async fn run(
        &self,
        target: &Target,
        settings: &Settings,
        progress: Arc<dyn Progress>,
    ) -> Result<Report, ConformanceError> {
        if settings.concurrency < 2 {
            return Err(ConformanceError::InvalidSettings(
                "concurrency must be at least 2 for the races to mean anything".into(),
            ));
        }
        if settings.rounds == Some(0) {
            return Err(ConformanceError::InvalidSettings(
                "rounds must be at least 1".into(),
            ));
        }
        let started_at = SystemTime::now();
        let started = Instant::now();
        let run_prefix = run_prefix(started_at);
        let run_store = PrefixedStore::new(target.store.clone(), &run_prefix)
            .map_err(|e| setup_error(e, &target.store))?;
        let run_store: Arc<dyn CasStore> = Arc::new(run_store);
        preflight(&run_store, &target.store).await?;

        let total = self.probes.len();
        let mut results = Vec::with_capacity(total);
        for (index, probe) in self.probes.iter().enumerate() {
            progress.probe_started(index, total, probe.id(), probe.title());
            let store = PrefixedStore::new(run_store.clone(), probe.id())
                .map_err(|e| setup_error(e, &target.store))?;
            let cx = ProbeContext::new(
                probe.id(),
                Arc::new(store),
                settings.clone(),
                target.clock.clone(),
                progress.clone(),
            )
            .with_key_prefix(format!("{run_prefix}/{}/", probe.id()));
            let result = run_one(probe.as_ref(), &cx, settings).await;
            tracing::debug!(probe = result.id, verdict = %result.verdict, "probe finished");
            progress.probe_finished(&result);
            results.push(result);
        }

        let cleanup = cleanup(&run_store, &run_prefix).await;
        let capabilities = target.store.capabilities();
        Ok(Report::new(
            ToolInfo::current(),
            rfc3339(started_at),
            started.elapsed().as_millis() as u64,
            SettingsReport {
                mode: if settings.quick { "quick" } else { "thorough" }.to_string(),
                concurrency: settings.concurrency,
                rounds: settings.race_rounds(),
            },
            BackendReport {
                url: target.url.clone(),
                description: target.store.describe(),
                scheme: target
                    .url
                    .split_once("://")
                    .map_or_else(String::new, |(s, _)| s.to_string()),
                prefix: run_prefix,
                capabilities,
                server_clock: target.clock.is_some(),
            },
            results,
            cleanup,
        ))
    }
}

async fn run_one(probe: &dyn Probe, cx: &ProbeContext, settings: &Settings) -> ProbeResult {
    let started = Instant::now();
    let outcome = match tokio::time::timeout(settings.probe_timeout, probe.run(cx)).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(step)) if step.source.kind() == ErrorKind::Unsupported => {
            Outcome::unsupported(format!("{}: {}", step.step, step.source))
                .with("answer", error_evidence(&step.source))
        }
        Ok(Err(step)) => Outcome::error(format!("{}: {}", step.step, step.source))
            .with("error", error_evidence(&step.source)),
        Err(_) => Outcome::error(format!(
            "the probe did not finish within {:?}",
            settings.probe_timeout
        )),
    };
    ProbeResult {
        id: probe.id().to_string(),
        title: probe.title().to_string(),
        severity: probe.severity(),
        verdict: outcome.verdict,
        detail: outcome.detail,
        evidence: outcome.evidence,
        explanation: probe.explanation().to_string(),
        recommended_options: outcome.recommendations,
        duration_ms: started.elapsed().as_millis() as u64,
    }
}

/// `casaas-conformance/20260101T120000Z-PID-RANDOM`: unique per run.
fn run_prefix(at: SystemTime) -> String {
    use rand::Rng;
    let stamp: String = rfc3339(at)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    format!(
        "casaas-conformance/{stamp}-{}-{:08x}",
        std::process::id(),
        rand::rng().random::<u32>()
    )
}

fn setup_error(source: CasError, store: &Arc<dyn CasStore>) -> ConformanceError {
    let where_ = store.describe();
    let hint = match source.kind() {
        ErrorKind::Unauthorized => format!(
            "The store at {where_} refused the credentials: check them and that they allow reading, writing and listing under the prefix."
        ),
        ErrorKind::Transport => format!(
            "Could not reach {where_}: check the endpoint address and that the server is running."
        ),
        ErrorKind::Misconfigured | ErrorKind::NotFound => format!(
            "Check the bucket/container name and endpoint of {where_}; if the bucket does not exist, create it."
        ),
        ErrorKind::InvalidInput => "Check the prefix in the URL.".to_string(),
        _ => format!(
            "The store at {where_} failed a first, simple read; try again or check the server."
        ),
    };
    ConformanceError::Setup {
        hint,
        source: Box::new(source),
    }
}

/// One read and one listing before any write: fails early, with a hint,
/// when the store cannot be used at all.
async fn preflight(
    run_store: &Arc<dyn CasStore>,
    base: &Arc<dyn CasStore>,
) -> Result<(), ConformanceError> {
    match run_store.get("preflight").await {
        Ok(_) => {}
        Err(e) => return Err(setup_error(e, base)),
    }
    match run_store.list("").await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::Unsupported => Ok(()),
        Err(e) => Err(setup_error(e, base)),
    }
}

/// Deletes every object under the run's prefix with a conditional delete,
/// reporting what could not be removed.
async fn cleanup(run_store: &Arc<dyn CasStore>, run_prefix: &str) -> CleanupReport {
    let entries = match run_store.list("").await {
        Ok(entries) => entries,
        Err(e) => {
            return CleanupReport {
                deleted: 0,
                leftovers: Vec::new(),
                note: Some(format!(
                    "could not list the run's prefix to clean up ({}); objects under it remain",
                    e.evidence()
                )),
            };
        }
    };
    let results: Vec<(String, Result<(), CasError>)> =
        futures::stream::iter(entries.into_iter().map(|entry| async move {
            let mut retries = 0;
            let result = crate::probes::patiently(&mut retries, || {
                run_store.delete(&entry.key, &entry.version)
            })
            .await;
            (entry.key, result)
        }))
        .buffer_unordered(8)
        .collect()
        .await;
    let mut deleted = 0;
    let mut leftovers = Vec::new();
    let mut unsupported = false;
    for (key, result) in results {
        match result {
            Ok(()) => deleted += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                unsupported |= e.kind() == ErrorKind::Unsupported;
                leftovers.push(format!("{run_prefix}/{key}"));
            }
        }
    }
    leftovers.sort();
    let note = if unsupported {
        Some("the store has no conditional delete, and this tool never deletes unconditionally: remove the leftovers by hand".to_string())
    } else if !leftovers.is_empty() {
        Some("some objects could not be deleted".to_string())
    } else {
        None
    };
    CleanupReport {
        deleted,
        leftovers,
        note,
    }
}
