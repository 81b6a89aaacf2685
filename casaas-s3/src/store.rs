//! [`S3Store`]: the CAS-object contract on S3 conditional writes.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_credential_types::Credentials;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use bytes::Bytes;
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoredObject, UrlOptions, Version,
    validate_key, validate_prefix,
};
use url::Url;

use crate::clock::{DateInterceptor, DateSlot, ServerDate};
use crate::errors::{Context, Op, from_sdk_error};

/// Connect timeout unless `connect_timeout=` says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Whole-operation timeout unless `timeout=` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The query options an `s3://` URL accepts.
pub const URL_OPTIONS: &[&str] = &[
    "endpoint",
    "region",
    "path_style",
    "profile",
    "connect_timeout",
    "timeout",
    "etag_unquoted",
    "conditional_delete",
    "versioned_bucket",
];

/// Static credentials given to the builder. Never printed.
#[derive(Clone)]
struct StaticCredentials {
    access_key_id: String,
    secret_access_key: String,
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
#[derive(Debug, Clone)]
pub struct S3StoreBuilder {
    bucket: Option<String>,
    prefix: String,
    endpoint: Option<String>,
    region: Option<String>,
    profile: Option<String>,
    path_style: bool,
    credentials: Option<StaticCredentials>,
    connect_timeout: Duration,
    timeout: Duration,
    etag_unquoted: bool,
    conditional_delete: bool,
    versioned_bucket: bool,
    list_page_size: Option<i32>,
}

impl Default for S3StoreBuilder {
    fn default() -> Self {
        S3StoreBuilder {
            bucket: None,
            prefix: String::new(),
            endpoint: None,
            region: None,
            profile: None,
            path_style: false,
            credentials: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            etag_unquoted: false,
            conditional_delete: true,
            versioned_bucket: false,
            list_page_size: None,
        }
    }
}

impl S3StoreBuilder {
    /// Takes bucket, prefix and options from an
    /// `s3://bucket/prefix?endpoint=…&region=…&path_style=true` URL.
    /// Unknown or repeated options, credentials in the URL and malformed
    /// values are rejected with a message that says what to fix.
    pub fn url(mut self, url: &str) -> Result<Self, CasError> {
        let parsed = Url::parse(url).map_err(|e| {
            CasError::misconfigured(format!(
                "not a valid S3 URL ({e}); expected s3://bucket/prefix?region=…"
            ))
        })?;
        self.apply_url(&parsed)?;
        Ok(self)
    }

    fn apply_url(&mut self, url: &Url) -> Result<(), CasError> {
        if url.scheme() != "s3" {
            return Err(CasError::misconfigured(format!(
                "an S3 store URL starts with s3://, not {}://",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            // Do not echo them.
            return Err(CasError::misconfigured(
                "credentials must not be put in an s3:// URL: use the AWS credential chain \
                 (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, roles) instead",
            ));
        }
        if url.port().is_some() {
            return Err(CasError::misconfigured(
                "an s3:// URL names a bucket, not a server: give the server as endpoint=http://host:port",
            ));
        }
        let bucket = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| {
            CasError::misconfigured("the S3 URL needs a bucket: s3://bucket/prefix")
        })?;
        self.bucket = Some(decode(bucket)?);
        self.prefix = decode(&casaas_core::url_prefix(url))?;
        if url.fragment().is_some() {
            return Err(CasError::misconfigured("an s3:// URL takes no #fragment"));
        }
        let options = UrlOptions::parse(url, URL_OPTIONS)?;
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
        self.etag_unquoted = options.get_bool("etag_unquoted", self.etag_unquoted)?;
        self.conditional_delete =
            options.get_bool("conditional_delete", self.conditional_delete)?;
        self.versioned_bucket = options.get_bool("versioned_bucket", self.versioned_bucket)?;
        Ok(())
    }

    /// The bucket.
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.bucket = Some(bucket.into());
        self
    }

    /// The key prefix every key lives under (no leading or trailing `/`
    /// needed); replaces the URL's.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().trim_matches('/').to_string();
        self
    }

    /// The endpoint of an S3-compatible server, e.g. `http://127.0.0.1:9000`.
    /// Without it, `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` or AWS apply.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The region; without it, `AWS_REGION` or the profile's.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// The named profile of `~/.aws/config` to load settings from.
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = Some(profile.into());
        self
    }

    /// Path-style addressing (`endpoint/bucket/key`), which most
    /// S3-compatible servers need.
    pub fn path_style(mut self, on: bool) -> Self {
        self.path_style = on;
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
        });
        self
    }

    /// How long connecting may take (a failure here sends nothing).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a whole request may take; past it, a write is ambiguous.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends the `If-Match` ETag without its quotes (Ceph RGW 16.2 answers
    /// 412 to the quoted current ETag).
    pub fn etag_unquoted(mut self, on: bool) -> Self {
        self.etag_unquoted = on;
        self
    }

    /// Whether the store honours `If-Match` on DeleteObject. When false,
    /// [`CasStore::delete`] answers `Unsupported` without sending anything.
    pub fn conditional_delete(mut self, on: bool) -> Self {
        self.conditional_delete = on;
        self
    }

    /// Declares the bucket versioned, which some S3-compatibles handle
    /// differently (Ceph RGW ignores `If-None-Match` there).
    pub fn versioned_bucket(mut self, on: bool) -> Self {
        self.versioned_bucket = on;
        self
    }

    /// Keys per ListObjectsV2 page (the server's default, 1000, otherwise).
    pub fn list_page_size(mut self, keys: u16) -> Self {
        self.list_page_size = Some(i32::from(keys.max(1)));
        self
    }

    /// Loads the AWS configuration and builds the store. Makes no request.
    pub async fn build(self) -> Result<S3Store, CasError> {
        let bucket = self
            .bucket
            .clone()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| CasError::misconfigured("no bucket given for the S3 store"))?;
        if !self.prefix.is_empty() {
            validate_key(&self.prefix).map_err(|e| {
                CasError::misconfigured(format!(
                    "the S3 store's prefix is unusable: {}",
                    e.message()
                ))
            })?;
        }
        if let Some(endpoint) = &self.endpoint {
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
            .connect_timeout(self.connect_timeout)
            .operation_timeout(self.timeout)
            .operation_attempt_timeout(self.timeout)
            .build();
        // Retries off: a re-sent conditional write can turn one's own
        // success into a 412. The protocol layer retries, knowing the outcome.
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts.clone());
        let region = match (&self.region, &self.credentials) {
            (Some(r), _) => Some(r.clone()),
            (None, Some(_)) => Some("us-east-1".to_string()),
            (None, None) => None,
        };
        if let Some(region) = &region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(profile) = &self.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(creds) = &self.credentials {
            loader = loader.credentials_provider(Credentials::new(
                creds.access_key_id.clone(),
                creds.secret_access_key.clone(),
                None,
                None,
                "casaas-static",
            ));
        }
        if let Some(endpoint) = &self.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        let sdk = loader.load().await;
        let region = sdk.region().map(|r| r.to_string()).ok_or_else(|| {
            CasError::misconfigured(
                "no AWS region: add region=… to the URL or set AWS_REGION (or a profile's region)",
            )
        })?;
        // For messages only: the SDK itself also honours AWS_ENDPOINT_URL_S3.
        let endpoint = sdk
            .endpoint_url()
            .map(str::to_owned)
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok());
        let date: DateSlot = Arc::new(Mutex::new(None));
        let config = aws_sdk_s3::config::Builder::from(&sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts)
            .force_path_style(self.path_style)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .interceptor(DateInterceptor { slot: date.clone() })
            .build();
        let location = endpoint
            .clone()
            .unwrap_or_else(|| format!("AWS S3 ({region})"));
        Ok(S3Store {
            client: Client::from_conf(config),
            prefix: if self.prefix.is_empty() {
                String::new()
            } else {
                format!("{}/", self.prefix)
            },
            bucket,
            location,
            region,
            path_style: self.path_style,
            etag_unquoted: self.etag_unquoted,
            conditional_delete: self.conditional_delete,
            versioned_bucket: self.versioned_bucket,
            list_page_size: self.list_page_size,
            date,
        })
    }
}

fn decode(text: &str) -> Result<String, CasError> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| CasError::misconfigured("the S3 URL's bucket or prefix is not valid UTF-8"))
}

/// A [`CasStore`] on an S3 bucket (AWS or S3-compatible), through
/// `aws-sdk-s3` with its retries off.
///
/// - `get`: GetObject; the ETag is kept verbatim as the version.
/// - `create`: PutObject with `If-None-Match: *`.
/// - `replace`: PutObject with `If-Match: <etag>`.
/// - `delete`: DeleteObject with `If-Match: <etag>`.
/// - `list`: ListObjectsV2, all pages.
///
/// Open one with [`S3Store::builder`], [`S3Store::open`] or, after
/// [`register`](crate::register), `casaas_core::open_store("s3://…")`.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    /// Empty or ending with `/`.
    prefix: String,
    location: String,
    region: String,
    path_style: bool,
    etag_unquoted: bool,
    conditional_delete: bool,
    versioned_bucket: bool,
    list_page_size: Option<i32>,
    date: DateSlot,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client holds credentials: never print it.
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("location", &self.location)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("etag_unquoted", &self.etag_unquoted)
            .field("conditional_delete", &self.conditional_delete)
            .field("versioned_bucket", &self.versioned_bucket)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    /// A builder with the defaults: AWS credential chain, virtual-host
    /// addressing, 3 s connect and 30 s operation timeouts.
    pub fn builder() -> S3StoreBuilder {
        S3StoreBuilder::default()
    }

    /// Opens the store an `s3://bucket/prefix?…` URL names, with the AWS
    /// credential chain.
    pub async fn open(url: &str) -> Result<S3Store, CasError> {
        S3Store::builder().url(url)?.build().await
    }

    /// The underlying SDK client (retries off, timeouts set).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The full object key for `key`: the store's prefix joined with it.
    pub fn object_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The `Date` header of the last response from the server, if any.
    pub fn last_server_date(&self) -> Option<SystemTime> {
        self.last_server_date_sample().map(|d| d.server)
    }

    /// The last `Date` header with the local time it arrived, for
    /// estimating clock skew.
    pub fn last_server_date_sample(&self) -> Option<ServerDate> {
        *self.date.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ctx<'a>(&'a self, op: Op, key: &'a str) -> Context<'a> {
        Context {
            op,
            key,
            bucket: &self.bucket,
            location: &self.location,
        }
    }

    /// The `If-Match` value for `expected`.
    fn if_match(&self, key: &str, expected: &Version) -> Result<String, CasError> {
        let etag = expected.as_etag().ok_or_else(|| {
            CasError::invalid_input(format!(
                "S3 versions are ETags, not {expected:?}: pass a version this store returned"
            ))
            .with_key(key)
        })?;
        Ok(if self.etag_unquoted {
            etag.trim_matches('"').to_string()
        } else {
            etag.to_string()
        })
    }

    /// The version of `key` from HeadObject, for listings that carry no
    /// ETag; `None` when the object vanished since it was listed.
    async fn head_version(&self, key: &str) -> Result<Option<Version>, CasError> {
        let result = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .send()
            .await;
        let output = match result {
            Ok(output) => output,
            Err(err) if err.raw_response().map(|r| r.status().as_u16()) == Some(404) => {
                tracing::debug!(key, "a listed key vanished before its HeadObject");
                return Ok(None);
            }
            Err(err) => return Err(from_sdk_error(err, &self.ctx(Op::List, key))),
        };
        match output.e_tag() {
            Some(etag) => Ok(Some(Version::etag(etag))),
            None => Err(CasError::unsupported(
                "the store lists objects without an ETag and answers HeadObject without one                  too, so their versions cannot be known",
            )
            .with_key(key)),
        }
    }

    async fn put(
        &self,
        op: Op,
        key: &str,
        body: Bytes,
        condition: Option<String>,
    ) -> Result<Version, CasError> {
        let request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .content_length(i64::try_from(body.len()).unwrap_or(i64::MAX))
            .body(ByteStream::from(body));
        let request = match (op, condition) {
            (Op::Replace, Some(etag)) => request.if_match(etag),
            _ => request.if_none_match("*"),
        };
        let output = request
            .send()
            .await
            .map_err(|e| from_sdk_error(e, &self.ctx(op, key)))?;
        match output.e_tag() {
            Some(etag) => Ok(Version::etag(etag)),
            None => Err(CasError::new(
                ErrorKind::Ambiguous,
                "the store accepted the write but sent no ETag, so its version is unknown; \
                 read the object to find out",
            )
            .with_key(key)
            .with_status(200)),
        }
    }
}

#[async_trait]
impl CasStore for S3Store {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, CasError> {
        validate_key(key)?;
        let result = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .send()
            .await;
        let output = match result {
            Ok(output) => output,
            Err(err) => {
                let absent = matches!(err.as_service_error(), Some(GetObjectError::NoSuchKey(_)))
                    || (err.raw_response().map(|r| r.status().as_u16()) == Some(404)
                        && aws_sdk_s3::error::ProvideErrorMetadata::code(&err)
                            != Some("NoSuchBucket"));
                if absent {
                    return Ok(None);
                }
                return Err(from_sdk_error(err, &self.ctx(Op::Get, key)));
            }
        };
        let etag = output.e_tag().map(str::to_owned).ok_or_else(|| {
            CasError::unsupported("the store answered GetObject without an ETag").with_key(key)
        })?;
        let body = output.body.collect().await.map_err(|e| {
            CasError::new(
                ErrorKind::Transport,
                format!("reading the body of GetObject failed: {e}"),
            )
            .with_key(key)
        })?;
        Ok(Some(StoredObject {
            body: body.into_bytes(),
            version: Version::etag(etag),
        }))
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        validate_key(key)?;
        self.put(Op::Create, key, body, None).await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        validate_key(key)?;
        let etag = self.if_match(key, expected)?;
        self.put(Op::Replace, key, body, Some(etag)).await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        validate_key(key)?;
        if !self.conditional_delete {
            return Err(CasError::unsupported(
                "conditional delete is off for this store (conditional_delete=false): \
                 it does not honour If-Match on DeleteObject",
            )
            .with_key(key));
        }
        let etag = self.if_match(key, expected)?;
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .if_match(etag)
            .send()
            .await
            .map_err(|e| from_sdk_error(e, &self.ctx(Op::Delete, key)))?;
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ListEntry>, CasError> {
        validate_prefix(prefix)?;
        let full_prefix = self.object_key(prefix);
        let mut entries = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut request = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .set_continuation_token(token.take());
            if !full_prefix.is_empty() {
                request = request.prefix(&full_prefix);
            }
            if let Some(size) = self.list_page_size {
                request = request.max_keys(size);
            }
            let page = request
                .send()
                .await
                .map_err(|e| from_sdk_error(e, &self.ctx(Op::List, prefix)))?;
            for object in page.contents() {
                let Some(full) = object.key() else {
                    continue;
                };
                let Some(key) = full.strip_prefix(&self.prefix) else {
                    continue;
                };
                // Folder markers and other keys the contract cannot address.
                if validate_key(key).is_err() {
                    tracing::debug!(key = full, "skipping a listed key outside the contract");
                    continue;
                }
                let version = match object.e_tag() {
                    Some(etag) => Version::etag(etag),
                    // Some S3-compatibles (s3s-fs) list without ETags: ask
                    // for the version rather than drop the entry.
                    None => match self.head_version(key).await? {
                        Some(version) => version,
                        None => continue,
                    },
                };
                entries.push(ListEntry {
                    key: key.to_string(),
                    version,
                });
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_string()),
                _ => break,
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::full();
        if !self.conditional_delete {
            caps = caps.without_conditional_delete().with_note(
                "conditional delete off (conditional_delete=false): delete answers unsupported",
            );
        }
        if self.etag_unquoted {
            caps = caps.with_note("If-Match ETags are sent without quotes (etag_unquoted=true)");
        }
        if self.versioned_bucket {
            caps = caps.with_note(
                "versioned bucket: some S3-compatibles (Ceph RGW) ignore If-None-Match on \
                 versioned buckets; run the conformance probes before relying on create",
            );
        }
        caps
    }

    fn describe(&self) -> String {
        format!(
            "s3://{}/{} ({}{})",
            self.bucket,
            self.prefix,
            self.location,
            if self.path_style { ", path-style" } else { "" }
        )
    }
}
