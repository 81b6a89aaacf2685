//! `cargo xtask man`: writes `casaas-cli/man/casaas.1`, the manual page of
//! the `casaas` command, from its clap definitions (the binary prints it
//! with its hidden `__man` argument). `casaas-cli/tests/man.rs` fails when
//! the committed page differs from what the command prints.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Builds the command and writes its manual page.
pub fn man(root: &Path) -> Result<()> {
    crate::cargo(
        &root.to_path_buf(),
        &["build", "-p", "casaas-cli", "--bins"],
    )?;
    let output = Command::new(root.join("target").join("debug").join("casaas"))
        .arg("__man")
        .output()
        .context("running casaas __man")?;
    if !output.status.success() {
        bail!("casaas __man failed ({})", output.status);
    }
    let dir = root.join("casaas-cli").join("man");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("casaas.1");
    std::fs::write(&path, &output.stdout)?;
    eprintln!(
        "xtask: wrote {} (`man -l {}` shows it)",
        path.display(),
        path.display()
    );
    Ok(())
}
