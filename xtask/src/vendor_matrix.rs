//! `cargo xtask vendor-matrix`: runs the conformance binary against every
//! store this machine can run and writes `docs/vendors.md`.
//!
//! Targets: the embedded backends (`memory`, `file`) and every server of
//! [`servers::all`] that starts by default, plus those built on request
//! (Garage, once its binary exists). Each run's JSON report is kept in
//! `.casaas/vendor-matrix/NAME.json`, and the run's own facts (rows, exit
//! statuses, times, command line, date, mode) in
//! `.casaas/vendor-matrix/runs.json` ([`stored`]); the Markdown is generated
//! from them ([`render`]), followed by a fixed section on what public reports
//! say about stores that cannot run here. `cargo xtask vendor-matrix
//! --render` writes the page again from that directory, starting nothing.
//!
//! Each S3, Azure and GCS emulator is probed a second and third time through
//! the adapters table formats use (`object_store+URL`, `opendal+URL`): rows
//! named `SERVER+object_store` and `SERVER+opendal`, run right after the
//! server's own row and before the server is stopped.

mod render;
mod stored;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use casaas_core::testkit::server_env;

use crate::servers::{self, Ctx};
use render::{Known, verdict_line};
use stored::{Mode, Page, Run};

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

/// `cargo xtask vendor-matrix`.
pub fn vendor_matrix(
    ctx: &Ctx,
    only: &[String],
    quick: bool,
    keep_servers: bool,
    command_line: &str,
) -> Result<()> {
    let built = build_binary(&ctx.root)?;
    let out_dir = out_dir(ctx);
    fs::create_dir_all(&out_dir)?;
    // A copy, so that a build during the long run cannot swap the binary
    // between two rows.
    let binary = out_dir.join("casaas-conformance");
    fs::copy(&built, &binary)
        .with_context(|| format!("copying {} to {}", built.display(), binary.display()))?;
    let tool_version = binary_version(&binary);

    let (names, not_built) = target_names(ctx, only)?;
    let runs = run_all(ctx, &names, &binary, quick, keep_servers, &out_dir)?;
    let page = Page {
        command_line: command_line.to_string(),
        date: render::run_date(&runs),
        mode: Mode::of(quick),
        tool_version,
        not_built,
        runs,
    };
    stored::save(&out_dir, &page)?;
    write_page(ctx, &page, &out_dir)
}

/// `cargo xtask vendor-matrix --render`: the page again from the last run's
/// stored reports and `runs.json`, starting nothing.
pub fn render_stored(ctx: &Ctx) -> Result<()> {
    let out_dir = out_dir(ctx);
    let page = stored::load(&out_dir)?;
    write_page(ctx, &page, &out_dir)
}

/// Where the binary, its reports and `runs.json` are kept.
fn out_dir(ctx: &Ctx) -> PathBuf {
    ctx.state.join("vendor-matrix")
}

/// Writes `docs/vendors.md`.
fn write_page(ctx: &Ctx, page: &Page, out_dir: &Path) -> Result<()> {
    let markdown = render::render(page, &Known::of_this_tree());
    let path = ctx.root.join("docs").join("vendors.md");
    fs::create_dir_all(path.parent().context("docs directory")?)?;
    fs::write(&path, markdown).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "xtask: vendor-matrix: wrote {} ({} targets; JSON reports in {})",
        path.display(),
        page.runs.len(),
        out_dir.display()
    );
    Ok(())
}

/// The rows to run, in order (limited to `only` and the server rows they
/// need, if given), and the servers left out because they are built only on
/// request.
fn target_names(ctx: &Ctx, only: &[String]) -> Result<(Vec<String>, Vec<String>)> {
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
    Ok((names, not_built))
}

/// Runs the binary on every row, starting each server before its first
/// row and stopping those started here after their last.
fn run_all(
    ctx: &Ctx,
    names: &[String],
    binary: &Path,
    quick: bool,
    keep_servers: bool,
    out_dir: &Path,
) -> Result<Vec<Run>> {
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
        let run = match prepare(ctx, name) {
            Ok(target) => {
                let run = run_binary(binary, target, quick, out_dir);
                let outcome = match &run.report {
                    Some(report) => verdict_line(report),
                    None => run.problem.as_deref().unwrap_or("no report"),
                };
                eprintln!("xtask: vendor-matrix: {name}: {outcome}");
                run
            }
            Err(e) => not_started(ctx, name, &e),
        };
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
    Ok(runs)
}

/// The row of a target that could not be prepared.
fn not_started(ctx: &Ctx, name: &str, error: &anyhow::Error) -> Run {
    Run {
        name: name.to_string(),
        kind: kind_of(name),
        version: server_version(ctx, name),
        url: None,
        env_names: Vec::new(),
        gateways: Vec::new(),
        exit: None,
        seconds: 0.0,
        problem: Some(format!(
            "could not start: {}",
            first_line(&format!("{error:#}"))
        )),
        report_file: None,
        report: None,
    }
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
    let report = stored::read_report(&json_path).ok();
    Run {
        report_file: report.as_ref().map(|_| format!("{}.json", target.name)),
        report,
        name: target.name,
        kind: target.kind,
        version: target.version,
        url: target.url,
        env_names: target.env.into_iter().map(|(name, _)| name).collect(),
        gateways: target.gateways,
        exit,
        seconds,
        problem,
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
        let page = |name: &str| Page {
            command_line: "cargo xtask vendor-matrix".into(),
            date: "an unknown date".into(),
            mode: Mode::Thorough,
            tool_version: "x".into(),
            not_built: Vec::new(),
            runs: vec![Run {
                name: name.into(),
                kind: kind_of(name),
                version: "moto 5.2.1".into(),
                url: None,
                env_names: Vec::new(),
                gateways: Vec::new(),
                exit: None,
                seconds: 0.0,
                problem: Some("could not start".into()),
                report_file: None,
                report: None,
            }],
        };
        let md = render::render(&page("moto"), &Known::of_this_tree());
        assert!(md.contains("### Findings"), "{md}");
        assert!(md.contains("- **moto** (found by other tests"), "{md}");
        assert!(md.contains("**not atomic**"), "{md}");
        // Only for servers in the run.
        let md = render::render(&page("azurite"), &Known::of_this_tree());
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
