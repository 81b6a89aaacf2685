//! moto's standalone server (PyPI `moto[server]`): the reference S3
//! emulator for conditional writes (`If-None-Match: *`, `If-Match`).

use std::process::Command;
use std::time::Duration;

use anyhow::{Result, bail};

use super::{
    Ctx, Procs, Server, Started, http_request, pip_version, python_venv, s3_started, wait_for_http,
};

/// The pinned release.
const PACKAGE: &str = "moto[server]==5.2.1";
/// The pinned version, for reports.
pub const VERSION: &str = "5.2.1";
/// The bucket the tests use.
const BUCKET: &str = "casaas-test";

/// moto's server on loopback.
pub struct Moto;

impl Server for Moto {
    fn name(&self) -> &'static str {
        "moto"
    }

    fn kind(&self) -> &'static str {
        "S3 emulator (moto server, Python)"
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        pip_version(ctx, "moto", "moto").map(|v| format!("moto {v}"))
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        python_venv(ctx, "moto", &[PACKAGE]).map(|_| ())
    }

    fn known_findings(&self) -> &'static [&'static str] {
        &[
            "conditional writes are **not atomic**. moto 5.2.1 checks `If-Match` / \
             `If-None-Match`, then stores the object later with no lock between, in a \
             threaded server, so two concurrent conditional writes of one version can both \
             succeed. The race needs the server's thread to be descheduled between the two \
             steps, so it shows under CPU load: the ten-minute chaos run on a loaded machine \
             had 4 overlapping holders (`cargo xtask chaos --server moto --minutes 10`), and \
             12 writers x 300 rounds had two winners in 4 rounds \
             (`casaas-testkit/tests/server_races.rs`, ignored for moto). On a quiet machine \
             the race probes ran over 900 rounds of 12 writers without one. Use moto to test \
             semantics, never to judge exclusion.",
        ]
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let bin = python_venv(ctx, "moto", &[PACKAGE])?;
        let mut command = Command::new(bin.join("moto_server"));
        command.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        procs.spawn("moto_server", command)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        wait_for_http(&format!("{endpoint}/"), Duration::from_secs(60))?;
        // moto does not check signatures, so a plain PUT creates the bucket.
        let status = http_request(port, "PUT", &format!("/{BUCKET}"), &[])?;
        if !(200..300).contains(&status) {
            bail!("creating bucket {BUCKET} on moto answered HTTP {status}");
        }
        Ok(s3_started(BUCKET, &endpoint, "test", "test", ""))
    }
}
