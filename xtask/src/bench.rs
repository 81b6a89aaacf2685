//! `cargo xtask bench [--quick]`: starts Ceph RGW, moto, Azurite, etcd and
//! Redis on loopback, runs the `casaas-bench` binary (release build) against
//! them, writes docs/performance.md, stops the servers, and prints the
//! headline `name=value` lines last. The Python package is built in release
//! into a virtualenv of its own beside python-redis-lock for the Python
//! section.

use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::servers::{self, Ctx};

/// The servers the benchmark measures, in start order.
const SERVERS: [&str; 5] = ["ceph", "moto", "azurite", "etcd", "redis"];

pub fn bench(ctx: &Ctx, quick: bool, keep_servers: bool) -> Result<()> {
    let mut running = Vec::new();
    for name in SERVERS {
        // A server that cannot start here leaves its rows out of the report
        // instead of failing the whole run.
        match servers::up(ctx, &[name.to_string()]) {
            Ok(()) => running.push(name),
            Err(err) => {
                eprintln!("xtask: bench: {name} did not start, measuring without it: {err:#}")
            }
        }
    }
    let result = run(ctx, quick, &running);
    if !keep_servers {
        let names: Vec<String> = running.iter().map(|s| s.to_string()).collect();
        servers::down(ctx, &names)?;
    }
    let headlines = result?;
    print!("{headlines}");
    Ok(())
}

fn run(ctx: &Ctx, quick: bool, running: &[&str]) -> Result<String> {
    let work_dir = ctx.state.join("bench");
    std::fs::create_dir_all(&work_dir)?;
    let out = ctx.root.join("docs").join("performance.md");
    let mut args: Vec<String> = vec![
        "run".into(),
        "--release".into(),
        "--quiet".into(),
        "-p".into(),
        "casaas-bench".into(),
        "--".into(),
        "run".into(),
        "--out".into(),
        out.display().to_string(),
        "--work-dir".into(),
        work_dir.display().to_string(),
    ];
    if quick {
        args.push("--quick".into());
    }
    for name in running {
        args.push("--server".into());
        args.push(format!(
            "{name}={}",
            ctx.server_dir(name).join("env").display()
        ));
    }
    for (name, version) in versions(running) {
        args.push("--version".into());
        args.push(format!("{name}={version}"));
    }
    // The `casaas` command, timed per invocation beside `etcdctl lock`.
    crate::cargo(
        &ctx.root,
        &["build", "--release", "--quiet", "-p", "casaas-cli"],
    )?;
    // The Python package in release, for the Python section; a run goes on
    // without that section when it cannot be built here.
    match crate::python::bench_python(ctx, &work_dir.join("wheels")) {
        Ok((python, build_seconds)) => {
            args.push("--python".into());
            args.push(python.display().to_string());
            args.push("--python-build-seconds".into());
            args.push(format!("{build_seconds:.1}"));
        }
        Err(err) => eprintln!("xtask: bench: no Python section: {err:#}"),
    }
    let casaas_bin = ctx.root.join("target").join("release").join("casaas");
    eprintln!("xtask: cargo {}", args.join(" "));
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(&args)
        .current_dir(&ctx.root)
        .env("CASAAS_BIN", &casaas_bin)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .context("running casaas-bench")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        eprint!("{stdout}");
        bail!("casaas-bench failed ({})", output.status);
    }
    Ok(stdout)
}

/// Versions of what runs, for the report's header.
fn versions(running: &[&str]) -> Vec<(String, String)> {
    let mut versions = vec![];
    // The commit measured, so the page says which code its figures are of.
    if let Ok(output) = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        && output.status.success()
    {
        let commit = String::from_utf8_lossy(&output.stdout).trim().to_string();
        versions.push(("commit".into(), commit));
    }
    if let Ok(output) = Command::new("rustc").arg("--version").output() {
        versions.push(("rustc".into(), first_word_after(&output.stdout, "rustc")));
    }
    for name in running {
        match *name {
            "ceph" => {
                if let Ok(output) = Command::new("radosgw").arg("--version").output() {
                    versions.push((
                        "Ceph RGW".into(),
                        first_word_after(&output.stdout, "version"),
                    ));
                }
            }
            "moto" => versions.push(("moto".into(), servers::MOTO_VERSION.into())),
            "azurite" => versions.push(("Azurite".into(), servers::AZURITE_VERSION.into())),
            _ => {}
        }
    }
    versions
}

/// The word after `marker` in `text` ("ceph version 16.2.11 (...)" → 16.2.11).
fn first_word_after(text: &[u8], marker: &str) -> String {
    let text = String::from_utf8_lossy(text);
    text.split_whitespace()
        .skip_while(|w| *w != marker)
        .nth(1)
        .unwrap_or("?")
        .to_string()
}
