//! `casaas doctor` and `casaas conformance` as library calls: the verdict as
//! a value (and the same JSON the commands print), for programs and
//! language bindings that embed the checks instead of running the binary.
//!
//! A store is named by its URL plus options opened beside it (credentials
//! among them, so that they never have to be put in the URL); options that
//! a run proves are added to the URL when the store is opened again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use casaas_core::guard::{GuardReport, StoreGuard};
use casaas_core::{CasError, CasStore, ErrorKind, StoreUrl};

use crate::cli::DOCTOR_PROBES;
use crate::redact::{redact_text, register_secret, register_url_secrets};
use crate::{
    ConformanceError, NoProgress, Probe, Reopen, Reopened, Report, RunVerdict, Settings, Suite,
    Target,
};

/// A store to check: its URL and the options opened beside it.
#[derive(Clone)]
pub struct CheckedStore {
    url: String,
    options: Vec<(String, String)>,
}

impl std::fmt::Debug for CheckedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Option values may be credentials: names only.
        let names: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("CheckedStore")
            .field("url", &crate::redact_url(&self.url))
            .field("options", &names)
            .finish()
    }
}

impl CheckedStore {
    /// The store `url` names, opened with `options` (`name`, `value`)
    /// beside it. Every option value and the URL's secrets are registered
    /// for redaction, so no report or error repeats them.
    pub fn new(url: impl Into<String>, options: Vec<(String, String)>) -> Self {
        let url = url.into();
        register_url_secrets(&url);
        for (_, value) in &options {
            register_secret(value);
        }
        CheckedStore { url, options }
    }

    /// The URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Opens `url` with this store's options; no capability profile is
    /// looked up (a run is what writes one).
    async fn open(&self, url: &str) -> Result<Arc<dyn CasStore>, CasError> {
        register_providers();
        let options = self
            .options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain([(casaas_core::profile::PROFILE_OPTION, "none")]);
        casaas_core::open_store_with(url, options).await
    }

    /// The target to probe and the probes its backend contributes.
    async fn target(&self, url: &str) -> Result<(Target, Vec<Box<dyn Probe>>), ConformanceError> {
        let store = self.open(url).await.map_err(|e| setup(url, e))?;
        let probes = backend_probes(&store);
        let mut target = Target::new(store.clone(), url);
        if casaas_core::provider::adapter_of(url).is_none() {
            // Adapter URLs follow their library's rules: casaas options do
            // not apply, so there is nothing to reopen with.
            let parsed = StoreUrl::parse(url).map_err(|e| setup(url, e))?;
            target = target.with_reopen(Arc::new(ReopenWith {
                store: self.clone(),
                url: parsed,
            }));
        }
        #[cfg(feature = "s3")]
        if let Some(s3) =
            (store.as_ref() as &dyn std::any::Any).downcast_ref::<casaas_s3::S3Store>()
        {
            target = target.with_clock(Arc::new(crate::s3::S3Clock(s3.clone())));
        }
        Ok((target, probes))
    }
}

/// Makes the URLs of the providers this build has openable (registering
/// again is harmless).
fn register_providers() {
    #[cfg(feature = "s3")]
    casaas_s3::register();
    #[cfg(feature = "gcs")]
    casaas_gcs::register();
    #[cfg(feature = "azure")]
    casaas_azure::register();
    #[cfg(feature = "object-store")]
    casaas_object_store::register();
    #[cfg(feature = "opendal")]
    casaas_opendal::register();
}

/// A store error met before any probe ran, with what to fix.
fn setup(url: &str, source: CasError) -> ConformanceError {
    let hint = if source.is_bucket_missing() {
        "Create the bucket (or container) first."
    } else {
        match source.kind() {
            ErrorKind::Unauthorized => {
                "Check the credentials given as options or in the environment."
            }
            ErrorKind::Misconfigured | ErrorKind::InvalidInput => "Check the URL and its options.",
            _ => "Check that the store is reachable.",
        }
    };
    ConformanceError::Setup {
        hint: format!("{hint} (store: {})", crate::redact_url(url)),
        source: Box::new(source),
    }
}

/// The probes the backend of `store` contributes (S3-, Azure- or GCS-only
/// probes replace the standard placeholders of the same ids).
pub(crate) fn backend_probes(store: &Arc<dyn CasStore>) -> Vec<Box<dyn Probe>> {
    let any = store.as_ref() as &dyn std::any::Any;
    #[cfg(feature = "s3")]
    if let Some(s3) = any.downcast_ref::<casaas_s3::S3Store>() {
        return crate::s3::s3_probes(s3);
    }
    #[cfg(feature = "azure")]
    if let Some(azure) = any.downcast_ref::<casaas_azure::AzureBlobStore>() {
        return crate::assembled::azure_probes(azure);
    }
    #[cfg(feature = "gcs")]
    if let Some(gcs) = any.downcast_ref::<casaas_gcs::GcsStore>() {
        return crate::assembled::gcs_probes(gcs);
    }
    let _ = any;
    Vec::new()
}

/// Opens the store again with options added (to prove them), keeping the
/// options it was opened with (credentials).
struct ReopenWith {
    store: CheckedStore,
    url: StoreUrl,
}

#[async_trait]
impl Reopen for ReopenWith {
    async fn reopen(&self, options: &[String]) -> Result<Reopened, CasError> {
        let url = self.url.with_options(options)?;
        let store = self.store.open(url.as_unredacted_str()).await?;
        let probes = backend_probes(&store);
        Ok(Reopened { store, probes })
    }
}

/// Runs the conformance suite on `store` with `settings` (only the probes
/// `only` names, when given): what `casaas conformance URL` does, without
/// progress output. [`Report::to_json`] is the command's `--json` report.
pub async fn conformance(
    store: &CheckedStore,
    settings: &Settings,
    only: &[String],
) -> Result<Report, ConformanceError> {
    // Check the probe names before touching the store.
    if !only.is_empty() {
        Suite::standard().only(only)?;
    }
    let (target, extra) = store.target(&store.url).await?;
    let mut suite = Suite::standard();
    for probe in extra {
        suite = suite.with_probe(probe);
    }
    if !only.is_empty() {
        suite = suite.only(only)?;
    }
    suite.run(&target, settings, Arc::new(NoProgress)).await
}

/// What [`doctor`] found: the store guard's checks, then the quick probes.
#[derive(Debug, Clone)]
pub struct DoctorReport {
    /// Safe, not safe (the guard or a critical probe failed), or
    /// inconclusive (the guard found only ambiguous answers until its
    /// deadline, or a critical probe could not complete).
    pub verdict: RunVerdict,
    /// The verdict line, as `casaas doctor` prints it.
    pub summary: String,
    /// The store guard's report; `None` when it reached no verdict.
    pub guard: Option<GuardReport>,
    /// Why the guard reached no verdict, when it did not.
    pub guard_error: Option<String>,
    /// The quick probes' report; `None` when the guard reached no verdict.
    pub report: Option<Report>,
    /// Wall time of every check.
    pub elapsed: Duration,
}

impl DoctorReport {
    /// The exit status `casaas doctor` gives for this report: 0, 1 or 3.
    pub fn exit_code(&self) -> u8 {
        self.verdict.exit_code()
    }

    /// The report as the JSON value `casaas doctor --format json` prints
    /// (secrets redacted when rendered with [`DoctorReport::to_json`]).
    pub fn to_value(&self) -> serde_json::Value {
        let code = self.exit_code();
        let elapsed_ms = self.elapsed.as_millis() as u64;
        match (&self.guard, &self.report) {
            (Some(guard), Some(report)) => {
                let checks: Vec<serde_json::Value> = guard
                    .checks
                    .iter()
                    .map(|c| serde_json::json!({"name": c.name, "passed": c.passed, "detail": c.detail}))
                    .collect();
                let report_json = serde_json::to_value(report).unwrap_or_default();
                serde_json::json!({
                    "verdict": self.summary,
                    "exit_code": code,
                    "guard": {
                        "passed": guard.passed(),
                        "checks": checks,
                        "requests": guard.requests(),
                        "elapsed_ms": guard.elapsed().as_millis() as u64,
                    },
                    "elapsed_ms": elapsed_ms,
                    "report": report_json,
                })
            }
            _ => serde_json::json!({
                "verdict": self.summary,
                "exit_code": code,
                "guard": {
                    "passed": serde_json::Value::Null,
                    "checks": [],
                    "error": self.guard_error.clone().unwrap_or_default(),
                },
                "elapsed_ms": elapsed_ms,
            }),
        }
    }

    /// [`DoctorReport::to_value`] as pretty JSON, secrets redacted.
    pub fn to_json(&self) -> String {
        redact_text(&serde_json::to_string_pretty(&self.to_value()).unwrap_or_default())
    }
}

/// The URL the doctor opens: it creates no directory, so a `file://` URL
/// loses `create_dirs`.
fn doctor_url(url: &str) -> Result<String, ConformanceError> {
    if casaas_core::provider::adapter_of(url).is_some() {
        return Ok(url.to_string());
    }
    let Ok(parsed) = StoreUrl::parse(url) else {
        // Not a URL: opening it says why.
        return Ok(url.to_string());
    };
    if parsed.scheme() != "file" {
        return Ok(url.to_string());
    }
    let (without, _) = parsed
        .without_option("create_dirs")
        .map_err(|e| setup(url, e))?;
    Ok(without.as_unredacted_str().to_string())
}

/// The deploy gate of `casaas doctor`: the store guard (trying for at most
/// `guard_deadline` while the store's answers are ambiguous), then the
/// quick probes ([`DOCTOR_PROBES`]).
pub async fn doctor(
    store: &CheckedStore,
    guard_deadline: Duration,
) -> Result<DoctorReport, ConformanceError> {
    let start = Instant::now();
    let url = doctor_url(&store.url)?;
    let (target, extra) = store.target(&url).await?;
    // The guard checks what leases write through: the epoch layout's view
    // on a store opened with `layout=epochs`.
    let view = casaas_core::layout::lease_view(target.store.clone());
    let checked = StoreGuard::new()
        .with_deadline(guard_deadline)
        .check(view.as_ref())
        .await;
    let guard = match checked {
        Ok(guard) => guard,
        Err(e) if e.kind() == ErrorKind::Ambiguous => {
            return Ok(DoctorReport {
                verdict: RunVerdict::Inconclusive,
                summary: redact_text(&format!(
                    "INCONCLUSIVE: the store guard found no verdict: {e}"
                )),
                guard: None,
                guard_error: Some(redact_text(&e.to_string())),
                report: None,
                elapsed: start.elapsed(),
            });
        }
        Err(e) => return Err(setup(&url, e)),
    };
    let mut suite = Suite::standard();
    for probe in extra {
        suite = suite.with_probe(probe);
    }
    let only: Vec<String> = DOCTOR_PROBES.iter().map(|p| p.to_string()).collect();
    let suite = suite.only(&only)?;
    let report = suite
        .run(&target, &Settings::quick(), Arc::new(NoProgress))
        .await?;
    let (verdict, summary) = if guard.passed() {
        (report.verdict, report.summary.clone())
    } else {
        (
            RunVerdict::NotSafe,
            format!(
                "NOT SAFE: the store guard failed ({})",
                guard.failure().map_or("", |f| f.name)
            ),
        )
    };
    Ok(DoctorReport {
        verdict,
        summary: redact_text(&summary),
        guard: Some(guard),
        guard_error: None,
        report: Some(report),
        elapsed: start.elapsed(),
    })
}
