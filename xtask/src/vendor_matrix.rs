//! `cargo xtask vendor-matrix`: runs the conformance binary against every
//! store this machine can run and writes `docs/vendors.md`.
//!
//! Targets: the embedded backends (`memory`, `file`) and every server of
//! [`servers::all`] that starts by default, plus those built on request
//! (Garage, once its binary exists). Each run's JSON report is kept in
//! `.casaas/vendor-matrix/NAME.json`; the Markdown is generated from them,
//! followed by a fixed section on what public reports say about stores that
//! cannot run here.
//!
//! Each S3, Azure and GCS emulator is probed a second and third time through
//! the adapters table formats use (`object_store+URL`, `opendal+URL`): rows
//! named `SERVER+object_store` and `SERVER+opendal`, run right after the
//! server's own row and before the server is stopped.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use casaas_conformance::evidence::{
    Answer, ClockSkewEvidence, CreateConflictEvidence, LatencyEvidence, Percentiles, RaceEvidence,
    ReplaceStaleEvidence, ThrottleEvidence, probe_id,
};
use casaas_conformance::{Report, RunVerdict, Severity, Verdict};
use serde::Deserialize;

use casaas_core::testkit::server_env;

use crate::servers::{self, Ctx};

/// The adapter rows: (row name suffix, what it is, library version).
const ADAPTERS: [(&str, &str); 2] = [
    ("object_store", "object_store 0.14"),
    ("opendal", "OpenDAL 0.59"),
];

/// Servers the adapters are probed on.
const ADAPTER_SERVERS: [&str; 3] = ["moto", "azurite", "fake-gcs"];

/// The server a row runs on (`moto` for `moto` and `moto+opendal`), or
/// `None` for the embedded backends.
fn server_of(name: &str) -> Option<&str> {
    let server = name.split_once('+').map_or(name, |(server, _)| server);
    (server != "memory" && server != "file").then_some(server)
}

/// One store the matrix covers.
struct Target {
    /// Column name: `memory`, `file`, or a server name.
    name: String,
    /// What it is, for people.
    kind: String,
    /// Version of the server software, as installed.
    version: String,
    /// The URL given to the binary (none = embedded file backend).
    url: Option<String>,
    /// Environment for the binary (credentials from the server's env file).
    env: Vec<(String, String)>,
    /// Other endpoints of the same bucket (`--gateway`), from the server's
    /// env file.
    gateways: Vec<String>,
}

/// The outcome of one run.
struct Run {
    target: Target,
    /// The parsed JSON report, if the binary produced one.
    report: Option<Report>,
    /// Exit status of the binary.
    exit: Option<i32>,
    /// Why there is no report (start failure, exit 2 message).
    problem: Option<String>,
    seconds: f64,
}

/// `cargo xtask vendor-matrix`.
pub fn vendor_matrix(
    ctx: &Ctx,
    only: &[String],
    quick: bool,
    keep_servers: bool,
    command_line: &str,
) -> Result<()> {
    let built = build_binary(&ctx.root)?;
    let out_dir = ctx.state.join("vendor-matrix");
    fs::create_dir_all(&out_dir)?;
    // A copy, so that a build during the long run cannot swap the binary
    // between two rows.
    let binary = out_dir.join("casaas-conformance");
    fs::copy(&built, &binary)
        .with_context(|| format!("copying {} to {}", built.display(), binary.display()))?;
    let tool_version = binary_version(&binary);

    let mut names: Vec<String> = vec!["memory".into(), "file".into()];
    let mut not_built = Vec::new();
    for server in servers::all().into_iter().filter(|s| s.is_object_store()) {
        let name = server.name();
        if server.default_enabled() || built_on_request(ctx, name) {
            names.push(name.to_string());
            if ADAPTER_SERVERS.contains(&name) {
                names.extend(
                    ADAPTERS
                        .iter()
                        .map(|(adapter, _)| format!("{name}+{adapter}")),
                );
            }
        } else {
            not_built.push(name.to_string());
        }
    }
    if !only.is_empty() {
        if let Some(unknown) = only.iter().find(|n| !names.contains(n)) {
            bail!(
                "unknown or unavailable target '{unknown}'; available: {}",
                names.join(", ")
            );
        }
        // An adapter row runs after its server's own row, which also
        // prepares the server (Azurite's container is created by it).
        let wanted: Vec<String> = only
            .iter()
            .flat_map(|n| [n.clone(), server_of(n).unwrap_or(n).to_string()])
            .collect();
        names.retain(|n| wanted.contains(n));
    }

    let mut runs = Vec::new();
    let mut started_here: Vec<String> = Vec::new();
    for (index, name) in names.iter().enumerate() {
        eprintln!("xtask: vendor-matrix: {name}");
        if let Some(server) = server_of(name)
            && !is_running(ctx, server)
            && !started_here.iter().any(|s| s == server)
        {
            started_here.push(server.to_string());
        }
        let target = match prepare(ctx, name) {
            Ok(t) => t,
            Err(e) => {
                runs.push(Run {
                    target: Target {
                        name: name.clone(),
                        kind: kind_of(name),
                        version: server_version(ctx, name),
                        url: None,
                        env: Vec::new(),
                        gateways: Vec::new(),
                    },
                    report: None,
                    exit: None,
                    problem: Some(format!(
                        "could not start: {}",
                        first_line(&format!("{e:#}"))
                    )),
                    seconds: 0.0,
                });
                continue;
            }
        };
        let run = run_binary(&binary, target, quick, &out_dir);
        if let Some(report) = &run.report {
            eprintln!("xtask: vendor-matrix: {name}: {}", verdict_line(report));
        } else {
            eprintln!(
                "xtask: vendor-matrix: {name}: {}",
                run.problem.as_deref().unwrap_or("no report")
            );
        }
        runs.push(run);
        // Stop a server this command started once its last row has run.
        if let Some(server) = server_of(name) {
            let last_use = !names[index + 1..]
                .iter()
                .any(|n| server_of(n) == Some(server));
            if last_use && !keep_servers && started_here.iter().any(|s| s == server) {
                servers::down(ctx, &[server.to_string()])?;
            }
        }
    }

    let markdown = render(&runs, &not_built, quick, command_line, &tool_version);
    let path = ctx.root.join("docs").join("vendors.md");
    fs::create_dir_all(path.parent().context("docs directory")?)?;
    fs::write(&path, markdown).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "xtask: vendor-matrix: wrote {} ({} targets; JSON reports in {})",
        path.display(),
        runs.len(),
        out_dir.display()
    );
    Ok(())
}

/// Builds the conformance binary and returns its path.
fn build_binary(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("xtask: cargo build -p casaas-conformance");
    let output = Command::new(cargo)
        .args([
            "build",
            "-p",
            "casaas-conformance",
            "--bin",
            "casaas-conformance",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("building casaas-conformance failed");
    }
    /// The fields of cargo's JSON messages read here.
    #[derive(Deserialize)]
    struct CargoMessage {
        reason: String,
        executable: Option<PathBuf>,
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<CargoMessage>(l).ok())
        .filter(|m| m.reason == "compiler-artifact")
        .filter_map(|m| m.executable)
        .find(|p| p.file_name().is_some_and(|n| n == "casaas-conformance"))
        .context("cargo build did not report the casaas-conformance executable")
}

fn binary_version(binary: &Path) -> String {
    Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "casaas-conformance (unknown version)".into())
}

/// Servers not started by default that are ready to start because their
/// (slow) build already happened.
fn built_on_request(ctx: &Ctx, name: &str) -> bool {
    let tools = ctx.tools.join(name);
    tools.join(".installed").is_file() || tools.join("bin").join(name).is_file()
}

fn is_running(ctx: &Ctx, name: &str) -> bool {
    ctx.env_file(name).is_file()
}

fn kind_of(name: &str) -> String {
    if let Some((server, adapter)) = name.split_once('+') {
        let library = ADAPTERS
            .iter()
            .find(|(a, _)| *a == adapter)
            .map_or(adapter, |(_, library)| library);
        let label = servers::named(server).map_or(server, |s| s.label());
        return format!("{label} via {library}");
    }
    match name {
        "memory" => "embedded in-memory backend",
        "file" => "embedded file backend (temporary directory)",
        server => servers::named(server).map_or("server", |s| s.kind()),
    }
    .to_string()
}

/// Starts (if needed) the target and reads what the binary needs.
fn prepare(ctx: &Ctx, name: &str) -> Result<Target> {
    let mut target = Target {
        name: name.to_string(),
        kind: kind_of(name),
        version: server_version(ctx, name),
        url: None,
        env: Vec::new(),
        gateways: Vec::new(),
    };
    let (server_name, adapter) = match name.split_once('+') {
        Some((server, adapter)) => (server, Some(adapter)),
        None => (name, None),
    };
    match server_name {
        "file" => {}
        "memory" => target.url = Some("memory://vendor-matrix/run".into()),
        server => {
            servers::up(ctx, &[server.to_string()])?;
            let mut env = ctx.test_server(server)?.env;
            match env.remove(server_env::URL_VAR) {
                Some(url) => target.url = Some(url),
                None => bail!("{server}'s env file has no store URL"),
            }
            // The server's own row races over every gateway it runs.
            if let Some(urls) = env.remove(servers::GATEWAYS_VAR)
                && adapter.is_none()
            {
                target.gateways = urls.split_whitespace().map(String::from).collect();
            }
            target.env.extend(env);
            // Versions may only be readable once installed.
            target.version = server_version(ctx, name);
            if let Some(adapter) = adapter {
                adapter_target(&mut target, server, adapter)?;
            }
        }
    }
    Ok(target)
}

/// Points `target` (the server's own row) at the same server through
/// `adapter`, configured by that library's URL and environment conventions.
/// Credentials stay in the environment, never in the URL.
fn adapter_target(target: &mut Target, server: &str, adapter: &str) -> Result<()> {
    let var = |name: &str| -> Result<String> {
        target
            .env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .with_context(|| format!("{server}'s env file has no {name}"))
    };
    let (url, extra_env): (String, Vec<(&str, String)>) = match (server, adapter) {
        ("moto", "object_store") => (
            format!(
                "object_store+s3://casaas-test/?aws_endpoint={}&aws_allow_http=true\
                 &aws_virtual_hosted_style_request=false",
                var("AWS_ENDPOINT_URL")?
            ),
            vec![],
        ),
        ("moto", "opendal") => (
            format!(
                "opendal+s3://casaas-test/?endpoint={}&region={}",
                var("AWS_ENDPOINT_URL")?,
                var("AWS_REGION")?
            ),
            vec![],
        ),
        ("azurite", library) => {
            let container = var("AZURE_STORAGE_CONTAINER")?;
            let endpoint = var("AZURE_STORAGE_ENDPOINT")?;
            let url = if library == "object_store" {
                format!(
                    "object_store+az://{container}/?azure_storage_endpoint={endpoint}\
                     &azure_allow_http=true"
                )
            } else {
                format!("opendal+azblob://{container}/?endpoint={endpoint}")
            };
            // The variable names both libraries read.
            let env = vec![
                ("AZURE_STORAGE_ACCOUNT_NAME", var("AZURE_STORAGE_ACCOUNT")?),
                ("AZURE_STORAGE_ACCOUNT_KEY", var("AZURE_STORAGE_KEY")?),
            ];
            (url, env)
        }
        ("fake-gcs", "object_store") => (
            format!(
                "object_store+gs://{}/?google_base_url={}",
                var("GCS_BUCKET")?,
                var("GCS_ENDPOINT")?
            ),
            // A key that turns OAuth off: no token is ever fetched, from a
            // metadata server or elsewhere.
            vec![(
                "GOOGLE_SERVICE_ACCOUNT_KEY",
                r#"{"disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}"#
                    .to_string(),
            )],
        ),
        ("fake-gcs", "opendal") => (
            format!(
                "opendal+gcs://{}/?endpoint={}&skip_signature=true&disable_vm_metadata=true\
                 &disable_config_load=true&conditional_delete=false",
                var("GCS_BUCKET")?,
                var("GCS_ENDPOINT")?
            ),
            vec![],
        ),
        _ => bail!("no {adapter} row for {server}"),
    };
    target.url = Some(url);
    target
        .env
        .extend(extra_env.into_iter().map(|(k, v)| (k.to_string(), v)));
    Ok(())
}

fn run_binary(binary: &Path, target: Target, quick: bool, out_dir: &Path) -> Run {
    let json_path = out_dir.join(format!("{}.json", target.name));
    let _ = fs::remove_file(&json_path);
    let mut command = Command::new(binary);
    if let Some(url) = &target.url {
        command.arg(url);
    }
    for gateway in &target.gateways {
        command.arg("--gateway").arg(gateway);
    }
    command
        .args(["--format", "json", "--output"])
        .arg(&json_path)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(target.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if quick {
        command.arg("--quick");
    }
    let started = Instant::now();
    let output = command.output();
    let seconds = started.elapsed().as_secs_f64();
    let (exit, problem) = match &output {
        Ok(o) => {
            let code = o.status.code();
            let stderr = String::from_utf8_lossy(&o.stderr);
            let problem = if code == Some(2) || code.is_none() {
                Some(
                    stderr
                        .lines()
                        .rev()
                        .find(|l| l.contains("error"))
                        .unwrap_or("the binary failed")
                        .trim()
                        .to_string(),
                )
            } else {
                None
            };
            (code, problem)
        }
        Err(e) => (None, Some(format!("could not run the binary: {e}"))),
    };
    let report = fs::read_to_string(&json_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Run {
        target,
        report,
        exit,
        problem,
        seconds,
    }
}

/// The installed version of a row's software: casaas-core's for the
/// embedded backends, the server's own otherwise (an adapter row runs on its
/// server's software).
fn server_version(ctx: &Ctx, name: &str) -> String {
    let name = name.split_once('+').map_or(name, |(server, _)| server);
    let found = match name {
        "memory" | "file" => Some(format!("casaas-core {}", env!("CARGO_PKG_VERSION"))),
        server => servers::named(server).and_then(|s| s.version(ctx)),
    };
    found.unwrap_or_else(|| "unknown".into())
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

/// Replaces loopback ports (`127.0.0.1:41234`) with `PORT`, so the document
/// does not change with every run's random ports.
fn stable_url(url: &str) -> String {
    let mut out = String::new();
    let mut rest = url;
    while let Some(i) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..i + "127.0.0.1:".len()]);
        rest = &rest[i + "127.0.0.1:".len()..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("PORT");
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// The day of the run, from the reports' own `started_at` (RFC 3339).
fn run_date(runs: &[Run]) -> String {
    runs.iter()
        .find_map(|run| {
            let started = &run.report.as_ref()?.started_at;
            started.get(..10).map(str::to_string)
        })
        .unwrap_or_else(|| "an unknown date".to_string())
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The verdict word of a report: `SAFE`, `NOT SAFE` or `INCONCLUSIVE`.
fn verdict_word(report: &Report) -> &'static str {
    match report.verdict {
        RunVerdict::Safe => "SAFE",
        RunVerdict::NotSafe => "NOT SAFE",
        RunVerdict::Inconclusive => "INCONCLUSIVE",
    }
}

/// The verdict line of a report.
fn verdict_line(report: &Report) -> &str {
    &report.summary
}

fn verdict_mark(verdict: Verdict, severity: Severity) -> &'static str {
    match (verdict, severity) {
        (Verdict::Pass, _) => "pass",
        (Verdict::Fail, Severity::Info) | (Verdict::Note, _) => "note",
        (Verdict::Fail, _) => "**FAIL**",
        (Verdict::Unsupported, _) => "unsupported",
        (Verdict::Error, _) => "error",
    }
}

/// What a store answered, in short: a word, or its error's answer.
fn answer(value: Option<&Answer>) -> String {
    match value {
        Some(Answer::Word(word)) => word.clone(),
        Some(Answer::Error(error)) => error.answer.clone().unwrap_or_else(|| "?".into()),
        None => "-".into(),
    }
}

/// A number as the JSON report wrote it (`51.0`, not `51`).
fn json_number(value: f64) -> String {
    serde_json::Number::from_f64(value).map_or_else(|| "null".into(), |n| n.to_string())
}

/// The casaas quirk options already set in a store's URL, shown as
/// "needed" for that store: xtask's env file gives each server the options it
/// needs, so the binary then has nothing left to recommend.
fn quirk_options_in_url(url: Option<&str>) -> Option<String> {
    let url = casaas_core::StoreUrl::parse(url?).ok()?;
    let given: Vec<String> = casaas_s3::S3Quirks::OPTIONS
        .iter()
        .filter_map(|name| Some(format!("{name}={}", url.option(name)?)))
        .collect();
    (!given.is_empty()).then(|| format!("{} (set in the URL)", given.join(", ")))
}

fn render(
    runs: &[Run],
    not_built: &[String],
    quick: bool,
    command_line: &str,
    tool_version: &str,
) -> String {
    let mut md = String::new();
    md.push_str("# Vendor matrix\n\n");
    md.push_str(&format!(
        "> **Generated** by `{command_line}` on {} (UTC) with {tool_version}, {} mode. \
         Do not edit by hand: run the command again. Each store's full JSON report \
         (schema in [conformance.md](conformance.md)) is kept in `.casaas/vendor-matrix/`.\n\n",
        run_date(runs),
        if quick { "quick" } else { "thorough" }
    ));
    md.push_str(
        "The first part is **measured here**: the `casaas-conformance` binary run against \
         each store that xtask can install and start on this machine, on loopback. \
         The second part, clearly marked, collects **public reports** about stores we \
         cannot run here; it is not measured by us.\n\n",
    );

    md.push_str("## Measured here\n\n");
    md.push_str(
        "| Store | What | Version | Verdict | Verdict line | Options needed | Exit | Time |\n",
    );
    md.push_str("|---|---|---|---|---|---|---|---|\n");
    for run in runs {
        let word = run.report.as_ref().map_or("-", verdict_word);
        let (verdict, options) = match &run.report {
            Some(r) => (
                verdict_line(r).to_string(),
                Some(
                    r.recommended_options
                        .iter()
                        .map(|o| o.option.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                )
                .filter(|s| !s.is_empty())
                .or_else(|| quirk_options_in_url(run.target.url.as_deref()))
                .unwrap_or_else(|| "-".into()),
            ),
            None => (
                format!("not run: {}", run.problem.as_deref().unwrap_or("no report")),
                "-".into(),
            ),
        };
        md.push_str(&format!(
            "| {} | {} | {} | **{word}** | {} | {} | {} | {:.0} s |\n",
            run.target.name,
            run.target.kind,
            cell(&run.target.version),
            cell(&verdict),
            cell(&options),
            run.exit.map_or_else(|| "-".into(), |c| c.to_string()),
            run.seconds
        ));
    }

    md.push_str(
        "\nVerdicts: **SAFE** (exit 0), **NOT SAFE** (a critical probe failed; exit 1), \
         **INCONCLUSIVE** (no critical probe failed, but some could not complete; exit 3); \
         see [conformance.md](conformance.md).\n",
    );
    if !not_built.is_empty() {
        md.push_str(&format!(
            "\nNot run this time (built from source on request, which takes long): {}. \
             Start one with `cargo xtask servers up NAME`, then run this command again.\n",
            not_built.join(", ")
        ));
    }
    md.push_str("\nURLs used (ports vary per run):\n\n");
    for run in runs {
        let url = run
            .target
            .url
            .as_deref()
            .map_or_else(|| "(none: embedded file backend)".to_string(), stable_url);
        md.push_str(&format!("- {}: `{}`\n", run.target.name, url));
        for gateway in &run.target.gateways {
            md.push_str(&format!("  - `--gateway {}`\n", stable_url(gateway)));
        }
    }

    // Probe × store matrix.
    let reported: Vec<&Run> = runs.iter().filter(|r| r.report.is_some()).collect();
    if let Some(first) = reported.first().and_then(|r| r.report.as_ref()) {
        md.push_str("\n### Probe results\n\n| Probe | Severity |");
        for run in &reported {
            md.push_str(&format!(" {} |", run.target.name));
        }
        md.push_str("\n|---|---|");
        for _ in &reported {
            md.push_str("---|");
        }
        md.push('\n');
        for p in &first.probes {
            let id = p.id.as_str();
            let severity = p.severity;
            md.push_str(&format!("| `{id}` | {severity} |"));
            for run in &reported {
                let mark = run
                    .report
                    .as_ref()
                    .and_then(|r| r.probe(id))
                    .map_or("-", |p| verdict_mark(p.verdict, p.severity));
                md.push_str(&format!(" {mark} |"));
            }
            md.push('\n');
        }
        md.push_str(
            "\n`note` = an info probe observed something worth knowing (for example \
             content-hash versions); it never changes the verdict.\n",
        );
    }

    // What each store answered.
    md.push_str("\n### What each store answered\n\n");
    md.push_str("| Store | Losing create | Stale replace | Race losers (create) | Race losers (replace) | Per-key writes/s | Replace p50 / p99 ms | Contended replace p50 / p99 ms (won; refused) | Clock skew |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for run in &reported {
        let Some(r) = &run.report else { continue };
        let histogram = |id: &str| -> String {
            let losers = r
                .probe(id)
                .and_then(|p| p.evidence_as::<RaceEvidence>())
                .map(|e| e.loser_answers)
                .unwrap_or_default();
            if losers.is_empty() {
                return "-".into();
            }
            losers
                .iter()
                .map(|(k, v)| format!("{k} ×{v}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let number = |v: Option<f64>| v.map_or_else(|| "null".into(), json_number);
        let throttle = match r.probe(probe_id::THROTTLE) {
            Some(p) => {
                let e: ThrottleEvidence = p.evidence_as().unwrap_or_default();
                if e.throttled {
                    format!(
                        "throttled at ~{} ({})",
                        number(e.throttled_at_per_s),
                        answer(e.throttle_answer.as_ref())
                    )
                } else if p.verdict == Verdict::Pass {
                    format!(
                        "≥ {} ({})",
                        number(e.max_sustained_per_s),
                        e.stopped_because.as_deref().unwrap_or("?")
                    )
                } else {
                    p.verdict.as_str().to_string()
                }
            }
            None => "-".into(),
        };
        let latency = r
            .probe(probe_id::LATENCY)
            .and_then(|p| p.evidence_as::<LatencyEvidence>())
            .and_then(|e| e.replace)
            .map_or_else(
                || "-".into(),
                |p| format!("{} / {}", json_number(p.p50_ms), json_number(p.p99_ms)),
            );
        let contended = r
            .probe(probe_id::RACE_REPLACE)
            .and_then(|p| p.evidence_as::<RaceEvidence>())
            .map(|e| e.contended_latency_ms)
            .map_or_else(
                || "-".into(),
                |c| {
                    let pair = |p: Option<Percentiles>| {
                        p.map_or_else(
                            || "-".into(),
                            |p| format!("{} / {}", json_number(p.p50_ms), json_number(p.p99_ms)),
                        )
                    };
                    format!("{}; {}", pair(c.winners), pair(c.losers))
                },
            );
        let skew = r
            .probe(probe_id::CLOCK_SKEW)
            .and_then(|p| p.evidence_as::<ClockSkewEvidence>())
            .and_then(|e| e.median_skew_s)
            .map_or_else(|| "-".into(), |v| format!("{} s", json_number(v)));
        let second_create = r
            .probe(probe_id::CREATE_CONFLICT)
            .and_then(|p| p.evidence_as::<CreateConflictEvidence>())
            .and_then(|e| e.second_create);
        let stale_replace = r
            .probe(probe_id::REPLACE_STALE)
            .and_then(|p| p.evidence_as::<ReplaceStaleEvidence>())
            .and_then(|e| e.stale_replace);
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            run.target.name,
            cell(&answer(second_create.as_ref())),
            cell(&answer(stale_replace.as_ref())),
            cell(&histogram(probe_id::RACE_CREATE)),
            cell(&histogram(probe_id::RACE_REPLACE)),
            cell(&throttle),
            latency,
            contended,
            skew
        ));
    }

    // Failures in words.
    let mut failures = String::new();
    for run in &reported {
        let Some(r) = &run.report else { continue };
        for p in &r.probes {
            let (verdict, severity) = (p.verdict, p.severity);
            if matches!(verdict, Verdict::Fail | Verdict::Error) && severity != Severity::Info {
                failures.push_str(&format!(
                    "- **{}** `{}` ({severity}, {verdict}): {} — {}\n",
                    run.target.name,
                    p.id,
                    cell(&p.detail),
                    cell(&p.explanation)
                ));
            }
        }
    }
    // What other tests found on a server, which the probes above may miss.
    for server in servers::all() {
        if !runs
            .iter()
            .any(|r| server_of(&r.target.name) == Some(server.name()))
        {
            continue;
        }
        for finding in server.known_findings() {
            failures.push_str(&format!(
                "- **{}** (found by other tests, not reliably by the probes): {finding}\n",
                server.name()
            ));
        }
    }
    if !failures.is_empty() {
        md.push_str("\n### Findings\n\n");
        md.push_str(&failures);
    }

    md.push('\n');
    md.push_str(PUBLIC_REPORTS);
    md
}

/// Stores we cannot run here: what public sources say, with links. Not
/// measured by us; edited by hand in docs/, copied into every generated
/// document.
const PUBLIC_REPORTS: &str = include_str!("../../docs/vendors-public-reports.md");

/// The exact command line, for the document.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut line = String::from("cargo xtask");
    for a in args {
        line.push(' ');
        line.push_str(&a);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_rows_belong_to_their_server() {
        assert_eq!(server_of("moto+object_store"), Some("moto"));
        assert_eq!(server_of("fake-gcs"), Some("fake-gcs"));
        assert_eq!(server_of("memory"), None);
        assert_eq!(kind_of("azurite+opendal"), "Azurite via OpenDAL 0.59");
        assert_eq!(kind_of("moto+object_store"), "moto via object_store 0.14");
    }

    #[test]
    fn a_servers_known_findings_are_printed_beside_the_probes() {
        let run = |name: &str| Run {
            target: Target {
                name: name.into(),
                kind: kind_of(name),
                version: "moto 5.2.1".into(),
                url: None,
                env: Vec::new(),
                gateways: Vec::new(),
            },
            report: None,
            exit: None,
            problem: Some("could not start".into()),
            seconds: 0.0,
        };
        let md = render(&[run("moto")], &[], false, "cargo xtask vendor-matrix", "x");
        assert!(md.contains("### Findings"), "{md}");
        assert!(md.contains("- **moto** (found by other tests"), "{md}");
        assert!(md.contains("**not atomic**"), "{md}");
        // Only for servers in the run.
        let md = render(
            &[run("azurite")],
            &[],
            false,
            "cargo xtask vendor-matrix",
            "x",
        );
        assert!(!md.contains("**moto**"), "{md}");
    }

    #[test]
    fn adapter_urls_keep_credentials_in_the_environment() {
        let mut target = Target {
            name: "azurite+object_store".into(),
            kind: kind_of("azurite+object_store"),
            version: String::new(),
            url: None,
            env: vec![
                ("AZURE_STORAGE_ACCOUNT".into(), "devstoreaccount1".into()),
                ("AZURE_STORAGE_KEY".into(), "SECRETKEY".into()),
                ("AZURE_STORAGE_CONTAINER".into(), "c".into()),
                (
                    "AZURE_STORAGE_ENDPOINT".into(),
                    "http://127.0.0.1:1/devstoreaccount1".into(),
                ),
            ],
            gateways: Vec::new(),
        };
        adapter_target(&mut target, "azurite", "object_store").unwrap();
        let url = target.url.unwrap();
        assert!(url.starts_with("object_store+az://c/"), "{url}");
        assert!(!url.contains("SECRETKEY"), "{url}");
        assert!(
            target
                .env
                .iter()
                .any(|(k, v)| k == "AZURE_STORAGE_ACCOUNT_KEY" && v == "SECRETKEY")
        );
    }
}
