//! Where the store is and how it authenticates: credentials, connection
//! strings, `az://` URLs and the builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use casaas_core::provider::validate_key;
use casaas_core::{CasError, StoreUrl};
use url::Url;

/// The well-known development account of Azurite and the storage emulator.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// The well-known (public, documented) key of [`DEV_ACCOUNT`].
pub const DEV_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The emulator's default blob endpoint for [`DEV_ACCOUNT`].
pub const DEV_BLOB_ENDPOINT: &str = "http://127.0.0.1:10000/devstoreaccount1";

/// The environment variables credentials are read from by
/// [`AzureBlobStoreBuilder::from_url`], in order of precedence.
pub const CREDENTIAL_VARIABLES: [&str; 3] = [
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
];

/// The query options an `az://` URL accepts; the credentials (the
/// lowercase names of [`CREDENTIAL_VARIABLES`]) only beside it, never in it.
pub const URL_OPTIONS: &[&str] = &[
    "endpoint",
    "timeout",
    "connect_timeout",
    "create_container",
    "azure_storage_connection_string",
    "azure_storage_key",
    "azure_storage_sas_token",
];

/// A source of Entra ID (Azure AD) tokens, e.g. a credential from the
/// `azure_identity` crate (version 0.21). Tokens are requested for the
/// `https://storage.azure.com/.default` scope.
pub use azure_core::auth::TokenCredential;

/// How requests are authorized. `Debug` never shows a secret.
#[derive(Clone)]
#[non_exhaustive]
pub enum AzureCredentials {
    /// Shared key: the storage account's base64 access key.
    SharedKey(String),
    /// A shared access signature: the query string the portal or CLI gives
    /// (`sv=…&sig=…`, with or without a leading `?`).
    Sas(String),
    /// A fixed Entra ID bearer token (it expires; prefer
    /// [`AzureCredentials::Token`]).
    BearerToken(String),
    /// Entra ID tokens from a credential that refreshes them.
    Token(Arc<dyn TokenCredential>),
    /// No authorization (public-read containers only).
    Anonymous,
}

impl AzureCredentials {
    /// The kind of credential, for messages and `Debug`.
    pub fn kind(&self) -> &'static str {
        match self {
            AzureCredentials::SharedKey(_) => "shared key",
            AzureCredentials::Sas(_) => "SAS",
            AzureCredentials::BearerToken(_) => "bearer token",
            AzureCredentials::Token(_) => "Entra ID token credential",
            AzureCredentials::Anonymous => "anonymous",
        }
    }

    /// The SDK's credential for `account`, checking what can be checked
    /// offline. Errors never repeat the secret.
    pub(crate) fn to_sdk(
        &self,
        account: &str,
    ) -> Result<azure_storage::StorageCredentials, CasError> {
        use azure_core::auth::Secret;
        use azure_storage::StorageCredentials;
        Ok(match self {
            AzureCredentials::SharedKey(key) => {
                if azure_core::base64::decode(key.trim()).is_err() {
                    return Err(CasError::misconfigured(
                        "the account key is not valid base64; copy it again from the portal \
                         (Access keys) or `az storage account keys list`",
                    ));
                }
                StorageCredentials::access_key(account, Secret::new(key.trim().to_string()))
            }
            AzureCredentials::Sas(token) => {
                let token = token.trim().trim_start_matches('?');
                if !token.split('&').any(|pair| pair.starts_with("sig=")) {
                    return Err(CasError::misconfigured(
                        "the SAS token has no sig= parameter; give the whole query string \
                         (sv=…&sig=…)",
                    ));
                }
                StorageCredentials::sas_token(token).map_err(|_| {
                    CasError::misconfigured("the SAS token is not a valid query string")
                })?
            }
            AzureCredentials::BearerToken(token) => {
                StorageCredentials::bearer_token(Secret::new(token.clone()))
            }
            AzureCredentials::Token(credential) => {
                StorageCredentials::token_credential(credential.clone())
            }
            AzureCredentials::Anonymous => StorageCredentials::anonymous(),
        })
    }
}

impl fmt::Debug for AzureCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AzureCredentials({})", self.kind())
    }
}

/// What a connection string says (only the blob-relevant parts).
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectionString {
    pub(crate) account: Option<String>,
    pub(crate) credentials: Option<AzureCredentials>,
    pub(crate) blob_endpoint: Option<String>,
}

impl ConnectionString {
    /// Parses `Key=Value;…`. Messages name keys, never values.
    pub(crate) fn parse(text: &str) -> Result<Self, CasError> {
        let mut account = None;
        let mut key = None;
        let mut sas = None;
        let mut protocol = None;
        let mut suffix = None;
        let mut blob_endpoint = None;
        let mut development = false;
        let mut proxy = None;
        for (index, entry) in text.split(';').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let Some((name, value)) = entry.split_once('=') else {
                return Err(CasError::misconfigured(format!(
                    "connection string entry {} has no '=' (expected Key=Value;Key=Value)",
                    index + 1
                )));
            };
            let (name, value) = (name.trim(), value.trim().to_string());
            if value.is_empty() {
                return Err(CasError::misconfigured(format!(
                    "connection string key '{name}' has an empty value"
                )));
            }
            match name.to_ascii_lowercase().as_str() {
                "accountname" => account = Some(value),
                "accountkey" => key = Some(value),
                "sharedaccesssignature" => sas = Some(value),
                "defaultendpointsprotocol" => match value.as_str() {
                    "http" | "https" => protocol = Some(value),
                    _ => {
                        return Err(CasError::misconfigured(
                            "connection string DefaultEndpointsProtocol must be http or https",
                        ));
                    }
                },
                "endpointsuffix" => suffix = Some(value),
                "blobendpoint" => blob_endpoint = Some(value),
                "usedevelopmentstorage" => match value.to_ascii_lowercase().as_str() {
                    "true" => development = true,
                    "false" => development = false,
                    _ => {
                        return Err(CasError::misconfigured(
                            "connection string UseDevelopmentStorage must be true or false",
                        ));
                    }
                },
                "developmentstorageproxyuri" => proxy = Some(value),
                // Other services' endpoints do not concern blobs.
                "blobsecondaryendpoint"
                | "queueendpoint"
                | "queuesecondaryendpoint"
                | "tableendpoint"
                | "tablesecondaryendpoint"
                | "fileendpoint"
                | "filesecondaryendpoint" => {}
                _ => {
                    return Err(CasError::misconfigured(format!(
                        "connection string has an unknown key '{name}'"
                    )));
                }
            }
        }
        if development {
            // The emulator's well-known account, unless the string says more.
            let account = account.unwrap_or_else(|| DEV_ACCOUNT.to_string());
            let endpoint = blob_endpoint
                .or_else(|| proxy.map(|p| format!("{}/{account}", p.trim_end_matches('/'))));
            let credentials = match (key, sas) {
                (_, Some(sas)) => AzureCredentials::Sas(sas),
                (Some(key), None) => AzureCredentials::SharedKey(key),
                (None, None) => AzureCredentials::SharedKey(DEV_ACCOUNT_KEY.to_string()),
            };
            return Ok(ConnectionString {
                blob_endpoint: Some(endpoint.unwrap_or_else(|| DEV_BLOB_ENDPOINT.to_string())),
                account: Some(account),
                credentials: Some(credentials),
            });
        }
        let credentials = match (key, sas) {
            // Like the Azure SDKs: a SAS wins over a key.
            (_, Some(sas)) => Some(AzureCredentials::Sas(sas)),
            (Some(key), None) => Some(AzureCredentials::SharedKey(key)),
            (None, None) => None,
        };
        let blob_endpoint = blob_endpoint.or_else(|| {
            let account = account.as_ref()?;
            let protocol = protocol.as_deref().unwrap_or("https");
            let suffix = suffix.as_deref().unwrap_or("core.windows.net");
            Some(format!("{protocol}://{account}.blob.{suffix}"))
        });
        Ok(ConnectionString {
            account,
            credentials,
            blob_endpoint,
        })
    }
}

/// Builds an [`AzureBlobStore`](crate::AzureBlobStore).
///
/// ```
/// use casaas_azure::{AzureBlobStore, AzureCredentials};
///
/// let builder = AzureBlobStore::builder("myaccount", "locks")
///     .prefix("app1")
///     .credentials(AzureCredentials::SharedKey("c2VjcmV0".into()));
/// // Debug shows what, never the secret.
/// assert!(!format!("{builder:?}").contains("c2VjcmV0"));
/// ```
#[derive(Clone)]
pub struct AzureBlobStoreBuilder {
    pub(crate) config: AzureConfig,
    pub(crate) credentials: Option<AzureCredentials>,
}

impl fmt::Debug for AzureBlobStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureBlobStoreBuilder")
            .field("config", &self.config)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// The settings of one Azure store: where it is and how it talks. Holds no
/// secrets (credentials are the builder's, [`AzureCredentials`]).
///
/// ```
/// use casaas_azure::AzureConfig;
/// use casaas_core::StoreUrl;
///
/// let url = StoreUrl::parse("az://myaccount/locks/app1?timeout=5&create_container=true").unwrap();
/// let config = AzureConfig::from_url(&url).unwrap();
/// assert_eq!((config.account.as_str(), config.container.as_str()), ("myaccount", "locks"));
/// assert_eq!(config.prefix, "app1");
/// assert_eq!(config.timeout, std::time::Duration::from_secs(5));
/// assert!(config.create_container);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AzureConfig {
    /// The storage account.
    pub account: String,
    /// The container.
    pub container: String,
    /// The prefix keys live under, without a trailing `/` (may be empty).
    pub prefix: String,
    /// The account's blob endpoint (`https://ACCOUNT.blob.core.windows.net`
    /// when `None`).
    pub endpoint: Option<String>,
    /// The total time one request may take.
    pub timeout: Duration,
    /// The time a connection attempt may take.
    pub connect_timeout: Duration,
    /// Whether building the store creates the container if it is missing.
    pub create_container: bool,
}

impl AzureConfig {
    /// The defaults for container `container` of account `account`: the
    /// public endpoint, [`DEFAULT_TIMEOUT`], [`DEFAULT_CONNECT_TIMEOUT`],
    /// no container creation.
    pub fn new(account: impl Into<String>, container: impl Into<String>) -> Self {
        AzureConfig {
            account: account.into(),
            container: container.into(),
            prefix: String::new(),
            endpoint: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            create_container: false,
        }
    }

    /// Reads `az://account/container/prefix?options` ([`URL_OPTIONS`]);
    /// credentials given beside the URL are the builder's business, not the
    /// config's. Unknown or repeated options and malformed values are
    /// rejected with a message that says what to fix.
    pub fn from_url(url: &StoreUrl) -> Result<Self, CasError> {
        url.check_provider(
            "az",
            "set AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_CONNECTION_STRING",
        )?;
        let account = Some(url.authority())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                CasError::misconfigured(
                    "the URL names no storage account: az://ACCOUNT/CONTAINER/PREFIX",
                )
            })?
            .to_string();
        let (container, prefix) = url.first_segment()?;
        if container.is_empty() {
            return Err(CasError::misconfigured(
                "the URL names no container: az://ACCOUNT/CONTAINER/PREFIX",
            ));
        }
        let options = url.options(URL_OPTIONS)?;
        let mut config = AzureConfig::new(account, container);
        config.prefix = prefix.to_string();
        if let Some(endpoint) = options.get("endpoint") {
            config.endpoint = Some(endpoint.to_string());
        }
        if let Some(timeout) = options.get_seconds("timeout")? {
            config.timeout = timeout;
        }
        if let Some(timeout) = options.get_seconds("connect_timeout")? {
            config.connect_timeout = timeout;
        }
        config.create_container = options.get_bool("create_container", false)?;
        Ok(config)
    }
}

/// The default per-request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl AzureBlobStoreBuilder {
    /// A builder for container `container` of storage account `account`,
    /// on the public Azure endpoint unless [`endpoint`](Self::endpoint) says
    /// otherwise.
    pub fn new(account: impl Into<String>, container: impl Into<String>) -> Self {
        AzureBlobStoreBuilder::from_config(AzureConfig::new(account, container))
    }

    /// A builder with `config`'s settings and no credentials yet.
    pub fn from_config(config: AzureConfig) -> Self {
        AzureBlobStoreBuilder {
            config,
            credentials: None,
        }
    }

    /// The settings so far.
    pub fn config(&self) -> &AzureConfig {
        &self.config
    }

    /// A builder from a connection string (account, key or SAS, endpoint),
    /// including `UseDevelopmentStorage=true` for the local emulator.
    ///
    /// ```
    /// use casaas_azure::AzureBlobStoreBuilder;
    /// let b = AzureBlobStoreBuilder::from_connection_string("UseDevelopmentStorage=true", "c")
    ///     .unwrap();
    /// assert!(format!("{b:?}").contains("devstoreaccount1"));
    /// ```
    pub fn from_connection_string(
        connection_string: &str,
        container: impl Into<String>,
    ) -> Result<Self, CasError> {
        let parsed = ConnectionString::parse(connection_string)?;
        let account = parsed
            .account
            .ok_or_else(|| CasError::misconfigured("the connection string has no AccountName"))?;
        let credentials = parsed.credentials.ok_or_else(|| {
            CasError::misconfigured(
                "the connection string has neither AccountKey nor SharedAccessSignature",
            )
        })?;
        let mut builder = AzureBlobStoreBuilder::new(account, container).credentials(credentials);
        builder.config.endpoint = parsed.blob_endpoint;
        Ok(builder)
    }

    /// A builder from an `az://account/container/prefix?options` URL, with
    /// credentials from the process environment (never from the URL): see
    /// [`from_url_with_env`](Self::from_url_with_env).
    pub fn from_url(url: &str) -> Result<Self, CasError> {
        Self::from_url_with_env(url, |name| std::env::var(name).ok())
    }

    /// A builder from an `az://account/container/prefix?options` URL, with
    /// credentials looked up by `env`:
    /// `AZURE_STORAGE_CONNECTION_STRING`, else `AZURE_STORAGE_KEY` (shared
    /// key), else `AZURE_STORAGE_SAS_TOKEN`.
    ///
    /// Options: `endpoint` (the account's blob endpoint, e.g.
    /// `http://127.0.0.1:10000/devstoreaccount1`; default
    /// `https://ACCOUNT.blob.core.windows.net`), `timeout` and
    /// `connect_timeout` (seconds), `create_container` (`true` creates the
    /// container when the store is built).
    ///
    /// ```
    /// use casaas_azure::AzureBlobStoreBuilder;
    /// let b = AzureBlobStoreBuilder::from_url_with_env(
    ///     "az://myaccount/locks/app1?timeout=5",
    ///     |name| (name == "AZURE_STORAGE_KEY").then(|| "c2VjcmV0".to_string()),
    /// )
    /// .unwrap();
    /// let text = format!("{b:?}");
    /// assert!(text.contains("app1") && !text.contains("c2VjcmV0"));
    /// ```
    pub fn from_url_with_env(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, CasError> {
        Self::from_store_url(&StoreUrl::parse(url)?, env)
    }

    /// A builder from a parsed `az://` URL, with credentials looked up by
    /// `env` (see [`from_url_with_env`](Self::from_url_with_env)).
    pub fn from_store_url(
        url: &StoreUrl,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, CasError> {
        let config = AzureConfig::from_url(url)?;
        let account = config.account.clone();
        let mut builder = AzureBlobStoreBuilder::from_config(config);

        if let Some(text) = env("AZURE_STORAGE_CONNECTION_STRING").filter(|s| !s.is_empty()) {
            let parsed = ConnectionString::parse(&text)
                .map_err(|e| prefix_message(e, "AZURE_STORAGE_CONNECTION_STRING: "))?;
            if let Some(named) = &parsed.account
                && named != &account
            {
                return Err(CasError::misconfigured(format!(
                    "AZURE_STORAGE_CONNECTION_STRING is for account '{named}', but the URL \
                     names account '{account}'"
                )));
            }
            builder.credentials = Some(parsed.credentials.ok_or_else(|| {
                CasError::misconfigured(
                    "AZURE_STORAGE_CONNECTION_STRING has neither AccountKey nor \
                     SharedAccessSignature",
                )
            })?);
            builder.config.endpoint = parsed.blob_endpoint;
        } else if let Some(key) = env("AZURE_STORAGE_KEY").filter(|s| !s.is_empty()) {
            builder.credentials = Some(AzureCredentials::SharedKey(key));
        } else if let Some(sas) = env("AZURE_STORAGE_SAS_TOKEN").filter(|s| !s.is_empty()) {
            builder.credentials = Some(AzureCredentials::Sas(sas));
        } else {
            return Err(CasError::misconfigured(format!(
                "no Azure credentials: set one of {} (credentials never come from the URL)",
                CREDENTIAL_VARIABLES.join(", ")
            )));
        }
        if let Some(endpoint) = url.options(URL_OPTIONS)?.get("endpoint") {
            builder.config.endpoint = Some(endpoint.to_string());
        }
        builder.check()?;
        Ok(builder)
    }

    /// Keys are stored under `prefix/` in the container.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// The account's blob endpoint, e.g. `http://127.0.0.1:10000/devstoreaccount1`
    /// for Azurite or `https://ACCOUNT.blob.core.windows.net` (the default).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.config.endpoint = Some(endpoint.into());
        self
    }

    /// How requests are authorized (required).
    pub fn credentials(mut self, credentials: AzureCredentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The total time one request may take (default 30 s). A write that
    /// times out is reported as ambiguous.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// The time a connection attempt may take (default 10 s). A connect
    /// failure is reported as "not sent".
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Whether [`build`](Self::build) creates the container if it is
    /// missing (default false: a missing container is a configuration
    /// error).
    pub fn create_container(mut self, create: bool) -> Self {
        self.config.create_container = create;
        self
    }

    /// The endpoint requests go to: the configured one without a trailing
    /// `/`, or the public Azure one.
    pub(crate) fn endpoint_url(&self) -> Result<Url, CasError> {
        let text = match &self.config.endpoint {
            Some(e) => e.trim_end_matches('/').to_string(),
            None => format!("https://{}.blob.core.windows.net", self.config.account),
        };
        let url = Url::parse(&text).map_err(|e| {
            CasError::misconfigured(format!(
                "endpoint is not a valid URL ({e}); expected e.g. \
                 https://ACCOUNT.blob.core.windows.net or http://127.0.0.1:10000/devstoreaccount1"
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(CasError::misconfigured(
                "endpoint must be an http:// or https:// URL with a host",
            ));
        }
        if url.query().is_some() || !url.username().is_empty() || url.password().is_some() {
            return Err(CasError::misconfigured(
                "endpoint must not carry a query or user info; credentials (a SAS included) \
                 go in AZURE_STORAGE_SAS_TOKEN or the builder",
            ));
        }
        Ok(url)
    }

    /// Checks names and the endpoint before any request.
    pub(crate) fn check(&self) -> Result<(), CasError> {
        check_account(&self.config.account)?;
        check_container(&self.config.container)?;
        if !self.config.prefix.is_empty() {
            validate_key(&self.config.prefix)
                .map_err(|e| CasError::misconfigured(format!("bad prefix: {}", e.message())))?;
        }
        if self.config.timeout.is_zero() || self.config.connect_timeout.is_zero() {
            return Err(CasError::misconfigured("timeouts must be positive"));
        }
        self.endpoint_url().map(|_| ())
    }
}

fn prefix_message(error: CasError, prefix: &str) -> CasError {
    CasError::new(error.kind(), format!("{prefix}{}", error.message()))
}

/// Storage account names: 3–24 lowercase letters and digits.
fn check_account(account: &str) -> Result<(), CasError> {
    let ok = (3..=24).contains(&account.len())
        && account
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(CasError::misconfigured(format!(
            "'{account}' is not a storage account name (3-24 lowercase letters and digits)"
        )))
    }
}

/// Container names: 3–63 lowercase letters, digits and single hyphens,
/// starting and ending with a letter or digit.
fn check_container(container: &str) -> Result<(), CasError> {
    let bytes = container.as_bytes();
    let ok = (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(|b| *b != b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
        && !container.contains("--");
    if ok {
        Ok(())
    } else {
        Err(CasError::misconfigured(format!(
            "'{container}' is not a container name (3-63 lowercase letters, digits and single \
             hyphens, starting and ending with a letter or digit)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings() {
        let dev = ConnectionString::parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev.account.as_deref(), Some(DEV_ACCOUNT));
        assert_eq!(dev.blob_endpoint.as_deref(), Some(DEV_BLOB_ENDPOINT));
        assert!(
            matches!(dev.credentials, Some(AzureCredentials::SharedKey(k)) if k == DEV_ACCOUNT_KEY)
        );

        let proxy = ConnectionString::parse(
            "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://127.0.0.1:4000/",
        )
        .unwrap();
        assert_eq!(
            proxy.blob_endpoint.as_deref(),
            Some("http://127.0.0.1:4000/devstoreaccount1")
        );

        let cloud = ConnectionString::parse(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn",
        )
        .unwrap();
        assert_eq!(
            cloud.blob_endpoint.as_deref(),
            Some("https://acct.blob.core.chinacloudapi.cn")
        );
        assert!(matches!(
            cloud.credentials,
            Some(AzureCredentials::SharedKey(_))
        ));

        let sas = ConnectionString::parse(
            "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=1&sig=x%3D",
        )
        .unwrap();
        assert!(matches!(sas.credentials, Some(AzureCredentials::Sas(s)) if s == "sv=1&sig=x%3D"));

        for bad in [
            "AccountName",
            "AccountName=",
            "Bogus=1",
            "UseDevelopmentStorage=maybe",
        ] {
            assert!(ConnectionString::parse(bad).is_err(), "{bad}");
        }
        // Errors never echo values.
        let err = ConnectionString::parse("AccountKey=SECRET;Oops").unwrap_err();
        assert!(!err.to_string().contains("SECRET"), "{err}");
    }

    #[test]
    fn names() {
        assert!(check_account("devstoreaccount1").is_ok());
        assert!(check_account("Upper").is_err());
        assert!(check_account("ab").is_err());
        assert!(check_container("casaas-test").is_ok());
        for bad in ["ab", "-abc", "abc-", "a--b", "ABC", "a_b"] {
            assert!(check_container(bad).is_err(), "{bad}");
        }
    }
}
