//! S3-only probes and backend hooks (feature `s3`).
//!
//! These need the raw S3 client of [`casaas_s3::S3Store`], so the binary
//! contributes them with [`Suite::with_probe`](crate::Suite::with_probe)
//! for `s3://` URLs, replacing the placeholders of the standard suite.

use std::time::SystemTime;

use async_trait::async_trait;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use casaas_core::{CasError, ErrorKind};
use casaas_s3::S3Store;
use serde_json::{Value, json};

use crate::model::{Outcome, Recommendation, Severity, StepError};
use crate::probe::{Probe, ProbeContext, ServerClock};
use crate::probes::payload;

/// The server clock of an S3 store: the `Date` header of its last response.
#[derive(Debug, Clone)]
pub struct S3Clock(pub S3Store);

impl ServerClock for S3Clock {
    fn last_server_date(&self) -> Option<SystemTime> {
        self.0.last_server_date()
    }
}

/// Probes whose failure `etag_unquoted=true` fixes: everything that sends
/// `If-Match`.
const FIXED_BY_UNQUOTED: [&str; 11] = [
    "replace_if_match",
    "replace_stale",
    "missing_key",
    "conditional_delete",
    "identical_rewrite",
    "read_after_write",
    "list_after_write",
    "race_replace",
    "lease_protocol",
    "throttle",
    "latency",
];

/// The S3-only probes for `store`, opened from `url`.
pub fn s3_probes(store: &S3Store, url: &str) -> Vec<Box<dyn Probe>> {
    let unquoted_set = url_option(url, "etag_unquoted").is_some_and(|v| v == "true" || v == "1");
    vec![
        Box::new(EtagForms {
            store: store.clone(),
            unquoted_set,
        }),
        Box::new(MultipartIfNoneMatch {
            store: store.clone(),
        }),
        Box::new(VersionedBucket {
            store: store.clone(),
        }),
    ]
}

fn url_option<'a>(url: &'a str, name: &str) -> Option<&'a str> {
    let query = url.split_once('?')?.1;
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Creates the store's bucket (the `--create-bucket` hook). A bucket that
/// already exists and is ours counts as success.
pub async fn create_bucket(store: &S3Store) -> Result<(), CasError> {
    let client = store.client();
    let mut request = client.create_bucket().bucket(store.bucket());
    let region = client
        .config()
        .region()
        .map(|r| r.as_ref().to_string())
        .unwrap_or_default();
    if !region.is_empty() && region != "us-east-1" {
        request = request.create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(
                    region.as_str(),
                ))
                .build(),
        );
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.code(), Some("BucketAlreadyOwnedByYou")) => Ok(()),
        Err(e) => {
            let (status, code) = sdk_answer(&e);
            let mut err = CasError::misconfigured(format!(
                "could not create bucket '{}': {}",
                store.bucket(),
                e.message().unwrap_or("no message")
            ));
            if let Some(s) = status {
                err = err.with_status(s);
            }
            if let Some(c) = code {
                err = err.with_code(c);
            }
            Err(err)
        }
    }
}

/// Status and code of an SDK error.
fn sdk_answer<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> (Option<u16>, Option<String>)
where
    R: HasStatus,
{
    let status = err.raw_response().map(HasStatus::status_code);
    (status, err.code().map(str::to_string))
}

/// Access to the status of a raw HTTP response.
trait HasStatus {
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

fn answer_json<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    err: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Value {
    let (status, code) = sdk_answer(err);
    let answer = match (status, code.as_deref()) {
        (Some(s), Some(c)) => format!("{s} {c}"),
        (Some(s), None) => s.to_string(),
        (None, Some(c)) => c.to_string(),
        (None, None) => "no response".to_string(),
    };
    let mut message = aws_sdk_s3::error::DisplayErrorContext(err).to_string();
    if let Some((cut, _)) = message.char_indices().nth(300) {
        message.truncate(cut);
        message.push('…');
    }
    json!({ "status": status, "code": code, "answer": answer, "message": message })
}

fn step_error(step: &str, status: Option<u16>, code: Option<String>, kind: ErrorKind) -> StepError {
    let mut source = CasError::new(kind, format!("{step} failed"));
    if let Some(s) = status {
        source = source.with_status(s);
    }
    if let Some(c) = code {
        source = source.with_code(c);
    }
    StepError {
        step: step.to_string(),
        source: Box::new(source),
    }
}

fn kind_for(status: Option<u16>) -> ErrorKind {
    match status {
        Some(501) => ErrorKind::Unsupported,
        Some(401 | 403) => ErrorKind::Unauthorized,
        _ => ErrorKind::Ambiguous,
    }
}

struct EtagForms {
    store: S3Store,
    unquoted_set: bool,
}

impl EtagForms {
    async fn current_etag(&self, key: &str) -> Result<String, StepError> {
        let head = self
            .store
            .client()
            .head_object()
            .bucket(self.store.bucket())
            .key(key)
            .send()
            .await
            .map_err(|e| {
                let (s, c) = sdk_answer(&e);
                step_error("HeadObject", s, c, kind_for(s))
            })?;
        Ok(head.e_tag().unwrap_or_default().to_string())
    }

    /// Tries PutObject with `If-Match: value`: Ok(true) accepted, Ok(false)
    /// refused with 412, evidence either way.
    async fn try_if_match(&self, key: &str, value: &str) -> (bool, Value) {
        let result = self
            .store
            .client()
            .put_object()
            .bucket(self.store.bucket())
            .key(key)
            .body(ByteStream::from(payload("etag form").to_vec()))
            .if_match(value)
            .send()
            .await;
        match result {
            Ok(_) => (true, json!("accepted")),
            Err(e) => (false, answer_json(&e)),
        }
    }
}

#[async_trait]
impl Probe for EtagForms {
    fn id(&self) -> &'static str {
        "s3_etag_forms"
    }
    fn title(&self) -> &'static str {
        "If-Match accepts quoted, unquoted and weak ETag forms"
    }
    fn severity(&self) -> Severity {
        Severity::Warning
    }
    fn explanation(&self) -> &'static str {
        "If the store accepts only one ETag spelling, every renew can be refused until the matching casaas option (etag_unquoted) is set."
    }

    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        let key = self.store.object_key(&cx.base_key("etag"));
        let client = self.store.client();
        client
            .put_object()
            .bucket(self.store.bucket())
            .key(&key)
            .body(ByteStream::from(payload("etag start").to_vec()))
            .if_none_match("*")
            .send()
            .await
            .map_err(|e| {
                let (s, c) = sdk_answer(&e);
                step_error("PutObject If-None-Match: *", s, c, kind_for(s))
            })?;
        let mut forms = serde_json::Map::new();
        let mut accepted = std::collections::BTreeMap::new();
        for form in ["quoted", "unquoted", "weak"] {
            let etag = self.current_etag(&key).await?;
            let bare = etag.trim_matches('"');
            let value = match form {
                "quoted" => format!("\"{bare}\""),
                "unquoted" => bare.to_string(),
                _ => format!("W/\"{bare}\""),
            };
            let (ok, evidence) = self.try_if_match(&key, &value).await;
            accepted.insert(form, ok);
            forms.insert(form.to_string(), evidence);
        }
        // An accepted form must also reject a stale value in the same form.
        let stale_form = if accepted["quoted"] {
            "quoted"
        } else {
            "unquoted"
        };
        let (stale_ok, stale_evidence) = self
            .try_if_match(
                &key,
                &if stale_form == "quoted" {
                    "\"00000000000000000000000000000000\"".to_string()
                } else {
                    "00000000000000000000000000000000".to_string()
                },
            )
            .await;
        let evidence = json!({
            "forms": forms,
            "stale_form": stale_form,
            "stale": stale_evidence,
            "etag_unquoted_set": self.unquoted_set,
        });
        let outcome = if stale_ok {
            Outcome::fail(format!(
                "a PutObject with a wrong {stale_form} ETag in If-Match succeeded: the condition is ignored"
            ))
        } else if accepted["quoted"] {
            Outcome::pass("If-Match accepts the ETag exactly as the store returns it (quoted)")
        } else if accepted["unquoted"] && self.unquoted_set {
            Outcome::pass(
                "If-Match refuses the quoted ETag but accepts it unquoted, and etag_unquoted=true is set",
            )
        } else if accepted["unquoted"] {
            Outcome::fail(
                "If-Match refuses the ETag as returned (quoted) and accepts it only unquoted",
            )
            .recommend(Recommendation {
                option: "etag_unquoted=true".to_string(),
                reason: "the store matches If-Match only against the unquoted ETag".to_string(),
                fixes: FIXED_BY_UNQUOTED
                    .iter()
                    .chain(["s3_etag_forms"].iter())
                    .map(|s| s.to_string())
                    .collect(),
            })
        } else {
            Outcome::fail("If-Match with the current ETag was refused in every form")
        };
        Ok(outcome.with("if_match", evidence))
    }
}

struct MultipartIfNoneMatch {
    store: S3Store,
}

impl MultipartIfNoneMatch {
    /// One single-part multipart upload completed with `If-None-Match: *`:
    /// `Ok(Ok(unparseable))` when it completed (`unparseable`: the store
    /// answered 200 with a body the SDK could not read), `Ok(Err(answer))`
    /// when refused.
    async fn upload(&self, key: &str) -> Result<Result<bool, Value>, StepError> {
        let client = self.store.client();
        let bucket = self.store.bucket();
        let created = client
            .create_multipart_upload()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                let (s, c) = sdk_answer(&e);
                let kind = if c.as_deref() == Some("NotImplemented") {
                    ErrorKind::Unsupported
                } else {
                    kind_for(s)
                };
                step_error("CreateMultipartUpload", s, c, kind)
            })?;
        let upload_id = created.upload_id().unwrap_or_default().to_string();
        let part = client
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(&upload_id)
            .part_number(1)
            .body(ByteStream::from(payload("multipart").to_vec()))
            .send()
            .await
            .map_err(|e| {
                let (s, c) = sdk_answer(&e);
                step_error("UploadPart", s, c, kind_for(s))
            })?;
        let completed = CompletedMultipartUpload::builder()
            .parts(
                CompletedPart::builder()
                    .part_number(1)
                    .set_e_tag(part.e_tag().map(str::to_string))
                    .build(),
            )
            .build();
        let result = client
            .complete_multipart_upload()
            .bucket(bucket)
            .key(key)
            .upload_id(&upload_id)
            .multipart_upload(completed)
            .if_none_match("*")
            .send()
            .await;
        match result {
            Ok(_) => Ok(Ok(false)),
            // 200 with a body the SDK cannot parse: the upload completed.
            Err(e) if sdk_answer(&e).0 == Some(200) => Ok(Ok(true)),
            Err(e) => {
                // Leave no dangling upload behind.
                let _ = client
                    .abort_multipart_upload()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                Ok(Err(answer_json(&e)))
            }
        }
    }
}

#[async_trait]
impl Probe for MultipartIfNoneMatch {
    fn id(&self) -> &'static str {
        "s3_multipart_if_none_match"
    }
    fn title(&self) -> &'static str {
        "CompleteMultipartUpload honours If-None-Match"
    }
    fn severity(&self) -> Severity {
        Severity::Info
    }
    fn explanation(&self) -> &'static str {
        "Large records written by multipart upload could overwrite an existing object; casaas lease records are small single-part writes, so leases are unaffected."
    }

    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        let key = self.store.object_key(&cx.base_key("multipart"));
        let first = self.upload(&key).await?;
        let unparseable = match first {
            Ok(unparseable) => unparseable,
            Err(answer) => {
                return Ok(Outcome::fail(
                    "a multipart upload with If-None-Match: * to a fresh key was refused",
                )
                .with("first", answer));
            }
        };
        let etag_before = self
            .store
            .client()
            .head_object()
            .bucket(self.store.bucket())
            .key(&key)
            .send()
            .await
            .ok()
            .and_then(|h| h.e_tag().map(str::to_string));
        let second = self.upload(&key).await?;
        let etag_after = self
            .store
            .client()
            .head_object()
            .bucket(self.store.bucket())
            .key(&key)
            .send()
            .await
            .ok()
            .and_then(|h| h.e_tag().map(str::to_string));
        let unchanged = etag_before.is_some() && etag_before == etag_after;
        let outcome = match second {
            Ok(_) => Outcome::fail(
                "a second multipart upload with If-None-Match: * overwrote the existing object",
            )
            .with("second", "succeeded"),
            Err(answer) => {
                let refused_412 = answer["status"] == json!(412);
                Outcome::check(
                    unchanged,
                    format!(
                        "a second multipart upload with If-None-Match: * was refused ({}) and the object is unchanged",
                        answer["answer"].as_str().unwrap_or("?")
                    ),
                    "the second multipart upload was refused but the object changed",
                )
                .with("second", answer)
                .with("answered_412", refused_412)
            }
        };
        Ok(outcome.with("completion_response_unparseable", unparseable))
    }
}

struct VersionedBucket {
    store: S3Store,
}

#[async_trait]
impl Probe for VersionedBucket {
    fn id(&self) -> &'static str {
        "s3_versioned_bucket"
    }
    fn title(&self) -> &'static str {
        "Conditional writes on a versioned bucket"
    }
    fn severity(&self) -> Severity {
        Severity::Info
    }
    fn explanation(&self) -> &'static str {
        "On a versioned bucket a store that ignores conditions for new versions would let two holders write; run this probe on the bucket you deploy on."
    }

    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        let _ = cx;
        let result = self
            .store
            .client()
            .get_bucket_versioning()
            .bucket(self.store.bucket())
            .send()
            .await;
        match result {
            Ok(v) => {
                let status = v
                    .status()
                    .map_or_else(|| "never enabled".to_string(), |s| s.as_str().to_string());
                Ok(Outcome::pass(format!(
                    "bucket versioning is {status}; the other probes ran on this bucket in that state"
                ))
                .with("versioning", status))
            }
            Err(e) => {
                let (s, c) = sdk_answer(&e);
                if matches!(s, Some(200)) {
                    return Ok(Outcome::unsupported(
                        "the store's answer to GetBucketVersioning could not be understood",
                    )
                    .with("answer", answer_json(&e)));
                }
                if matches!(s, Some(501)) || c.as_deref() == Some("NotImplemented") {
                    Ok(
                        Outcome::unsupported("the store does not implement GetBucketVersioning")
                            .with("answer", answer_json(&e)),
                    )
                } else {
                    Err(step_error("GetBucketVersioning", s, c, kind_for(s)))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_options() {
        let url = "s3://b/p?endpoint=http://127.0.0.1:1&etag_unquoted=true";
        assert_eq!(url_option(url, "etag_unquoted"), Some("true"));
        assert_eq!(url_option("s3://b/p", "etag_unquoted"), None);
    }
}
