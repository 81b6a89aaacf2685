//! Where a GCS store lives and how it talks: parsed from a `gs://` URL or
//! set with [`GcsStoreBuilder`](crate::GcsStoreBuilder).

use std::time::Duration;

use casaas_core::provider::validate_prefix;
use casaas_core::{CasError, StoreUrl};

use crate::store::GcsStore;
use url::Url;

/// The production endpoint (JSON API and uploads).
pub const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";
/// The default deadline of one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The URL options a `gs://` URL accepts.
pub const URL_OPTIONS: &[&str] = &["endpoint", "anonymous", "timeout", "conditional_delete"];

/// Which credentials the store sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Auth {
    /// Application Default Credentials (production).
    Default,
    /// No credentials at all (emulators).
    Anonymous,
}

/// The settings of one store. Holds no secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcsConfig {
    /// The bucket name.
    pub bucket: String,
    /// The object-name prefix, without leading or trailing `/` (may be empty).
    pub prefix: String,
    /// The endpoint, e.g. `https://storage.googleapis.com` or an emulator's
    /// `http://127.0.0.1:PORT`; no trailing `/`.
    pub endpoint: String,
    /// Which credentials to send.
    pub auth: Auth,
    /// The deadline of one request.
    pub timeout: Duration,
    /// Whether delete sends `ifGenerationMatch` and is offered at all.
    /// Turned off for emulators that ignore the condition on DELETE.
    pub conditional_delete: bool,
}

impl GcsConfig {
    /// Production settings for `bucket`: default endpoint, Application
    /// Default Credentials.
    pub fn new(bucket: impl Into<String>) -> Self {
        GcsConfig {
            bucket: bucket.into(),
            prefix: String::new(),
            endpoint: DEFAULT_ENDPOINT.to_string(),
            auth: Auth::Default,
            timeout: DEFAULT_TIMEOUT,
            conditional_delete: true,
        }
    }

    /// Parses `gs://BUCKET/prefix?options`.
    ///
    /// Options: `endpoint=URL` (an emulator or private endpoint; implies
    /// anonymous credentials unless `anonymous=false`), `anonymous=BOOL`,
    /// `timeout=SECONDS` (per request, default 30), `conditional_delete=BOOL`
    /// (default true; false for emulators that ignore the condition on
    /// DELETE). `emulator_host` is the value of `STORAGE_EMULATOR_HOST`, used
    /// as the endpoint when the URL gives none.
    pub fn from_url(url: &StoreUrl, emulator_host: Option<&str>) -> Result<Self, CasError> {
        url.check_provider("gs", "use Application Default Credentials")?;
        let bucket = url.authority().to_string();
        validate_bucket(&bucket)?;
        let options = url.options(URL_OPTIONS)?;
        let mut config = GcsConfig::new(bucket);
        config.prefix = url.path().to_string();
        if !config.prefix.is_empty() {
            validate_prefix(&config.prefix).map_err(|e| {
                CasError::misconfigured(format!("bad prefix in {url}: {}", e.message()))
            })?;
        }
        let endpoint = match options.get("endpoint") {
            Some(e) => Some(e.to_string()),
            None => emulator_host
                .filter(|h| !h.trim().is_empty())
                .map(str::to_string),
        };
        if let Some(endpoint) = endpoint {
            config.endpoint = normalize_endpoint(&endpoint)?;
            config.auth = Auth::Anonymous;
        }
        if !options.get_bool("anonymous", config.auth == Auth::Anonymous)? {
            config.auth = Auth::Default;
        } else {
            config.auth = Auth::Anonymous;
        }
        if let Some(timeout) = options.get_seconds("timeout")? {
            config.timeout = timeout;
        }
        config.conditional_delete = options.get_bool("conditional_delete", true)?;
        Ok(config)
    }

    /// The full object name of `key`.
    pub fn object_name(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    /// The bucket as the storage client names it.
    pub fn bucket_resource(&self) -> String {
        format!("projects/_/buckets/{}", self.bucket)
    }
}

/// Checks a bucket name against GCS's rules closely enough to catch typos
/// and URLs that are not `gs://BUCKET/...`.
pub fn validate_bucket(bucket: &str) -> Result<(), CasError> {
    let ok_chars = bucket
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
    let ok_ends = bucket
        .chars()
        .next()
        .zip(bucket.chars().last())
        .is_some_and(|(a, b)| a.is_ascii_alphanumeric() && b.is_ascii_alphanumeric());
    if (3..=222).contains(&bucket.len()) && ok_chars && ok_ends {
        Ok(())
    } else {
        Err(CasError::misconfigured(format!(
            "{bucket:?} is not a valid GCS bucket name (3-63 characters per dot-separated \
             part, lowercase letters, digits, '-', '_', '.'); the URL form is \
             gs://BUCKET/prefix"
        )))
    }
}

/// An endpoint URL without trailing `/`; a bare `host:port` (the
/// `STORAGE_EMULATOR_HOST` form) gets `http://`. A bare form with a path
/// (`ftp//host`, a scheme missing its colon) is refused, not read as a host.
pub fn normalize_endpoint(endpoint: &str) -> Result<String, CasError> {
    let endpoint = endpoint.trim().trim_end_matches('/');
    let bare = !endpoint.contains("://");
    let full = if bare {
        format!("http://{endpoint}")
    } else {
        endpoint.to_string()
    };
    match Url::parse(&full) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some()
                && !(bare && endpoint.contains('/'))
                && u.query().is_none()
                && u.fragment().is_none() =>
        {
            Ok(full)
        }
        _ => Err(CasError::misconfigured(format!(
            "endpoint {endpoint:?} is not an http(s) URL such as http://127.0.0.1:4443"
        ))),
    }
}

/// Builds a [`GcsStore`] with explicit settings (tests, emulators, or code
/// that does not want URLs).
#[derive(Debug, Clone)]
pub struct GcsStoreBuilder {
    config: GcsConfig,
}

impl GcsStoreBuilder {
    /// A builder for `bucket` with production defaults.
    pub fn new(bucket: impl Into<String>) -> Self {
        GcsStoreBuilder {
            config: GcsConfig::new(bucket),
        }
    }

    /// The object-name prefix under which keys live.
    pub fn prefix(mut self, prefix: impl AsRef<str>) -> Self {
        self.config.prefix = prefix.as_ref().trim_matches('/').to_string();
        self
    }

    /// The endpoint (default `https://storage.googleapis.com`).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.config.endpoint = endpoint.into();
        self
    }

    /// Send no credentials (emulators).
    pub fn anonymous(mut self) -> Self {
        self.config.auth = Auth::Anonymous;
        self
    }

    /// An emulator at `endpoint`, with anonymous credentials.
    pub fn emulator(self, endpoint: impl Into<String>) -> Self {
        self.endpoint(endpoint).anonymous()
    }

    /// The deadline of one request (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// Whether delete is offered (default true). Turn it off for emulators
    /// that ignore `ifGenerationMatch` on DELETE; delete then answers
    /// [`casaas_core::ErrorKind::Unsupported`].
    pub fn conditional_delete(mut self, enabled: bool) -> Self {
        self.config.conditional_delete = enabled;
        self
    }

    /// Checks the settings and creates the clients. Sends no request.
    pub async fn build(self) -> Result<GcsStore, CasError> {
        GcsStore::from_config(self.config).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use casaas_core::ErrorKind;

    fn parse(url: &str) -> Result<GcsConfig, CasError> {
        GcsConfig::from_url(&StoreUrl::parse(url)?, None)
    }

    #[test]
    fn prefix_is_decoded_once() {
        assert_eq!(parse("gs://b1b/x%2541").unwrap().prefix, "x%41");
    }

    #[test]
    fn production_url() {
        let c = parse("gs://my-bucket/locks/app").unwrap();
        assert_eq!(c.bucket, "my-bucket");
        assert_eq!(c.prefix, "locks/app");
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(c.auth, Auth::Default);
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert!(c.conditional_delete);
        assert_eq!(c.object_name("k"), "locks/app/k");
        assert_eq!(c.bucket_resource(), "projects/_/buckets/my-bucket");
        let c = parse("gs://my-bucket").unwrap();
        assert_eq!(c.prefix, "");
        assert_eq!(c.object_name("k"), "k");
    }

    #[test]
    fn emulator_url() {
        let c =
            parse("gs://b1b/?endpoint=http://127.0.0.1:4443/&timeout=2.5&conditional_delete=false")
                .unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:4443");
        assert_eq!(c.auth, Auth::Anonymous);
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert!(!c.conditional_delete);
        let c = parse("gs://b1b/?endpoint=https://private.googleapis.com&anonymous=false").unwrap();
        assert_eq!(c.auth, Auth::Default);
        // STORAGE_EMULATOR_HOST, bare host:port form.
        let c = GcsConfig::from_url(
            &StoreUrl::parse("gs://b1b/p").unwrap(),
            Some("localhost:9023"),
        )
        .unwrap();
        assert_eq!(c.endpoint, "http://localhost:9023");
        assert_eq!(c.auth, Auth::Anonymous);
    }

    #[test]
    fn bad_urls() {
        for (url, needle) in [
            ("gs:///prefix", "not a valid GCS bucket name"),
            ("gs://Upper/p", "not a valid GCS bucket name"),
            ("gs://b1b/p?bogus=1", "unknown option 'bogus'"),
            ("gs://b1b/p?timeout=-1", "positive duration"),
            ("gs://b1b/p?anonymous=maybe", "must be true or false"),
            ("gs://b1b/p?endpoint=ftp://x", "not an http(s) URL"),
            ("gs://b1b/p?endpoint=ftp//nowhere", "not an http(s) URL"),
            ("gs://b1b/p?endpoint=127.0.0.1:4443/x", "not an http(s) URL"),
            ("gs://user:pw@b1b/p", "credentials never go"),
            ("gs://b1b:99/p", "not a host:port"),
            ("gs://b1b/a//b", "bad prefix"),
            ("s3://b1b/p", "starts with gs://"),
        ] {
            let err = parse(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Misconfigured, "{url}");
            assert!(err.to_string().contains(needle), "{url}: {err}");
            assert!(!err.to_string().contains("pw"), "{url}: {err}");
        }
    }
}
