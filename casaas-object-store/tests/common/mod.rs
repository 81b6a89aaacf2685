//! object_store clients on the servers `cargo xtask servers up` started,
//! built with explicit credentials and endpoints (never a metadata lookup).
#![allow(dead_code)]

use std::sync::Arc;

use casaas_core::CasStore;
use casaas_core::testkit::{TestServer, test_server, unique_prefix};
use casaas_object_store::ObjectStoreCas;
use object_store::ObjectStore;
use object_store::StaticCredentialProvider;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder};
use url::Url;

/// The value of URL query option `name` in the server's casaas URL.
pub fn url_option(server: &TestServer, name: &str) -> String {
    let url = Url::parse(&server.url).unwrap();
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("{} has no {name} option", server.url))
}

/// The bucket (S3, GCS) named by the server's casaas URL.
pub fn bucket(server: &TestServer) -> String {
    Url::parse(&server.url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_string()
}

/// An S3 client for moto: static keys, path-style requests, plain HTTP.
pub fn s3_client(server: &TestServer) -> AmazonS3Builder {
    AmazonS3Builder::new()
        .with_bucket_name(bucket(server))
        .with_endpoint(server.var("AWS_ENDPOINT_URL"))
        .with_region(server.var("AWS_REGION"))
        .with_access_key_id(server.var("AWS_ACCESS_KEY_ID"))
        .with_secret_access_key(server.var("AWS_SECRET_ACCESS_KEY"))
        .with_virtual_hosted_style_request(false)
        .with_allow_http(true)
}

/// An Azure client for Azurite: the emulator's shared key, explicit endpoint.
/// The container must exist (see [`ensure_azure_container`]).
pub fn azure_client(server: &TestServer) -> MicrosoftAzureBuilder {
    MicrosoftAzureBuilder::new()
        .with_account(server.var("AZURE_STORAGE_ACCOUNT"))
        .with_access_key(server.var("AZURE_STORAGE_KEY"))
        .with_container_name(server.var("AZURE_STORAGE_CONTAINER"))
        .with_endpoint(server.var("AZURE_STORAGE_ENDPOINT").to_string())
        .with_allow_http(true)
}

/// Creates the Azurite container through casaas-azure (object_store cannot).
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

/// A GCS client for fake-gcs: explicit base URL and a static empty bearer
/// token, so the client never asks a metadata server for one.
pub fn gcs_client(server: &TestServer) -> GoogleCloudStorageBuilder {
    GoogleCloudStorageBuilder::new()
        .with_bucket_name(server.var("GCS_BUCKET"))
        .with_base_url(server.var("GCS_ENDPOINT"))
        .with_credentials(Arc::new(StaticCredentialProvider::new(GcpCredential {
            bearer: String::new(),
        })))
        .with_client_options(object_store::ClientOptions::new().with_allow_http(true))
}

/// The adapter over `client` on a fresh prefix.
pub fn adapter(client: Arc<dyn ObjectStore>, label: &str) -> Arc<dyn CasStore> {
    Arc::new(ObjectStoreCas::new(client, unique_prefix(label)).unwrap())
}

/// A fresh store on server `name`.
pub async fn server_store(name: &str, label: &str) -> Arc<dyn CasStore> {
    let server = test_server(name);
    let client: Arc<dyn ObjectStore> = match name {
        "moto" => Arc::new(s3_client(&server).build().unwrap()),
        "azurite" => {
            ensure_azure_container(&server).await;
            Arc::new(azure_client(&server).build().unwrap())
        }
        "fake-gcs" => Arc::new(gcs_client(&server).build().unwrap()),
        other => panic!("no object_store client for {other}"),
    };
    adapter(client, label)
}
