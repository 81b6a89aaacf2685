//! The appends workload shared by `examples/appends.rs` and
//! `tests/servers.rs`: W tasks each append C one-row Parquet files to one
//! table through iceberg-rust's transaction API (`fast_append`), then the
//! table is read back.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use arrow_array::{Int32Array, RecordBatch};
use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::{CasError, CasStore, ErrorKind, ForwardingStore, Version};
use casaas_iceberg::CasaasCatalog;
use futures::TryStreamExt;
use iceberg::spec::{DataFileFormat, NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use parquet::file::properties::WriterProperties;

/// Lets every write through, and drops the answer of a share of the
/// pointer writes after they land (a lost answer, as a proxy that closes
/// the connection would make it).
#[derive(Debug)]
pub struct DropAnswers {
    inner: Arc<dyn CasStore>,
    share: f64,
    rng: Mutex<u64>,
    dropped: AtomicU64,
}

impl DropAnswers {
    /// Drops the answer of a share `share` of the pointer writes to `inner`.
    pub fn new(inner: Arc<dyn CasStore>, share: f64) -> Self {
        DropAnswers {
            inner,
            share,
            rng: Mutex::new(0x9E37_79B9_7F4A_7C15),
            dropped: AtomicU64::new(0),
        }
    }

    /// How many answers were dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn drop_this(&self, key: &str) -> bool {
        if !key.starts_with("tables/") || self.share <= 0.0 {
            return false;
        }
        let mut state = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state % 10_000) as f64 / 10_000.0 < self.share
    }

    fn lost(&self, key: &str) -> CasError {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        CasError::new(
            ErrorKind::Ambiguous,
            format!("the answer to the write of {key} was dropped (fault injection)"),
        )
    }
}

#[async_trait]
impl ForwardingStore for DropAnswers {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }

    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        let answer = self.inner.create(key, body).await;
        if answer.is_ok() && self.drop_this(key) {
            return Err(self.lost(key));
        }
        answer
    }

    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        let answer = self.inner.replace(key, expected, body).await;
        if answer.is_ok() && self.drop_this(key) {
            return Err(self.lost(key));
        }
        answer
    }
}

fn schema() -> anyhow::Result<Schema> {
    Ok(Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "writer", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(2, "commit", Type::Primitive(PrimitiveType::Int)).into(),
        ])
        .build()?)
}

/// Writes one row `(writer, commit)` as a Parquet data file of `table` and
/// appends it with one commit (retried by iceberg-rust after a conflict).
pub async fn append(
    catalog: &CasaasCatalog,
    ident: &TableIdent,
    writer: i32,
    commit: i32,
) -> anyhow::Result<()> {
    let table = catalog.load_table(ident).await?;
    let metadata = table.metadata();
    let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(
        metadata.current_schema(),
    )?);
    let parquet = ParquetWriterBuilder::new(
        WriterProperties::builder().build(),
        metadata.current_schema().clone(),
    );
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata)?,
        DefaultFileNameGenerator::new(
            format!("w{writer}-c{commit}"),
            Some(uuid::Uuid::new_v4().to_string()),
            DataFileFormat::Parquet,
        ),
    );
    let mut data = DataFileWriterBuilder::new(rolling).build(None).await?;
    let batch = RecordBatch::try_new(
        arrow_schema,
        vec![
            Arc::new(Int32Array::from(vec![writer])),
            Arc::new(Int32Array::from(vec![commit])),
        ],
    )?;
    data.write(batch).await?;
    let files = data.close().await?;
    let tx = Transaction::new(&table);
    let tx = tx.fast_append().add_data_files(files).apply(tx)?;
    tx.commit(catalog).await?;
    Ok(())
}

pub async fn rows(table: &Table) -> anyhow::Result<Vec<(i32, i32)>> {
    let batches: Vec<RecordBatch> = table
        .scan()
        .select_all()
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut found = Vec::new();
    for batch in batches {
        let column = |name: &str| -> anyhow::Result<Int32Array> {
            Ok(batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<Int32Array>())
                .with_context(|| format!("no int column {name}"))?
                .clone())
        };
        let (w, c) = (column("writer")?, column("commit")?);
        for i in 0..batch.num_rows() {
            found.push((w.value(i), c.value(i)));
        }
    }
    Ok(found)
}

/// What a run found when it read the table back.
#[derive(Debug)]
pub struct Outcome {
    pub commits: usize,
    pub snapshots: usize,
    pub duplicates: usize,
    pub lost: usize,
    pub rows: usize,
    pub ms_per_commit: f64,
}

impl Outcome {
    /// Each append there exactly once.
    pub fn exactly_once(&self) -> bool {
        self.snapshots == self.commits && self.duplicates == 0 && self.lost == 0
    }
}

/// Creates a fresh table under namespace `bench` and runs the workload.
pub async fn run(
    catalog: &CasaasCatalog,
    writers: usize,
    commits: usize,
) -> anyhow::Result<Outcome> {
    let args = (writers, commits);
    let namespace = NamespaceIdent::new("bench".into());
    if !catalog.namespace_exists(&namespace).await? {
        catalog.create_namespace(&namespace, HashMap::new()).await?;
    }
    let name = format!("appends_{}", uuid::Uuid::new_v4().simple());
    let creation = TableCreation::builder()
        .name(name.clone())
        .schema(schema()?)
        .properties(HashMap::from([
            ("commit.retry.num-retries".to_string(), "1000".to_string()),
            ("commit.retry.min-wait-ms".to_string(), "5".to_string()),
            ("commit.retry.max-wait-ms".to_string(), "200".to_string()),
            (
                "commit.retry.total-timeout-ms".to_string(),
                "600000".to_string(),
            ),
        ]))
        .build();
    catalog.create_table(&namespace, creation).await?;
    let ident = TableIdent::new(namespace, name);

    let mut tasks = Vec::new();
    for w in 0..args.0 {
        let (catalog, ident, commits) = (catalog.clone(), ident.clone(), args.1);
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            for c in 0..commits {
                append(&catalog, &ident, w as i32, c as i32).await?;
            }
            anyhow::Ok(start.elapsed())
        }));
    }
    let mut spent = Duration::ZERO;
    for task in tasks {
        spent += task.await??;
    }
    let commits = args.0 * args.1;

    let table = catalog.load_table(&ident).await?;
    let snapshots = table.metadata().snapshots().count();
    let mut seen: BTreeMap<(i32, i32), usize> = BTreeMap::new();
    let found = rows(&table).await?;
    for row in &found {
        *seen.entry(*row).or_default() += 1;
    }
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    let lost = (0..args.0 as i32)
        .flat_map(|w| (0..args.1 as i32).map(move |c| (w, c)))
        .filter(|row| !seen.contains_key(row))
        .count();
    let ms_per_commit = spent.as_secs_f64() * 1000.0 / commits.max(1) as f64;
    Ok(Outcome {
        commits,
        snapshots,
        duplicates,
        lost,
        rows: found.len(),
        ms_per_commit,
    })
}
