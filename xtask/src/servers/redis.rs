//! Redis from Debian's `redis-server` (7.0 on bookworm) on loopback, no
//! persistence, files under the server's state directory. Used by `cargo
//! xtask bench` only, so not started by `servers up` without a name.

use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use super::{Ctx, Procs, Server, Started, apt_install, dpkg_version, wait_for_tcp};

/// One Redis server.
pub struct Redis;

impl Server for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn kind(&self) -> &'static str {
        "Redis, no persistence (Debian package)"
    }

    fn version(&self, _ctx: &Ctx) -> Option<String> {
        dpkg_version("redis-server")
    }

    fn install(&self, _ctx: &Ctx) -> Result<()> {
        apt_install("redis", &["redis-server"], &["redis-server"])
    }

    fn start(&self, _ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let dir = procs.dir().to_path_buf();
        let dir = dir.canonicalize().unwrap_or(dir);
        let mut command = Command::new("redis-server");
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ])
            .arg("--dir")
            .arg(&dir);
        procs.spawn("redis-server", command)?;
        wait_for_tcp(port, Duration::from_secs(30))?;
        let url = format!("redis://127.0.0.1:{port}/");
        Ok(Started {
            url: url.clone(),
            env: vec![("CASAAS_REDIS_URL".into(), url)],
        })
    }

    fn default_enabled(&self) -> bool {
        false
    }

    fn is_object_store(&self) -> bool {
        false
    }
}
