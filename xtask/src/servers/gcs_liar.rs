//! gcp-storage-emulator (PyPI): a GCS emulator that accepts
//! `ifGenerationMatch` and silently ignores it on every write. It is the
//! lying control: the `casaas-gcs` tests expect a losing create to succeed
//! there and several racers to win, and fail if that goes unnoticed.

use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use super::{
    Ctx, Procs, Server, Started, create_gcs_bucket, gcs_started, pip_version, python_venv,
    wait_for_http,
};

/// The pinned release.
const PACKAGE: &str = "gcp-storage-emulator==2026.7.19";
/// The bucket the tests use.
const BUCKET: &str = "casaas-test";

/// gcp-storage-emulator on loopback, in memory.
pub struct GcsLiar;

impl Server for GcsLiar {
    fn name(&self) -> &'static str {
        "gcs-liar"
    }

    fn kind(&self) -> &'static str {
        "GCS emulator (gcp-storage-emulator)"
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        pip_version(ctx, "gcs-liar", "gcp-storage-emulator")
            .map(|v| format!("gcp-storage-emulator {v}"))
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        python_venv(ctx, "gcs-liar", &[PACKAGE]).map(|_| ())
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let bin = python_venv(ctx, "gcs-liar", &[PACKAGE])?;
        let mut command = Command::new(bin.join("gcp-storage-emulator"));
        command
            .args(["start", "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--in-memory", "--quiet"]);
        procs.spawn("gcp-storage-emulator", command)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        // `GET /` is the emulator's health check.
        wait_for_http(&format!("{endpoint}/"), Duration::from_secs(60))?;
        create_gcs_bucket(port, BUCKET)?;
        Ok(gcs_started(BUCKET, &endpoint, ""))
    }
}
