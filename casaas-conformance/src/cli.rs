//! The command line of `casaas-conformance [URL]` (also `casaas
//! conformance [URL]`): tells whether an object store is safe to build
//! leases on. Both binaries call [`run_cli`].
//!
//! Without a URL it probes the embedded file backend in a temporary
//! directory. Exit status: 0 safe, 1 not safe, 2 usage error, 3
//! inconclusive, 69 the store could not be reached or answered a transient
//! error, 78 the store refused the configuration. No output ever carries a secret: URL
//! user parts, credential-looking parameters and the values of credential
//! environment variables are redacted from the report, messages and logs.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{
    ConformanceError, Probe, ProbeResult, Progress, Reopen, Reopened, Report, Settings, Suite,
    Target, redact_text, redact_url, register_secrets_from_env, register_url_secrets,
};
use anyhow::{Context, Result};
use async_trait::async_trait;
use casaas_core::{CasStore, FileStore, StoreUrl};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

/// The help text after the options of `casaas-conformance` and `casaas
/// conformance`.
pub const CONFORMANCE_AFTER_HELP: &str = "URL examples: file:///abs/dir, memory://name, s3://bucket/prefix?endpoint=http://127.0.0.1:9000&path_style=true, gs://bucket/prefix, az://account/container/prefix.\n\
Credentials come from the environment (e.g. AWS_ACCESS_KEY_ID), never from the URL.\n\
Exit status: 0 safe for leases; 1 not safe; 2 usage error; 3 inconclusive (some critical probes could not complete); \
69 the store could not be reached or answered a transient error (retry later); \
78 the store refused the configuration (missing bucket, credentials, an unsupported request).";

/// The help text after the options of `casaas doctor`.
pub const DOCTOR_AFTER_HELP: &str = "Exit status: 0 safe for leases; 1 not safe; 2 usage error; 3 inconclusive; \
69 the store could not be reached or answered a transient error (retry later); \
78 the store refused the configuration (missing bucket, credentials, an unsupported request).\n\
Races and rare faults are not probed: run `casaas conformance URL` for those.";

/// Exit status: the store could not be reached, timed out, throttled or
/// answered ambiguously; running again later may succeed.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status: the store refused the configuration (a missing bucket,
/// wrong credentials, an unsupported request); retrying will not help.
pub const EXIT_CONFIG: u8 = 78;
/// Exit status: bad input on the command line.
pub const EXIT_USAGE: u8 = 2;
/// Exit status: the store does not honour the conditional writes leases
/// rely on.
pub const EXIT_NOT_SAFE: u8 = 1;

/// The exit status for a store error of `kind`: [`EXIT_UNAVAILABLE`] for
/// what may pass (throttling, an unreachable store, a lost answer),
/// [`EXIT_CONFIG`] for what the store refuses as configured,
/// [`EXIT_NOT_SAFE`] for a store that broke a condition, [`EXIT_USAGE`]
/// for input the contract rejects.
pub fn exit_code_for(kind: casaas_core::ErrorKind) -> u8 {
    use casaas_core::ErrorKind as K;
    match kind {
        K::Throttled | K::Ambiguous | K::NotSent | K::ConcurrentRequest | K::PreconditionFailed => {
            EXIT_UNAVAILABLE
        }
        K::UnsafeStore => EXIT_NOT_SAFE,
        K::InvalidInput => EXIT_USAGE,
        _ => EXIT_CONFIG,
    }
}

/// A store's failure that ends the run, with its kind kept for the exit
/// status; the message is already redacted.
#[derive(Debug)]
struct StoreFailure {
    kind: casaas_core::ErrorKind,
    message: String,
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreFailure {}

/// The exit status of a failed run: the store error's, when one caused it.
fn usage_exit_code(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|cause| {
            cause
                .downcast_ref::<StoreFailure>()
                .map(|f| f.kind)
                .or_else(|| {
                    cause
                        .downcast_ref::<casaas_core::CasError>()
                        .map(|c| c.kind())
                })
        })
        .map_or(EXIT_USAGE, exit_code_for)
}

/// Probe an object store's conditional writes and say whether leases can be
/// built on it.
#[derive(Parser, Debug, Clone)]
#[command(name = "casaas-conformance", version, after_help = CONFORMANCE_AFTER_HELP)]
struct ConformanceCommand {
    #[command(flatten)]
    args: ConformanceArgs,
}

/// The arguments of `casaas-conformance` (and `casaas conformance`), for a
/// command line that embeds them with `#[command(flatten)]`; run them with
/// [`run_conformance`].
#[derive(clap::Args, Debug, Clone)]
pub struct ConformanceArgs {
    /// The store to probe. Without one, the embedded file backend is probed
    /// in a temporary directory. With several, each is probed (in
    /// parallel) and one comparison table is printed.
    #[arg(value_name = "URL")]
    urls: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the report to FILE (the table is then also printed).
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// A quick first look (under a minute on a loopback server, under two on
    /// a store that allows one write per second per key) instead of the
    /// thorough default.
    #[arg(long)]
    quick: bool,
    /// Run only these probes (ids, separated by spaces or commas; see
    /// --list-probes).
    #[arg(long, value_name = "PROBE", num_args = 1.., value_delimiter = ',')]
    only: Vec<String>,
    /// Concurrent writers in each race round.
    #[arg(long, default_value_t = 8, value_name = "N")]
    concurrency: usize,
    /// Race rounds, exactly. By default each race runs at least 10 rounds
    /// (--quick) or 100, then more for up to 10 s or 30 s (at most 300 or
    /// 2000 rounds), so that a store whose races break only now and then
    /// is caught.
    #[arg(long, value_name = "R")]
    rounds: Option<usize>,
    /// Pace writes to one key to at most one per this interval (e.g. `1s`,
    /// `500ms`), instead of the rate the throttle probe measures.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    min_write_interval: Option<Duration>,
    /// Create the bucket (or container) first, where the backend supports it.
    #[arg(long)]
    create_bucket: bool,
    /// The same bucket and prefix through another endpoint (repeatable):
    /// race probes and the lease probe spread their writers over every
    /// endpoint, and race_across_endpoints becomes critical.
    #[arg(long = "gateway", value_name = "URL")]
    gateways: Vec<String>,
    /// List the probes and exit.
    #[arg(long)]
    list_probes: bool,
    /// Save the verdict and the proven options as the store's capability
    /// profile, to PATH or (without one) to the profile directory, where
    /// opening the store finds it (see docs/cli.md, "Capability profiles").
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    save_profile: Option<String>,
}

/// The arguments' old name inside this module.
type Cli = ConformanceArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// A table for people, ending with the verdict line.
    Table,
    /// The JSON schema documented in docs/conformance.md.
    Json,
    /// Markdown, for docs and issues.
    Markdown,
}

/// A duration in the one grammar of durations (`1s`, `500ms`, `1.5s`,
/// `2m`, or plain seconds), at most an hour.
fn parse_duration(text: &str) -> Result<Duration, String> {
    casaas_core::provider::parse_duration(text)
        .ok()
        .filter(|d| *d <= Duration::from_secs(3600))
        .ok_or_else(|| {
            format!(
                "'{}' is not a duration: write e.g. 1s, 500ms or 1.5 (seconds, at most an hour)",
                text.trim()
            )
        })
}

/// Failures that end the run with exit status 2.
struct Usage(anyhow::Error);

/// Standard error with every secret redacted, for log lines.
struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = redact_text(&String::from_utf8_lossy(buf));
        std::io::stderr().write_all(text.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// How log lines are written on standard error: text for people, or one
/// JSON object a line for services (as `casaas --log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The variable the log format comes from when no flag gives it.
pub const LOG_FORMAT_VAR: &str = "CASAAS_LOG_FORMAT";

impl LogFormat {
    /// `text` or `json`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("invalid log format {other:?}: use text or json")),
        }
    }

    /// From `$CASAAS_LOG_FORMAT`: text when it is unset or empty.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(LOG_FORMAT_VAR) {
            Ok(value) if !value.is_empty() => {
                Self::parse(&value).map_err(|e| format!("{LOG_FORMAT_VAR}: {e}"))
            }
            _ => Ok(LogFormat::Text),
        }
    }
}

/// Runs the command line `args` (the first item is the program name) and
/// returns the exit status, with logs in the format `$CASAAS_LOG_FORMAT`
/// names. Installs a global `tracing` subscriber if none is set yet.
pub fn run_cli<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    match LogFormat::from_env() {
        Ok(format) => run_cli_logging(args, format),
        Err(e) => {
            eprintln!("casaas-conformance: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// [`run_cli`] with logs in `log_format` (for `casaas --log-format json
/// conformance …`, whose flag wins over the variable).
pub fn run_cli_logging<I, T>(args: I, log_format: LogFormat) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    // Before anything can be printed: what the credential variables hold
    // is redacted from every output.
    register_secrets_from_env();
    run_conformance(ConformanceCommand::parse_from(args).args, log_format)
}

/// Runs the conformance suite with `args` (parsed by the caller's command
/// line) and returns the exit status; logs in `log_format` unless a
/// `tracing` subscriber is installed already.
pub fn run_conformance(cli: ConformanceArgs, log_format: LogFormat) -> ExitCode {
    register_secrets_from_env();
    for url in &cli.urls {
        register_url_secrets(url);
    }
    for url in &cli.gateways {
        register_url_secrets(url);
    }
    init_logging_and_providers(log_format);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Usage(e)) => {
            report_error(
                log_format,
                &redact_text(&format!("casaas-conformance: error: {e:#}")),
            );
            ExitCode::from(usage_exit_code(&e))
        }
    }
}

/// An error that ends the run: a plain line, or a JSON log line with JSON
/// logs.
fn report_error(log_format: LogFormat, message: &str) {
    match log_format {
        LogFormat::Text => eprintln!("{message}"),
        LogFormat::Json => tracing::error!("{message}"),
    }
}

/// Logs to standard error with every secret redacted (unless a subscriber
/// is already installed), and the providers this build has.
fn init_logging_and_providers(log_format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_writer(|| RedactingStderr)
        .with_ansi(false)
        .with_env_filter(sdk_capped(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,casaas_core::lease=error")
            }),
        ));
    let installed = match log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // Already installed (a program embedding this command line): keep it.
    drop(installed);
    register_providers();
}

/// Makes s3://, gs://, az://, object_store+URL and opendal+URL openable, as
/// the features allow.
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

/// Can this build open `scheme` URLs? For a helpful message.
fn feature_hint(scheme: &str) -> Option<&'static str> {
    match scheme {
        "s3" if !cfg!(feature = "s3") => Some("this build lacks the `s3` feature"),
        "gs" if !cfg!(feature = "gcs") => Some("this build lacks the `gcs` feature"),
        "az" if !cfg!(feature = "azure") => Some("this build lacks the `azure` feature"),
        _ => None,
    }
}

fn run(cli: Cli) -> Result<u8, Usage> {
    if cli.list_probes {
        for probe in Suite::standard().ids() {
            println!("{probe}");
        }
        return Ok(0);
    }
    // Check --only before touching the store.
    if !cli.only.is_empty() {
        Suite::standard().only(&cli.only).map_err(|e| {
            Usage(anyhow::anyhow!(
                "{e} (put the URL before --only, or separate ids with commas)"
            ))
        })?;
    }
    if cli.urls.len() > 1 && !cli.gateways.is_empty() {
        return Err(Usage(anyhow::anyhow!(
            "--gateway names another endpoint of one store: give one store URL with it, \
             or compare several stores without it"
        )));
    }
    if !cli.gateways.is_empty() && cli.urls.is_empty() {
        return Err(Usage(anyhow::anyhow!(
            "--gateway names another endpoint of the store: give the store's URL first"
        )));
    }
    // Fail now, not after a long run, if the report cannot be written.
    if let Some(path) = &cli.output {
        std::fs::write(path, "")
            .with_context(|| format!("cannot write the report to {}", path.display()))
            .map_err(Usage)?;
    }
    let mut settings = if cli.quick {
        Settings::quick()
    } else {
        Settings::thorough()
    };
    settings.concurrency = cli.concurrency;
    settings.rounds = cli.rounds;
    settings.min_write_interval = cli.min_write_interval;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(Usage)?;
    if cli.urls.len() > 1 {
        if cli.save_profile.is_some() {
            return Err(Usage(anyhow::anyhow!(
                "--save-profile saves one store's profile: give one store URL with it"
            )));
        }
        return runtime.block_on(compare(&cli, settings));
    }
    let report = runtime.block_on(probe(&cli, settings))?;
    if let Some(path) = &cli.save_profile {
        let saved = save_profile(
            &report,
            cli.urls.first().map(String::as_str),
            std::path::Path::new(path),
            !cli.only.is_empty(),
        )
        .map_err(Usage)?;
        eprintln!("capability profile saved to {}", saved.display());
    }

    let rendered = match cli.format {
        Format::Table => report.to_table(),
        Format::Json => report.to_json() + "\n",
        Format::Markdown => report.to_markdown(),
    };
    match &cli.output {
        Some(path) => {
            std::fs::write(path, &rendered)
                .with_context(|| format!("writing the report to {}", path.display()))
                .map_err(Usage)?;
            print!("{}", report.to_table());
        }
        None => {
            print!("{rendered}");
            if cli.format != Format::Table {
                eprintln!("{}", redact_text(&report.summary));
            }
        }
    }
    Ok(report.exit_code())
}

/// One store's URL (redacted) and its report, or why it was not run.
type StoreRun = (String, Result<Report, String>);

/// Several stores: each probed in parallel, one comparison printed. The
/// exit status is the worst verdict's (not safe, then a store that could
/// not be probed, then inconclusive, then safe).
async fn compare(cli: &Cli, settings: Settings) -> Result<u8, Usage> {
    let runs = cli.urls.iter().map(|url| {
        let mut one = cli.clone();
        one.urls = vec![url.clone()];
        let settings = settings.clone();
        async move {
            let result = probe_quietly(&one, settings).await;
            let code = match &result {
                Ok(report) => report.exit_code(),
                Err(Usage(e)) => usage_exit_code(e),
            };
            (
                (
                    redact_url(url),
                    result.map_err(|Usage(e)| redact_text(&format!("{e:#}"))),
                ),
                code,
            )
        }
    });
    let (results, codes): (Vec<StoreRun>, Vec<u8>) =
        futures::future::join_all(runs).await.into_iter().unzip();
    let rendered = match cli.format {
        Format::Json => {
            let reports: Vec<serde_json::Value> = results
                .iter()
                .map(|(url, r)| match r {
                    Ok(report) => {
                        serde_json::from_str(&report.to_json()).unwrap_or(serde_json::Value::Null)
                    }
                    Err(e) => serde_json::json!({ "url": url, "error": e }),
                })
                .collect();
            serde_json::to_string_pretty(&reports).unwrap_or_default() + "\n"
        }
        Format::Markdown => crate::report::comparison_markdown(&results),
        Format::Table => crate::report::comparison_table(&results),
    };
    match &cli.output {
        Some(path) => {
            std::fs::write(path, &rendered)
                .with_context(|| format!("writing the report to {}", path.display()))
                .map_err(Usage)?;
            print!("{}", crate::report::comparison_table(&results));
        }
        None => print!("{rendered}"),
    }
    // The worst first: not safe, then a store that could not be probed
    // (refused, bad input, unreachable), then inconclusive.
    Ok([
        EXIT_NOT_SAFE,
        EXIT_CONFIG,
        EXIT_USAGE,
        EXIT_UNAVAILABLE,
        3,
        0,
    ]
    .into_iter()
    .find(|c| codes.contains(c))
    .unwrap_or(0))
}

/// One store's run without a progress bar (several run at once).
async fn probe_quietly(cli: &Cli, settings: Settings) -> Result<Report, Usage> {
    let (target, extra, _tempdir) = open_target(cli).await?;
    let mut suite = Suite::standard();
    for probe in extra {
        suite = suite.with_probe(probe);
    }
    if !cli.only.is_empty() {
        suite = suite
            .only(&cli.only)
            .map_err(|e| Usage(anyhow::anyhow!("{e}")))?;
    }
    suite
        .run(&target, &settings, Arc::new(crate::NoProgress))
        .await
        .map_err(|e| Usage(explain_run_error(e, cli.create_bucket)))
}

async fn probe(cli: &Cli, settings: Settings) -> Result<Report, Usage> {
    // Keep the temporary directory alive until the run ends.
    let (target, extra, _tempdir) = open_target(cli).await?;
    // Backend-specific probes replace the standard placeholders by id.
    let mut suite = Suite::standard();
    for probe in extra {
        suite = suite.with_probe(probe);
    }
    if !cli.only.is_empty() {
        suite = suite
            .only(&cli.only)
            .map_err(|e| Usage(anyhow::anyhow!("{e}")))?;
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(suite.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    } else {
        ProgressBar::hidden()
    };
    let progress = Arc::new(Bar {
        bar: bar.clone(),
        title: Mutex::new(String::new()),
    });
    let result = suite.run(&target, &settings, progress).await;
    bar.finish_and_clear();
    result.map_err(|e| Usage(explain_run_error(e, cli.create_bucket)))
}

fn explain_run_error(e: ConformanceError, create_bucket: bool) -> anyhow::Error {
    // A hint only when the store said the bucket or container is missing.
    let hint = if e.bucket_missing() && !create_bucket {
        " (--create-bucket creates it.)"
    } else {
        ""
    };
    let message = format!("{}{hint}", redact_text(&e.to_string()));
    // The store's error kind decides the exit status (unreachable: 69).
    match e.store_kind() {
        Some(kind) => anyhow::Error::new(StoreFailure { kind, message }),
        None => anyhow::anyhow!(message),
    }
}

/// The target, the probes its backend contributes, and the temporary
/// directory to keep alive (embedded file backend).
type Opened = (Target, Vec<Box<dyn Probe>>, Option<tempfile::TempDir>);

async fn open_target(cli: &Cli) -> Result<Opened, Usage> {
    let (mut target, probes, dir) = open_main(cli).await?;
    for url in &cli.gateways {
        let (store, reopen) = open_endpoint(cli, url).await?;
        target = target.with_gateway(store, url.as_str(), reopen);
    }
    Ok((target, probes, dir))
}

/// Another endpoint (`--gateway`): its store and, for a URL that casaas
/// options apply to, the way to reopen it with them.
async fn open_endpoint(
    cli: &Cli,
    url: &str,
) -> Result<(Arc<dyn CasStore>, Option<Arc<dyn Reopen>>), Usage> {
    if casaas_core::provider::adapter_of(url).is_some() {
        let store = open_as_given(url)
            .await
            .map_err(|e| open_error(url, &e, cli.create_bucket))?;
        return Ok((store, None));
    }
    let parsed = StoreUrl::parse(url).map_err(|e| open_error(url, &e, cli.create_bucket))?;
    let store = open_as_given(parsed.as_unredacted_str())
        .await
        .map_err(|e| open_error(url, &e, cli.create_bucket))?;
    Ok((store, Some(Arc::new(UrlReopen { url: parsed }))))
}

async fn open_main(cli: &Cli) -> Result<Opened, Usage> {
    let Some(url) = cli.urls.first().map(String::as_str) else {
        let dir = tempfile::Builder::new()
            .prefix("casaas-conformance-")
            .tempdir()
            .context("creating a temporary directory for the embedded file backend")
            .map_err(Usage)?;
        let store = FileStore::open(dir.path())
            .await
            .map_err(|e| Usage(anyhow::anyhow!("opening the embedded file backend: {e}")))?;
        let store: Arc<dyn CasStore> = Arc::new(store);
        let url = format!("file://{}", dir.path().display());
        return Ok((Target::new(store, url), Vec::new(), Some(dir)));
    };
    if casaas_core::provider::adapter_of(url).is_some() {
        // `object_store+…`, `opendal+…`: the adapter parses the rest with its
        // library's rules, and casaas options do not apply, so there is
        // nothing to reopen with.
        let store = open_as_given(url)
            .await
            .map_err(|e| open_error(url, &e, cli.create_bucket))?;
        create_bucket_if_asked(cli, &store).await?;
        return Ok((Target::new(store, url), Vec::new(), None));
    }
    let parsed = StoreUrl::parse(url).map_err(|e| open_error(url, &e, cli.create_bucket))?;
    let store = open_as_given(parsed.as_unredacted_str())
        .await
        .map_err(|e| {
            let Usage(err) = open_error(url, &e, cli.create_bucket);
            match feature_hint(parsed.scheme()) {
                Some(hint) => Usage(err.context(hint)),
                None => Usage(err),
            }
        })?;
    create_bucket_if_asked(cli, &store).await?;
    #[cfg(feature = "s3")]
    if let Some(s3) = (store.as_ref() as &dyn std::any::Any).downcast_ref::<casaas_s3::S3Store>() {
        // The S3-only probes need the raw S3 client.
        use crate::s3::{S3Clock, S3Reopen, s3_probes};
        let probes = s3_probes(s3);
        let target = Target::new(store.clone(), url)
            .with_clock(Arc::new(S3Clock(s3.clone())))
            .with_reopen(Arc::new(S3Reopen::new(parsed)));
        return Ok((target, probes, None));
    }
    let probes = crate::check::backend_probes(&store);
    let reopen = Arc::new(UrlReopen { url: parsed });
    Ok((Target::new(store, url).with_reopen(reopen), probes, None))
}

/// Opens `url` through the one way in, as the user gave it: no capability
/// profile is looked up (the run is what writes one).
pub(crate) async fn open_as_given(url: &str) -> Result<Arc<dyn CasStore>, casaas_core::CasError> {
    casaas_core::open_store_with(url, [(casaas_core::profile::PROFILE_OPTION, "none")]).await
}

/// Writes the run's verdict and proven options as the store's capability
/// profile; returns where.
fn save_profile(
    report: &Report,
    url: Option<&str>,
    path: &std::path::Path,
    partial: bool,
) -> Result<PathBuf> {
    use casaas_core::profile::{CapabilityProfile, ProfileVerdict};
    let url = url.context("--save-profile needs the URL of the store to profile")?;
    if casaas_core::provider::adapter_of(url).is_some() {
        anyhow::bail!(
            "--save-profile: profiles are for s3://, gs://, az:// and file:// URLs; an adapter \
             URL is opened by its library's rules"
        );
    }
    let parsed = StoreUrl::parse(url)?;
    let verdict = match report.verdict {
        crate::RunVerdict::Safe => ProfileVerdict::Safe,
        crate::RunVerdict::NotSafe => ProfileVerdict::NotSafe,
        crate::RunVerdict::Inconclusive => ProfileVerdict::Inconclusive,
    };
    // Options count as proven only in a safe run (they were run again).
    let proven = if verdict == ProfileVerdict::Safe {
        let mut proven: Vec<String> = report
            .recommended_options
            .iter()
            .map(|r| r.option.clone())
            .collect();
        // A store proven safe only in the create-only layout is opened in it.
        if report.layout == casaas_core::layout::LeaseLayout::Epochs {
            proven.push(format!(
                "{}={}",
                casaas_core::layout::LAYOUT_OPTION,
                report.layout
            ));
        }
        proven
    } else {
        Vec::new()
    };
    let failed = report.blockers().iter().map(|p| p.id.clone()).collect();
    let profile = CapabilityProfile::new(&parsed, verdict, report.summary.clone(), proven, failed)
        .partial(partial)
        .with_large_conditional_writes(report.proves_large_conditional_writes());
    let explicit = (!path.as_os_str().is_empty()).then_some(path);
    Ok(profile.save(explicit)?)
}

/// `--create-bucket`: creates the bucket (or container) where the backend
/// supports it.
async fn create_bucket_if_asked(cli: &Cli, store: &Arc<dyn CasStore>) -> Result<(), Usage> {
    if cli.create_bucket {
        store.create_bucket().await.map_err(|e| {
            Usage(anyhow::anyhow!(
                "--create-bucket: {}",
                redact_text(&e.to_string())
            ))
        })?;
    }
    Ok(())
}

/// Opens a store URL again with options added, to prove them.
struct UrlReopen {
    url: StoreUrl,
}

#[async_trait]
impl Reopen for UrlReopen {
    async fn reopen(&self, options: &[String]) -> Result<Reopened, casaas_core::CasError> {
        let store = open_as_given(self.url.with_options(options)?.as_unredacted_str()).await?;
        Ok(Reopened {
            store,
            probes: Vec::new(),
        })
    }
}

fn open_error(url: &str, e: &casaas_core::CasError, create_bucket: bool) -> Usage {
    let mut message = format!("cannot open {}: {e}", redact_url(url));
    // A hint only when the store said the bucket or container is missing.
    if e.is_bucket_missing() && !create_bucket {
        message.push_str(". If the bucket does not exist, run again with --create-bucket");
    }
    Usage(anyhow::Error::new(StoreFailure {
        kind: e.kind(),
        message: redact_text(&message),
    }))
}

/// The progress bar (drawn only on a terminal).
struct Bar {
    bar: ProgressBar,
    title: Mutex<String>,
}

impl Progress for Bar {
    fn probe_started(&self, index: usize, _total: usize, _id: &str, title: &str) {
        self.bar.set_position(index as u64);
        self.bar.set_message(title.to_string());
        *self.title.lock().unwrap_or_else(|p| p.into_inner()) = title.to_string();
    }

    fn probe_step(&self, _id: &str, done: u64, total: u64) {
        let title = self.title.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.bar.set_message(format!("{title} ({done}/{total})"));
    }

    fn probe_finished(&self, result: &ProbeResult) {
        self.bar.inc(1);
        if !self.bar.is_hidden() {
            self.bar.println(format!(
                "{:<11} {}",
                result.verdict.as_str().to_uppercase(),
                result.id
            ));
        }
    }
}

/// `filter` with the Azure SDK's request dumps kept off even at
/// `RUST_LOG=trace` ([`casaas_azure::SDK_LOG_CAPS`]: they print the signed
/// `Authorization` header). Without the `azure` feature there is no Azure
/// SDK to cap.
pub fn sdk_capped(filter: tracing_subscriber::EnvFilter) -> tracing_subscriber::EnvFilter {
    #[cfg(feature = "azure")]
    let filter = casaas_azure::SDK_LOG_CAPS
        .iter()
        .filter_map(|directive| directive.parse().ok())
        .fold(filter, tracing_subscriber::EnvFilter::add_directive);
    filter
}

/// The probes `casaas doctor` runs after the store guard: every quick
/// semantic probe and the lease protocol, no race plan and no throttle
/// measurement, so that a healthy store answers in seconds.
pub const DOCTOR_PROBES: &[&str] = &[
    "create_if_absent",
    "create_conflict",
    "replace_if_match",
    "replace_stale",
    "missing_key",
    "conditional_delete",
    "identical_rewrite",
    "read_after_write",
    "list_after_write",
    "lease_protocol",
    "s3_etag_forms",
    "s3_versioned_bucket",
];

/// A deploy gate: the store guard and the quick probes, one line each.
#[derive(Parser, Debug)]
#[command(name = "casaas doctor", version, after_help = DOCTOR_AFTER_HELP)]
struct DoctorCommand {
    #[command(flatten)]
    args: DoctorArgs,
}

/// The arguments of `casaas doctor`, for a command line that embeds them
/// with `#[command(flatten)]`; run them with [`run_doctor`].
#[derive(clap::Args, Debug, Clone)]
pub struct DoctorArgs {
    /// The store to check.
    url: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DoctorFormat::Table)]
    format: DoctorFormat,
    /// How long the store guard keeps trying when the store's answers are
    /// ambiguous or throttled, in seconds; a store still ambiguous then is
    /// inconclusive (exit status 3).
    #[arg(long, value_name = "SECONDS", default_value_t = casaas_core::guard::DEFAULT_GUARD_DEADLINE.as_secs())]
    guard_deadline: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DoctorFormat {
    /// One line per check, then the verdict.
    Table,
    /// The guard's checks and the conformance report, as JSON.
    Json,
}

/// Runs `casaas doctor URL` (the first item of `args` is the program name)
/// and returns the exit status: the store guard, then the quick probes
/// ([`DOCTOR_PROBES`]); 0 safe, 1 not safe, 2 usage or connection error,
/// 3 inconclusive. Logs in the format `$CASAAS_LOG_FORMAT` names.
pub fn run_doctor_cli<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    match LogFormat::from_env() {
        Ok(format) => run_doctor_cli_logging(args, format),
        Err(e) => {
            eprintln!("casaas doctor: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// [`run_doctor_cli`] with logs in `log_format`.
pub fn run_doctor_cli_logging<I, T>(args: I, log_format: LogFormat) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    register_secrets_from_env();
    run_doctor(DoctorCommand::parse_from(args).args, log_format)
}

/// Runs the deploy gate with `doctor` (parsed by the caller's command line)
/// and returns the exit status; logs in `log_format` unless a `tracing`
/// subscriber is installed already.
pub fn run_doctor(doctor: DoctorArgs, log_format: LogFormat) -> ExitCode {
    register_secrets_from_env();
    register_url_secrets(&doctor.url);
    init_logging_and_providers(log_format);
    match doctor_run(&doctor) {
        Ok(code) => ExitCode::from(code),
        Err(Usage(e)) => {
            let message = format!("casaas doctor: error: {e:#}").replace(
                "; create it or add ?create_dirs=true",
                "; create it (the doctor creates no directory, whatever the URL says)",
            );
            report_error(log_format, &redact_text(&message));
            ExitCode::from(usage_exit_code(&e))
        }
    }
}

/// Prints the verdict of a store guard that found none (every answer
/// ambiguous until its deadline) and returns the inconclusive exit status.
fn doctor_inconclusive(doctor: &DoctorArgs, err: &casaas_core::CasError, elapsed: Duration) -> u8 {
    let code = crate::RunVerdict::Inconclusive.exit_code();
    let verdict = format!("INCONCLUSIVE: the store guard found no verdict: {err}");
    match doctor.format {
        DoctorFormat::Table => println!(
            "{} (all checks {:.1} s)",
            redact_text(&verdict),
            elapsed.as_secs_f64()
        ),
        DoctorFormat::Json => {
            let out = serde_json::json!({
                "verdict": verdict,
                "exit_code": code,
                "guard": { "passed": serde_json::Value::Null, "checks": [], "error": err.to_string() },
                "elapsed_ms": elapsed.as_millis() as u64,
            });
            println!(
                "{}",
                redact_text(&serde_json::to_string_pretty(&out).unwrap_or_default())
            );
        }
    }
    code
}

/// The URL the doctor opens for `url`: nothing may create a directory, so
/// a `file://` URL loses `create_dirs`, and an adapter URL on a local
/// directory (`object_store+file://`, `opendal+fs://`, whose libraries
/// create a missing directory on their first write) is refused when its
/// directory does not exist.
fn doctor_url(url: &str) -> Result<String, Usage> {
    let (adapter, inner) = match casaas_core::provider::split_adapter(url) {
        Some((name, inner)) => (Some(name), inner),
        None => (None, url),
    };
    let Ok(parsed) = StoreUrl::parse(inner) else {
        // Not a URL: opening it says why.
        return Ok(url.to_string());
    };
    match (adapter, parsed.scheme()) {
        (None, "file") => {
            let (without, _) = parsed
                .without_option("create_dirs")
                .map_err(|e| Usage(e.into()))?;
            Ok(without.as_unredacted_str().to_string())
        }
        (Some(name), _) if let Some(dir) = parsed.local_path() => {
            if dir.is_dir() {
                Ok(url.to_string())
            } else {
                Err(Usage(anyhow::Error::new(StoreFailure {
                    kind: casaas_core::ErrorKind::Misconfigured,
                    message: redact_text(&format!(
                        "cannot open {name}+{inner}: directory {} does not exist; create it (the doctor creates no directory)",
                        dir.display()
                    )),
                })))
            }
        }
        _ => Ok(url.to_string()),
    }
}

/// `casaas doctor`: the store guard, then the quick probes; the exit status.
fn doctor_run(doctor: &DoctorArgs) -> Result<u8, Usage> {
    let only = DOCTOR_PROBES.join(",");
    let url = doctor_url(&doctor.url)?;
    let cli =
        ConformanceCommand::parse_from(["casaas doctor", url.as_str(), "--quick", "--only", &only])
            .args;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(Usage)?;
    runtime.block_on(doctor_checks(doctor, &cli))
}

/// Opens the store, runs the store guard and then the probes `cli` names,
/// and prints the result in the doctor's format; the exit status.
async fn doctor_checks(doctor: &DoctorArgs, cli: &Cli) -> Result<u8, Usage> {
    let start = std::time::Instant::now();
    let (target, _, _tempdir) = open_target(cli).await?;
    // The guard checks what leases write through: the epoch layout's
    // view on a store opened with `layout=epochs`.
    let view = casaas_core::layout::lease_view(target.store.clone());
    let checked = casaas_core::guard::StoreGuard::new()
        .with_deadline(Duration::from_secs(doctor.guard_deadline))
        .check(view.as_ref())
        .await;
    let guard = match checked {
        Ok(guard) => guard,
        // Ambiguous (or throttled) until the deadline: no verdict, and
        // no probe would find one sooner.
        Err(e) if e.kind() == casaas_core::ErrorKind::Ambiguous => {
            return Ok(doctor_inconclusive(doctor, &e, start.elapsed()));
        }
        Err(e) => {
            return Err(Usage(anyhow::Error::new(StoreFailure {
                kind: e.kind(),
                message: redact_text(&format!("store guard: {e}")),
            })));
        }
    };
    let report = probe(cli, Settings::quick()).await?;
    let code = if guard.passed() {
        report.exit_code()
    } else {
        crate::RunVerdict::NotSafe.exit_code()
    };
    refresh_guard_cache(
        view.as_ref(),
        guard.passed(),
        code == crate::RunVerdict::NotSafe.exit_code(),
    );
    let verdict = if guard.passed() {
        report.summary.clone()
    } else {
        format!(
            "NOT SAFE: the store guard failed ({})",
            guard.failure().map_or("", |f| f.name)
        )
    };
    match doctor.format {
        DoctorFormat::Table => print_doctor_table(&guard, &report, &verdict, start),
        DoctorFormat::Json => print_doctor_json(&guard, &report, &verdict, code, start),
    }
    Ok(code)
}

/// The doctor's verdict refreshes the store-guard cache of the user who
/// ran it, where there is one (`casaas lock` made it): a store that passed
/// the guard has its pass recorded afresh; one found not safe has every
/// pass recorded for it withdrawn, however it was opened. The cache only
/// saves requests: a cache it cannot use is reported at warn.
fn refresh_guard_cache(view: &dyn casaas_core::CasStore, passed: bool, not_safe: bool) {
    use casaas_core::guard::cache::GuardCache;
    let Some(dir) = GuardCache::default_dir().filter(|dir| dir.is_dir()) else {
        return;
    };
    let cache = match GuardCache::open(&dir) {
        Ok(cache) => cache,
        Err(e) => {
            tracing::warn!("{e}; the store-guard cache is not refreshed");
            return;
        }
    };
    if not_safe {
        if let Err(e) = cache.withdraw(view) {
            tracing::warn!("{e}; run `casaas cache clear`");
        }
    } else if passed {
        cache.record_pass(view);
    }
}

/// Prints the doctor's checks one line each, then the verdict.
fn print_doctor_table(
    guard: &casaas_core::guard::GuardReport,
    report: &Report,
    verdict: &str,
    start: std::time::Instant,
) {
    for check in &guard.checks {
        println!("guard   {check}");
    }
    for probe in &report.probes {
        // A warning's failure does not make the store unsafe:
        // shown as `warn`, and named after the verdict.
        let verdict = if probe.severity == crate::Severity::Warning
            && probe.verdict == crate::Verdict::Fail
        {
            "warn"
        } else {
            probe.verdict.as_str()
        };
        println!(
            "{:<7} {:<5}  {:<30} {}",
            "probe",
            verdict,
            probe.id,
            redact_text(&probe.detail)
        );
    }
    println!(
        "{} (guard: {} requests; all checks {:.1} s)",
        redact_text(verdict),
        guard.requests(),
        start.elapsed().as_secs_f64()
    );
}

/// Prints the verdict, the guard's checks and the conformance report as
/// JSON.
fn print_doctor_json(
    guard: &casaas_core::guard::GuardReport,
    report: &Report,
    verdict: &str,
    code: u8,
    start: std::time::Instant,
) {
    let checks: Vec<serde_json::Value> = guard
        .checks
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name, "passed": c.passed, "detail": c.detail
            })
        })
        .collect();
    let report_json: serde_json::Value =
        serde_json::from_str(&report.to_json()).unwrap_or_default();
    let out = serde_json::json!({
        "verdict": verdict,
        "exit_code": code,
        "guard": {
            "passed": guard.passed(),
            "checks": checks,
            "requests": guard.requests(),
            "elapsed_ms": guard.elapsed().as_millis() as u64,
        },
        "elapsed_ms": start.elapsed().as_millis() as u64,
        "report": report_json,
    });
    println!(
        "{}",
        redact_text(&serde_json::to_string_pretty(&out).unwrap_or_default())
    );
}
