//! Garage (crates.io `garage`): a single node with SQLite metadata, built
//! from source on first use into `.casaas/tools/garage`.
//!
//! The build takes about 20 minutes on two cores, so this server is not in
//! the default set: `cargo xtask servers up garage` starts it by name.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Ctx, Procs, Server, Started, free_port, retry, run, wait_for_http};

/// The pinned release.
const VERSION: &str = "2.5.0";
/// Test credentials imported at start (loopback only). Garage wants key IDs
/// of the form `GK` + 24 hex digits and secrets of 64 hex digits.
const ACCESS_KEY: &str = "GK0c0a5aa5000000000000c0de";
const SECRET_KEY: &str = "0c0a5aa50c0a5aa50c0a5aa50c0a5aa50c0a5aa50c0a5aa50c0a5aa50c0a5aa5";
const BUCKET: &str = "casaas";
/// Garage checks the SigV4 region against its configured `s3_region`.
const REGION: &str = "garage";

/// Garage on loopback, single node, replication factor 1.
pub struct Garage;

impl Server for Garage {
    fn name(&self) -> &'static str {
        "garage"
    }

    fn kind(&self) -> &'static str {
        "Garage, single node"
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        installed_version(ctx).map(|v| format!("garage {v}"))
    }

    fn default_enabled(&self) -> bool {
        false
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        let root = install_root(ctx);
        if installed_version(ctx).as_deref() == Some(VERSION) {
            return Ok(());
        }
        eprintln!(
            "xtask: garage: building garage {VERSION} from crates.io \
             (about 20 minutes on two cores)"
        );
        let started = Instant::now();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run(Command::new(cargo)
            .args([
                "install",
                "garage",
                "--version",
                VERSION,
                "--locked",
                "--root",
            ])
            .arg(&root))?;
        eprintln!(
            "xtask: garage: built in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let started = Instant::now();
        let garage = binary(ctx);
        let dir = procs.dir().to_path_buf();
        let dir = dir.canonicalize().unwrap_or(dir);
        let rpc_port = free_port()?;
        let conf = dir.join("garage.toml");
        fs::write(&conf, config(&dir, rpc_port, port, &random_hex(32)?))?;
        let cli = || {
            let mut c = Command::new(&garage);
            c.arg("-c").arg(&conf);
            c
        };

        procs.spawn("garage", {
            let mut c = cli();
            c.arg("server").env("RUST_LOG", "garage=info");
            c
        })?;
        retry(Duration::from_secs(60), || run(cli().arg("status")))
            .context("garage did not answer `garage status`")?;

        // A layout with this one node, then a key and a bucket.
        let node = output(cli().args(["node", "id", "-q"]))?;
        let node = node.trim();
        let node = node.split('@').next().unwrap_or(node);
        run(cli()
            .args(["layout", "assign", "-z", "dc1", "-c", "1G"])
            .arg(node))?;
        run(cli().args(["layout", "apply", "--version", "1"]))?;
        retry(Duration::from_secs(30), || {
            run(cli().args([
                "key", "import", "--yes", "-n", "casaas", ACCESS_KEY, SECRET_KEY,
            ]))
        })?;
        retry(Duration::from_secs(30), || {
            run(cli().args(["bucket", "create", BUCKET]))
        })?;
        run(cli().args([
            "bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", ACCESS_KEY,
        ]))?;

        let endpoint = format!("http://127.0.0.1:{port}");
        wait_for_http(&format!("{endpoint}/"), Duration::from_secs(30))?;
        eprintln!(
            "xtask: garage: S3 API answering with key and bucket after {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(Started {
            url: format!("s3://{BUCKET}/?endpoint={endpoint}&path_style=true&region={REGION}"),
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

fn install_root(ctx: &Ctx) -> PathBuf {
    ctx.tools.join("garage")
}

fn binary(ctx: &Ctx) -> PathBuf {
    install_root(ctx).join("bin").join("garage")
}

/// The version of the installed binary (`garage --version` prints e.g.
/// `garage cargo:2.5.0 [features: ...]`), if there is one.
fn installed_version(ctx: &Ctx) -> Option<String> {
    let out = Command::new(binary(ctx)).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(&text)
}

fn parse_version(text: &str) -> Option<String> {
    let word = text.split_whitespace().nth(1)?;
    let version = word.rsplit(':').next().unwrap_or(word);
    Some(version.trim_start_matches('v').to_string())
}

/// The node's configuration: everything under `dir`, every address on
/// 127.0.0.1, only the S3 API (no web, K2V or admin endpoints).
fn config(dir: &Path, rpc_port: u16, s3_port: u16, rpc_secret: &str) -> String {
    let d = dir.display();
    format!(
        r#"metadata_dir = "{d}/meta"
data_dir = "{d}/data"
db_engine = "sqlite"
replication_factor = 1

rpc_bind_addr = "127.0.0.1:{rpc_port}"
rpc_public_addr = "127.0.0.1:{rpc_port}"
rpc_secret = "{rpc_secret}"

[s3_api]
s3_region = "{REGION}"
api_bind_addr = "127.0.0.1:{s3_port}"
root_domain = ".s3.garage.localhost"
"#
    )
}

/// Runs `command`, returning its standard output.
fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `bytes` random bytes from the kernel, as lowercase hex.
fn random_hex(bytes: usize) -> Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("reading /dev/urandom")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_have_garage_formats() {
        let id = ACCESS_KEY.strip_prefix("GK").unwrap();
        assert_eq!(id.len(), 24);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(SECRET_KEY.len(), 64);
        assert!(SECRET_KEY.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn version_line_parses() {
        let line = "garage cargo:2.5.0 [features: bundled-libs, k2v, lmdb, metrics, sqlite]\n";
        assert_eq!(parse_version(line).as_deref(), Some("2.5.0"));
        assert_eq!(parse_version("garage v2.5.0\n").as_deref(), Some("2.5.0"));
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn config_is_loopback_sqlite() {
        let conf = config(Path::new("/x/garage"), 10, 20, "ab");
        assert!(conf.contains("db_engine = \"sqlite\""));
        assert!(conf.contains("rpc_bind_addr = \"127.0.0.1:10\""));
        assert!(conf.contains("api_bind_addr = \"127.0.0.1:20\""));
        assert!(!conf.contains("[admin]"));
        assert_eq!(random_hex(32).unwrap().len(), 64);
    }
}
