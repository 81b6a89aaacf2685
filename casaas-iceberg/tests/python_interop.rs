//! The Rust catalog and casaas's PyIceberg catalog on the same objects: a
//! table created and appended to by one is appended to by the other, and
//! both read back every row.
//!
//! Needs a Python with casaas (its `iceberg` extra) and PyArrow: the
//! interpreter named by `CASAAS_ICEBERG_PYTHON`, else the test virtualenv
//! `cargo xtask python` makes (`.casaas/tools/casaas-py-test`). Without one
//! the tests say so and pass without running, unless
//! `CASAAS_REQUIRE_SERVERS=1` (then they fail).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use arrow_array::{Int32Array, RecordBatch};
use casaas_iceberg::CasaasCatalog;
use futures::TryStreamExt;
use iceberg::io::FileIO;
use iceberg::spec::{DataFileFormat, NestedField, PrimitiveType, Schema, Type};
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

fn python() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CASAAS_ICEBERG_PYTHON") {
        return Some(PathBuf::from(path));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.casaas/tools/casaas-py-test/bin/python");
    if !venv.exists() && std::env::var("CASAAS_REQUIRE_SERVERS").as_deref() == Ok("1") {
        panic!("no Python with casaas: set CASAAS_ICEBERG_PYTHON or run cargo xtask python");
    }
    venv.exists().then_some(venv)
}

/// Runs `script` with the catalog's uri as `URI`; its stdout.
fn run_python(python: &PathBuf, uri: &str, script: &str) -> String {
    let prelude = r#"
import json, sys
import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, NestedField
URI = sys.argv[1]
catalog = load_catalog("lake", **{"py-catalog-impl": "casaas.iceberg.Catalog", "uri": URI})
ARROW = pa.schema([pa.field("writer", pa.int32(), nullable=False), pa.field("commit", pa.int32(), nullable=False)])
def append(table, w, c):
    table.append(pa.Table.from_pydict({"writer": [w], "commit": [c]}, schema=ARROW))
def rows(table):
    t = table.scan().to_arrow()
    return sorted(zip(t["writer"].to_pylist(), t["commit"].to_pylist()))
"#;
    let out = Command::new(python)
        .arg("-c")
        .arg(format!("{prelude}\n{script}"))
        .arg(uri)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn schema() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "writer", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(2, "commit", Type::Primitive(PrimitiveType::Int)).into(),
        ])
        .build()
        .unwrap()
}

async fn append(catalog: &CasaasCatalog, ident: &TableIdent, writer: i32, commit: i32) {
    let table = catalog.load_table(ident).await.unwrap();
    let metadata = table.metadata();
    let arrow_schema =
        Arc::new(iceberg::arrow::schema_to_arrow_schema(metadata.current_schema()).unwrap());
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        ParquetWriterBuilder::new(
            WriterProperties::builder().build(),
            metadata.current_schema().clone(),
        ),
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata).unwrap(),
        DefaultFileNameGenerator::new(
            format!("rust-w{writer}-c{commit}"),
            None,
            DataFileFormat::Parquet,
        ),
    );
    let mut data = DataFileWriterBuilder::new(rolling)
        .build(None)
        .await
        .unwrap();
    let batch = RecordBatch::try_new(
        arrow_schema,
        vec![
            Arc::new(Int32Array::from(vec![writer])),
            Arc::new(Int32Array::from(vec![commit])),
        ],
    )
    .unwrap();
    data.write(batch).await.unwrap();
    let files = data.close().await.unwrap();
    let tx = Transaction::new(&table);
    let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
    tx.commit(catalog).await.unwrap();
}

async fn rows(catalog: &CasaasCatalog, ident: &TableIdent) -> Vec<(i32, i32)> {
    let table = catalog.load_table(ident).await.unwrap();
    let batches: Vec<RecordBatch> = table
        .scan()
        .select_all()
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut found = Vec::new();
    for batch in batches {
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap()
                .clone()
        };
        let (w, c) = (col("writer"), col("commit"));
        for i in 0..batch.num_rows() {
            found.push((w.value(i), c.value(i)));
        }
    }
    found.sort();
    found
}

/// The catalog's uri and a Rust catalog on it, its tables where the
/// Python catalog puts them by default (`uri` without its query).
async fn catalog(dir: &tempfile::TempDir) -> (String, CasaasCatalog) {
    let base = format!("file://{}/lake", dir.path().display());
    let uri = format!("{base}?create_dirs=true");
    let store = casaas::open_store(&uri).await.unwrap();
    let catalog = CasaasCatalog::new("lake", store, FileIO::new_with_fs(), base);
    (uri, catalog)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_made_in_rust_is_appended_to_by_python_and_read_by_both() {
    let Some(python) = python() else {
        eprintln!("no Python with casaas: set CASAAS_ICEBERG_PYTHON or run cargo xtask python");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (uri, catalog) = catalog(&dir).await;
    let db = NamespaceIdent::new("db".into());
    catalog.create_namespace(&db, HashMap::new()).await.unwrap();
    let creation = TableCreation::builder()
        .name("events".into())
        .schema(schema())
        .build();
    catalog.create_table(&db, creation).await.unwrap();
    let ident = TableIdent::new(db, "events".into());
    append(&catalog, &ident, 0, 0).await;

    let out = run_python(
        &python,
        &uri,
        r#"
table = catalog.load_table("db.events")
append(table, 1, 0)
table = catalog.load_table("db.events")
print(json.dumps({"rows": rows(table), "snapshots": len(table.metadata.snapshots)}))
"#,
    );
    let seen: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(seen["rows"], serde_json::json!([[0, 0], [1, 0]]), "{out}");
    assert_eq!(seen["snapshots"], 2, "{out}");

    assert_eq!(rows(&catalog, &ident).await, vec![(0, 0), (1, 0)]);
    append(&catalog, &ident, 0, 1).await;
    let table = catalog.load_table(&ident).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), 3);
    let out = run_python(
        &python,
        &uri,
        r#"print(json.dumps(rows(catalog.load_table("db.events"))))"#,
    );
    assert_eq!(out.trim(), "[[0, 0], [0, 1], [1, 0]]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_made_in_python_is_appended_to_by_rust_and_read_by_both() {
    let Some(python) = python() else {
        eprintln!("no Python with casaas: set CASAAS_ICEBERG_PYTHON or run cargo xtask python");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (uri, catalog) = catalog(&dir).await;
    run_python(
        &python,
        &uri,
        r#"
catalog.create_namespace("db")
schema = Schema(NestedField(1, "writer", IntegerType(), required=True), NestedField(2, "commit", IntegerType(), required=True))
table = catalog.create_table("db.events", schema=schema)
append(table, 1, 0)
"#,
    );
    let db = NamespaceIdent::new("db".into());
    assert_eq!(
        catalog.list_namespaces(None).await.unwrap(),
        vec![db.clone()]
    );
    let ident = TableIdent::new(db.clone(), "events".into());
    assert_eq!(catalog.list_tables(&db).await.unwrap(), vec![ident.clone()]);
    assert_eq!(rows(&catalog, &ident).await, vec![(1, 0)]);
    append(&catalog, &ident, 0, 0).await;
    assert_eq!(rows(&catalog, &ident).await, vec![(0, 0), (1, 0)]);

    let out = run_python(
        &python,
        &uri,
        r#"
table = catalog.load_table("db.events")
append(table, 1, 1)
table = catalog.load_table("db.events")
print(json.dumps({"rows": rows(table), "snapshots": len(table.metadata.snapshots)}))
"#,
    );
    let seen: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        seen["rows"],
        serde_json::json!([[0, 0], [1, 0], [1, 1]]),
        "{out}"
    );
    assert_eq!(seen["snapshots"], 3, "{out}");
    assert_eq!(rows(&catalog, &ident).await, vec![(0, 0), (1, 0), (1, 1)]);
    assert_eq!(
        catalog
            .load_table(&ident)
            .await
            .unwrap()
            .metadata()
            .snapshots()
            .count(),
        3
    );
}
