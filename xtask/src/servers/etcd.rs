//! etcd from Debian's `etcd-server` (3.4 on bookworm): one member on
//! loopback, data under the server's state directory. Used by `cargo xtask
//! bench` only, so not started by `servers up` without a name.

use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use super::{Ctx, Procs, Server, Started, apt_install, dpkg_version, free_port, wait_for_http};

/// The single-member etcd cluster.
pub struct Etcd;

impl Server for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn kind(&self) -> &'static str {
        "etcd key-value store, single member (Debian package)"
    }

    fn version(&self, _ctx: &Ctx) -> Option<String> {
        dpkg_version("etcd-server")
    }

    fn install(&self, _ctx: &Ctx) -> Result<()> {
        // etcdctl: the bench times `etcdctl lock` per invocation beside `casaas lock`.
        apt_install(
            "etcd",
            &["etcd-server", "etcd-client"],
            &["etcd", "etcdctl"],
        )
    }

    fn start(&self, _ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let dir = procs.dir().to_path_buf();
        let dir = dir.canonicalize().unwrap_or(dir);
        let peer = free_port()?;
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut command = Command::new("etcd");
        command
            .arg("--name=casaas")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=casaas={peer_url}"))
            .arg("--log-level=warn");
        procs.spawn("etcd", command)?;
        wait_for_http(&format!("{client_url}/health"), Duration::from_secs(60))?;
        Ok(Started {
            url: client_url.clone(),
            env: vec![("CASAAS_ETCD_ENDPOINT".into(), client_url)],
        })
    }

    fn default_enabled(&self) -> bool {
        false
    }

    fn is_object_store(&self) -> bool {
        false
    }
}
