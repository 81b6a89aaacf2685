//! W tasks each append C one-row batches to one Iceberg table through
//! iceberg-rust's transaction API (`fast_append`, its commit retry on),
//! then the table is read back:
//!
//! ```text
//! cargo run --example appends -- --writers 4 --commits 10 [--url URL]
//!     [--property NAME=VALUE]... [--warehouse URL] [--local-data] [--faults P]
//! ```
//!
//! Prints `commits= snapshots= duplicates= lost= rows= dropped_answers=
//! ms_per_commit=`, like the Python example (`casaas.examples.iceberg_appends`).
//! Without `--url` the catalog and the table are on the local disk.
//! `--property` sets a catalog property (`casaas.NAME` for the store,
//! `s3.*` for the tables' FileIO). `--faults P` lets a share P of the
//! pointer writes (keys under `tables/`) land and drops their answer.
//! `--local-data` keeps the table's files on the local disk and only the
//! pointers on `--url`.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, bail};
use casaas_iceberg::{CasaasCatalog, STORE_OPTION_PREFIX};
use iceberg::io::FileIOBuilder;
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

#[path = "../tests/shared/workload.rs"]
mod workload;

use workload::DropAnswers;

struct Args {
    writers: usize,
    commits: usize,
    url: Option<String>,
    warehouse: Option<String>,
    properties: HashMap<String, String>,
    local_data: bool,
    faults: f64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        writers: 4,
        commits: 10,
        url: None,
        warehouse: None,
        properties: HashMap::new(),
        local_data: false,
        faults: 0.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--writers" => args.writers = value()?.parse()?,
            "--commits" => args.commits = value()?.parse()?,
            "--url" => args.url = Some(value()?),
            "--warehouse" => args.warehouse = Some(value()?),
            "--faults" => args.faults = value()?.parse()?,
            "--local-data" => args.local_data = true,
            "--property" => {
                let pair = value()?;
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("--property wants NAME=VALUE, not {pair}"))?;
                args.properties.insert(k.to_string(), v.to_string());
            }
            other => bail!(
                "unknown argument {other}: use --writers N --commits N [--url URL] \
                 [--property NAME=VALUE]... [--warehouse URL] [--local-data] [--faults P]"
            ),
        }
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let scratch = tempfile::tempdir()?;
    let local = format!("file://{}", scratch.path().display());
    let url = args
        .url
        .clone()
        .unwrap_or_else(|| format!("{local}/catalog?create_dirs=true"));
    let options: Vec<(String, String)> = args
        .properties
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(STORE_OPTION_PREFIX)
                .map(|k| (k.to_string(), v.clone()))
        })
        .collect();
    let opened = casaas::open_store_with(&url, options).await?;
    let store = Arc::new(DropAnswers::new(opened, args.faults));
    let warehouse = match (&args.warehouse, args.local_data, &args.url) {
        (Some(w), _, _) => w.clone(),
        (None, true, _) | (None, _, None) => format!("{local}/warehouse"),
        (None, false, Some(url)) => url
            .split_once('?')
            .map_or(url.as_str(), |(b, _)| b)
            .to_string(),
    };
    let file_io = FileIOBuilder::new(Arc::new(OpenDalResolvingStorageFactory::new()))
        .with_props(
            args.properties
                .iter()
                .filter(|(k, _)| !k.starts_with(STORE_OPTION_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone())),
        )
        .build();
    let catalog = CasaasCatalog::new("appends", store.clone(), file_io, warehouse);
    let outcome = workload::run(&catalog, args.writers, args.commits).await?;
    let dropped = if args.faults > 0.0 {
        format!(" dropped_answers={}", store.dropped())
    } else {
        String::new()
    };
    println!(
        "commits={} snapshots={} duplicates={} lost={} rows={}{dropped} ms_per_commit={:.1}",
        outcome.commits,
        outcome.snapshots,
        outcome.duplicates,
        outcome.lost,
        outcome.rows,
        outcome.ms_per_commit
    );
    if !outcome.exactly_once() {
        bail!("the table does not hold each append exactly once");
    }
    Ok(())
}
