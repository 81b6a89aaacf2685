//! Running probes against a store: preflight, probes, cleanup, report.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use casaas_core::layout::{LAYOUT_OPTION, LeaseLayout, layout_of, with_layout};
use casaas_core::{CasError, CasStore, ErrorKind, StoreUrl};
use futures::StreamExt;

use crate::evidence::probe_id;
use crate::model::{Outcome, ProbeResult, Severity, Verdict, error_evidence};
use crate::paced::{IntervalSource, Mode, PacedStore, Pacer};
use crate::prefixed::PrefixedStore;
use crate::probe::{Probe, ProbeContext, Progress, ServerClock, Settings};
use crate::redact::{redact_text, redact_url};
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

    /// Whether the store said that the bucket or container is missing.
    pub fn bucket_missing(&self) -> bool {
        match self {
            ConformanceError::Setup { source, .. } => source.is_bucket_missing(),
            _ => false,
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
    /// Opens the store again with options, to prove recommended options
    /// before they are recommended.
    pub reopen: Option<Arc<dyn Reopen>>,
    /// The same bucket and prefix through other endpoints (`--gateway`):
    /// race probes and the lease probe spread their writers over all of
    /// them, and `race_across_endpoints` is critical when there are any.
    pub gateways: Vec<Gateway>,
}

/// Another endpoint of the same store: the same bucket and prefix through
/// another gateway.
#[derive(Clone)]
pub struct Gateway {
    /// The store, opened through this endpoint.
    pub store: Arc<dyn CasStore>,
    /// Its URL, for the report (never with credentials).
    pub url: String,
    /// Opens it again with options, as [`Target::reopen`] does for the
    /// main endpoint.
    pub reopen: Option<Arc<dyn Reopen>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("store", &self.store.describe())
            .field("url", &self.url)
            .finish()
    }
}

/// The store opened again with casaas options added, and the
/// backend-specific probes for it.
pub struct Reopened {
    /// The store with the options applied.
    pub store: Arc<dyn CasStore>,
    /// Backend probes that replace standard ones by id (as
    /// [`Suite::with_probe`] does).
    pub probes: Vec<Box<dyn Probe>>,
}

impl std::fmt::Debug for Reopened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reopened")
            .field("store", &self.store.describe())
            .field(
                "probes",
                &self.probes.iter().map(|p| p.id()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A backend hook: opens the same store again with casaas options (URL
/// query options such as `etag_unquoted=true`) added. With it, a run that
/// finds an option that would help runs every probe the option affects
/// again with the option applied, and recommends it only if they pass.
#[async_trait::async_trait]
pub trait Reopen: Send + Sync {
    /// The store with `options` (each `name=value`) applied.
    async fn reopen(&self, options: &[String]) -> Result<Reopened, CasError>;
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("store", &self.store.describe())
            .field("url", &self.url)
            .field("clock", &self.clock.is_some())
            .field("reopen", &self.reopen.is_some())
            .field("gateways", &self.gateways)
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
            reopen: None,
            gateways: Vec::new(),
        }
    }

    /// Adds another endpoint of the same bucket and prefix (`--gateway`).
    pub fn with_gateway(
        mut self,
        store: Arc<dyn CasStore>,
        url: impl Into<String>,
        reopen: Option<Arc<dyn Reopen>>,
    ) -> Self {
        self.gateways.push(Gateway {
            store,
            url: redact_url(&url.into()),
            reopen,
        });
        self
    }

    /// How many endpoints the run writes through: the URL and its gateways.
    pub fn endpoints(&self) -> usize {
        1 + self.gateways.len()
    }

    /// Adds the hook that opens the store again with options.
    pub fn with_reopen(mut self, reopen: Arc<dyn Reopen>) -> Self {
        self.reopen = Some(reopen);
        self
    }

    /// Adds the server clock hook.
    pub fn with_clock(mut self, clock: Arc<dyn ServerClock>) -> Self {
        self.clock = Some(clock);
        self
    }
}

/// `url` with `options` (each `name=value`) set in its query, replacing
/// an option of the same name.
///
/// ```
/// use casaas_conformance::url_with_options;
/// assert_eq!(
///     url_with_options("s3://b/p?region=x&etag_unquoted=false", &["etag_unquoted=true".into()])
///         .unwrap(),
///     "s3://b/p?region=x&etag_unquoted=true"
/// );
/// assert_eq!(url_with_options("gs://b/p", &["a=1".into()]).unwrap(), "gs://b/p?a=1");
/// ```
pub fn url_with_options(url: &str, options: &[String]) -> Result<String, CasError> {
    Ok(StoreUrl::parse(url)?
        .with_options(options)?
        .as_unredacted_str()
        .to_string())
}

/// The scheme a report names: `s3`, or `object_store+s3` for an adapter
/// URL (whose adapter name is no URL scheme).
fn scheme_of(url: &str) -> String {
    match casaas_core::provider::adapter_of(url) {
        Some(adapter) => {
            let inner = &url[adapter.len() + 1..];
            let scheme = inner.split_once(':').map_or("", |(scheme, _)| scheme);
            format!("{adapter}+{scheme}")
        }
        None => StoreUrl::parse(url)
            .map(|u| u.scheme().to_string())
            .unwrap_or_default(),
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
        check_settings(settings)?;
        let started_at = SystemTime::now();
        let started = Instant::now();
        let prefix = run_prefix(started_at);
        let (run_store, gateway_stores) = open_run_stores(target, &prefix).await?;
        let pacer = Arc::new(match settings.min_write_interval {
            Some(interval) => Pacer::new(Some(interval), IntervalSource::Option),
            None => Pacer::new(
                target.store.capabilities().min_write_interval,
                IntervalSource::Declared,
            ),
        });
        let run = Run {
            target,
            settings,
            pacer,
            progress,
            prefix,
            started_at,
            started,
        };
        let probes: Vec<&dyn Probe> = self.probes.iter().map(|p| p.as_ref()).collect();
        let mut results =
            run_probes(&run, &probes, &run_store, &gateway_stores, &run.prefix, &[]).await?;

        let mut options_applied = Vec::new();
        let mut cleanup_store = run_store;
        if let Some((options, with_options)) = self.prove_options(&run, &mut results).await? {
            options_applied = options;
            cleanup_store = with_options;
        }
        // A store that honours create-if-absent but not replace (or one
        // opened with layout=epochs) is judged on the create-only layout:
        // the lease probe runs again on it, and the probes of replace,
        // which that layout never sends, no longer decide the verdict.
        if judged_on_create_only_layout(&results, target) {
            let option = self
                .judge_on_create_only_layout(&run, &cleanup_store, &mut results)
                .await?;
            options_applied.push(option);
        }

        // Cleanup deletes are paced and resolved like the probes' writes.
        let cleanup_store: Arc<dyn CasStore> = Arc::new(PacedStore::new(
            cleanup_store,
            run.pacer.clone(),
            Arc::default(),
            Mode::Resolving,
        ));
        let cleanup = cleanup(&cleanup_store, &run.prefix).await;
        Ok(run.report(results, options_applied, cleanup))
    }

    /// Proves recommended options by running the probes they affect again
    /// with them applied, in place of their first results: the options and
    /// the store opened with them, or `None` when nothing was recommended or
    /// the store could not be opened again.
    async fn prove_options(
        &self,
        run: &Run<'_>,
        results: &mut [ProbeResult],
    ) -> Result<Option<(Vec<String>, Arc<dyn CasStore>)>, ConformanceError> {
        let target = run.target;
        let options = recommended(results);
        let (false, Some(reopen)) = (options.is_empty(), &target.reopen) else {
            return Ok(None);
        };
        let reopened = match reopen.reopen(&options).await {
            Ok(reopened) => reopened,
            Err(e) => {
                tracing::warn!(
                    "could not open the store again with {}: {}",
                    options.join(", "),
                    redact_text(&e.to_string())
                );
                return Ok(None);
            }
        };
        let probes = self.affected_probes(results, &reopened);
        let with_options: Arc<dyn CasStore> = Arc::new(
            PrefixedStore::new(reopened.store.clone(), &run.prefix)
                .map_err(|e| setup_error(e, &target.store))?,
        );
        let gateways = reopen_gateways(target, &options).await;
        let gateway_stores = gateway_run_stores(target, &gateways, &run.prefix)?;
        let again = run_probes(
            run,
            &probes,
            &with_options,
            &gateway_stores,
            &run.prefix,
            &options,
        )
        .await?;
        replace_with_reruns(results, again);
        Ok(Some((options, with_options)))
    }

    /// The probes the recommended options affect, in suite order, each
    /// replaced by the reopened backend's probe of the same id if it has
    /// one.
    fn affected_probes<'a>(
        &'a self,
        results: &[ProbeResult],
        reopened: &'a Reopened,
    ) -> Vec<&'a dyn Probe> {
        let affected: Vec<&str> = results
            .iter()
            .flat_map(|r| r.recommended_options.iter())
            .flat_map(|o| o.fixes.iter().map(String::as_str))
            .collect();
        self.probes
            .iter()
            .filter(|p| affected.contains(&p.id()))
            .map(|p| {
                reopened
                    .probes
                    .iter()
                    .find(|r| r.id() == p.id())
                    .map_or(p.as_ref(), |r| r.as_ref())
            })
            .collect()
    }

    /// Judges the store on the create-only layout: runs the lease probe
    /// again on it (over `store`), and notes the probes of replace, which
    /// that layout never sends, instead of letting them decide the verdict.
    /// The layout option it ran with.
    async fn judge_on_create_only_layout(
        &self,
        run: &Run<'_>,
        store: &Arc<dyn CasStore>,
        results: &mut [ProbeResult],
    ) -> Result<String, ConformanceError> {
        let probes: Vec<&dyn Probe> = self
            .probes
            .iter()
            .filter(|p| p.id() == LEASE_PROBE)
            .map(|p| p.as_ref())
            .collect();
        let epochs_store: Arc<dyn CasStore> = Arc::new(
            PrefixedStore::new(store.clone(), "epochs")
                .map_err(|e| setup_error(e, &run.target.store))?,
        );
        let epochs_store = with_layout(epochs_store, LeaseLayout::Epochs);
        let option = format!("{LAYOUT_OPTION}={}", LeaseLayout::Epochs);
        let again = run_probes(
            run,
            &probes,
            &epochs_store,
            &[],
            &format!("{}/epochs", run.prefix),
            std::slice::from_ref(&option),
        )
        .await?;
        replace_with_reruns(results, again);
        for result in results
            .iter_mut()
            .filter(|r| REPLACE_PROBES.contains(&r.id.as_str()))
            .filter(|r| r.verdict != Verdict::Pass)
        {
            result.verdict = Verdict::Note;
            result.detail = format!(
                "not used by the create-only layout, which never replaces an object: {}",
                result.detail
            );
        }
        Ok(option)
    }
}

/// What every probe of one run shares.
struct Run<'a> {
    target: &'a Target,
    settings: &'a Settings,
    pacer: Arc<Pacer>,
    progress: Arc<dyn Progress>,
    /// The run's key prefix.
    prefix: String,
    started_at: SystemTime,
    started: Instant,
}

impl Run<'_> {
    /// The report of the run, with its `results` and `cleanup`.
    fn report(
        self,
        results: Vec<ProbeResult>,
        options_applied: Vec<String>,
        cleanup: CleanupReport,
    ) -> Report {
        let (target, settings) = (self.target, self.settings);
        let declared = target.store.capabilities();
        let capabilities = self.pacer.correct(declared.clone());
        Report::new(
            ToolInfo::current(),
            rfc3339(self.started_at),
            self.started.elapsed().as_millis() as u64,
            SettingsReport {
                mode: if settings.quick { "quick" } else { "thorough" }.to_string(),
                concurrency: settings.concurrency,
                rounds: settings.race_rounds(),
            },
            BackendReport {
                url: target.url.clone(),
                description: redact_text(&target.store.describe()),
                scheme: scheme_of(&target.url),
                prefix: self.prefix,
                capabilities,
                declared_capabilities: declared,
                server_clock: target.clock.is_some(),
                gateways: target.gateways.iter().map(|g| g.url.clone()).collect(),
            },
            results,
            options_applied,
            self.pacer.report(),
            cleanup,
        )
    }
}

/// Refuses settings under which the probes would mean nothing.
fn check_settings(settings: &Settings) -> Result<(), ConformanceError> {
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
    Ok(())
}

/// The store and each gateway's store under the run's `prefix`, each
/// checked by a preflight.
async fn open_run_stores(
    target: &Target,
    prefix: &str,
) -> Result<(Arc<dyn CasStore>, Vec<Endpoint>), ConformanceError> {
    let run_store = PrefixedStore::new(target.store.clone(), prefix)
        .map_err(|e| setup_error(e, &target.store))?;
    let run_store: Arc<dyn CasStore> = Arc::new(run_store);
    preflight(&run_store, &target.store).await?;
    let gateway_stores = gateway_run_stores(target, &target.gateways, prefix)?;
    for (store, _) in &gateway_stores {
        preflight(store, &target.store).await?;
    }
    Ok((run_store, gateway_stores))
}

/// The probe of the lease protocol end to end.
const LEASE_PROBE: &str = "lease_protocol";
/// Probes of conditional replace, which the create-only layout never sends.
const REPLACE_PROBES: [&str; 4] = [
    "replace_if_match",
    probe_id::REPLACE_STALE,
    "missing_key",
    probe_id::RACE_REPLACE,
];
/// Probes of create-if-absent, all of which the create-only layout needs.
const CREATE_PROBES: [&str; 3] = [
    "create_if_absent",
    probe_id::CREATE_CONFLICT,
    probe_id::RACE_CREATE,
];

/// Is the store to be judged on the create-only layout? Every create probe
/// that ran must have passed, and either the store was opened with `layout=epochs`
/// or it refuses conditional replace outright (unsupported, as a 501)
/// without ever accepting a replace it should have refused: a store whose
/// replace misbehaves is a store that lies, and is not given the benefit of
/// another layout unless someone chose it knowingly.
fn judged_on_create_only_layout(results: &[ProbeResult], target: &Target) -> bool {
    let verdict = |id: &str| results.iter().find(|r| r.id == id).map(|r| r.verdict);
    // Every create probe that ran passed (a run without the race plan,
    // `casaas doctor`'s, is judged on the probes it ran, as it is in the
    // record layout), and create-if-absent itself did run.
    let creates_hold = verdict(CREATE_PROBES[0]) == Some(Verdict::Pass)
        && CREATE_PROBES
            .iter()
            .filter_map(|id| verdict(id))
            .all(|v| v == Verdict::Pass);
    let replace = || REPLACE_PROBES.iter().map(|id| verdict(id));
    let refuses_replace = replace().any(|v| v == Some(Verdict::Unsupported))
        && !replace().any(|v| v == Some(Verdict::Fail));
    let chosen = layout_of(target.store.as_ref()) == LeaseLayout::Epochs;
    creates_hold && verdict(LEASE_PROBE).is_some() && (refuses_replace || chosen)
}

/// The options the results recommend, each once, in order.
fn recommended(results: &[ProbeResult]) -> Vec<String> {
    let mut options: Vec<String> = Vec::new();
    for r in results.iter().flat_map(|p| p.recommended_options.iter()) {
        if !options.contains(&r.option) {
            options.push(r.option.clone());
        }
    }
    options
}

/// A result of the run with options, remembering what the first run saw.
/// Puts each probe's result of a second run in place of its first one,
/// keeping what the first found (see [`with_first_run`]).
fn replace_with_reruns(results: &mut [ProbeResult], again: Vec<ProbeResult>) {
    for rerun in again {
        if let Some(slot) = results.iter_mut().find(|r| r.id == rerun.id) {
            *slot = with_first_run(rerun, slot);
        }
    }
}

fn with_first_run(mut rerun: ProbeResult, first: &ProbeResult) -> ProbeResult {
    rerun.detail = format!("with {}: {}", rerun.options.join(", "), rerun.detail);
    rerun.evidence.insert(
        "without_options",
        serde_json::json!({ "verdict": first.verdict.as_str(), "detail": first.detail }),
    );
    // What the first run found stays recommended (the verdict says whether
    // the run with the options proved it).
    rerun.recommended_options = first.recommended_options.clone();
    rerun
}

/// A gateway's store and its label, as the probes get them.
type Endpoint = (Arc<dyn CasStore>, String);

/// Each gateway's store under the run's prefix, with its label.
fn gateway_run_stores(
    target: &Target,
    gateways: &[Gateway],
    run_prefix: &str,
) -> Result<Vec<Endpoint>, ConformanceError> {
    gateways
        .iter()
        .map(|g| {
            let store = PrefixedStore::new(g.store.clone(), run_prefix)
                .map_err(|e| setup_error(e, &target.store))?;
            Ok((Arc::new(store) as Arc<dyn CasStore>, g.url.clone()))
        })
        .collect()
}

/// The gateways opened again with `options` where they can be; a gateway
/// that cannot be reopened is used as it is (with a warning).
async fn reopen_gateways(target: &Target, options: &[String]) -> Vec<Gateway> {
    let mut gateways = Vec::with_capacity(target.gateways.len());
    for g in &target.gateways {
        let store = match &g.reopen {
            Some(reopen) => match reopen.reopen(options).await {
                Ok(reopened) => reopened.store,
                Err(e) => {
                    tracing::warn!(
                        "could not open gateway {} again with {}: {}",
                        g.url,
                        options.join(", "),
                        redact_text(&e.to_string())
                    );
                    g.store.clone()
                }
            },
            None => g.store.clone(),
        };
        gateways.push(Gateway {
            store,
            url: g.url.clone(),
            reopen: None,
        });
    }
    gateways
}

/// Runs `probes` in order, each under its own sub-prefix of `run_store`
/// and of each gateway's store (under `with-options/` when `options` are
/// applied).
async fn run_probes(
    run: &Run<'_>,
    probes: &[&dyn Probe],
    run_store: &Arc<dyn CasStore>,
    gateways: &[Endpoint],
    run_prefix: &str,
    options: &[String],
) -> Result<Vec<ProbeResult>, ConformanceError> {
    let (target, settings, progress) = (run.target, run.settings, &run.progress);
    let total = probes.len();
    let mut results = Vec::with_capacity(total);
    for (index, probe) in probes.iter().enumerate() {
        progress.probe_started(index, total, probe.id(), probe.title());
        let sub = if options.is_empty() {
            probe.id().to_string()
        } else {
            format!("with-options/{}", probe.id())
        };
        let store = PrefixedStore::new(run_store.clone(), &sub)
            .map_err(|e| setup_error(e, &target.store))?;
        let others = gateways
            .iter()
            .map(|(g, label)| {
                let store = PrefixedStore::new(g.clone(), &sub)
                    .map_err(|e| setup_error(e, &target.store))?;
                Ok((Arc::new(store) as Arc<dyn CasStore>, label.clone()))
            })
            .collect::<Result<Vec<_>, ConformanceError>>()?;
        let cx = ProbeContext::with_pacer(
            probe.id(),
            Arc::new(store),
            settings.clone(),
            target.clock.clone(),
            progress.clone(),
            run.pacer.clone(),
        )
        .with_key_prefix(format!("{run_prefix}/{sub}/"))
        .with_endpoints(others);
        let mut result = run_one(*probe, &cx, settings).await;
        result.options = options.to_vec();
        tracing::debug!(probe = result.id, verdict = %result.verdict, "probe finished");
        progress.probe_finished(&result);
        results.push(result);
    }
    Ok(results)
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
    let severity = probe.severity_for(cx.endpoints.len());
    // An info probe never fails: what it found is a note.
    let verdict = match (outcome.verdict, severity) {
        (Verdict::Fail, Severity::Info) => Verdict::Note,
        (verdict, _) => verdict,
    };
    ProbeResult {
        id: probe.id().to_string(),
        title: probe.title().to_string(),
        severity,
        verdict,
        detail: redact_text(&outcome.detail),
        evidence: outcome.evidence,
        explanation: probe.explanation().to_string(),
        recommended_options: outcome.recommendations,
        duration_ms: started.elapsed().as_millis() as u64,
        options: Vec::new(),
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
        ErrorKind::NotSent => format!(
            "Could not reach {where_}: check the endpoint address and that the server is running."
        ),
        _ if source.is_bucket_missing() => format!(
            "The bucket or container of {where_} does not exist: check its name, or create it."
        ),
        ErrorKind::Misconfigured | ErrorKind::NotFound => {
            format!("Check the bucket/container name and endpoint of {where_}.")
        }
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
