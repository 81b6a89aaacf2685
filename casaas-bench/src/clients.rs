//! The systems under test: casaas stores (opened from a URL and a server's
//! env file), etcd through its gRPC gateway, Redis through the `redis` crate.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use casaas_core::CasStore;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The variables of a server's env file.
pub fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(casaas_core::testkit::server_env::parse(&text))
}

/// Opens a casaas store from `url`, with the credentials of `env` (a
/// server's env file) where the provider needs them.
pub async fn open(url: &str, env: &BTreeMap<String, String>) -> Result<Arc<dyn CasStore>> {
    casaas_testkit::open_with_env(url, env).await
}

/// etcd's v3 lock and lease API through its gRPC gateway (JSON over
/// HTTP/1.1, one kept-alive connection). Each call is one HTTP request.
#[derive(Clone)]
pub struct Etcd {
    endpoint: String,
    client: Client<HttpConnector, Full<Bytes>>,
    requests: Arc<AtomicU64>,
}

impl Etcd {
    /// A client of `endpoint` (`http://127.0.0.1:PORT`).
    pub fn new(endpoint: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Etcd {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build(connector),
            requests: Arc::default(),
        }
    }

    /// Requests sent so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    async fn call(&self, path: &str, body: serde_json::Value) -> Result<serde_json::Value> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let request = hyper::Request::post(format!("{}{path}", self.endpoint))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))?;
        let response = self.client.request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!(
                "etcd {path} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("etcd {path}: {}", String::from_utf8_lossy(&bytes)))?;
        if let Some(error) = value.get("error") {
            bail!("etcd {path}: {error}");
        }
        Ok(value)
    }

    /// The server's version (`GET /version`).
    pub async fn version(&self) -> Result<String> {
        let request = hyper::Request::get(format!("{}/version", self.endpoint))
            .body(Full::new(Bytes::new()))?;
        let response = self.client.request(request).await?;
        let bytes = response.into_body().collect().await?.to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&bytes)?;
        Ok(value["etcdserver"].as_str().unwrap_or("?").to_string())
    }

    /// Grants a lease of `ttl_s` seconds; returns its ID.
    pub async fn grant(&self, ttl_s: u64) -> Result<String> {
        let answer = self
            .call("/v3/lease/grant", serde_json::json!({ "TTL": ttl_s }))
            .await?;
        id_string(&answer["ID"]).context("lease grant answered no ID")
    }

    /// Refreshes lease `id` once.
    pub async fn keepalive(&self, id: &str) -> Result<()> {
        let answer = self
            .call("/v3/lease/keepalive", serde_json::json!({ "ID": id }))
            .await?;
        let ttl = answer["result"]["TTL"]
            .as_str()
            .and_then(|t| t.parse::<i64>().ok())
            .or_else(|| answer["result"]["TTL"].as_i64())
            .unwrap_or(0);
        if ttl <= 0 {
            bail!("lease {id} expired (keepalive answered {answer})");
        }
        Ok(())
    }

    /// Revokes lease `id`.
    pub async fn revoke(&self, id: &str) -> Result<()> {
        self.call("/v3/lease/revoke", serde_json::json!({ "ID": id }))
            .await
            .map(drop)
    }

    /// Acquires lock `name` under lease `lease` (waits while it is held);
    /// returns the lock key to unlock with.
    pub async fn lock(&self, name: &str, lease: &str) -> Result<String> {
        let answer = self
            .call(
                "/v3/lock/lock",
                serde_json::json!({ "name": B64.encode(name), "lease": lease }),
            )
            .await?;
        answer["key"]
            .as_str()
            .map(str::to_string)
            .context("lock answered no key")
    }

    /// Releases the lock held under `key` (as returned by `lock`).
    pub async fn unlock(&self, key: &str) -> Result<()> {
        self.call("/v3/lock/unlock", serde_json::json!({ "key": key }))
            .await
            .map(drop)
    }
}

/// The gateway writes 64-bit integers as strings.
fn id_string(value: &serde_json::Value) -> Option<String> {
    value
        .as_str()
        .map(str::to_string)
        .or_else(|| value.as_i64().map(|i| i.to_string()))
}

/// The usual Redis lock: `SET key token NX PX ttl` to acquire, a Lua
/// compare-and-delete to release. Each call is one request.
#[derive(Clone)]
pub struct RedisLock {
    connection: redis::aio::MultiplexedConnection,
    release: redis::Script,
    requests: Arc<AtomicU64>,
}

const RELEASE_SCRIPT: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
else
    return 0
end"#;

impl RedisLock {
    /// Connects to `url` (`redis://127.0.0.1:PORT/`) and loads the release
    /// script, so that releases are one EVALSHA each.
    pub async fn connect(url: &str) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        let release = redis::Script::new(RELEASE_SCRIPT);
        release.prepare_invoke().load_async(&mut connection).await?;
        Ok(RedisLock {
            connection,
            release,
            requests: Arc::default(),
        })
    }

    /// Requests sent so far (setup excluded).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The server's version (`INFO server`).
    pub async fn version(&self) -> Result<String> {
        let mut connection = self.connection.clone();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_string())
    }

    /// `SET key token NX PX ttl_ms`: true if acquired.
    pub async fn acquire(&self, key: &str, token: &str, ttl_ms: u64) -> Result<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut connection = self.connection.clone();
        let answer: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut connection)
            .await?;
        Ok(answer.is_some())
    }

    /// Deletes `key` if it still holds `token`: true if it did.
    pub async fn release(&self, key: &str, token: &str) -> Result<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut connection = self.connection.clone();
        let deleted: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut connection)
            .await?;
        Ok(deleted == 1)
    }
}
