//! W writers each append C small commits to one Delta table at once, then
//! the table's history is read back and every transaction counted: shared by
//! the `concurrent_commits` example and the crate's server tests.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake_core::kernel::{DataType, PrimitiveType, StructField};
use deltalake_core::logstore::{LogStoreRef, ObjectStoreRef, StorageConfig, default_logstore};
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::writer::{DeltaWriter, JsonWriter};
use deltalake_core::{DeltaTable, DeltaTableBuilder};
use serde_json::json;
use url::Url;

/// Which log store commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStoreKind {
    /// casaas-delta's `CasaasLogStore`.
    Casaas,
    /// delta-rs's `DefaultLogStore` (a plain create-if-absent through the
    /// object store client, which retries 5xx answers).
    Default,
}

impl LogStoreKind {
    pub fn name(self) -> &'static str {
        match self {
            LogStoreKind::Casaas => "casaas",
            LogStoreKind::Default => "default",
        }
    }
}

/// Where the table is and how to reach it.
#[derive(Clone)]
pub struct Table {
    /// The table's URL (`file:///...`, `s3://bucket/path`, ...).
    pub url: Url,
    /// The object store rooted at the bucket (or the filesystem root), for
    /// data and reads; `None` lets delta-rs build it from the URL.
    pub root_store: Option<ObjectStoreRef>,
    /// Storage options (for casaas: `casaas_url` and `casaas.*`).
    pub options: HashMap<String, String>,
    /// Where casaas commits, if not where `options` say (a store the
    /// caller opened, e.g. with faults injected).
    pub commit: Option<casaas_delta::CommitStore>,
}

impl Table {
    /// A log store for the table, of `kind`.
    pub fn log_store(&self, kind: LogStoreKind) -> Result<LogStoreRef> {
        let config = StorageConfig::parse_options(self.options.clone())?;
        let root = match &self.root_store {
            Some(root) => root.clone(),
            None => {
                let scheme = Url::parse(&format!("{}://", self.url.scheme()))?;
                let factory = deltalake_core::logstore::object_store_factories()
                    .get(&scheme)
                    .map(|f| f.value().clone())
                    .with_context(|| format!("no object store for {scheme}"))?;
                factory.parse_url_opts(&self.url, &config)?.0
            }
        };
        let prefix = deltalake_core::Path::from_url_path(self.url.path())?;
        let prefixed: ObjectStoreRef = Arc::new(
            deltalake_core::logstore::object_store::prefix::PrefixStore::new(root.clone(), prefix),
        );
        Ok(match kind {
            LogStoreKind::Casaas => Arc::new(casaas_delta::CasaasLogStore::new(
                prefixed,
                root,
                &self.url,
                &config,
                self.commit
                    .clone()
                    .unwrap_or_else(|| casaas_delta::CommitStore::from_options(&self.options)),
            )),
            LogStoreKind::Default => default_logstore(prefixed, root, &self.url, &config),
        })
    }

    /// The table through a log store of `kind`, loaded.
    pub async fn open(&self, kind: LogStoreKind) -> Result<DeltaTable> {
        let mut table = DeltaTable::new(self.log_store(kind)?);
        table.load().await?;
        Ok(table)
    }

    /// The table as plain delta-rs opens it from its URL (whatever log
    /// store is registered for the scheme), loaded.
    pub async fn open_by_url(&self) -> Result<DeltaTable> {
        let mut builder = DeltaTableBuilder::from_url(self.url.clone())?
            .with_storage_options(self.options.clone());
        if let Some(root) = &self.root_store {
            builder = builder.with_storage_backend(root.clone(), self.url.clone());
        }
        Ok(builder.load().await?)
    }
}

/// What one run did and found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Commits reported `Ok` to their writer.
    pub commits: usize,
    /// Versions after the table's creation.
    pub table_versions: u64,
    /// Extra copies of transactions (one transaction at k versions adds
    /// k - 1).
    pub duplicates: usize,
    /// Transactions reported `Ok` that are in no version.
    pub lost: usize,
    /// Commit calls that returned an error (each retried by its writer).
    pub errors: usize,
    /// Milliseconds per `Ok` commit call, sorted.
    pub latencies_ms: Vec<f64>,
    /// The transaction at each version after the creation.
    pub history: Vec<Option<String>>,
}

impl Outcome {
    /// The line the example prints.
    pub fn line(&self) -> String {
        format!(
            "commits={} table_versions={} duplicates={} lost={} errors={} p50_ms={:.1} p99_ms={:.1}",
            self.commits,
            self.table_versions,
            self.duplicates,
            self.lost,
            self.errors,
            percentile(&self.latencies_ms, 0.50),
            percentile(&self.latencies_ms, 0.99),
        )
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Creates the table (version 0) through a log store of `kind`.
pub async fn create_table(table: &Table, kind: LogStoreKind) -> Result<()> {
    DeltaTable::new(table.log_store(kind)?)
        .create()
        .with_columns([
            StructField::new("writer", DataType::Primitive(PrimitiveType::Long), false),
            StructField::new("commit", DataType::Primitive(PrimitiveType::Long), false),
            StructField::new("txn", DataType::Primitive(PrimitiveType::String), false),
        ])
        .await
        .context("creating the table")?;
    Ok(())
}

/// Appends one row as one commit whose `commitInfo` names `txn`.
async fn append(table: &mut DeltaTable, writer: u64, commit: u64, txn: &str) -> Result<()> {
    let mut rows = JsonWriter::for_table(table)?;
    rows.write(vec![
        json!({"writer": writer, "commit": commit, "txn": txn}),
    ])
    .await?;
    let adds = rows.flush().await?;
    let properties = CommitProperties::default().with_metadata([("txn".to_string(), json!(txn))]);
    let snapshot = table.snapshot()?.clone();
    CommitBuilder::from(properties)
        .with_actions(
            adds.into_iter()
                .map(deltalake_core::kernel::Action::Add)
                .collect(),
        )
        .build(
            Some(&snapshot),
            table.log_store(),
            DeltaOperation::Write {
                mode: SaveMode::Append,
                partition_by: None,
                predicate: None,
            },
        )
        .await?;
    Ok(())
}

/// Runs `writers` × `commits` appends through a log store of `kind`, then
/// counts every transaction in the table's history.
///
/// A writer whose commit call fails reloads the table and commits the same
/// transaction again, as an application that was told "not committed" does.
pub async fn run(table: &Table, kind: LogStoreKind, writers: u64, commits: u64) -> Result<Outcome> {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let table = table.clone();
        tasks.push(tokio::spawn(async move {
            let mut handle = table.open(kind).await?;
            let mut ok = Vec::new();
            let mut errors = 0usize;
            let mut latencies = Vec::new();
            for c in 0..commits {
                let txn = format!("w{w}-c{c}");
                let mut tries = 0;
                loop {
                    tries += 1;
                    let started = Instant::now();
                    match append(&mut handle, w, c, &txn).await {
                        Ok(()) => {
                            latencies.push(started.elapsed().as_secs_f64() * 1e3);
                            ok.push(txn.clone());
                            break;
                        }
                        Err(err) if tries < 20 => {
                            errors += 1;
                            tracing::info!(%txn, %err, "commit failed; committing it again");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            handle.update_state().await?;
                        }
                        Err(err) => return Err(err.context(format!("{txn}: 20 failed commits"))),
                    }
                }
            }
            anyhow::Ok((ok, errors, latencies))
        }));
    }
    let mut outcome = Outcome::default();
    let mut reported = Vec::new();
    for task in tasks {
        let (ok, errors, latencies) = task.await??;
        outcome.commits += ok.len();
        outcome.errors += errors;
        outcome.latencies_ms.extend(latencies);
        reported.extend(ok);
    }
    outcome.latencies_ms.sort_by(f64::total_cmp);
    outcome.history = history(table).await?;
    outcome.table_versions = outcome.history.len() as u64;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for txn in outcome.history.iter().flatten() {
        *seen.entry(txn).or_default() += 1;
    }
    outcome.duplicates = seen.values().map(|n| n - 1).sum();
    outcome.lost = reported
        .iter()
        .filter(|txn| !seen.contains_key(txn.as_str()))
        .count();
    Ok(outcome)
}

/// The transaction of every version after the creation, read from the log
/// with delta-rs's plain log store (no casaas involved).
pub async fn history(table: &Table) -> Result<Vec<Option<String>>> {
    let plain = table.log_store(LogStoreKind::Default)?;
    let latest = plain.get_latest_version(0).await?;
    let mut found = Vec::new();
    for version in 1..=latest {
        let Some(bytes) = plain.read_commit_entry(version).await? else {
            bail!("version {version} is missing from the log");
        };
        let text = String::from_utf8_lossy(&bytes);
        let txn = text.lines().find_map(|line| {
            let action: serde_json::Value = serde_json::from_str(line).ok()?;
            Some(action.get("commitInfo")?.get("txn")?.as_str()?.to_string())
        });
        found.push(txn);
    }
    Ok(found)
}
