//! Ceph RGW: a single-node cluster from Debian's packages (one monitor, one
//! memstore OSD, one radosgw), everything bound to 127.0.0.1 and kept under
//! the server's state directory.
//!
//! Settings that matter, each found the hard way:
//! - `auth ... required = none` plus `ms mon client mode = crc`: without the
//!   latter radosgw never finishes authenticating with the monitor.
//! - beast with `tcp_nodelay=1`: otherwise every error response waits for
//!   the delayed ACK (about 45 ms each).
//! - pools of size 1 (`mon allow pool size one`), memstore so no disk is
//!   formatted, no manager daemon (nothing here needs one).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{
    Ctx, Procs, Server, Started, apt_install, create_bucket_signed, dpkg_version, free_port, retry,
    run, wait_for_http, wait_for_tcp,
};

/// The Debian packages that provide the daemons and tools used below
/// (`curl` signs the one request that creates the bucket).
const PACKAGES: &[&str] = &["ceph-mon", "ceph-osd", "radosgw", "ceph-common", "curl"];
/// Binaries that must exist after the install.
const BINARIES: &[&str] = &[
    "ceph-mon",
    "ceph-osd",
    "radosgw",
    "radosgw-admin",
    "monmaptool",
    "ceph",
    "curl",
];

/// Test credentials of the S3 user created at start (loopback only).
const ACCESS_KEY: &str = "CASAASCEPHTESTKEY001";
const SECRET_KEY: &str = "casaas-ceph-test-secret-0000000000000000";
const BUCKET: &str = "casaas";
/// RGW accepts any SigV4 region; this is what clients sign with.
const REGION: &str = "us-east-1";
/// The radosgw daemon's name (its config section).
const RGW_NAME: &str = "client.rgw.a";

/// Debian's Ceph (16.2 on bookworm) running one RGW on loopback.
pub struct Ceph;

impl Server for Ceph {
    fn name(&self) -> &'static str {
        "ceph"
    }

    fn kind(&self) -> &'static str {
        "Ceph RADOS Gateway, single node"
    }

    fn version(&self, _ctx: &Ctx) -> Option<String> {
        dpkg_version("radosgw")
    }

    fn install(&self, _ctx: &Ctx) -> Result<()> {
        apt_install("ceph", PACKAGES, BINARIES)
    }

    fn start(&self, _ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let started = Instant::now();
        let dir = procs.dir().to_path_buf();
        let dir = dir.canonicalize().unwrap_or(dir);
        for sub in ["mon", "osd", "run", "logs"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let mon_port = free_port()?;
        let fsid = random_uuid()?;
        let conf = dir.join("ceph.conf");
        fs::write(&conf, config(&dir, &fsid, mon_port, port))?;
        let conf_arg = conf.display().to_string();
        let ceph = |program: &str| {
            let mut c = Command::new(program);
            c.arg("-c").arg(&conf_arg);
            c
        };

        // Monitor: a one-member monmap, then its store.
        let monmap = dir.join("monmap");
        run(Command::new("monmaptool")
            .args(["--create", "--clobber", "--fsid", &fsid, "--addv", "a"])
            .arg(format!("[v1:127.0.0.1:{mon_port}]"))
            .arg(&monmap))?;
        run(ceph("ceph-mon")
            .args(["--mkfs", "-i", "a", "--monmap"])
            .arg(&monmap))?;
        procs.spawn("ceph-mon", {
            let mut c = ceph("ceph-mon");
            c.args(["-f", "-i", "a"]);
            c
        })?;
        wait_for_tcp(mon_port, Duration::from_secs(30))?;

        // OSD 0 on memstore: register it and place it in the CRUSH map,
        // then format it. (The OSD's own placement at start is off: with
        // auth none it may send that command before it knows the cluster's
        // fsid, get EPERM "wrong fsid" and exit.)
        let osd_uuid = random_uuid()?;
        retry(Duration::from_secs(30), || {
            run(ceph("ceph")
                .args(["--connect-timeout", "10", "osd", "new"])
                .arg(&osd_uuid))
        })?;
        run(ceph("ceph").args([
            "--connect-timeout",
            "10",
            "osd",
            "crush",
            "add",
            "osd.0",
            "1.0",
            "root=default",
        ]))?;
        run(ceph("ceph-osd").args(["--mkfs", "-i", "0", "--osd-uuid", &osd_uuid]))?;
        procs.spawn("ceph-osd", {
            let mut c = ceph("ceph-osd");
            c.args(["-f", "-i", "0"]);
            c
        })?;

        // radosgw creates its pools itself once the OSD is up, then listens.
        procs.spawn("radosgw", {
            let mut c = ceph("radosgw");
            c.args(["-f", "-n", RGW_NAME]);
            c
        })?;
        let endpoint = format!("http://127.0.0.1:{port}");
        wait_for_http(&format!("{endpoint}/"), Duration::from_secs(120))?;

        run(ceph("radosgw-admin").args([
            "user",
            "create",
            "--uid",
            "casaas",
            "--display-name",
            "casaas tests",
            "--access-key",
            ACCESS_KEY,
            "--secret",
            SECRET_KEY,
        ]))
        .context("creating the S3 user")?;
        create_bucket_signed(&endpoint, BUCKET, REGION, ACCESS_KEY, SECRET_KEY)?;
        eprintln!(
            "xtask: ceph: RGW answering with user and bucket after {:.1} s",
            started.elapsed().as_secs_f64()
        );

        Ok(Started {
            // Ceph 16 matches If-Match on PUT only against the unquoted ETag
            // and ignores If-Match on DELETE (a stale one still deletes).
            url: format!(
                "s3://{BUCKET}/?endpoint={endpoint}&path_style=true&region={REGION}\
                 &etag_unquoted=true&conditional_delete=false"
            ),
            env: vec![
                ("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY.into()),
                ("AWS_SECRET_ACCESS_KEY".into(), SECRET_KEY.into()),
                ("AWS_REGION".into(), REGION.into()),
                ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
                ("AWS_ENDPOINT_URL".into(), endpoint),
            ],
        })
    }
}

/// The whole cluster's configuration. Every path is under `dir`, every
/// address is 127.0.0.1.
fn config(dir: &Path, fsid: &str, mon_port: u16, rgw_port: u16) -> String {
    let d = dir.display();
    // A UNIX socket path must fit in 108 bytes; without one the daemons
    // still run, they just cannot be inspected with `ceph daemon`.
    let asok = format!("{d}/run/$name.asok");
    let asok = if asok.len() + 16 < 108 {
        asok
    } else {
        String::new()
    };
    format!(
        "[global]
fsid = {fsid}
mon host = v1:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
public network = 127.0.0.1/32
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
keyring = {d}/keyring
run dir = {d}/run
log file = {d}/logs/$name.log
log to stderr = false
err to stderr = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mon max pg per osd = 1000
# radosgw creates its pools one by one at start; shorter paxos waits
# make each osdmap change commit sooner.
paxos propose interval = 0.05
paxos min wait = 0.01

[mon]
admin socket = {asok}
pid file = {d}/run/$name.pid
mon data = {d}/mon

[osd]
admin socket = {asok}
pid file = {d}/run/$name.pid
osd data = {d}/osd
osd objectstore = memstore
memstore device bytes = 1073741824
osd crush update on start = false
osd class update on start = false

[{RGW_NAME}]
admin socket = {asok}
pid file = {d}/run/$name.pid
rgw data = {d}/rgw
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
"
    )
}

/// A random UUID from the kernel.
fn random_uuid() -> Result<String> {
    Ok(fs::read_to_string("/proc/sys/kernel/random/uuid")
        .context("reading a random UUID")?
        .trim()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_binds_loopback_and_keeps_paths_under_dir() {
        let conf = config(Path::new("/x/servers/ceph"), "fsid", 1000, 2000);
        assert!(conf.contains("mon host = v1:127.0.0.1:1000"));
        assert!(conf.contains("beast endpoint=127.0.0.1:2000 tcp_nodelay=1"));
        assert!(conf.contains("admin socket = /x/servers/ceph/run/$name.asok"));
        for line in conf.lines().filter(|l| l.contains('/')) {
            assert!(
                line.contains("/x/servers/ceph/") || line.contains("/32"),
                "{line}"
            );
        }
    }

    #[test]
    fn long_dirs_get_no_admin_socket() {
        let long = format!("/{}", "d".repeat(120));
        let conf = config(Path::new(&long), "fsid", 1, 2);
        assert!(conf.contains("admin socket = \n"));
    }
}
