//! `createonly`: an S3 store that honours only create-if-absent — SeaweedFS
//! (a real distributed store whose conditional writes were measured atomic)
//! behind xtask's own proxy, which answers `501 NotImplemented` to every
//! request carrying `If-Match` and forwards everything else unchanged
//! (`If-None-Match` included). The stores it stands for (Aliyun OSS, Tencent
//! COS through their create-only headers) cannot run here.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use super::{Ctx, Procs, Server, Started, s3_started, seaweedfs, up, wait_for_http};

/// The server in front of which the proxy runs: its creates must be atomic
/// (moto's are not), or the races on the create-only layout prove nothing.
const UPSTREAM: &str = "seaweedfs";

/// SeaweedFS behind the create-only proxy.
pub struct CreateOnly;

impl Server for CreateOnly {
    fn name(&self) -> &'static str {
        "createonly"
    }

    fn kind(&self) -> &'static str {
        "S3 with create-if-absent only (SeaweedFS behind a proxy that answers 501 to If-Match)"
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        seaweedfs::Seaweedfs
            .version(ctx)
            .map(|v| format!("{v} behind the createonly proxy"))
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        seaweedfs::Seaweedfs.install(ctx)
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        // The upstream keeps its own state directory and PIDs: it is started
        // if needed, and `servers down createonly` leaves it running.
        up(ctx, &[UPSTREAM.to_string()])?;
        let upstream = ctx.test_server(UPSTREAM)?;
        let upstream_endpoint = upstream.var("AWS_ENDPOINT_URL").to_string();
        let bucket = bucket_of(&upstream.url)?;
        // This very binary: on Linux through /proc/self/exe, which still
        // runs when a build replaced the file during a long run (the vendor
        // matrix); elsewhere by its path.
        let proc_exe = std::path::Path::new("/proc/self/exe");
        let exe = if proc_exe.exists() {
            proc_exe.to_path_buf()
        } else {
            std::env::current_exe().context("finding the xtask binary")?
        };
        let mut command = Command::new(exe);
        command.args([
            "createonly-proxy",
            "--listen",
            &port.to_string(),
            "--upstream",
            &upstream_endpoint,
        ]);
        procs.spawn("createonly-proxy", command)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        wait_for_http(&format!("{endpoint}/"), Duration::from_secs(30))?;
        Ok(s3_started(
            &bucket,
            &endpoint,
            upstream.var("AWS_ACCESS_KEY_ID"),
            upstream.var("AWS_SECRET_ACCESS_KEY"),
            "",
        ))
    }
}

/// The bucket of an `s3://BUCKET/...` URL.
fn bucket_of(url: &str) -> Result<String> {
    let parsed = casaas_core::StoreUrl::parse(url)?;
    Some(parsed.authority())
        .filter(|b| parsed.scheme() == "s3" && !b.is_empty())
        .map(str::to_string)
        .with_context(|| format!("no bucket in the upstream's store URL {parsed}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_of_reads_the_authority() {
        assert_eq!(
            bucket_of("s3://casaas-test/?endpoint=http://127.0.0.1:1&path_style=true").unwrap(),
            "casaas-test"
        );
        assert_eq!(bucket_of("s3://b%2Dx/p").unwrap(), "b-x");
        assert!(bucket_of("gs://b/p").is_err());
        assert!(bucket_of("s3:///p").is_err());
        assert!(bucket_of("not a url").is_err());
    }
}
