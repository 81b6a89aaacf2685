//! S3-only probes and backend hooks (feature `s3`).
//!
//! These need the raw S3 client of [`casaas_s3::S3Store`], so the binary
//! contributes them with [`Suite::with_probe`](crate::Suite::with_probe)
//! for `s3://` URLs, replacing the placeholders of the standard suite.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use casaas_core::provider::{Delivery, Operation, classify};
use casaas_core::{CasError, CasStore, StoreUrl};
use casaas_s3::S3Store;
use serde_json::{Value, json};

use crate::model::{Outcome, Recommendation, Severity, StepError};
use crate::probe::{Probe, ProbeContext, ServerClock};
use crate::probes::payload;
use crate::suite::{Reopen, Reopened};

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

/// The S3-only probes for `store`.
pub fn s3_probes(store: &S3Store) -> Vec<Box<dyn Probe>> {
    let unquoted_set = store.config().quirks.etag_unquoted;
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

/// Opens an `s3://` URL again with options added (the [`Reopen`] hook the
/// binary gives S3 targets), with the S3-only probes for it.
#[derive(Debug, Clone)]
pub struct S3Reopen {
    url: StoreUrl,
}

impl S3Reopen {
    /// The hook for the store opened from `url`.
    pub fn new(url: StoreUrl) -> Self {
        S3Reopen { url }
    }
}

#[async_trait]
impl Reopen for S3Reopen {
    async fn reopen(&self, options: &[String]) -> Result<Reopened, CasError> {
        let store = S3Store::open_url(&self.url.with_options(options)?).await?;
        let probes = s3_probes(&store);
        Ok(Reopened {
            store: std::sync::Arc::new(store),
            probes,
        })
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

/// A failed step of an S3-only probe, its kind decided by the one policy
/// with S3's code table.
fn step_error(step: &str, op: Operation, status: Option<u16>, code: Option<String>) -> StepError {
    let kind = classify(
        op,
        Delivery::MaybeSent,
        status,
        code.as_deref(),
        &casaas_s3::error::code_table,
    );
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
                step_error("HeadObject", Operation::Get, s, c)
            })?;
        Ok(head.e_tag().unwrap_or_default().to_string())
    }

    /// PutObject of a fresh body with `condition` (`If-Match: value`, or
    /// `If-None-Match: *` when `None`), paced and retried like every probe
    /// write: a throttled answer is retried with backoff, and an answer
    /// lost or unclear (no response, 5xx) is resolved by reading the object
    /// back and looking for the body's nonce.
    async fn put(&self, cx: &ProbeContext, key: &str, condition: Option<&str>) -> FormAnswer {
        let relative = cx.base_key(ETAG_KEY);
        let mut backoff = Duration::from_millis(200);
        let mut throttled = 0;
        for _ in 0..12 {
            if let Some(interval) = cx.min_write_interval() {
                tokio::time::sleep(interval).await;
            }
            let body = payload("etag form");
            let request = self
                .store
                .client()
                .put_object()
                .bucket(self.store.bucket())
                .key(key)
                .body(ByteStream::from(body.to_vec()));
            let request = match condition {
                Some(value) => request.if_match(value),
                None => request.if_none_match("*"),
            };
            let err = match request.send().await {
                Ok(_) => return FormAnswer::Accepted(json!("accepted")),
                Err(e) => e,
            };
            let (status, code) = sdk_answer(&err);
            let is_throttle = status == Some(429)
                || code.as_deref().is_some_and(|c| {
                    matches!(
                        c,
                        "SlowDown" | "Throttling" | "TooManyRequests" | "RequestLimitExceeded"
                    )
                });
            if is_throttle {
                throttled += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
            let unclear = status.is_none_or(|s| s >= 500);
            if !unclear {
                return FormAnswer::Refused(answer_json(&err));
            }
            // The answer was lost: did the write happen?
            match self.store.get(&relative).await {
                Ok(Some(o)) if o.body == body => {
                    return FormAnswer::Accepted(json!(
                        "accepted (the answer was lost; the write was read back)"
                    ));
                }
                // Not applied: the condition still stands, so ask again.
                Ok(_) | Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
        FormAnswer::Unknown(json!({
            "answer": "no clear answer after 12 attempts",
            "throttled": throttled,
        }))
    }
}

/// The key the ETag-forms probe writes, under its prefix.
const ETAG_KEY: &str = "etag";

/// What a conditional PutObject came to.
enum FormAnswer {
    /// The write happened.
    Accepted(Value),
    /// The store refused it (412, or another 4xx).
    Refused(Value),
    /// Still throttled or unclear when the attempts ran out.
    Unknown(Value),
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
        let key = self.store.object_key(&cx.base_key(ETAG_KEY));
        match self.put(cx, &key, None).await {
            FormAnswer::Accepted(_) => {}
            FormAnswer::Refused(answer) => {
                return Ok(Outcome::error(
                    "the probe's first PutObject with If-None-Match: * to a fresh key was refused",
                )
                .with("answer", answer));
            }
            FormAnswer::Unknown(answer) => {
                return Ok(Outcome::error(
                    "the probe's first PutObject stayed throttled or unclear",
                )
                .with("answer", answer));
            }
        }
        let mut forms = serde_json::Map::new();
        let mut accepted = std::collections::BTreeMap::new();
        let mut unknown = Vec::new();
        for form in ["quoted", "unquoted", "weak"] {
            let etag = self.current_etag(&key).await?;
            let bare = etag.trim_matches('"');
            let value = match form {
                "quoted" => format!("\"{bare}\""),
                "unquoted" => bare.to_string(),
                _ => format!("W/\"{bare}\""),
            };
            let (ok, evidence) = match self.put(cx, &key, Some(&value)).await {
                FormAnswer::Accepted(e) => (true, e),
                FormAnswer::Refused(e) => (false, e),
                FormAnswer::Unknown(e) => {
                    unknown.push(form);
                    (false, e)
                }
            };
            accepted.insert(form, ok);
            forms.insert(form.to_string(), evidence);
        }
        if unknown.contains(&"quoted") || (unknown.contains(&"unquoted") && !accepted["quoted"]) {
            return Ok(Outcome::error(format!(
                "If-Match with the {} ETag got no clear answer (throttled or lost every time)",
                unknown.join(" and ")
            ))
            .with("if_match", json!({ "forms": forms })));
        }
        // An accepted form must also reject a stale value in the same form.
        let stale_form = if accepted["quoted"] {
            "quoted"
        } else {
            "unquoted"
        };
        let stale_value = if stale_form == "quoted" {
            "\"00000000000000000000000000000000\"".to_string()
        } else {
            "00000000000000000000000000000000".to_string()
        };
        let (stale_ok, stale_evidence) = match self.put(cx, &key, Some(&stale_value)).await {
            FormAnswer::Accepted(e) => (true, e),
            FormAnswer::Refused(e) => (false, e),
            FormAnswer::Unknown(e) => {
                return Ok(Outcome::error(
                    "If-Match with a stale ETag got no clear answer (throttled or lost every time)",
                )
                .with("if_match", json!({ "forms": forms, "stale": e })));
            }
        };
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
                step_error("CreateMultipartUpload", Operation::Create, s, c)
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
                step_error("UploadPart", Operation::Create, s, c)
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
                    Err(step_error("GetBucketVersioning", Operation::Get, s, c))
                }
            }
        }
    }
}
