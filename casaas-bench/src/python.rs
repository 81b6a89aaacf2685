//! The lock round trip from Python: `casaas` (the Python package) against
//! the same round trip from Rust on the same store, and against
//! python-redis-lock on the bench's Redis, interleaved in one loop. The
//! Python side is a driver process (`python/lock_rtt.py`) spawned once and
//! driven over its stdin and stdout; it times each round trip itself, so the
//! pipe is not in its figures.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use casaas_core::CasStore;
use casaas_core::lease::{Lease, LeaseConfig};
use casaas_core::testkit::CountingStore;
use casaas_core::testkit::server_env::credential_options;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::section::{Section, ms};
use crate::stats::{percentile, summarize};
use crate::targets::{StoreTarget, Targets};

/// The driver, run as `python -c`.
const DRIVER: &str = include_str!("../python/lock_rtt.py");

/// The stores measured: the file store and Ceph (the headline's).
const STORES: [&str; 2] = ["file", "ceph"];

/// Round trips per way in the counting pass (after a warm-up).
const COUNTED: usize = 20;

/// The three ways a Python program takes a lock, as the driver names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// `lease = casaas.Lease(store, key)` once; `with lease.acquire(wait=0):`.
    Lease,
    /// `store = casaas.open(url)` once; `with casaas.lock(store, key, wait=0):`.
    Lock,
    /// `with casaas.lock(url, wait=0):` (opens the store each time).
    LockUrl,
}

impl Way {
    const ALL: [Way; 3] = [Way::Lease, Way::Lock, Way::LockUrl];

    fn driver_name(self) -> &'static str {
        match self {
            Way::Lease => "lease",
            Way::Lock => "lock",
            Way::LockUrl => "lock-url",
        }
    }

    fn code(self) -> &'static str {
        match self {
            Way::Lease => {
                "`lease = casaas.Lease(store, key)` once, then `with lease.acquire(wait=0):`"
            }
            Way::Lock => {
                "`store = casaas.open(url)` once, then `with casaas.lock(store, key, wait=0):`"
            }
            Way::LockUrl => "`with casaas.lock(url, wait=0):` (opens the store each time)",
        }
    }
}

/// One timed system of the loop.
enum System {
    Rust {
        store: String,
        lease: Box<Lease>,
        counting: CountingStore<Arc<dyn CasStore>>,
    },
    Python {
        store: String,
        way: Way,
    },
    RedisLock,
}

impl System {
    fn label(&self) -> String {
        match self {
            System::Rust { store, .. } => format!("Rust {store}"),
            System::Python { store, way } => format!("Python {store} ({})", way.driver_name()),
            System::RedisLock => "python-redis-lock".into(),
        }
    }
}

/// The Python driver process.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Driver {
    fn spawn(python: &Path) -> Result<Driver> {
        let mut child = tokio::process::Command::new(python)
            .args(["-c", DRIVER])
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", python.display()))?;
        let stdin = child.stdin.take().context("the driver's stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("the driver's stdout")?);
        Ok(Driver {
            child,
            stdin,
            stdout,
        })
    }

    async fn call(&mut self, request: Value) -> Result<Value> {
        let mut line = request.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        let mut answer = String::new();
        if self.stdout.read_line(&mut answer).await? == 0 {
            bail!("the Python driver exited");
        }
        let answer: Value = serde_json::from_str(&answer)
            .with_context(|| format!("the Python driver answered {answer:?}"))?;
        if answer["ok"] != Value::Bool(true) {
            bail!("the Python driver: {}", answer["error"]);
        }
        Ok(answer)
    }

    async fn open(&mut self, name: &str, url: &str, env: &BTreeMap<String, String>) -> Result<()> {
        let options: serde_json::Map<String, Value> = credential_options(env)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        self.call(
            json!({"op": "open", "name": name, "url": url, "options": options, "key": "py-rtt"}),
        )
        .await
        .with_context(|| format!("opening {name} from Python"))?;
        Ok(())
    }

    /// One round trip of `system`, timed by Python, ms.
    async fn cycle(&mut self, system: &str) -> Result<f64> {
        let answer = self
            .call(json!({"op": "cycle", "system": system}))
            .await
            .with_context(|| format!("Python round trip {system}"))?;
        answer["ms"]
            .as_f64()
            .context("the driver's answer has no ms")
    }

    async fn quit(mut self) {
        let _ = self.stdin.write_all(b"{\"op\": \"quit\"}\n").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

async fn rust_cycle(lease: &Lease) -> Result<f64> {
    let started = Instant::now();
    let guard = match lease.try_acquire().await?.into_result() {
        Ok(guard) => guard,
        Err(held) => bail!("the benchmark lock is held by {}", held.owner),
    };
    guard.release().await?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

async fn run_system(system: &System, driver: &mut Driver) -> Result<f64> {
    match system {
        System::Rust { lease, .. } => {
            // As a task on a runtime worker, where the binding runs each of
            // its calls: the same thread hops on both sides.
            let lease = (**lease).clone();
            let started = Instant::now();
            tokio::spawn(async move { rust_cycle(&lease).await }).await??;
            Ok(started.elapsed().as_secs_f64() * 1e3)
        }
        System::Python { store, way } => {
            driver
                .cycle(&format!("{} {store}", way.driver_name()))
                .await
        }
        System::RedisLock => driver.cycle("redis-lock").await,
    }
}

/// One timed system's figures.
#[derive(Debug)]
pub struct Row {
    /// Label.
    pub system: String,
    /// Round trip per iteration, ms.
    pub samples: Vec<f64>,
    /// Requests per acquire + release, where counted.
    pub requests: Option<f64>,
}

/// Requests per acquire + release counted on the wire (through a counting
/// proxy in front of the store).
#[derive(Debug)]
pub struct WireCount {
    /// Label.
    pub system: String,
    /// Requests per acquire + release.
    pub requests: f64,
    /// What they are, where told.
    pub detail: Option<String>,
}

/// The whole measurement.
#[derive(Debug)]
pub struct PythonResult {
    iterations: usize,
    rows: Vec<Row>,
    wire: Vec<WireCount>,
    versions: String,
    build: Option<f64>,
}

/// Runs `iterations` interleaved round trips with the Python at `python`
/// (which has casaas, redis and python-redis-lock installed).
/// `build_seconds` is how long the extension's release build took, for the
/// report.
pub async fn run(
    targets: &Targets,
    python: &Path,
    iterations: usize,
    build_seconds: Option<f64>,
) -> Result<PythonResult> {
    let mut driver = Driver::spawn(python)?;
    let versions = driver.call(json!({"op": "versions"})).await?;
    let versions = format!(
        "Python {}, redis-py {}, python-redis-lock {}",
        versions["python"].as_str().unwrap_or("?"),
        versions["redis"].as_str().unwrap_or("?"),
        versions["python-redis-lock"].as_str().unwrap_or("?"),
    );
    let mut systems = Vec::new();
    let stores: Vec<&StoreTarget> = STORES.iter().filter_map(|s| targets.store(s)).collect();
    for target in &stores {
        let counting = CountingStore::new(target.open().await?);
        let lease = Lease::new(
            Arc::new(counting.clone()),
            "py-rtt-rust",
            "bench-py-rust",
            LeaseConfig::default(),
        )?;
        systems.push(System::Rust {
            store: target.name.clone(),
            lease: Box::new(lease),
            counting,
        });
        driver.open(&target.name, &target.url, &target.env).await?;
        for way in Way::ALL {
            systems.push(System::Python {
                store: target.name.clone(),
                way,
            });
        }
    }
    if let Some(url) = &targets.redis {
        driver
            .call(json!({"op": "redis", "url": url, "key": "bench/py-redis-lock"}))
            .await?;
        systems.push(System::RedisLock);
    }
    // Warm connections, caches and the interpreter.
    for system in &systems {
        for _ in 0..10 {
            run_system(system, &mut driver).await?;
        }
    }
    let before: Vec<u64> = systems
        .iter()
        .map(|s| match s {
            System::Rust { counting, .. } => counting.counts().total(),
            _ => 0,
        })
        .collect();
    let count = systems.len();
    let mut samples = vec![Vec::with_capacity(iterations); count];
    for i in 0..iterations {
        for j in 0..count {
            // Rotate the order so that no system always follows the same one.
            let index = (i + j) % count;
            let time = run_system(&systems[index], &mut driver)
                .await
                .with_context(|| format!("round trip of {}", systems[index].label()))?;
            samples[index].push(time);
        }
        if (i + 1) % 100 == 0 {
            eprintln!("bench: python lock round trip {}/{iterations}", i + 1);
        }
    }
    let mut rows = Vec::new();
    for (index, system) in systems.iter().enumerate() {
        let requests = match system {
            System::Rust { counting, .. } => {
                Some((counting.counts().total() - before[index]) as f64 / iterations as f64)
            }
            _ => None,
        };
        rows.push(Row {
            system: system.label(),
            samples: std::mem::take(&mut samples[index]),
            requests,
        });
    }
    let mut wire = match targets.store("ceph") {
        Some(ceph) => count_on_the_wire(ceph, &mut driver).await?,
        None => Vec::new(),
    };
    if let Some(url) = &targets.redis {
        let (requests, detail) = count_redis_lock(url, &mut driver).await?;
        wire.push(WireCount {
            system: "python-redis-lock".into(),
            requests,
            detail: Some(detail),
        });
    }
    driver.quit().await;
    Ok(PythonResult {
        iterations,
        rows,
        wire,
        versions,
        build: build_seconds,
    })
}

/// Requests per round trip on Ceph counted by a proxy in front of it: Rust
/// (the same code path as the timed loop) and each Python way.
async fn count_on_the_wire(ceph: &StoreTarget, driver: &mut Driver) -> Result<Vec<WireCount>> {
    let proxy = CountingProxy::start(&ceph.url).await?;
    let url = proxy.url.clone();
    let store = casaas_testkit::open_with_env(&url, &ceph.env).await?;
    let lease = Lease::new(
        store,
        "py-rtt-rust-counted",
        "bench-py-rust",
        LeaseConfig::default(),
    )?;
    driver.open("ceph-counted", &url, &ceph.env).await?;
    let mut counts = Vec::new();
    for _ in 0..3 {
        rust_cycle(&lease).await?;
    }
    let before = proxy.requests();
    for _ in 0..COUNTED {
        rust_cycle(&lease).await?;
    }
    counts.push(WireCount {
        system: "Rust ceph".into(),
        requests: (proxy.requests() - before) as f64 / COUNTED as f64,
        detail: None,
    });
    for way in Way::ALL {
        let system = format!("{} ceph-counted", way.driver_name());
        for _ in 0..3 {
            driver.cycle(&system).await?;
        }
        let before = proxy.requests();
        for _ in 0..COUNTED {
            driver.cycle(&system).await?;
        }
        counts.push(WireCount {
            system: format!("Python ceph ({})", way.driver_name()),
            requests: (proxy.requests() - before) as f64 / COUNTED as f64,
            detail: None,
        });
    }
    proxy.check()?;
    Ok(counts)
}

/// Commands per python-redis-lock round trip as Redis counts them (`INFO
/// commandstats`, less the INFO calls themselves; the commands its scripts
/// run count too), and how many of each.
async fn count_redis_lock(url: &str, driver: &mut Driver) -> Result<(f64, String)> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let before = redis_calls(&mut connection).await?;
    for _ in 0..COUNTED {
        driver.cycle("redis-lock").await?;
    }
    let after = redis_calls(&mut connection).await?;
    let mut total = 0;
    let mut detail = Vec::new();
    for (command, calls) in &after {
        let delta = calls - before.get(command).copied().unwrap_or(0);
        if delta > 0 {
            total += delta;
            detail.push(format!(
                "{} {}",
                command.to_ascii_uppercase(),
                delta as f64 / COUNTED as f64
            ));
        }
    }
    Ok((total as f64 / COUNTED as f64, detail.join(", ")))
}

/// Calls per command Redis has run, INFO excepted.
async fn redis_calls(
    connection: &mut redis::aio::MultiplexedConnection,
) -> Result<BTreeMap<String, u64>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(connection)
        .await?;
    Ok(info
        .lines()
        .filter_map(|l| {
            let (command, stats) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (command != "info").then(|| (command.to_string(), calls))
        })
        .collect())
}

/// An HTTP/1.1 proxy on loopback that counts the requests it forwards (by
/// their headers and `Content-Length` bodies; responses are copied as they
/// come).
struct CountingProxy {
    url: String,
    requests: Arc<AtomicU64>,
    /// Requests it could not delimit (a chunked body): the count is then
    /// unreliable and the section fails.
    unparsed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    /// A proxy in front of the `endpoint=` of `url`; `url` with the proxy
    /// as its endpoint.
    async fn start(url: &str) -> Result<CountingProxy> {
        let (base, query) = url.split_once('?').context("the S3 URL has no query")?;
        let mut upstream = None;
        let mut params = Vec::new();
        for param in query.split('&') {
            match param.strip_prefix("endpoint=") {
                Some(endpoint) => upstream = Some(endpoint.to_string()),
                None => params.push(param.to_string()),
            }
        }
        let upstream = upstream.context("the S3 URL names no endpoint")?;
        let address = upstream
            .strip_prefix("http://")
            .context("the endpoint is not plain http")?
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local = listener.local_addr()?;
        params.push(format!("endpoint=http://{local}"));
        let requests = Arc::new(AtomicU64::new(0));
        let unparsed = Arc::new(AtomicU64::new(0));
        let (counted, failed) = (requests.clone(), unparsed.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (address, counted, failed) = (address.clone(), counted.clone(), failed.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&address).await {
                        let _ = forward(client, server, counted, failed).await;
                    }
                });
            }
        });
        Ok(CountingProxy {
            url: format!("{base}?{}", params.join("&")),
            requests,
            unparsed,
            task,
        })
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<()> {
        if self.unparsed.load(Ordering::SeqCst) > 0 {
            bail!("the counting proxy met a request body it cannot delimit");
        }
        Ok(())
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies one connection both ways, counting the client's requests.
async fn forward(
    client: TcpStream,
    server: TcpStream,
    counted: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> Result<()> {
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut reader = BufReader::new(client_read);
    loop {
        // The head: lines up to an empty one.
        let mut head = Vec::new();
        let mut length = 0u64;
        loop {
            let mut line = Vec::new();
            if reader.read_until(b'\n', &mut line).await? == 0 {
                back.abort();
                return Ok(());
            }
            let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
            if let Some(value) = text.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            if text.starts_with("transfer-encoding:") && text.contains("chunked") {
                failed.fetch_add(1, Ordering::SeqCst);
            }
            head.extend_from_slice(&line);
            if line == b"\r\n" || line == b"\n" {
                break;
            }
        }
        counted.fetch_add(1, Ordering::SeqCst);
        server_write.write_all(&head).await?;
        let mut body = (&mut reader).take(length);
        tokio::io::copy(&mut body, &mut server_write).await?;
    }
}

impl PythonResult {
    fn row(&self, system: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.system == system)
    }

    /// The median over iterations of `system` / Rust on `store` in the same
    /// iteration.
    fn ratio(&self, system: &str, store: &str) -> Option<f64> {
        let row = self.row(system)?;
        let rust = self.row(&format!("Rust {store}"))?;
        let ratios: Vec<f64> = row
            .samples
            .iter()
            .zip(&rust.samples)
            .map(|(a, b)| a / b)
            .collect();
        Some(percentile(&ratios, 50.0))
    }

    fn wire(&self, system: &str) -> Option<f64> {
        self.wire
            .iter()
            .find(|w| w.system == system)
            .map(|w| w.requests)
    }

    /// Fails unless Python's lease round trip sends as many requests as
    /// Rust's, on the wire, and the wire agrees with Rust's own count.
    pub fn check(&self) -> Result<()> {
        let (Some(rust), Some(python)) = (self.wire("Rust ceph"), self.wire("Python ceph (lease)"))
        else {
            return Ok(());
        };
        if (rust - python).abs() > 1e-9 {
            bail!(
                "requests per lock differ on Ceph: Rust {rust:.2}, Python {python:.2} (counted on the wire)"
            );
        }
        if let Some(counted) = self.row("Rust ceph").and_then(|r| r.requests)
            && (counted - rust).abs() > 1e-9
        {
            bail!(
                "the counting proxy saw {rust:.2} requests per Rust lock, the store wrapper {counted:.2}"
            );
        }
        Ok(())
    }

    /// The report's part.
    pub fn section(&self) -> Result<Section> {
        self.check()?;
        let mut md = String::new();
        md.push_str("## Lock round trip from Python\n\n");
        md.push_str(&format!(
            "Acquire a free lock, then release it, from Python ({}) through the `casaas` package \
             (release build{}), beside the same round trip from Rust on the same store (the lease \
             API with the default configuration and one `Lease` for the run, as in *Lock round \
             trip*, each round trip a task on a runtime worker as the binding runs its calls) and beside python-redis-lock on the Redis above (`with redis_lock.Lock(client, \
             key, expire=15):`, one `Lock` for the run). {} iterations, interleaved: each \
             iteration runs every row once, in a rotating order; a Python driver process times \
             each of its round trips around the Python statement alone, so the pipe that drives \
             it is not in its figures.\n\n\
             The Python rows are three ways to write it:\n\n",
            self.versions,
            match self.build {
                Some(s) => format!(", {s:.0} s to build in this run"),
                None => String::new(),
            },
            self.iterations
        ));
        for way in Way::ALL {
            md.push_str(&format!("- **{}**: {}\n", way.driver_name(), way.code()));
        }
        md.push_str(
            "\nPython / Rust is the median, over iterations, of the Python round trip / the Rust \
             round trip on the same store in the same iteration. Requests per lock are counted \
             on Ceph by a proxy on loopback that counts the HTTP requests it forwards (a separate \
             pass, not timed), for Rust and for each Python way; Rust's own count through its \
             store wrapper is beside it, and the section fails when Python's **lease** way and \
             Rust differ. The file store has no wire to count on. python-redis-lock's \
             commands are counted by Redis (`INFO commandstats`).\n\n",
        );
        md.push_str(
            "| system | p50 ms | p99 ms | max ms | Python / Rust (median of pairs) | requests per acquire + release |\n\
             |---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let s = summarize(&row.samples);
            let ratio = row
                .system
                .strip_prefix("Python ")
                .and_then(|rest| rest.split_once(' '))
                .and_then(|(store, _)| self.ratio(&row.system, store))
                .map_or("–".to_string(), |r| format!("{r:.3}"));
            let requests = if row.system.starts_with("Rust ") {
                let store = row.requests.map_or("–".into(), |r| format!("{r:.2}"));
                match self.wire(&row.system) {
                    Some(w) => format!("{w:.2} on the wire, {store} by the store wrapper"),
                    None => format!("{store} by the store wrapper"),
                }
            } else if row.system == "python-redis-lock" {
                match self.wire.iter().find(|w| w.system == row.system) {
                    Some(w) => format!(
                        "2 round trips (SET NX EX; EVALSHA of its release script); Redis counts \
                         {:.2} commands, the script's own among them: {}",
                        w.requests,
                        w.detail.as_deref().unwrap_or("")
                    ),
                    None => "–".into(),
                }
            } else {
                self.wire(&row.system)
                    .map_or("–".into(), |w| format!("{w:.2} on the wire"))
            };
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                row.system,
                ms(s.p50),
                ms(s.p99),
                ms(s.max),
                ratio,
                requests
            ));
        }
        md.push_str(
            "\n`python_lock_overhead` in the headline is Python / Rust on **Ceph** with the \
             **lease** way (the way that sends the requests Rust sends). `python_vs_redis_lock` \
             is the p50 of that Python round trip on Ceph divided by python-redis-lock's p50: \
             above 1 means the casaas lock on Ceph takes that many times as long as \
             python-redis-lock on Redis. The **lock** way builds a new `Lease` per call, so its \
             first request reads the record (one request more than Rust's); the **lock-url** way \
             also builds a store client on each call (`python_lock_url_overhead` is its Python / \
             Rust on Ceph): open one store and keep a `Lease` when locking in a loop.\n\n",
        );
        let mut headlines = Vec::new();
        if let Some(ratio) = self.ratio("Python ceph (lease)", "ceph") {
            headlines.push(format!("python_lock_overhead={ratio:.3}"));
        }
        let p50 = |name: &str| self.row(name).map(|r| summarize(&r.samples).p50);
        if let Some(ratio) = self.ratio("Python ceph (lock-url)", "ceph") {
            headlines.push(format!("python_lock_url_overhead={ratio:.3}"));
        }
        if let (Some(python), Some(redis)) = (p50("Python ceph (lease)"), p50("python-redis-lock"))
        {
            headlines.push(format!("python_vs_redis_lock={:.3}", python / redis));
        }
        Ok(Section {
            markdown: md,
            svgs: Vec::new(),
            headlines,
        })
    }
}
