//! `cargo xtask package`: every published crate packaged together, as
//! `cargo publish` would upload them; `cargo xtask hakari`: the workspace
//! hack as cargo-hakari writes it.
//!
//! The published crates are the workspace members without `publish =
//! false`, read from `cargo metadata`, so a new crate is checked as soon as
//! it is added. They are packaged in one `cargo package` run, which resolves
//! each against the others' packages (none of them need be on crates.io
//! yet) and against crates.io: a path dependency without a version, or a
//! dependency on an unpublished crate, fails here; casaas-core's package
//! is also built, the others' only with `--verify` (they rebuild the
//! provider SDKs: many minutes). The workspace hack
//! (package `workspace-hack`, `publish = false`) is named with a version, so
//! a packaged crate depends on the empty `workspace-hack` 0.1 stub of
//! crates.io instead: its users compile none of the hack's union.
//!
//! The hack's dependencies and the dependents' lines are cargo-hakari's
//! (`.config/hakari.toml`). `cargo xtask hakari` installs the pinned
//! cargo-hakari under `.casaas/tools/hakari/` when missing, then checks that
//! `cargo hakari generate` and `cargo hakari manage-deps` would change
//! nothing (`--write`: lets them write).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The cargo-hakari release the checks run; the hack's contents can differ
/// between releases, so everyone runs the same one.
const HAKARI_VERSION: &str = "0.9.39";

fn cargo_program() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// The workspace members that are published (no `publish = false`).
pub fn published(root: &Path) -> Result<Vec<String>> {
    let output = Command::new(cargo_program())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed");
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let mut names: Vec<String> = meta["packages"]
        .as_array()
        .context("no packages in cargo metadata")?
        .iter()
        // `publish = false` is an empty list; null means any registry.
        .filter(|package| package["publish"].is_null())
        .filter_map(|package| package["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

/// The published crates built from their packages even without
/// `--verify`: each needs no other workspace package and builds in
/// seconds. (The rest need the provider SDKs, compiled again with the
/// packages' own features: many minutes.)
const ALWAYS_VERIFIED: &[&str] = &["casaas-core"];

/// Packages every published crate together; with `verify`, each package
/// is also built from its tarball alone (its files, its dependencies from
/// the other packages and crates.io), and without it only those of
/// [`ALWAYS_VERIFIED`].
pub fn package(root: &Path, verify: bool) -> Result<()> {
    let crates = published(root)?;
    if crates.is_empty() {
        bail!("cargo metadata lists no published crate");
    }
    let started = std::time::Instant::now();
    cargo_package(root, &crates, verify)?;
    if !verify {
        let cheap: Vec<String> = ALWAYS_VERIFIED
            .iter()
            .map(|name| name.to_string())
            .filter(|name| crates.contains(name))
            .collect();
        cargo_package(root, &cheap, true)?;
    }
    eprintln!(
        "xtask: {} crates packaged together in {:.0?}",
        crates.len(),
        started.elapsed()
    );
    Ok(())
}

/// `cargo package` of `crates` in one run (`--no-verify` unless `verify`).
fn cargo_package(root: &Path, crates: &[String], verify: bool) -> Result<()> {
    // The working tree is what is checked, committed or not.
    let mut args = vec![
        "package".to_string(),
        "--locked".to_string(),
        "--allow-dirty".to_string(),
    ];
    if !verify {
        args.push("--no-verify".into());
    }
    for name in crates {
        args.push("-p".into());
        args.push(name.clone());
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(cargo_program())
        .args(&args)
        .current_dir(root)
        .status()
        .context("running cargo package")?;
    if !status.success() {
        bail!(
            "cargo package failed ({status}): a published crate does not package \
             (a dependency without a version or on an unpublished crate, or a file \
             from outside its folder?)"
        );
    }
    Ok(())
}

/// Checks (or, with `write`, updates) the workspace hack and the lines
/// that depend on it, as the pinned cargo-hakari computes them.
pub fn hakari(root: &Path, write: bool) -> Result<()> {
    let bin = install_hakari(root)?;
    let steps: [&[&str]; 2] = if write {
        [&["generate"], &["manage-deps", "--yes"]]
    } else {
        [&["generate", "--diff"], &["manage-deps", "--dry-run"]]
    };
    for step in steps {
        hakari_step(root, &bin, step)?;
    }
    if !write {
        eprintln!("xtask: the workspace hack is as cargo-hakari {HAKARI_VERSION} writes it");
    }
    Ok(())
}

/// One `cargo hakari` command with the pinned release first on `PATH`.
fn hakari_step(root: &Path, bin: &Path, args: &[&str]) -> Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)),
    )?;
    eprintln!("xtask: cargo hakari {}", args.join(" "));
    // `generate --diff` and `manage-deps --dry-run` exit with 1 when they
    // would change something.
    let status = Command::new(cargo_program())
        .arg("hakari")
        .args(args)
        .env("PATH", path)
        .current_dir(root)
        .status()
        .with_context(|| format!("running cargo hakari {}", args.join(" ")))?;
    if !status.success() {
        bail!(
            "cargo hakari {} failed ({status}): run `cargo xtask hakari --write` and \
             commit the workspace hack and the manifests it changes",
            args.join(" ")
        );
    }
    Ok(())
}

/// The `bin` folder holding the pinned cargo-hakari, installed from
/// crates.io when missing or another release.
fn install_hakari(root: &Path) -> Result<PathBuf> {
    let tools = root.join(".casaas").join("tools").join("hakari");
    let bin = tools.join("bin");
    let installed = Command::new(bin.join("cargo-hakari"))
        .args(["hakari", "--version"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned());
    if installed.is_some_and(|version| version.split_whitespace().any(|w| w == HAKARI_VERSION)) {
        return Ok(bin);
    }
    let started = std::time::Instant::now();
    eprintln!("xtask: cargo install cargo-hakari {HAKARI_VERSION}");
    let status = Command::new(cargo_program())
        .args([
            "install",
            "cargo-hakari",
            "--locked",
            "--version",
            HAKARI_VERSION,
        ])
        .arg("--root")
        .arg(&tools)
        .current_dir(root)
        .status()
        .context("running cargo install cargo-hakari")?;
    if !status.success() {
        bail!("cargo install cargo-hakari failed ({status})");
    }
    eprintln!("xtask: cargo-hakari installed in {:.0?}", started.elapsed());
    Ok(bin)
}
