#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! A store reached through several gateways that share one set of objects
//! but serialize conditional writes only within each gateway: each gateway
//! checks the condition and then writes under its own lock, so two gateways
//! can both pass the check. One endpoint cannot see that; two can.
//!
//! The store is opened by URL (`pergw://GATEWAY/`), through the same
//! command-line code the binary runs (`run_cli`): `--gateway` opens the
//! other endpoints exactly as it would open an S3 gateway's URL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, MemoryStore, StoreUrl, StoredObject,
    Version,
};
use serde_json::Value;

/// The objects every gateway shares.
fn shared() -> &'static MemoryStore {
    static SHARED: OnceLock<MemoryStore> = OnceLock::new();
    SHARED.get_or_init(MemoryStore::new)
}

/// One lock per gateway name: conditional writes through one gateway are
/// serialized, through two they are not.
fn gateway_lock(name: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(name.to_string())
        .or_default()
        .clone()
}

/// The time between the check and the write, inside the gateway's lock.
const WINDOW: Duration = Duration::from_millis(3);

#[derive(Debug)]
struct GatewayStore {
    gateway: String,
    lock: Arc<tokio::sync::Mutex<()>>,
}

fn precondition_failed(key: &str) -> CasError {
    CasError::new(ErrorKind::PreconditionFailed, "condition not met")
        .with_key(key)
        .with_status(412)
}

impl GatewayStore {
    /// Writes `body` whatever the shared map holds by then: the check was
    /// made earlier, under this gateway's lock only.
    async fn write(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        loop {
            let result = match shared().get(key).await? {
                Some(current) => shared().replace(key, &current.version, body.clone()).await,
                None => shared().create(key, body.clone()).await,
            };
            match result {
                Err(e) if e.kind() == ErrorKind::PreconditionFailed => continue,
                other => return other,
            }
        }
    }
}

#[async_trait]
impl CasStore for GatewayStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        shared().get(key).await
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let _serialized = self.lock.lock().await;
        if shared().get(key).await?.is_some() {
            return Err(precondition_failed(key));
        }
        tokio::time::sleep(WINDOW).await;
        self.write(key, body).await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let _serialized = self.lock.lock().await;
        match shared().get(key).await? {
            Some(current) if &current.version == expected => {}
            _ => return Err(precondition_failed(key)),
        }
        tokio::time::sleep(WINDOW).await;
        self.write(key, body).await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        let _serialized = self.lock.lock().await;
        shared().delete(key, expected).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        shared().list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full()
    }

    fn describe(&self) -> String {
        format!("per-gateway locked store via gateway {}", self.gateway)
    }
}

fn register() {
    casaas_core::provider::register_scheme("pergw", |url: StoreUrl| {
        Box::pin(async move {
            let gateway = url.authority().to_string();
            let store: Arc<dyn CasStore> = Arc::new(GatewayStore {
                lock: gateway_lock(&gateway),
                gateway,
            });
            Ok(store)
        })
    });
}

const CRITICAL: &str = "create_if_absent,create_conflict,replace_if_match,replace_stale,\
                        missing_key,race_create,race_replace,race_across_endpoints,lease_protocol";

/// Runs the command line on `urls[0]` with `urls[1..]` as `--gateway`s;
/// returns the exit status and the JSON report.
fn run(urls: &[&str]) -> (u8, Value) {
    register();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut args: Vec<String> = vec!["casaas-conformance".into(), urls[0].into()];
    for gateway in &urls[1..] {
        args.extend(["--gateway".into(), gateway.to_string()]);
    }
    args.extend(
        [
            "--quick",
            "--rounds",
            "20",
            "--concurrency",
            "6",
            "--format",
            "json",
            "--only",
            CRITICAL,
            "--output",
        ]
        .map(String::from),
    );
    args.push(json.display().to_string());
    let code = casaas_conformance::cli::run_cli(args);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // ExitCode has no accessor: find which status it is.
    let exit = (0..=3u8)
        .find(|n| code == std::process::ExitCode::from(*n))
        .unwrap();
    (exit, report)
}

fn probe<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no probe {id}: {report:#}"))
}

#[test]
fn one_endpoint_cannot_see_per_gateway_locking() {
    let (exit, report) = run(&["pergw://solo/"]);
    assert_eq!(exit, 0, "{report:#}");
    assert_eq!(report["summary"], "SAFE FOR LEASES");
    let across = probe(&report, "race_across_endpoints");
    assert_eq!(across["severity"], "info");
    assert_eq!(across["verdict"], "note");
    let detail = across["detail"].as_str().unwrap();
    assert!(
        detail.contains("cannot be seen from one endpoint"),
        "{detail}"
    );
    assert!(detail.contains("--gateway"), "{detail}");
}

#[test]
fn two_endpoints_show_per_gateway_locking_is_not_safe() {
    let (exit, report) = run(&["pergw://east/", "pergw://west/"]);
    assert_eq!(exit, 1, "{report:#}");
    let summary = report["summary"].as_str().unwrap();
    assert!(summary.starts_with("NOT SAFE"), "{summary}");
    assert!(summary.contains("race_across_endpoints"), "{summary}");
    let across = probe(&report, "race_across_endpoints");
    assert_eq!(across["severity"], "critical");
    assert_eq!(across["verdict"], "fail", "{across:#}");
    let evidence = &across["evidence"];
    assert!(
        evidence["rounds_multiple_winners_across_endpoints"]
            .as_u64()
            .unwrap()
            > 0,
        "{evidence:#}"
    );
    // Winners are reported per endpoint, and both endpoints won.
    let by_endpoint = evidence["winners_by_endpoint"].as_object().unwrap();
    assert_eq!(by_endpoint.len(), 2, "{evidence:#}");
    assert!(by_endpoint.values().all(|n| n.as_u64().unwrap() > 0));
    assert_eq!(
        report["backend"]["gateways"],
        serde_json::json!(["pergw://west/"])
    );
    // What each gateway checks alone still holds.
    for id in ["create_conflict", "replace_stale"] {
        assert_eq!(probe(&report, id)["verdict"], "pass", "{id}");
    }
}
