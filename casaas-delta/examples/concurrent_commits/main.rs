//! W writers append C small commits each to one Delta table at once, through
//! casaas's log store and through delta-rs's default one, side by side, then
//! count every transaction in each table's history.
//!
//! ```text
//! cargo run --release -p casaas-delta --example concurrent_commits -- --writers 4 --commits 25
//! cargo run --release -p casaas-delta --example concurrent_commits -- --writers 4 --commits 25 \
//!     --url 's3://bucket/tables?endpoint=http://127.0.0.1:7480' --faults 0.2
//! ```
//!
//! Without `--url` the table is on the local disk, and casaas commits to its
//! files through the local filesystem's create-if-absent. With an `s3://` URL
//! (credentials from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, region
//! from `AWS_REGION`), `--faults P` puts a fault proxy on loopback between
//! the clients and the server that, for a share P of commit writes
//! (`_delta_log/*.json`), lets the write land and then drops the connection
//! or answers 500. Each run prints one line per log store:
//! `commits=N table_versions=V duplicates=D lost=L ...`.

#![allow(missing_docs)]

#[path = "workload.rs"]
mod workload;

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use casaas_testkit::{ChaosProxy, ProxyFault, RandomFaults};
use clap::Parser;
use object_store_0_13::aws::AmazonS3Builder;
use url::Url;
use workload::{LogStoreKind, Table};

#[derive(Parser, Debug)]
#[command(
    about = "Concurrent Delta commits through casaas and through delta-rs's default log store"
)]
struct Args {
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    writers: u64,
    /// Commits per writer.
    #[arg(long, default_value_t = 25)]
    commits: u64,
    /// Where the tables go: `s3://bucket/prefix?endpoint=http://HOST:PORT`
    /// (the local disk without it).
    #[arg(long)]
    url: Option<String>,
    /// Share of commit writes whose answer is lost after the write landed
    /// (needs an http endpoint).
    #[arg(long, default_value_t = 0.0)]
    faults: f64,
    /// Seed of the fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// `casaas`, `default` or `both`.
    #[arg(long, default_value = "both")]
    log_store: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,deltalake_core=error,buoyant_kernel=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let kinds = match args.log_store.as_str() {
        "casaas" => vec![LogStoreKind::Casaas],
        "default" => vec![LogStoreKind::Default],
        "both" => vec![LogStoreKind::Casaas, LogStoreKind::Default],
        other => bail!("--log-store {other}: use casaas, default or both"),
    };
    let dir = tempfile::tempdir()?;
    let run_id = format!("{}-{:x}", std::process::id(), rand_suffix());
    for kind in kinds {
        let (table, proxy) = match &args.url {
            None => (local_table(dir.path(), kind)?, None),
            Some(url) => s3_table(url, kind, &run_id, &args).await?,
        };
        workload::create_table(&table, kind).await?;
        let outcome = workload::run(&table, kind, args.writers, args.commits).await?;
        let faults = proxy.as_ref().map_or(0, |p: &ChaosProxy| p.fault_count());
        println!(
            "log_store={} {} faults={faults}",
            kind.name(),
            outcome.line()
        );
    }
    Ok(())
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

fn local_table(dir: &std::path::Path, kind: LogStoreKind) -> Result<Table> {
    let path = dir.join(kind.name());
    std::fs::create_dir_all(&path)?;
    let url = Url::from_directory_path(&path).map_err(|()| anyhow::anyhow!("not a directory"))?;
    // No casaas_url: the commits go through casaas to the table's own
    // files (create-if-absent on the local filesystem).
    Ok(Table {
        url,
        root_store: None,
        options: HashMap::new(),
        commit: None,
    })
}

async fn s3_table(
    url: &str,
    kind: LogStoreKind,
    run_id: &str,
    args: &Args,
) -> Result<(Table, Option<ChaosProxy>)> {
    let parsed = Url::parse(url).context("--url")?;
    if parsed.scheme() != "s3" {
        bail!("--url {url}: this example takes s3:// URLs (the tests cover the other stores)");
    }
    let bucket = parsed
        .host_str()
        .context("--url has no bucket")?
        .to_string();
    let endpoint = parsed
        .query_pairs()
        .find(|(k, _)| k == "endpoint")
        .map(|(_, v)| v.into_owned())
        .context("--url needs endpoint=http://HOST:PORT")?;
    let env = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
    let (key, secret) = (env("AWS_ACCESS_KEY_ID")?, env("AWS_SECRET_ACCESS_KEY")?);
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    let proxy = if args.faults > 0.0 {
        let proxy = ChaosProxy::start(&endpoint).await?;
        proxy.only_paths_containing("_delta_log");
        proxy.randomize(RandomFaults {
            seed: args.seed,
            probability: args.faults,
            faults: vec![
                ProxyFault::DropAfterForward,
                ProxyFault::ServerErrorAfterForward,
            ],
        });
        Some(proxy)
    } else {
        None
    };
    let reach = proxy.as_ref().map_or(endpoint.clone(), |p| p.endpoint());
    let root = AmazonS3Builder::new()
        .with_bucket_name(&bucket)
        .with_endpoint(&reach)
        .with_region(&region)
        .with_access_key_id(&key)
        .with_secret_access_key(&secret)
        .with_virtual_hosted_style_request(false)
        .with_allow_http(true)
        .build()?;
    let prefix = parsed.path().trim_matches('/');
    let path = [prefix, &format!("concurrent-{run_id}-{}", kind.name())]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("/");
    let table_url = Url::parse(&format!("s3://{bucket}/{path}"))?;
    // The same server for casaas, with the URL's options (endpoint through
    // the proxy, vendor quirks such as etag_unquoted).
    let mut casaas_url = Url::parse(&format!("s3://{bucket}/{path}"))?;
    {
        let mut query = casaas_url.query_pairs_mut();
        for (k, v) in parsed.query_pairs() {
            query.append_pair(&k, if k == "endpoint" { &reach } else { &v });
        }
    }
    let options = HashMap::from([
        (
            casaas_delta::STORE_URL_OPTION.to_string(),
            casaas_url.to_string(),
        ),
        ("casaas.aws_access_key_id".to_string(), key),
        ("casaas.aws_secret_access_key".to_string(), secret),
    ]);
    Ok((
        Table {
            url: table_url,
            root_store: Some(Arc::new(root)),
            options,
            commit: None,
        },
        proxy,
    ))
}
