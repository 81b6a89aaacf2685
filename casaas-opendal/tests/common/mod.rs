//! OpenDAL operators on the servers `cargo xtask servers up` started, built
//! with explicit credentials and endpoints (never a metadata lookup).
#![allow(dead_code)]

use std::sync::Arc;

use casaas_core::CasStore;
use casaas_core::testkit::{TestServer, test_server, unique_prefix};
use casaas_opendal::OpendalCas;
use opendal::{HttpTransporter, Operator, services};
use opendal_http_transport_reqwest::ReqwestTransport;
use url::Url;

/// The bucket named by the server's casaas URL.
pub fn bucket(server: &TestServer) -> String {
    Url::parse(&server.url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_string()
}

/// An S3 operator for moto: static keys, no config files or environment.
pub fn s3_operator(server: &TestServer) -> Operator {
    let builder = services::S3::default()
        .bucket(&bucket(server))
        .endpoint(server.var("AWS_ENDPOINT_URL"))
        .region(server.var("AWS_REGION"))
        .access_key_id(server.var("AWS_ACCESS_KEY_ID"))
        .secret_access_key(server.var("AWS_SECRET_ACCESS_KEY"))
        .disable_config_load();
    Operator::new(builder).unwrap()
}

/// An Azure Blob operator for Azurite: the emulator's shared key.
pub fn azblob_operator(server: &TestServer) -> Operator {
    let builder = services::Azblob::default()
        .container(server.var("AZURE_STORAGE_CONTAINER"))
        .endpoint(server.var("AZURE_STORAGE_ENDPOINT"))
        .account_name(server.var("AZURE_STORAGE_ACCOUNT"))
        .account_key(server.var("AZURE_STORAGE_KEY"));
    Operator::new(builder).unwrap()
}

/// Creates the Azurite container through casaas-azure (OpenDAL cannot).
pub async fn ensure_azure_container(server: &TestServer) {
    use casaas_azure::{AzureBlobStore, AzureCredentials};
    AzureBlobStore::builder(
        server.var("AZURE_STORAGE_ACCOUNT"),
        server.var("AZURE_STORAGE_CONTAINER"),
    )
    .endpoint(server.var("AZURE_STORAGE_ENDPOINT"))
    .credentials(AzureCredentials::SharedKey(
        server.var("AZURE_STORAGE_KEY").to_string(),
    ))
    .create_container(true)
    .build()
    .await
    .unwrap();
}

/// A GCS operator for fake-gcs: anonymous, no VM metadata, no config.
pub fn gcs_operator(server: &TestServer) -> Operator {
    let builder = services::Gcs::default()
        .bucket(server.var("GCS_BUCKET"))
        .endpoint(server.var("GCS_ENDPOINT"))
        .skip_signature()
        .disable_vm_metadata()
        .disable_config_load();
    Operator::new(builder).unwrap()
}

/// `op` with an HTTP client of its own. OpenDAL's default transport is one
/// process-wide client whose pooled connections belong to the runtime that
/// opened them; each contract check runs on its own runtime, so a shared
/// pool would hand one check a connection whose runtime is gone.
pub fn with_own_client(op: Operator) -> Operator {
    let transport = HttpTransporter::new(ReqwestTransport::new(reqwest::Client::new()));
    let ctx = op.base_context().with_http_transport(transport);
    op.with_context(ctx)
}

/// The operator for server `name`.
pub async fn server_operator(name: &str) -> (TestServer, Operator) {
    // This crate builds OpenDAL without its start-up constructor.
    opendal::install_default();
    let server = test_server(name);
    let op = match name {
        "moto" => s3_operator(&server),
        "azurite" => {
            ensure_azure_container(&server).await;
            azblob_operator(&server)
        }
        "fake-gcs" => gcs_operator(&server),
        other => panic!("no OpenDAL operator for {other}"),
    };
    (server, with_own_client(op))
}

/// A fresh store on server `name`; `configure` adjusts it (for example
/// declaring what an emulator does not honour).
pub async fn server_store(
    name: &str,
    label: &str,
    configure: fn(OpendalCas) -> OpendalCas,
) -> Arc<dyn CasStore> {
    let (_, op) = server_operator(name).await;
    Arc::new(configure(
        OpendalCas::new(op, unique_prefix(label)).unwrap(),
    ))
}
