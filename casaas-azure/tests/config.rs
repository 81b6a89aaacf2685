//! URLs, credentials and Debug output; credential kinds live on Azurite.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use casaas_azure::{AzureBlobStore, AzureBlobStoreBuilder, AzureCredentials, DEV_ACCOUNT_KEY};
use casaas_core::testkit::unique_prefix;
use casaas_core::{CasStore, ErrorKind};

const KEY: &str = "c2VjcmV0LWtleS12YWx1ZQ==";

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn parse_err(url: &str, vars: &[(&str, &str)]) -> String {
    let err = AzureBlobStoreBuilder::from_url_with_env(url, env(vars)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{url}: {err}");
    err.to_string()
}

#[test]
fn url_errors_say_what_to_fix() {
    let key = [("AZURE_STORAGE_KEY", KEY)];
    for (url, expected) in [
        ("not a url", "not a valid store URL"),
        ("s3://acct/c", "not az"),
        ("az:///c/p", "no storage account"),
        ("az://acct", "no container"),
        ("az://acct/", "no container"),
        ("az://user:pw@acct/cont", "never go in the URL"),
        ("az://acct:99/cont", "no port"),
        ("az://acct/cont#x", "fragment"),
        ("az://acct/cont?bogus=1", "unknown option 'bogus'"),
        ("az://acct/cont?endpoint=1&endpoint=2", "given twice"),
        ("az://acct/cont?timeout=-1", "positive duration"),
        ("az://acct/cont?create_container=maybe", "true or false"),
        ("az://acct/cont?endpoint=ftp://x", "http:// or https://"),
        ("az://acct/cont?endpoint=not-a-url", "not a valid URL"),
        ("az://Acct/cont", "not a storage account name"),
        ("az://acct/Bad_Container", "not a container name"),
        ("az://acct/cont/a//b", "bad prefix"),
        // `..` is resolved by URL parsing itself, leaving container 'x'.
        ("az://acct/cont/../x", "'x' is not a container name"),
    ] {
        let text = parse_err(url, &key);
        assert!(text.contains(expected), "{url}: {text}");
    }
    // A SAS smuggled into the endpoint is refused.
    let text = parse_err(
        "az://acct/cont?endpoint=https%3A%2F%2Facct.blob.core.windows.net%2F%3Fsv%3D1%26sig%3DSECRET",
        &key,
    );
    assert!(text.contains("must not carry a query"), "{text}");
    assert!(!text.contains("SECRET"), "{text}");
}

#[test]
fn credentials_come_from_the_environment_only() {
    let text = parse_err("az://acct/cont/p", &[]);
    assert!(text.contains("AZURE_STORAGE_KEY"), "{text}");
    assert!(text.contains("never come from the URL"), "{text}");

    let b = AzureBlobStoreBuilder::from_url_with_env(
        "az://acct/cont/p/q/",
        env(&[("AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=SECRETSIG")]),
    )
    .unwrap();
    let text = format!("{b:?}");
    assert!(text.contains("SAS") && text.contains("p/q"), "{text}");
    assert!(!text.contains("SECRETSIG"), "{text}");

    // Precedence: connection string, then key, then SAS.
    let b = AzureBlobStoreBuilder::from_url_with_env(
        "az://acct/cont",
        env(&[
            ("AZURE_STORAGE_KEY", KEY),
            ("AZURE_STORAGE_SAS_TOKEN", "sv=1&sig=x"),
        ]),
    )
    .unwrap();
    assert!(format!("{b:?}").contains("shared key"));

    // A connection string for another account is refused, without echoing it.
    let text = parse_err(
        "az://acct/cont",
        &[(
            "AZURE_STORAGE_CONNECTION_STRING",
            "AccountName=other;AccountKey=SECRETKEY",
        )],
    );
    assert!(
        text.contains("'other'") && !text.contains("SECRETKEY"),
        "{text}"
    );
    let text = parse_err(
        "az://acct/cont",
        &[(
            "AZURE_STORAGE_CONNECTION_STRING",
            "AccountKey=SECRETKEY;Garbage",
        )],
    );
    assert!(!text.contains("SECRETKEY"), "{text}");
}

#[tokio::test]
async fn bad_secrets_are_refused_offline() {
    let err = AzureBlobStore::builder("acct", "cont")
        .credentials(AzureCredentials::SharedKey("not base64!!".into()))
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("base64"), "{err}");
    assert!(!err.to_string().contains("not base64!!"), "{err}");
    let err = AzureBlobStore::builder("acct", "cont")
        .credentials(AzureCredentials::Sas("sv=1&se=SECRET".into()))
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("sig="), "{err}");
    assert!(!err.to_string().contains("SECRET"), "{err}");
    let err = AzureBlobStore::builder("acct", "cont")
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no credentials"), "{err}");
}

#[tokio::test]
async fn debug_and_describe_hold_no_secret() {
    for credentials in [
        AzureCredentials::SharedKey(KEY.into()),
        AzureCredentials::Sas("sv=1&sig=c2VjcmV0LWtleS12YWx1ZQ%3D%3D".into()),
        AzureCredentials::BearerToken(KEY.into()),
    ] {
        let builder = AzureBlobStore::builder("acct", "cont")
            .prefix("app")
            .credentials(credentials.clone());
        let store = builder.clone().build().await.unwrap();
        let native = store.native_lease("lock").unwrap();
        for text in [
            format!("{credentials:?}"),
            format!("{builder:?}"),
            format!("{store:?}"),
            format!("{native:?}"),
            store.describe(),
        ] {
            assert!(!text.contains("c2VjcmV0"), "{text}");
        }
        assert_eq!(
            store.describe().split(' ').next(),
            Some("az://acct/cont/app/")
        );
    }
}

#[tokio::test]
async fn register_makes_az_urls_openable() {
    casaas_azure::register();
    assert!(casaas_core::provider::registered_schemes().contains(&"az".to_string()));
    // Fails on the URL before looking at any credential.
    let err = casaas_core::open_store("az://acct").await.unwrap_err();
    assert!(err.to_string().contains("no container"), "{err}");
}

// --- Each credential kind, live on Azurite. ---

async fn round_trip(store: &AzureBlobStore) {
    let v = store.create("k", Bytes::from_static(b"1")).await.unwrap();
    store
        .replace("k", &v, Bytes::from_static(b"2"))
        .await
        .unwrap();
    assert_eq!(
        store.get("k").await.unwrap().unwrap().body,
        Bytes::from_static(b"2")
    );
    assert_eq!(store.list("").await.unwrap().len(), 1);
}

#[tokio::test]
async fn connection_string_with_endpoint() {
    let server = common::server();
    let store = AzureBlobStoreBuilder::from_connection_string(
        server.var("AZURE_STORAGE_CONNECTION_STRING"),
        server.var("AZURE_STORAGE_CONTAINER"),
    )
    .unwrap()
    .prefix(unique_prefix("azure-connstr"))
    .create_container(true)
    .build()
    .await
    .unwrap();
    round_trip(&store).await;
}

#[tokio::test]
async fn development_storage_with_endpoint_override() {
    let server = common::server();
    // UseDevelopmentStorage=true means the well-known account and key; the
    // URL's endpoint points it at this Azurite's port.
    let url = format!(
        "az://devstoreaccount1/{}/{}?endpoint={}&create_container=true",
        server.var("AZURE_STORAGE_CONTAINER"),
        unique_prefix("azure-devstorage"),
        server.var("AZURE_STORAGE_ENDPOINT")
    );
    let store = AzureBlobStoreBuilder::from_url_with_env(
        &url,
        env(&[(
            "AZURE_STORAGE_CONNECTION_STRING",
            "UseDevelopmentStorage=true",
        )]),
    )
    .unwrap()
    .build()
    .await
    .unwrap();
    assert_eq!(DEV_ACCOUNT_KEY, server.var("AZURE_STORAGE_KEY"));
    round_trip(&store).await;
}

#[tokio::test]
async fn sas_token() {
    use azure_storage::prelude::BlobSasPermissions;
    use azure_storage::shared_access_signature::SasToken;
    use azure_storage_blobs::prelude::ClientBuilder;

    let server = common::server();
    let container = server.var("AZURE_STORAGE_CONTAINER");
    // A container SAS cannot create its container: make sure it exists.
    common::fresh("azure-sas-setup").await;
    // A container SAS signed with the account key, as `az storage
    // container generate-sas` would make.
    let location = azure_storage::CloudLocation::Custom {
        account: "devstoreaccount1".into(),
        uri: server.var("AZURE_STORAGE_ENDPOINT").into(),
    };
    let signer = ClientBuilder::with_location(
        location,
        azure_storage::StorageCredentials::access_key(
            "devstoreaccount1",
            azure_core::auth::Secret::new(server.var("AZURE_STORAGE_KEY").to_string()),
        ),
    )
    .container_client(container);
    let permissions = BlobSasPermissions {
        read: true,
        create: true,
        write: true,
        delete: true,
        list: true,
        ..Default::default()
    };
    let expiry = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let token = signer
        .shared_access_signature(permissions, expiry)
        .await
        .unwrap()
        .token()
        .unwrap();

    let store = AzureBlobStore::builder("devstoreaccount1", container)
        .endpoint(server.var("AZURE_STORAGE_ENDPOINT"))
        .prefix(unique_prefix("azure-sas"))
        .credentials(AzureCredentials::Sas(token.clone()))
        .build()
        .await
        .unwrap();
    round_trip(&store).await;
    // Errors from a SAS store do not leak the signature.
    let err = store
        .create("k", Bytes::from_static(b"again"))
        .await
        .unwrap_err();
    let sig = token
        .split('&')
        .find_map(|p| p.strip_prefix("sig="))
        .unwrap();
    assert!(!format!("{err} {err:?}").contains(sig), "{err:?}");
}

/// The typed config read from a URL, kept by the builder and the store;
/// `open_with` takes the credentials beside the URL, like the other
/// providers.
#[tokio::test]
async fn config_from_url_and_open_with() {
    use casaas_azure::AzureConfig;
    use casaas_core::StoreUrl;
    let url = StoreUrl::parse(
        "az://devstoreaccount1/locks/app1?endpoint=http://127.0.0.1:9/devstoreaccount1&timeout=7",
    )
    .unwrap();
    let config = AzureConfig::from_url(&url).unwrap();
    assert_eq!(config.account, "devstoreaccount1");
    assert_eq!(config.container, "locks");
    assert_eq!(config.prefix, "app1");
    assert_eq!(config.timeout, std::time::Duration::from_secs(7));
    assert!(!config.create_container);
    assert!(casaas_azure::URL_OPTIONS.contains(&"create_container"));
    assert!(AzureConfig::from_url(&StoreUrl::parse("az://acct/cont?bogus=1").unwrap()).is_err());

    let store = AzureBlobStore::open_with(
        "az://devstoreaccount1/locks/app1?endpoint=http://127.0.0.1:9/devstoreaccount1",
        [("azure_storage_key", DEV_ACCOUNT_KEY)],
    )
    .await
    .unwrap();
    assert_eq!(store.config().prefix, "app1");
    assert_eq!(
        store.config().endpoint.as_deref(),
        Some("http://127.0.0.1:9/devstoreaccount1")
    );
    assert!(!format!("{store:?}").contains(DEV_ACCOUNT_KEY));
    let builder = AzureBlobStoreBuilder::from_config(config.clone());
    assert_eq!(builder.config(), &config);
}
