//! [`S3Store`]: the CAS-object contract on S3 conditional writes.

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use casaas_core::provider::{Operation, validate_key, validate_prefix};
use casaas_core::{
    Capabilities, CasError, CasStore, ErrorKind, ListEntry, StoreUrl, StoredObject, Version,
};

use crate::clock::{DateSlot, ServerDate};
use crate::config::{ForbidOverwrite, S3Config, S3StoreBuilder};
use crate::dialect::{
    GOOG_GENERATION, GOOG_IF_GENERATION_MATCH, HeaderCapture, common_headers, customize,
    parse_generation,
};
use crate::error::{Context, from_sdk_error};

/// A [`CasStore`] on an S3 bucket (AWS or S3-compatible), through
/// `aws-sdk-s3` with its retries off.
///
/// - `get`: GetObject; the ETag is kept verbatim as the version.
/// - `create`: PutObject with `If-None-Match: *`.
/// - `replace`: PutObject with `If-Match: <etag>`.
/// - `delete`: DeleteObject with `If-Match: <etag>`.
/// - `list`: ListObjectsV2, all pages.
///
/// The vendor dialects of [`S3Quirks`](crate::S3Quirks) change the
/// conditions: `forbid_overwrite` sends the vendor's create-only header and
/// has no replace or delete; `gcs_interop` conditions every write on
/// `x-goog-if-generation-match` and versions are GCS generations;
/// `tigris_consistent` adds `X-Tigris-Consistent: true`.
///
/// Open one with [`S3Store::builder`], [`S3Store::open`] or, after
/// [`register`](crate::register), `casaas_core::open_store("s3://…")`.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    config: S3Config,
    /// Empty or ending with `/`.
    prefix: String,
    location: String,
    region: String,
    date: DateSlot,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client holds credentials: never print it.
        f.debug_struct("S3Store")
            .field("config", &self.config)
            .field("location", &self.location)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    pub(crate) fn new(
        client: Client,
        config: S3Config,
        location: String,
        region: String,
        date: DateSlot,
    ) -> Self {
        S3Store {
            client,
            prefix: if config.prefix.is_empty() {
                String::new()
            } else {
                format!("{}/", config.prefix)
            },
            config,
            location,
            region,
            date,
        }
    }

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

    /// Opens the store an `s3://` URL names, with `options` given beside
    /// the URL: static credentials (`aws_access_key_id` with
    /// `aws_secret_access_key`, optionally `aws_session_token`; without
    /// them the AWS credential chain decides) and any option the URL's
    /// query takes.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), casaas_core::CasError> {
    /// let store = casaas_s3::S3Store::open_with(
    ///     "s3://locks/app1?endpoint=http://127.0.0.1:9000&path_style=true",
    ///     [("aws_access_key_id", "KEY"), ("aws_secret_access_key", "SECRET"), ("region", "us-east-1")],
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_with<I, K, V>(url: &str, options: I) -> Result<S3Store, CasError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        S3Store::open_url(&StoreUrl::parse(url)?.with_given_options(options)?).await
    }

    /// Opens the store a parsed `s3://` URL names, with the static
    /// credentials given beside it ([`StoreUrl::with_given_options`]), else
    /// the AWS credential chain.
    pub async fn open_url(url: &StoreUrl) -> Result<S3Store, CasError> {
        S3Store::builder().store_url(url)?.build().await
    }

    /// The settings the store was built with, quirks included.
    pub fn config(&self) -> &S3Config {
        &self.config
    }

    /// The underlying SDK client (retries off, timeouts set).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.config.bucket
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

    fn ctx<'a>(&'a self, op: Operation, key: &'a str) -> Context<'a> {
        Context {
            op,
            key,
            bucket: &self.config.bucket,
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
        Ok(if self.config.quirks.etag_unquoted {
            etag.trim_matches('"').to_string()
        } else {
            etag.to_string()
        })
    }

    /// The generation `expected` names, for `gcs_interop` conditions.
    fn generation_of(&self, key: &str, expected: &Version) -> Result<i64, CasError> {
        expected.as_generation().ok_or_else(|| {
            CasError::invalid_input(format!(
                "with gcs_interop=true versions are GCS generations, not {expected:?}: pass a \
                 version this store returned"
            ))
            .with_key(key)
        })
    }

    /// What a store that honours only create-if-absent answers to replace
    /// and delete, before anything is sent.
    fn create_only(&self, key: &str, dialect: ForbidOverwrite, what: &str) -> CasError {
        CasError::unsupported(format!(
            "{what} is not available with forbid_overwrite={}: the store honours only \
             create-if-absent ({}: true)",
            dialect.as_str(),
            dialect.header()
        ))
        .with_key(key)
    }

    /// A capture of `x-goog-generation` when the dialect reads versions
    /// from it.
    fn generation_capture(&self) -> Option<HeaderCapture> {
        self.config
            .quirks
            .gcs_interop
            .then(|| HeaderCapture::new(GOOG_GENERATION))
    }

    /// The version of an answer: its ETag, or under `gcs_interop` the
    /// generation `capture` read. `None` when the answer lacked it.
    fn answer_version(
        &self,
        etag: Option<&str>,
        capture: Option<&HeaderCapture>,
    ) -> Option<Version> {
        match capture {
            Some(capture) => capture
                .value()
                .as_deref()
                .and_then(parse_generation)
                .map(Version::Generation),
            None => etag.map(Version::etag),
        }
    }

    /// The version of `key` from HeadObject, for listings that carry no
    /// ETag (or no generation); `None` when the object vanished since it
    /// was listed.
    async fn head_version(&self, key: &str) -> Result<Option<Version>, CasError> {
        let capture = self.generation_capture();
        let request = self
            .client
            .head_object()
            .bucket(&self.config.bucket)
            .key(self.object_key(key))
            .customize();
        let result = customize(
            request,
            common_headers(&self.config.quirks),
            capture.as_ref(),
        )
        .send()
        .await;
        let output = match result {
            Ok(output) => output,
            Err(err) if err.raw_response().map(|r| r.status().as_u16()) == Some(404) => {
                tracing::debug!(key, "a listed key vanished before its HeadObject");
                return Ok(None);
            }
            Err(err) => return Err(from_sdk_error(err, &self.ctx(Operation::List, key))),
        };
        match self.answer_version(output.e_tag(), capture.as_ref()) {
            Some(version) => Ok(Some(version)),
            None => Err(CasError::unsupported(if capture.is_some() {
                "gcs_interop=true, but the store answered HeadObject without an \
                 x-goog-generation header: is the endpoint GCS's XML API \
                 (storage.googleapis.com)?"
            } else {
                "the store lists objects without an ETag and answers HeadObject without one \
                 too, so their versions cannot be known"
            })
            .with_key(key)),
        }
    }

    /// PutObject conditioned on absence (`expected` = `None`) or on
    /// `expected`, in the store's dialect.
    async fn put(
        &self,
        op: Operation,
        key: &str,
        body: Bytes,
        expected: Option<&Version>,
    ) -> Result<Version, CasError> {
        let quirks = self.config.quirks;
        let mut headers = common_headers(&quirks);
        let mut request = self
            .client
            .put_object()
            .bucket(&self.config.bucket)
            .key(self.object_key(key))
            .content_length(i64::try_from(body.len()).unwrap_or(i64::MAX))
            .body(ByteStream::from(body));
        match (expected, quirks.gcs_interop, quirks.forbid_overwrite) {
            (None, true, _) => headers.push((GOOG_IF_GENERATION_MATCH, "0".to_string())),
            // Never beside If-None-Match: OSS answers 501 to it.
            (None, false, Some(dialect)) => headers.push((dialect.header(), "true".to_string())),
            (None, false, None) => request = request.if_none_match("*"),
            (Some(version), true, _) => headers.push((
                GOOG_IF_GENERATION_MATCH,
                self.generation_of(key, version)?.to_string(),
            )),
            (Some(_), false, Some(dialect)) => {
                return Err(self.create_only(key, dialect, "replace-if-match"));
            }
            (Some(version), false, None) => {
                request = request.if_match(self.if_match(key, version)?)
            }
        }
        let capture = self.generation_capture();
        let output = customize(request.customize(), headers, capture.as_ref())
            .send()
            .await
            .map_err(|e| from_sdk_error(e, &self.ctx(op, key)))?;
        match self.answer_version(output.e_tag(), capture.as_ref()) {
            Some(version) => Ok(version),
            None => Err(CasError::new(
                ErrorKind::Ambiguous,
                if capture.is_some() {
                    "the store accepted the write but sent no x-goog-generation, so its \
                     version is unknown; read the object to find out"
                } else {
                    "the store accepted the write but sent no ETag, so its version is unknown; \
                     read the object to find out"
                },
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
        let capture = self.generation_capture();
        let request = self
            .client
            .get_object()
            .bucket(&self.config.bucket)
            .key(self.object_key(key))
            .customize();
        let result = customize(
            request,
            common_headers(&self.config.quirks),
            capture.as_ref(),
        )
        .send()
        .await;
        let output = match result {
            Ok(output) => output,
            Err(err) => {
                let absent = matches!(err.as_service_error(), Some(GetObjectError::NoSuchKey(_)))
                    || (err.raw_response().map(|r| r.status().as_u16()) == Some(404)
                        && err.code() != Some("NoSuchBucket"));
                if absent {
                    return Ok(None);
                }
                return Err(from_sdk_error(err, &self.ctx(Operation::Get, key)));
            }
        };
        let version = self
            .answer_version(output.e_tag(), capture.as_ref())
            .ok_or_else(|| {
                CasError::unsupported(if capture.is_some() {
                    "gcs_interop=true, but the store answered GetObject without an \
                     x-goog-generation header: is the endpoint GCS's XML API \
                     (storage.googleapis.com)?"
                } else {
                    "the store answered GetObject without an ETag"
                })
                .with_key(key)
            })?;
        let body = output.body.collect().await.map_err(|e| {
            CasError::new(
                ErrorKind::NotSent,
                format!("reading the body of GetObject failed: {e}"),
            )
            .with_key(key)
        })?;
        Ok(Some(StoredObject::new(body.into_bytes(), version)))
    }

    async fn create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        validate_key(key)?;
        self.put(Operation::Create, key, body, None).await
    }

    async fn replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        validate_key(key)?;
        if let Some(dialect) = self.config.quirks.forbid_overwrite {
            return Err(self.create_only(key, dialect, "replace-if-match"));
        }
        self.put(Operation::Replace, key, body, Some(expected))
            .await
    }

    async fn delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        validate_key(key)?;
        if !self.config.quirks.conditional_delete {
            return Err(CasError::unsupported(
                "conditional delete is off for this store (conditional_delete=false): \
                 it does not honour If-Match on DeleteObject",
            )
            .with_key(key));
        }
        if let Some(dialect) = self.config.quirks.forbid_overwrite {
            return Err(self.create_only(key, dialect, "delete-if-match"));
        }
        let mut headers = common_headers(&self.config.quirks);
        let mut request = self
            .client
            .delete_object()
            .bucket(&self.config.bucket)
            .key(self.object_key(key));
        if self.config.quirks.gcs_interop {
            let generation = self.generation_of(key, expected)?;
            headers.push((GOOG_IF_GENERATION_MATCH, generation.to_string()));
        } else {
            request = request.if_match(self.if_match(key, expected)?);
        }
        customize(request.customize(), headers, None)
            .send()
            .await
            .map_err(|e| from_sdk_error(e, &self.ctx(Operation::Delete, key)))?;
        Ok(())
    }

    async fn delete_unconditionally(&self, key: &str) -> Result<(), CasError> {
        validate_key(key)?;
        let request = self
            .client
            .delete_object()
            .bucket(&self.config.bucket)
            .key(self.object_key(key));
        customize(
            request.customize(),
            common_headers(&self.config.quirks),
            None,
        )
        .send()
        .await
        .map_err(|e| from_sdk_error(e, &self.ctx(Operation::Delete, key)))?;
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
                .bucket(&self.config.bucket)
                .set_continuation_token(token.take());
            if !full_prefix.is_empty() {
                request = request.prefix(&full_prefix);
            }
            if let Some(size) = self.config.list_page_size {
                request = request.max_keys(size);
            }
            let page = customize(
                request.customize(),
                common_headers(&self.config.quirks),
                None,
            )
            .send()
            .await
            .map_err(|e| from_sdk_error(e, &self.ctx(Operation::List, prefix)))?;
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
                let listed = object.e_tag().filter(|_| !self.config.quirks.gcs_interop);
                let version = match listed {
                    Some(etag) => Version::etag(etag),
                    // Some S3-compatibles (s3s-fs) list without ETags, and
                    // a GCS listing carries no generation a client of S3
                    // reads: ask for the version rather than drop the entry.
                    None => match self.head_version(key).await? {
                        Some(version) => version,
                        None => continue,
                    },
                };
                entries.push(ListEntry::new(key, version));
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
        let quirks = self.config.quirks;
        if !quirks.conditional_delete {
            caps = caps.without_conditional_delete().with_note(
                "conditional delete off (conditional_delete=false): delete answers unsupported",
            );
        }
        if quirks.etag_unquoted {
            caps = caps.with_note("If-Match ETags are sent without quotes (etag_unquoted=true)");
        }
        if let Some(dialect) = quirks.forbid_overwrite {
            caps.replace_if_match = false;
            caps.conditional_delete = false;
            caps = caps.with_note(format!(
                "create-only store (forbid_overwrite={}): create sends {}: true instead of \
                 If-None-Match; replace and delete answer unsupported",
                dialect.as_str(),
                dialect.header()
            ));
        }
        if quirks.gcs_interop {
            caps = caps.with_note(
                "GCS through its XML API (gcs_interop=true): conditions are \
                 x-goog-if-generation-match, versions are generations; list reads each \
                 entry's generation with HeadObject",
            );
        }
        if quirks.tigris_consistent {
            caps = caps.with_note(
                "X-Tigris-Consistent: true on every read and conditional write \
                 (tigris_consistent=true)",
            );
        }
        if quirks.versioned_bucket {
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
            self.config.bucket,
            self.prefix,
            self.location,
            if self.config.path_style {
                ", path-style"
            } else {
                ""
            }
        )
    }

    async fn create_bucket(&self) -> Result<(), CasError> {
        let mut request = self.client.create_bucket().bucket(&self.config.bucket);
        if self.region != "us-east-1" {
            request = request.create_bucket_configuration(
                aws_sdk_s3::types::CreateBucketConfiguration::builder()
                    .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(
                        self.region.as_str(),
                    ))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("BucketAlreadyOwnedByYou") => Ok(()),
            Err(e) => {
                let mut err = CasError::misconfigured(format!(
                    "could not create bucket '{}': {}",
                    self.config.bucket,
                    e.message().unwrap_or("no message")
                ));
                if let Some(status) = e.raw_response().map(|r| r.status().as_u16()) {
                    err = err.with_status(status);
                }
                if let Some(code) = e.code() {
                    err = err.with_code(code);
                }
                Err(err)
            }
        }
    }
}
