//! Shared setup: stores on the Azurite server started by
//! `cargo xtask servers up azurite`, with explicit credentials from its env
//! file (tests never read the process environment).
#![allow(dead_code)]

use casaas_azure::{AzureBlobStore, AzureBlobStoreBuilder};
use casaas_core::testkit::{TestServer, test_server, unique_prefix};

pub fn server() -> TestServer {
    test_server("azurite")
}

/// A builder for the test URL, credentials from the server's env file.
pub fn builder(server: &TestServer) -> AzureBlobStoreBuilder {
    AzureBlobStoreBuilder::from_url_with_env(&server.url, |name| server.env.get(name).cloned())
        .expect("the azurite test URL parses")
}

/// A store on a fresh, unique prefix of the test container.
pub async fn fresh(label: &str) -> AzureBlobStore {
    let server = server();
    builder(&server)
        .prefix(unique_prefix(label))
        .build()
        .await
        .expect("azurite store")
}
