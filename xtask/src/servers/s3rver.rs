//! s3rver (npm): an S3 emulator that silently ignores `If-None-Match` and
//! `If-Match`. It is the lying control: the tests expect casaas to detect
//! that a losing create succeeds there.

use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use super::{Ctx, Procs, Server, Started, npm_prefix, npm_version, s3_started, wait_for_http};

/// The pinned release.
const PACKAGE: &str = "s3rver@3.7.1";
/// The bucket the tests use (created at start with `--configure-bucket`).
const BUCKET: &str = "casaas-test";

/// s3rver on loopback, data in the server's state directory.
pub struct S3rver;

impl Server for S3rver {
    fn name(&self) -> &'static str {
        "s3rver"
    }

    fn kind(&self) -> &'static str {
        "S3 emulator (s3rver, Node.js)"
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        npm_version(ctx, "s3rver", "s3rver")
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        npm_prefix(ctx, "s3rver", &[PACKAGE]).map(|_| ())
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let bin = npm_prefix(ctx, "s3rver", &[PACKAGE])?;
        let data = procs.dir().join("data");
        std::fs::create_dir_all(&data)?;
        let mut command = Command::new(bin.join("s3rver"));
        command
            .args(["--address", "127.0.0.1", "--port", &port.to_string()])
            .arg("--directory")
            .arg(&data)
            .args(["--configure-bucket", BUCKET, "--silent"]);
        procs.spawn("s3rver", command)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        wait_for_http(&format!("{endpoint}/"), Duration::from_secs(30))?;
        // s3rver checks signatures against its fixed development key pair.
        Ok(s3_started(BUCKET, &endpoint, "S3RVER", "S3RVER", ""))
    }
}
