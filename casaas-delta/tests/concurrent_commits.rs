//! Concurrent Delta writers commit through casaas on real stores (Ceph RGW,
//! Azurite, fake-gcs: `cargo xtask servers up ceph azurite fake-gcs`; and
//! the local disk), with commit answers lost after the write landed: no
//! commit is lost or duplicated, and plain delta-rs reads the same history.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../examples/concurrent_commits/workload.rs"]
mod workload;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use casaas_core::testkit::{FaultConfig, FaultyStore, TestServer, test_server, unique_prefix};
use casaas_delta::{CommitStore, STORE_URL_OPTION};
use casaas_object_store::v0_13::ObjectStoreCas;
use casaas_testkit::{ChaosProxy, ProxyFault, RandomFaults};
use deltalake_core::logstore::ObjectStoreRef;
use object_store_0_13::aws::AmazonS3Builder;
use object_store_0_13::azure::MicrosoftAzureBuilder;
use url::Url;
use workload::{LogStoreKind, Table};

const WRITERS: u64 = 4;
const COMMITS: u64 = 6;

/// Runs the workload through casaas and checks it, then reads the table
/// with plain delta-rs.
async fn commits_exactly_once(table: &Table, proxy: Option<&ChaosProxy>) {
    // Tables opened by URL get casaas's log store.
    casaas_delta::register();
    workload::create_table(table, LogStoreKind::Casaas)
        .await
        .unwrap();
    let outcome = workload::run(table, LogStoreKind::Casaas, WRITERS, COMMITS)
        .await
        .unwrap();
    eprintln!("{}", outcome.line());
    let n = (WRITERS * COMMITS) as usize;
    assert_eq!(outcome.commits, n, "{}", outcome.line());
    assert_eq!(outcome.duplicates, 0, "{}", outcome.line());
    assert_eq!(outcome.lost, 0, "{}", outcome.line());
    assert_eq!(outcome.table_versions, n as u64, "{}", outcome.line());
    assert!(
        outcome.history.iter().all(Option::is_some),
        "every version holds one of the run's transactions: {:?}",
        outcome.history
    );
    if let Some(proxy) = proxy {
        let faults = proxy.fault_count();
        assert!(
            faults > 0,
            "no commit answer was lost: the run proves nothing"
        );
    }
    // Plain delta-rs (its default log store, no casaas) reads the same
    // table: every version, one file per commit.
    let plain = table.open(LogStoreKind::Default).await.unwrap();
    assert_eq!(plain.version(), Some(n as u64));
    assert_eq!(plain.get_file_uris().unwrap().count(), n);
    let by_url = table.open_by_url().await.unwrap();
    assert_eq!(by_url.version(), Some(n as u64));
}

/// A proxy that loses a fifth of the commit answers after the write landed
/// (a dropped connection, or a 500 the client retries).
async fn commit_fault_proxy(endpoint: &str) -> ChaosProxy {
    let proxy = ChaosProxy::start(endpoint).await.unwrap();
    proxy.only_paths_containing("_delta_log");
    proxy.randomize(RandomFaults {
        seed: 11,
        probability: 0.2,
        faults: vec![
            ProxyFault::DropAfterForward,
            ProxyFault::ServerErrorAfterForward,
        ],
    });
    proxy
}

fn url_option(server: &TestServer, name: &str) -> String {
    Url::parse(&server.url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap()
}

/// The table's casaas URL: the server's, at `path`, through `endpoint`.
fn casaas_url(server: &TestServer, endpoint: &str, path: &str) -> String {
    casaas_testkit::chaos_proxy::rewrite_store_url(&server.url, Some(endpoint), None, path).unwrap()
}

/// Options naming the casaas store, with the server's credentials.
fn casaas_options(server: &TestServer, url: &str) -> HashMap<String, String> {
    let mut options: HashMap<String, String> = server
        .store_options()
        .into_iter()
        .map(|(k, v)| (format!("casaas.{k}"), v))
        .collect();
    options.insert(STORE_URL_OPTION.to_string(), url.to_string());
    options
}

fn table(url: &str, root: ObjectStoreRef, options: HashMap<String, String>) -> Table {
    Table {
        url: Url::parse(url).unwrap(),
        root_store: Some(root),
        options,
        commit: None,
    }
}

fn s3_root(server: &TestServer, endpoint: &str) -> ObjectStoreRef {
    let bucket = Url::parse(&server.url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_string();
    Arc::new(
        AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(endpoint)
            .with_region(server.var("AWS_REGION"))
            .with_access_key_id(server.var("AWS_ACCESS_KEY_ID"))
            .with_secret_access_key(server.var("AWS_SECRET_ACCESS_KEY"))
            .with_virtual_hosted_style_request(false)
            .with_allow_http(true)
            .build()
            .unwrap(),
    )
}

async fn ceph(adapter: bool) {
    let server = test_server("ceph");
    let upstream = url_option(&server, "endpoint");
    let proxy = commit_fault_proxy(&upstream).await;
    let path = unique_prefix("delta-ceph");
    let bucket = Url::parse(&server.url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_string();
    let options = if adapter {
        HashMap::new()
    } else {
        casaas_options(&server, &casaas_url(&server, &proxy.endpoint(), &path))
    };
    let root = s3_root(&server, &proxy.endpoint());
    let table = table(&format!("s3://{bucket}/{path}"), root, options);
    commits_exactly_once(&table, Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ceph_commits_through_the_s3_provider_exactly_once_under_lost_answers() {
    ceph(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ceph_commits_through_the_tables_own_client_exactly_once_under_lost_answers() {
    ceph(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azurite_commits_exactly_once_under_lost_answers() {
    let server = test_server("azurite");
    let (upstream, account_path) = casaas_testkit::chaos_proxy::endpoint_of(&server.url).unwrap();
    let proxy = commit_fault_proxy(&upstream).await;
    let path = unique_prefix("delta-azurite");
    let url = casaas_url(
        &server,
        &format!("{}{account_path}", proxy.endpoint()),
        &path,
    );
    // Opening the store creates the container (create_container=true).
    casaas::open_store_with(&url, server.store_options())
        .await
        .unwrap();
    let root: ObjectStoreRef = Arc::new(
        MicrosoftAzureBuilder::new()
            .with_account(server.var("AZURE_STORAGE_ACCOUNT"))
            .with_access_key(server.var("AZURE_STORAGE_KEY"))
            .with_container_name(server.var("AZURE_STORAGE_CONTAINER"))
            .with_endpoint(format!("{}{account_path}", proxy.endpoint()))
            .with_allow_http(true)
            .build()
            .unwrap(),
    );
    let container = server.var("AZURE_STORAGE_CONTAINER");
    let table = table(
        &format!("az://{container}/{path}"),
        root,
        casaas_options(&server, &url),
    );
    commits_exactly_once(&table, Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fake_gcs_commits_exactly_once_under_lost_answers() {
    let server = test_server("fake-gcs");
    let upstream = url_option(&server, "endpoint");
    let proxy = commit_fault_proxy(&upstream).await;
    let path = unique_prefix("delta-gcs");
    // object_store 0.13 percent-encodes `-` in a bucket name, which
    // fake-gcs does not decode: a bucket of letters only (made by
    // `cargo xtask servers up fake-gcs`).
    let bucket = "casaasdelta";
    let url = casaas_url(&server, &proxy.endpoint(), &path).replacen(
        &format!("gs://{}/", server.var("GCS_BUCKET")),
        &format!("gs://{bucket}/"),
        1,
    );
    // The data through casaas-gcs too (JSON API), straight to the server:
    // fake-gcs takes no XML writes, which object_store's GCS client sends.
    let data_url = casaas_url(&server, &upstream, "").replacen(
        &format!("gs://{}/", server.var("GCS_BUCKET")),
        &format!("gs://{bucket}/"),
        1,
    );
    let data = casaas::open_store_with(&data_url, server.store_options())
        .await
        .unwrap();
    let root: ObjectStoreRef = Arc::new(SinglePut(Arc::new(CasData(data))));
    let table = table(
        &format!("gs://{bucket}/{path}"),
        root,
        casaas_options(&server, &url),
    );
    commits_exactly_once(&table, Some(&proxy)).await;
}

/// The local disk, with the commit store's answers lost, duplicated and
/// delayed in process (no HTTP to put a proxy on).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_disk_commits_exactly_once_under_lost_answers() {
    let dir = tempfile::tempdir().unwrap();
    let url = Url::from_directory_path(dir.path()).unwrap();
    let local: Arc<dyn object_store_0_13::ObjectStore> =
        Arc::new(object_store_0_13::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let adapter = ObjectStoreCas::new(local, "").unwrap();
    let faulty = Arc::new(FaultyStore::new(adapter, 3, FaultConfig::default()));
    // The guard (on the store's create-only view, all CreateOnce needs)
    // passes before the faults begin.
    let view = casaas_core::layout::lease_view(casaas_core::layout::with_layout(
        faulty.clone(),
        casaas_core::layout::LeaseLayout::Epochs,
    ));
    casaas_core::testkit::pass_store_guard(view.as_ref())
        .await
        .unwrap();
    faulty.set_config(FaultConfig {
        lose_response: 0.15,
        duplicate: 0.1,
        delay: 0.05,
        max_delay: Duration::from_millis(20),
        ..FaultConfig::default()
    });
    let table = Table {
        url,
        root_store: None,
        options: HashMap::new(),
        commit: Some(CommitStore::Store(faulty.clone())),
    };
    commits_exactly_once(&table, None).await;
    let counts = faulty.counts();
    assert!(
        counts.lost_responses + counts.duplicated > 0,
        "no commit answer was lost: {counts:?}"
    );
}

/// delta-rs's own log store under the same lost answers, for contrast: a
/// commit whose 500 is retried by the client comes back "already exists",
/// and delta-rs commits the same transaction again at the next version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_log_store_duplicates_commits_under_the_same_faults() {
    let server = test_server("ceph");
    let upstream = url_option(&server, "endpoint");
    let proxy = ChaosProxy::start(&upstream).await.unwrap();
    proxy.only_paths_containing("_delta_log");
    proxy.randomize(RandomFaults {
        seed: 5,
        probability: 0.3,
        faults: vec![ProxyFault::ServerErrorAfterForward],
    });
    let path = unique_prefix("delta-default");
    let bucket = Url::parse(&server.url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_string();
    let table = table(
        &format!("s3://{bucket}/{path}"),
        s3_root(&server, &proxy.endpoint()),
        HashMap::new(),
    );
    // Created through casaas: the default log store can fail to create a
    // table under these faults (its own version 0 "already exists").
    workload::create_table(&table, LogStoreKind::Casaas)
        .await
        .unwrap();
    let outcome = workload::run(&table, LogStoreKind::Default, 2, 5)
        .await
        .unwrap();
    eprintln!("{}", outcome.line());
    assert!(
        outcome.duplicates > 0,
        "the fault this crate exists for did not show: {}",
        outcome.line()
    );
}

/// An object store that sends a multipart upload as one put at completion:
/// fake-gcs has no XML multipart API, which object_store's GCS client uses
/// for delta-rs's data files.
#[derive(Debug)]
struct SinglePut(Arc<dyn object_store_0_13::ObjectStore>);

impl std::fmt::Display for SinglePut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SinglePut({})", self.0)
    }
}

#[derive(Debug)]
struct BufferedUpload {
    store: Arc<dyn object_store_0_13::ObjectStore>,
    location: object_store_0_13::path::Path,
    parts: Vec<object_store_0_13::PutPayload>,
}

#[async_trait::async_trait]
impl object_store_0_13::MultipartUpload for BufferedUpload {
    fn put_part(&mut self, data: object_store_0_13::PutPayload) -> object_store_0_13::UploadPart {
        self.parts.push(data);
        Box::pin(async { Ok(()) })
    }

    async fn complete(&mut self) -> object_store_0_13::Result<object_store_0_13::PutResult> {
        let whole: object_store_0_13::PutPayload = std::mem::take(&mut self.parts)
            .iter()
            .flat_map(|part| part.iter().cloned())
            .collect();
        self.store
            .put_opts(&self.location, whole, Default::default())
            .await
    }

    async fn abort(&mut self) -> object_store_0_13::Result<()> {
        self.parts.clear();
        Ok(())
    }
}

#[async_trait::async_trait]
impl object_store_0_13::ObjectStore for SinglePut {
    async fn put_opts(
        &self,
        location: &object_store_0_13::path::Path,
        payload: object_store_0_13::PutPayload,
        opts: object_store_0_13::PutOptions,
    ) -> object_store_0_13::Result<object_store_0_13::PutResult> {
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store_0_13::path::Path,
        _opts: object_store_0_13::PutMultipartOptions,
    ) -> object_store_0_13::Result<Box<dyn object_store_0_13::MultipartUpload>> {
        Ok(Box::new(BufferedUpload {
            store: self.0.clone(),
            location: location.clone(),
            parts: Vec::new(),
        }))
    }

    async fn get_opts(
        &self,
        location: &object_store_0_13::path::Path,
        options: object_store_0_13::GetOptions,
    ) -> object_store_0_13::Result<object_store_0_13::GetResult> {
        self.0.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store_0_13::Result<object_store_0_13::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store_0_13::Result<object_store_0_13::path::Path>>
    {
        self.0.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store_0_13::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store_0_13::Result<object_store_0_13::ObjectMeta>>
    {
        self.0.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store_0_13::path::Path>,
    ) -> object_store_0_13::Result<object_store_0_13::ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store_0_13::path::Path,
        to: &object_store_0_13::path::Path,
        options: object_store_0_13::CopyOptions,
    ) -> object_store_0_13::Result<()> {
        self.0.copy_opts(from, to, options).await
    }
}

/// The table's data through a casaas store (fake-gcs through casaas-gcs's
/// JSON API, since fake-gcs takes no XML writes): whole-object reads,
/// writes as create or read-then-replace. Test support only.
#[derive(Debug)]
struct CasData(Arc<dyn casaas_core::CasStore>);

impl std::fmt::Display for CasData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CasData({})", self.0.describe())
    }
}

type OsResult<T> = object_store_0_13::Result<T>;
type OsPath = object_store_0_13::path::Path;

fn os_error(err: casaas_core::CasError) -> object_store_0_13::Error {
    object_store_0_13::Error::Generic {
        store: "casaas",
        source: Box::new(err),
    }
}

impl CasData {
    async fn meta(
        &self,
        location: &OsPath,
    ) -> OsResult<Option<(Bytes, object_store_0_13::ObjectMeta)>> {
        let Some(object) = self.0.get(location.as_ref()).await.map_err(os_error)? else {
            return Ok(None);
        };
        let meta = object_store_0_13::ObjectMeta {
            location: location.clone(),
            last_modified: chrono::Utc::now(),
            size: object.body.len() as u64,
            e_tag: Some(object.version.to_string()),
            version: None,
        };
        Ok(Some((object.body, meta)))
    }
}

use bytes::Bytes;

#[async_trait::async_trait]
impl object_store_0_13::ObjectStore for CasData {
    async fn put_opts(
        &self,
        location: &OsPath,
        payload: object_store_0_13::PutPayload,
        opts: object_store_0_13::PutOptions,
    ) -> OsResult<object_store_0_13::PutResult> {
        let body = Bytes::from(payload);
        let key = location.as_ref();
        let version = loop {
            let current = self.0.get(key).await.map_err(os_error)?;
            let written = match (&opts.mode, current) {
                (_, None) => self.0.create(key, body.clone()).await,
                (object_store_0_13::PutMode::Create, Some(_)) => {
                    return Err(object_store_0_13::Error::AlreadyExists {
                        path: key.to_string(),
                        source: "exists".into(),
                    });
                }
                (_, Some(old)) => self.0.replace(key, &old.version, body.clone()).await,
            };
            match written {
                Ok(version) => break version,
                Err(err) if err.kind() == casaas_core::ErrorKind::PreconditionFailed => continue,
                Err(err) => return Err(os_error(err)),
            }
        };
        Ok(object_store_0_13::PutResult {
            e_tag: Some(version.to_string()),
            version: None,
        })
    }

    async fn put_multipart_opts(
        &self,
        _location: &OsPath,
        _opts: object_store_0_13::PutMultipartOptions,
    ) -> OsResult<Box<dyn object_store_0_13::MultipartUpload>> {
        Err(object_store_0_13::Error::NotImplemented {
            operation: "multipart (wrap in SinglePut)".into(),
            implementer: "CasData".into(),
        })
    }

    async fn get_opts(
        &self,
        location: &OsPath,
        options: object_store_0_13::GetOptions,
    ) -> OsResult<object_store_0_13::GetResult> {
        let Some((body, meta)) = self.meta(location).await? else {
            return Err(object_store_0_13::Error::NotFound {
                path: location.to_string(),
                source: "absent".into(),
            });
        };
        let range = match &options.range {
            Some(range) => {
                range
                    .as_range(meta.size)
                    .map_err(|e| object_store_0_13::Error::Generic {
                        store: "casaas",
                        source: Box::new(e),
                    })?
            }
            None => 0..meta.size,
        };
        let part = body.slice(range.start as usize..range.end as usize);
        Ok(object_store_0_13::GetResult {
            payload: object_store_0_13::GetResultPayload::Stream(Box::pin(futures::stream::once(
                async move { Ok(part) },
            ))),
            meta,
            range,
            attributes: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, OsResult<OsPath>>,
    ) -> futures::stream::BoxStream<'static, OsResult<OsPath>> {
        use futures::StreamExt;
        let store = self.0.clone();
        locations
            .then(move |path| {
                let store = store.clone();
                async move {
                    let path = path?;
                    store
                        .delete_unconditionally(path.as_ref())
                        .await
                        .map_err(os_error)?;
                    Ok(path)
                }
            })
            .boxed()
    }

    fn list(
        &self,
        prefix: Option<&OsPath>,
    ) -> futures::stream::BoxStream<'static, OsResult<object_store_0_13::ObjectMeta>> {
        use futures::StreamExt;
        let store = CasData(self.0.clone());
        let prefix = prefix.map_or(String::new(), |p| format!("{p}/"));
        futures::stream::once(async move {
            let mut metas = Vec::new();
            for entry in store.0.list(&prefix).await.map_err(os_error)? {
                if let Some((_, meta)) = store.meta(&OsPath::from(entry.key)).await? {
                    metas.push(Ok(meta));
                }
            }
            OsResult::Ok(futures::stream::iter(metas))
        })
        .map(|listed| match listed {
            Ok(stream) => stream.boxed(),
            Err(err) => futures::stream::once(async move { Err(err) }).boxed(),
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&OsPath>,
    ) -> OsResult<object_store_0_13::ListResult> {
        use futures::TryStreamExt;
        let base = prefix.map_or(String::new(), |p| format!("{p}/"));
        let all: Vec<_> = self.list(prefix).try_collect().await?;
        let mut objects = Vec::new();
        let mut common = std::collections::BTreeSet::new();
        for meta in all {
            let rest = meta.location.as_ref()[base.len()..].to_string();
            match rest.split_once('/') {
                Some((dir, _)) => {
                    common.insert(OsPath::from(format!("{base}{dir}")));
                }
                None => objects.push(meta),
            }
        }
        Ok(object_store_0_13::ListResult {
            common_prefixes: common.into_iter().collect(),
            objects,
        })
    }

    async fn copy_opts(
        &self,
        from: &OsPath,
        to: &OsPath,
        _options: object_store_0_13::CopyOptions,
    ) -> OsResult<()> {
        use object_store_0_13::ObjectStoreExt;
        let body = self.get(from).await?.bytes().await?;
        self.put(to, body.into()).await?;
        Ok(())
    }
}
