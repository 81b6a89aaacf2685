//! Where an S3 store is and how it talks: the typed [`S3Config`] (from an
//! `s3://` [`StoreUrl`] or set on [`S3StoreBuilder`]), the vendor quirks
//! ([`S3Quirks`]), and credentials.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_credential_types::Credentials;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use casaas_core::provider::{UrlOptions, validate_key};
use casaas_core::{CasError, StoreUrl};
use url::Url;

use crate::clock::{DateInterceptor, DateSlot};
use crate::store::S3Store;

/// Connect timeout unless `connect_timeout=` says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Whole-operation timeout unless `timeout=` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The query options an `s3://` URL accepts: the connection options, then
/// the vendor quirks ([`S3Quirks::OPTIONS`]).
pub const URL_OPTIONS: &[&str] = &[
    "endpoint",
    "region",
    "path_style",
    "profile",
    "connect_timeout",
    "timeout",
    S3Quirks::ETAG_UNQUOTED,
    S3Quirks::CONDITIONAL_DELETE,
    S3Quirks::VERSIONED_BUCKET,
    S3Quirks::FORBID_OVERWRITE,
    S3Quirks::TIGRIS_CONSISTENT,
    S3Quirks::GCS_INTEROP,
    // Credentials: given beside the URL only (StoreUrl refuses them in it).
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
];

/// A vendor's create-only header, sent instead of `If-None-Match: *` by
/// stores that refuse the standard condition (option `forbid_overwrite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForbidOverwrite {
    /// Aliyun OSS: `x-oss-forbid-overwrite: true` (OSS answers 501 to
    /// `If-None-Match`); an existing key answers 409 `FileAlreadyExists`.
    Oss,
    /// Tencent COS: `x-cos-forbid-overwrite: true`.
    Cos,
}

impl ForbidOverwrite {
    /// The option value naming it (`oss`, `cos`).
    pub fn as_str(self) -> &'static str {
        match self {
            ForbidOverwrite::Oss => "oss",
            ForbidOverwrite::Cos => "cos",
        }
    }

    /// The request header that makes PutObject create-only.
    pub fn header(self) -> &'static str {
        match self {
            ForbidOverwrite::Oss => "x-oss-forbid-overwrite",
            ForbidOverwrite::Cos => "x-cos-forbid-overwrite",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "oss" => Some(ForbidOverwrite::Oss),
            "cos" => Some(ForbidOverwrite::Cos),
            _ => None,
        }
    }
}

/// How an S3-compatible store departs from AWS S3, each a URL option (see
/// `docs/providers/s3.md`). The one place these options are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct S3Quirks {
    /// Send the `If-Match` ETag without its quotes (Ceph RGW 16.2 answers
    /// 412 to the quoted current ETag). Option `etag_unquoted`, default false.
    pub etag_unquoted: bool,
    /// The store honours `If-Match` on DeleteObject. When false, delete
    /// answers `Unsupported` without sending anything. Option
    /// `conditional_delete`, default true.
    pub conditional_delete: bool,
    /// The bucket is versioned, which some S3-compatibles handle differently
    /// (Ceph RGW ignores `If-None-Match` there). Option `versioned_bucket`,
    /// default false.
    pub versioned_bucket: bool,
    /// Create-if-absent is sent as the vendor's forbid-overwrite header
    /// instead of `If-None-Match: *`. Such a store has no conditional
    /// replace or delete: both answer `Unsupported` without sending
    /// anything. Option `forbid_overwrite=oss|cos`, default none.
    pub forbid_overwrite: Option<ForbidOverwrite>,
    /// Send `X-Tigris-Consistent: true` on every conditional write and every
    /// read, so that Tigris evaluates them on the leader region. Option
    /// `tigris_consistent`, default false.
    pub tigris_consistent: bool,
    /// Google Cloud Storage through its XML (S3-interoperable) endpoint:
    /// conditions are `x-goog-if-generation-match` (0 for create, the
    /// generation for replace and delete), and versions are the generations
    /// of `x-goog-generation`. Option `gcs_interop`, default false.
    pub gcs_interop: bool,
}

impl S3Quirks {
    /// The URL option of [`etag_unquoted`](Self::etag_unquoted).
    pub const ETAG_UNQUOTED: &'static str = "etag_unquoted";
    /// The URL option of [`conditional_delete`](Self::conditional_delete).
    pub const CONDITIONAL_DELETE: &'static str = "conditional_delete";
    /// The URL option of [`versioned_bucket`](Self::versioned_bucket).
    pub const VERSIONED_BUCKET: &'static str = "versioned_bucket";
    /// The URL option of [`forbid_overwrite`](Self::forbid_overwrite).
    pub const FORBID_OVERWRITE: &'static str = "forbid_overwrite";
    /// The URL option of [`tigris_consistent`](Self::tigris_consistent).
    pub const TIGRIS_CONSISTENT: &'static str = "tigris_consistent";
    /// The URL option of [`gcs_interop`](Self::gcs_interop).
    pub const GCS_INTEROP: &'static str = "gcs_interop";
    /// Every quirk option, in order.
    pub const OPTIONS: [&'static str; 6] = [
        Self::ETAG_UNQUOTED,
        Self::CONDITIONAL_DELETE,
        Self::VERSIONED_BUCKET,
        Self::FORBID_OVERWRITE,
        Self::TIGRIS_CONSISTENT,
        Self::GCS_INTEROP,
    ];

    fn apply(&mut self, options: &UrlOptions) -> Result<(), CasError> {
        self.etag_unquoted = options.get_bool(Self::ETAG_UNQUOTED, self.etag_unquoted)?;
        self.conditional_delete =
            options.get_bool(Self::CONDITIONAL_DELETE, self.conditional_delete)?;
        self.versioned_bucket = options.get_bool(Self::VERSIONED_BUCKET, self.versioned_bucket)?;
        if let Some(text) = options.get(Self::FORBID_OVERWRITE) {
            self.forbid_overwrite = match text.to_ascii_lowercase().as_str() {
                "none" | "false" | "no" | "0" => None,
                _ => Some(ForbidOverwrite::parse(text).ok_or_else(|| {
                    CasError::misconfigured(format!(
                        "option '{}' must be oss (Aliyun OSS) or cos (Tencent COS), not {text:?}",
                        Self::FORBID_OVERWRITE
                    ))
                })?),
            };
        }
        self.tigris_consistent =
            options.get_bool(Self::TIGRIS_CONSISTENT, self.tigris_consistent)?;
        self.gcs_interop = options.get_bool(Self::GCS_INTEROP, self.gcs_interop)?;
        self.check()
    }

    /// Refuses combinations that contradict each other.
    pub fn check(&self) -> Result<(), CasError> {
        if self.gcs_interop && self.forbid_overwrite.is_some() {
            return Err(CasError::misconfigured(format!(
                "options '{}' and '{}' name two different dialects of conditional writes: \
                 give one",
                Self::GCS_INTEROP,
                Self::FORBID_OVERWRITE
            )));
        }
        Ok(())
    }
}

impl Default for S3Quirks {
    fn default() -> Self {
        S3Quirks {
            etag_unquoted: false,
            conditional_delete: true,
            versioned_bucket: false,
            forbid_overwrite: None,
            tigris_consistent: false,
            gcs_interop: false,
        }
    }
}

/// The settings of one S3 store. Holds no secrets.
///
/// It may gain settings: read it from a URL ([`S3Config::from_url`]), take
/// it from a store ([`S3Store::config`]) or set it on [`S3StoreBuilder`];
/// a struct expression does not compile outside this crate:
///
/// ```compile_fail,E0639
/// let _ = casaas_s3::S3Config {
///     bucket: "b".into(),
///     ..Default::default()
/// };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// The key prefix, without leading or trailing `/` (may be empty).
    pub prefix: String,
    /// The endpoint of an S3-compatible server, if given.
    pub endpoint: Option<String>,
    /// The region, if given.
    pub region: Option<String>,
    /// The named profile of `~/.aws/config`, if given.
    pub profile: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`).
    pub path_style: bool,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// How long a whole request may take.
    pub timeout: Duration,
    /// How the store departs from AWS S3.
    pub quirks: S3Quirks,
    /// Keys per ListObjectsV2 page (the server's default otherwise).
    pub list_page_size: Option<i32>,
}

impl Default for S3Config {
    fn default() -> Self {
        S3Config {
            bucket: String::new(),
            prefix: String::new(),
            endpoint: None,
            region: None,
            profile: None,
            path_style: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            quirks: S3Quirks::default(),
            list_page_size: None,
        }
    }
}

impl S3Config {
    /// Reads `s3://bucket/prefix?options`. Unknown or repeated options,
    /// credentials in the URL and malformed values are rejected with a
    /// message that says what to fix.
    ///
    /// ```
    /// use casaas_core::StoreUrl;
    /// use casaas_s3::S3Config;
    ///
    /// let url = StoreUrl::parse("s3://b/x%2541?etag_unquoted=yes").unwrap();
    /// let config = S3Config::from_url(&url).unwrap();
    /// assert_eq!(config.prefix, "x%41");
    /// assert!(config.quirks.etag_unquoted);
    /// ```
    pub fn from_url(url: &StoreUrl) -> Result<Self, CasError> {
        let mut config = S3Config::default();
        config.apply_url(url)?;
        Ok(config)
    }

    fn apply_url(&mut self, url: &StoreUrl) -> Result<(), CasError> {
        url.check_provider(
            "s3",
            "use the AWS credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, \
             AWS_PROFILE, roles) instead",
        )?;
        if url.authority().is_empty() {
            return Err(CasError::misconfigured(
                "the S3 URL needs a bucket: s3://bucket/prefix",
            ));
        }
        self.bucket = url.authority().to_string();
        self.prefix = url.path().to_string();
        let options = url.options(URL_OPTIONS)?;
        if let Some(endpoint) = options.get("endpoint") {
            self.endpoint = Some(endpoint.to_string());
        }
        if let Some(region) = options.get("region") {
            self.region = Some(region.to_string());
        }
        if let Some(profile) = options.get("profile") {
            self.profile = Some(profile.to_string());
        }
        self.path_style = options.get_bool("path_style", self.path_style)?;
        if let Some(t) = options.get_seconds("connect_timeout")? {
            self.connect_timeout = t;
        }
        if let Some(t) = options.get_seconds("timeout")? {
            self.timeout = t;
        }
        self.quirks.apply(&options)
    }
}

/// Static credentials given to the builder. Never printed.
#[derive(Clone)]
struct StaticCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticCredentials(<redacted>)")
    }
}

/// Builds an [`S3Store`] from a URL, explicit settings, or both.
///
/// Credentials come from the standard AWS chain (environment, profiles,
/// SSO, process, web identity, instance roles) unless
/// [`static_credentials`](Self::static_credentials) is given. They are
/// never read from the URL and never printed.
///
/// ```no_run
/// # async fn demo() -> Result<(), casaas_core::CasError> {
/// use casaas_s3::S3Store;
///
/// let store = S3Store::builder()
///     .url("s3://locks/app1?endpoint=http://127.0.0.1:9000&path_style=true&region=us-east-1")?
///     .static_credentials("ACCESS_KEY", "SECRET_KEY")
///     .build()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct S3StoreBuilder {
    config: S3Config,
    credentials: Option<StaticCredentials>,
}

impl S3StoreBuilder {
    /// Takes bucket, prefix and options from an
    /// `s3://bucket/prefix?endpoint=…&region=…&path_style=true` URL.
    /// Unknown or repeated options, credentials in the URL and malformed
    /// values are rejected with a message that says what to fix.
    pub fn url(self, url: &str) -> Result<Self, CasError> {
        self.store_url(&StoreUrl::parse(url)?)
    }

    /// Takes bucket, prefix and options from a parsed `s3://` URL, and the
    /// static credentials given beside it (`aws_access_key_id` with
    /// `aws_secret_access_key`, optionally `aws_session_token`; see
    /// [`StoreUrl::with_given_options`]). Without them, the AWS credential
    /// chain decides.
    pub fn store_url(mut self, url: &StoreUrl) -> Result<Self, CasError> {
        self.config.apply_url(url)?;
        let id = url.has_given_credential("AWS_ACCESS_KEY_ID");
        let secret = url.has_given_credential("AWS_SECRET_ACCESS_KEY");
        match (id, secret) {
            (true, true) => {
                let key = url.credential("AWS_ACCESS_KEY_ID").unwrap_or_default();
                let secret = url.credential("AWS_SECRET_ACCESS_KEY").unwrap_or_default();
                self = self.static_credentials(key, secret);
                if url.has_given_credential("AWS_SESSION_TOKEN")
                    && let Some(creds) = &mut self.credentials
                {
                    creds.session_token = url.credential("AWS_SESSION_TOKEN");
                }
            }
            (false, false) => {}
            _ => {
                return Err(CasError::misconfigured(
                    "give aws_access_key_id and aws_secret_access_key together (one of them \
                     was given alone)",
                ));
            }
        }
        Ok(self)
    }

    /// The settings so far.
    pub fn config(&self) -> &S3Config {
        &self.config
    }

    /// The bucket.
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.config.bucket = bucket.into();
        self
    }

    /// The key prefix every key lives under (no leading or trailing `/`
    /// needed); replaces the URL's.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into().trim_matches('/').to_string();
        self
    }

    /// The endpoint of an S3-compatible server, e.g. `http://127.0.0.1:9000`.
    /// Without it, `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` or AWS apply.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.config.endpoint = Some(endpoint.into());
        self
    }

    /// The region; without it, `AWS_REGION` or the profile's.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.config.region = Some(region.into());
        self
    }

    /// The named profile of `~/.aws/config` to load settings from.
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.config.profile = Some(profile.into());
        self
    }

    /// Path-style addressing (`endpoint/bucket/key`), which most
    /// S3-compatible servers need.
    pub fn path_style(mut self, on: bool) -> Self {
        self.config.path_style = on;
        self
    }

    /// Explicit credentials instead of the AWS chain (tests, emulators).
    /// With them and no region, the region defaults to `us-east-1`, so that
    /// nothing consults instance metadata.
    pub fn static_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        self.credentials = Some(StaticCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        });
        self
    }

    /// How long connecting may take (a failure here sends nothing).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// How long a whole request may take; past it, a write is ambiguous.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// See [`S3Quirks::etag_unquoted`].
    pub fn etag_unquoted(mut self, on: bool) -> Self {
        self.config.quirks.etag_unquoted = on;
        self
    }

    /// See [`S3Quirks::conditional_delete`].
    pub fn conditional_delete(mut self, on: bool) -> Self {
        self.config.quirks.conditional_delete = on;
        self
    }

    /// See [`S3Quirks::versioned_bucket`].
    pub fn versioned_bucket(mut self, on: bool) -> Self {
        self.config.quirks.versioned_bucket = on;
        self
    }

    /// See [`S3Quirks::forbid_overwrite`].
    pub fn forbid_overwrite(mut self, dialect: Option<ForbidOverwrite>) -> Self {
        self.config.quirks.forbid_overwrite = dialect;
        self
    }

    /// See [`S3Quirks::tigris_consistent`].
    pub fn tigris_consistent(mut self, on: bool) -> Self {
        self.config.quirks.tigris_consistent = on;
        self
    }

    /// See [`S3Quirks::gcs_interop`].
    pub fn gcs_interop(mut self, on: bool) -> Self {
        self.config.quirks.gcs_interop = on;
        self
    }

    /// Keys per ListObjectsV2 page (the server's default, 1000, otherwise).
    pub fn list_page_size(mut self, keys: u16) -> Self {
        self.config.list_page_size = Some(i32::from(keys.max(1)));
        self
    }

    /// Loads the AWS configuration and builds the store. Makes no request.
    pub async fn build(self) -> Result<S3Store, CasError> {
        let S3StoreBuilder {
            config,
            credentials,
        } = self;
        if config.bucket.is_empty() {
            return Err(CasError::misconfigured("no bucket given for the S3 store"));
        }
        config.quirks.check()?;
        if !config.prefix.is_empty() {
            validate_key(&config.prefix).map_err(|e| {
                CasError::misconfigured(format!(
                    "the S3 store's prefix is unusable: {}",
                    e.message()
                ))
            })?;
        }
        if let Some(endpoint) = &config.endpoint {
            let parsed = Url::parse(endpoint).map_err(|e| {
                CasError::misconfigured(format!(
                    "endpoint {endpoint:?} is not a URL ({e}); expected e.g. http://127.0.0.1:9000"
                ))
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(CasError::misconfigured(format!(
                    "endpoint {endpoint:?} must start with http:// or https://"
                )));
            }
        }
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(config.connect_timeout)
            .operation_timeout(config.timeout)
            .operation_attempt_timeout(config.timeout)
            .build();
        // Retries off: a re-sent conditional write can turn one's own
        // success into a 412. The protocol layer retries, knowing the outcome.
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts.clone());
        let region = match (&config.region, &credentials) {
            (Some(r), _) => Some(r.clone()),
            (None, Some(_)) => Some("us-east-1".to_string()),
            (None, None) => None,
        };
        if let Some(region) = &region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(profile) = &config.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(creds) = &credentials {
            loader = loader.credentials_provider(Credentials::new(
                creds.access_key_id.clone(),
                creds.secret_access_key.clone(),
                creds.session_token.clone(),
                None,
                "casaas-static",
            ));
        }
        if let Some(endpoint) = &config.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        let sdk = loader.load().await;
        let region = sdk.region().map(|r| r.to_string()).ok_or_else(|| {
            CasError::misconfigured(
                "no AWS region: add region=… to the URL or set AWS_REGION (or a profile's region)",
            )
        })?;
        let endpoint = resolved_endpoint(&sdk, config.endpoint.as_deref());
        // The credential providers keep the SDK's own client (see
        // `HttpClients`): only the S3 requests may go without trust roots.
        let plan = HttpClients::for_endpoint(endpoint.as_deref());
        let date: DateSlot = Arc::new(Mutex::new(None));
        let mut s3_config = aws_sdk_s3::config::Builder::from(&sdk);
        if plan.s3 == HttpClient::PlainHttp {
            s3_config = s3_config.http_client(plain_http_client()?);
        }
        let sdk_config = s3_config
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts)
            .force_path_style(config.path_style)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .interceptor(DateInterceptor { slot: date.clone() })
            .build();
        let location = endpoint
            .clone()
            .unwrap_or_else(|| format!("AWS S3 ({region})"));
        Ok(S3Store::new(
            Client::from_conf(sdk_config),
            config,
            location,
            region,
            date,
        ))
    }
}

/// The endpoint the S3 client sends its requests to, resolved as the SDK
/// resolves it: the URL's own, else the S3-specific one of the environment
/// or the profile (`AWS_ENDPOINT_URL_S3`, a `[services]` section), else the
/// general one (`AWS_ENDPOINT_URL`, a profile's `endpoint_url`). `None`:
/// AWS itself. It names the store in messages and in its identity, so that
/// nothing keyed by the identity (the store guard's verdict) is taken for
/// another endpoint.
fn resolved_endpoint(sdk: &aws_config::SdkConfig, given: Option<&str>) -> Option<String> {
    if let Some(given) = given {
        return Some(given.to_string());
    }
    let key = aws_types::service_config::ServiceConfigKey::builder()
        .service_id("S3")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .ok();
    key.and_then(|key| sdk.service_config()?.load_config(key))
        .or_else(|| sdk.endpoint_url().map(str::to_owned))
}

/// Which HTTP client a part of the SDK sends its requests through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpClient {
    /// The SDK's own, with the system's trust roots (loaded at its first
    /// HTTPS request).
    SdkDefault,
    /// [`plain_http_client`]: no trust roots.
    PlainHttp,
}

/// The HTTP clients of one S3 store.
#[derive(Debug, PartialEq, Eq)]
struct HttpClients {
    /// For the credential providers (STS, SSO, web identity, IMDS, ECS),
    /// which answer over HTTPS whatever the store's endpoint is.
    credentials: HttpClient,
    /// For the S3 requests.
    s3: HttpClient,
}

impl HttpClients {
    fn for_endpoint(endpoint: Option<&str>) -> Self {
        let s3 = match endpoint {
            Some(endpoint) if endpoint.starts_with("http://") => HttpClient::PlainHttp,
            _ => HttpClient::SdkDefault,
        };
        HttpClients {
            credentials: HttpClient::SdkDefault,
            s3,
        }
    }
}

/// The SDK's HTTP client without the system's trust roots, for the S3
/// requests to a plain-HTTP endpoint: reading and parsing every root
/// certificate is most of the SDK's start-up time, which each short-lived
/// process (one `casaas lock` run) pays, and a plain-HTTP endpoint never
/// uses them. An `https://` URL reached through it (a redirect) fails to
/// verify rather than going unverified. Never given to the credential
/// providers: STS, SSO and web identity answer over HTTPS.
fn plain_http_client() -> Result<aws_sdk_s3::config::SharedHttpClient, CasError> {
    use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore, rustls_provider};
    let tls = TlsContext::builder()
        .with_trust_store(TrustStore::empty())
        .build()
        .map_err(|e| CasError::misconfigured(format!("building the HTTP client: {e}")))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(rustls_provider::CryptoMode::AwsLc))
        .tls_context(tls)
        .build_https())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn credential_providers_keep_the_trust_roots_beside_a_plain_http_endpoint() {
        // STS, SSO and web identity answer over HTTPS whatever the store's
        // endpoint is: only the S3 requests go without trust roots.
        assert_eq!(
            HttpClients::for_endpoint(Some("http://127.0.0.1:9000")),
            HttpClients {
                credentials: HttpClient::SdkDefault,
                s3: HttpClient::PlainHttp,
            }
        );
        for endpoint in [None, Some("https://s3.example.com")] {
            assert_eq!(
                HttpClients::for_endpoint(endpoint),
                HttpClients {
                    credentials: HttpClient::SdkDefault,
                    s3: HttpClient::SdkDefault,
                }
            );
        }
    }

    #[test]
    fn prefix_is_decoded_once() {
        let url = StoreUrl::parse("s3://b/x%2541").unwrap();
        assert_eq!(S3Config::from_url(&url).unwrap().prefix, "x%41");
    }

    #[test]
    fn quirks_read_every_boolean_form() {
        for (text, on) in [("true", true), ("1", true), ("yes", true), ("no", false)] {
            let url = StoreUrl::parse(&format!("s3://b/p?etag_unquoted={text}")).unwrap();
            assert_eq!(
                S3Config::from_url(&url).unwrap().quirks.etag_unquoted,
                on,
                "{text}"
            );
        }
        let url = StoreUrl::parse("s3://b/p").unwrap();
        assert_eq!(
            S3Config::from_url(&url).unwrap().quirks,
            S3Quirks::default()
        );
    }
}
