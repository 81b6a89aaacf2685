//! S3-only probes and backend hooks (feature `s3`).
//!
//! These need the raw S3 client of [`casaas_s3::S3Store`], so the binary
//! contributes them with [`Suite::with_probe`](crate::Suite::with_probe)
//! for `s3://` URLs, replacing the placeholders of the standard suite.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use casaas_core::provider::{Delivery, Operation, classify};
use casaas_core::{CasError, CasStore, StoreUrl};
use casaas_s3::{ForbidOverwrite, S3Store};
use serde_json::{Value, json};

use crate::model::{Outcome, Recommendation, Severity, StepError};
use crate::probe::{Probe, ProbeContext, ServerClock};
use crate::probes::{VERSIONED_BUCKET, payload};
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
        Box::new(MultipartIfMatch {
            store: store.clone(),
        }),
        Box::new(CopyConditional {
            store: store.clone(),
        }),
        Box::new(VersioningStates {
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
            // 501: the store does not implement the condition, a clear
            // refusal (OSS answers so to If-None-Match).
            let unclear = status.is_none_or(|s| s >= 500 && s != 501);
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

    /// The first write, `If-None-Match: *` to a fresh key: `None` when it
    /// was accepted, else the probe's outcome.
    async fn create_fresh(&self, cx: &ProbeContext, key: &str) -> Option<Outcome> {
        match self.put(cx, key, None).await {
            FormAnswer::Accepted(_) => None,
            FormAnswer::Refused(answer) if refused_as_unsupported(&answer) => {
                Some(suggest_forbid_overwrite(&self.store, cx, answer).await)
            }
            FormAnswer::Refused(answer) => Some(
                Outcome::error(
                    "the probe's first PutObject with If-None-Match: * to a fresh key was refused",
                )
                .with("answer", answer),
            ),
            FormAnswer::Unknown(answer) => Some(
                Outcome::error("the probe's first PutObject stayed throttled or unclear")
                    .with("answer", answer),
            ),
        }
    }

    /// PutObject with If-Match carrying the current ETag in each form:
    /// quoted, unquoted and weak.
    async fn try_forms(&self, cx: &ProbeContext, key: &str) -> Result<FormsTried, StepError> {
        let mut tried = FormsTried {
            evidence: serde_json::Map::new(),
            accepted: BTreeMap::new(),
            unknown: Vec::new(),
        };
        for form in ["quoted", "unquoted", "weak"] {
            let etag = self.current_etag(key).await?;
            let bare = etag.trim_matches('"');
            let value = match form {
                "quoted" => format!("\"{bare}\""),
                "unquoted" => bare.to_string(),
                _ => format!("W/\"{bare}\""),
            };
            let (ok, evidence) = match self.put(cx, key, Some(&value)).await {
                FormAnswer::Accepted(e) => (true, e),
                FormAnswer::Refused(e) => (false, e),
                FormAnswer::Unknown(e) => {
                    tried.unknown.push(form);
                    (false, e)
                }
            };
            tried.accepted.insert(form, ok);
            tried.evidence.insert(form.to_string(), evidence);
        }
        Ok(tried)
    }

    /// The verdict on the forms `accepted`, given whether a stale ETag in
    /// `stale_form` was accepted too.
    fn forms_verdict(
        &self,
        accepted: &BTreeMap<&'static str, bool>,
        stale_ok: bool,
        stale_form: &str,
    ) -> Outcome {
        if stale_ok {
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
        }
    }
}

/// What If-Match with the current ETag in each form came to.
struct FormsTried {
    /// Each form's answer.
    evidence: serde_json::Map<String, Value>,
    /// Whether each form was accepted.
    accepted: BTreeMap<&'static str, bool>,
    /// The forms that got no clear answer.
    unknown: Vec<&'static str>,
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
        if let Some(outcome) = dialect_without_etags(&self.store, cx).await {
            return Ok(outcome);
        }
        let key = self.store.object_key(&cx.base_key(ETAG_KEY));
        if let Some(outcome) = self.create_fresh(cx, &key).await {
            return Ok(outcome);
        }
        let tried = self.try_forms(cx, &key).await?;
        let (forms, accepted, unknown) = (&tried.evidence, &tried.accepted, &tried.unknown);
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
        Ok(self
            .forms_verdict(accepted, stale_ok, stale_form)
            .with("if_match", evidence))
    }
}

struct MultipartIfNoneMatch {
    store: S3Store,
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
        Severity::Warning
    }
    fn explanation(&self) -> &'static str {
        "Large records written by multipart upload could overwrite an existing object; casaas lease records are small single-part writes, so leases are unaffected."
    }

    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        let store = &self.store;
        let key = store.object_key(&cx.base_key("multipart"));
        if let Err(answer) = multipart_raw(store, &key, &Condition::Absent).await? {
            if not_implemented(&answer) {
                return Ok(Outcome::unsupported(
                    "the store does not implement If-None-Match on CompleteMultipartUpload",
                )
                .with("first", answer));
            }
            return Ok(Outcome::fail(
                "a multipart upload with If-None-Match: * to a fresh key was refused",
            )
            .with("first", answer));
        }
        let etag_before = head_etag(store, store.bucket(), &key).await;
        let second = multipart_raw(store, &key, &Condition::Absent).await?;
        let etag_after = head_etag(store, store.bucket(), &key).await;
        let unchanged = etag_before.is_some() && etag_before == etag_after;
        Ok(match second {
            Ok(()) => Outcome::fail(
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
        })
    }
}

struct VersionedBucket {
    store: S3Store,
}

/// Where docs/cli.md explains the lifecycle rule for a versioned bucket.
pub(crate) const VERSIONED_BUCKET_DOCS: &str = "docs/cli.md#versioned-buckets";

/// The finding of [`VersionedBucket`] for the state `GetBucketVersioning`
/// answered (`None`: versioning was never enabled).
fn versioning_outcome(status: Option<&str>) -> Outcome {
    match status {
        Some("Enabled") => Outcome::fail(format!(
            "bucket versioning is Enabled: every renewal of a lock keeps the previous record as a noncurrent version, \
             so a held lock piles up one noncurrent version per renewal (about 17,000 a day with a 15s TTL); \
             expire them with a lifecycle rule on the locks prefix ({VERSIONED_BUCKET_DOCS})"
        ))
        .with("versioning", "Enabled"),
        Some(other) => Outcome::pass(format!(
            "bucket versioning is {other}: renewals replace the record in place and keep no noncurrent version"
        ))
        .with("versioning", other),
        None => Outcome::pass(
            "bucket versioning was never enabled: renewals replace the record in place and keep no noncurrent version",
        )
        .with("versioning", "never enabled"),
    }
}

/// The versioning state in a `GetBucketVersioning` answer whose root
/// element the SDK does not accept: `Some(None)` for a versioning document
/// without a status (never enabled), `None` when it is no versioning
/// document at all.
fn lenient_versioning_status(body: &str) -> Option<Option<String>> {
    if !body.contains("Versioning") {
        return None;
    }
    let status = body
        .split_once("<Status>")
        .and_then(|(_, rest)| rest.split_once("</Status>"))
        .map(|(status, _)| status.trim().to_string());
    Some(status)
}

#[async_trait]
impl Probe for VersionedBucket {
    fn id(&self) -> &'static str {
        "s3_versioned_bucket"
    }
    fn title(&self) -> &'static str {
        VERSIONED_BUCKET.1
    }
    fn severity(&self) -> Severity {
        Severity::Warning
    }
    fn explanation(&self) -> &'static str {
        VERSIONED_BUCKET.2
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
            Ok(v) => Ok(versioning_outcome(v.status().map(|s| s.as_str()))),
            Err(e) => {
                let (s, c) = sdk_answer(&e);
                if matches!(s, Some(200)) {
                    // Some servers (moto) name the document's root
                    // differently; its Status element is still plain.
                    let body = e
                        .raw_response()
                        .and_then(|r| r.body().bytes())
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                        .unwrap_or_default();
                    if let Some(status) = lenient_versioning_status(&body) {
                        return Ok(
                            versioning_outcome(status.as_deref()).with("nonstandard_answer", true)
                        );
                    }
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

/// The condition of a raw S3 write.
#[derive(Debug, Clone)]
enum Condition {
    /// `If-None-Match: *`.
    Absent,
    /// `If-Match: ETAG`.
    Matches(String),
}

/// What a raw conditional write came to: `Ok(())` accepted, `Err(answer)`
/// refused (with the store's status and code).
type Answered = Result<(), Value>;

/// The ETag of `bucket`/`key`, or `None` if absent (or unreadable).
async fn head_etag(store: &S3Store, bucket: &str, key: &str) -> Option<String> {
    store
        .client()
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .ok()
        .and_then(|h| h.e_tag().map(str::to_string))
}

/// PutObject of a fresh body under `condition` (none: unconditional).
async fn put_raw(
    store: &S3Store,
    bucket: &str,
    key: &str,
    condition: Option<&Condition>,
) -> Answered {
    let request = store
        .client()
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(payload("raw write").to_vec()));
    let request = match condition {
        Some(Condition::Absent) => request.if_none_match("*"),
        Some(Condition::Matches(etag)) => request.if_match(etag),
        None => request,
    };
    request
        .send()
        .await
        .map(|_| ())
        .map_err(|e| answer_json(&e))
}

/// A one-part multipart upload of `key` completed under `condition`;
/// `Ok(Ok(()))` completed, `Ok(Err(answer))` refused (the upload aborted).
async fn multipart_raw(
    store: &S3Store,
    key: &str,
    condition: &Condition,
) -> Result<Answered, StepError> {
    let client = store.client();
    let bucket = store.bucket();
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
    let request = client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&upload_id)
        .multipart_upload(completed);
    let request = match condition {
        Condition::Absent => request.if_none_match("*"),
        Condition::Matches(etag) => request.if_match(etag),
    };
    match request.send().await {
        Ok(_) => Ok(Ok(())),
        // 200 with a body the SDK cannot parse: the upload completed.
        Err(e) if sdk_answer(&e).0 == Some(200) => Ok(Ok(())),
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

/// Whether a refusal says the store does not implement the condition.
fn not_implemented(answer: &Value) -> bool {
    answer["status"] == json!(501) || answer["code"] == json!("NotImplemented")
}

/// A stale ETag in the store's quoting.
const STALE_ETAG: &str = "\"00000000000000000000000000000000\"";

/// Judges a refused-or-not check: `refused` must hold and the object must
/// keep `before`; records the answer under `name`.
fn judge_refusal(
    checks: &mut serde_json::Map<String, Value>,
    failures: &mut Vec<String>,
    name: &str,
    answer: &Answered,
    before: &Option<String>,
    after: &Option<String>,
) {
    let kept = before.is_some() && before == after;
    match answer {
        Ok(()) => {
            failures.push(format!("{name}: accepted"));
            checks.insert(
                name.into(),
                json!({ "accepted": true, "object_kept": kept }),
            );
        }
        Err(a) => {
            if !kept {
                failures.push(format!("{name}: refused but the object changed"));
            }
            checks.insert(name.into(), json!({ "refused": a, "object_kept": kept }));
        }
    }
}

/// Judges a check that must be accepted.
fn judge_accept(
    checks: &mut serde_json::Map<String, Value>,
    failures: &mut Vec<String>,
    name: &str,
    answer: &Answered,
) {
    match answer {
        Ok(()) => {
            checks.insert(name.into(), json!({ "accepted": true }));
        }
        Err(a) => {
            failures.push(format!("{name}: refused"));
            checks.insert(name.into(), json!({ "refused": a }));
        }
    }
}

/// The outcome of a raw-check probe: unsupported when the store answered
/// 501 to the conditional form, else fail on any failure.
fn raw_outcome(
    what: &str,
    checks: serde_json::Map<String, Value>,
    failures: Vec<String>,
    unsupported: bool,
) -> Outcome {
    let outcome = if unsupported {
        Outcome::unsupported(format!("the store does not implement {what}"))
    } else if failures.is_empty() {
        Outcome::pass(format!("{what}: every condition was honoured"))
    } else {
        Outcome::fail(format!("{what}: {}", failures.join("; ")))
    };
    outcome.with("checks", Value::Object(checks))
}

struct MultipartIfMatch {
    store: S3Store,
}

#[async_trait]
impl Probe for MultipartIfMatch {
    fn id(&self) -> &'static str {
        "s3_multipart_if_match"
    }
    fn title(&self) -> &'static str {
        "CompleteMultipartUpload honours If-Match"
    }
    fn severity(&self) -> Severity {
        Severity::Warning
    }
    fn explanation(&self) -> &'static str {
        "A large record replaced by multipart upload with a stale If-Match would overwrite a newer one; casaas lease records are small single-part writes, and the adapters refuse larger conditional writes unless allowed."
    }

    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        let (store, bucket) = (&self.store, self.store.bucket());
        let key = store.object_key(&cx.base_key("multipart-if-match"));
        if let Err(answer) = put_raw(store, bucket, &key, None).await {
            return Ok(
                Outcome::error("the object to replace could not be written").with("answer", answer)
            );
        }
        let mut checks = serde_json::Map::new();
        let mut failures = Vec::new();
        let before = head_etag(store, bucket, &key).await;
        let stale = multipart_raw(store, &key, &Condition::Matches(STALE_ETAG.into())).await?;
        let after = head_etag(store, bucket, &key).await;
        let unsupported = stale.as_ref().err().is_some_and(not_implemented);
        judge_refusal(
            &mut checks,
            &mut failures,
            "stale_if_match",
            &stale,
            &before,
            &after,
        );
        if let Some(current) = after.clone() {
            let fresh = multipart_raw(store, &key, &Condition::Matches(current)).await?;
            judge_accept(&mut checks, &mut failures, "current_if_match", &fresh);
        }
        Ok(raw_outcome(
            "CompleteMultipartUpload with If-Match",
            checks,
            failures,
            unsupported,
        ))
    }
}

struct CopyConditional {
    store: S3Store,
}

impl CopyConditional {
    async fn copy(&self, source: &str, key: &str, condition: &Condition) -> Answered {
        let request = self
            .store
            .client()
            .copy_object()
            .bucket(self.store.bucket())
            .key(key)
            .copy_source(format!("{}/{source}", self.store.bucket()));
        let request = match condition {
            Condition::Absent => request.if_none_match("*"),
            Condition::Matches(etag) => request.if_match(etag),
        };
        request
            .send()
            .await
            .map(|_| ())
            .map_err(|e| answer_json(&e))
    }
}

#[async_trait]
impl Probe for CopyConditional {
    fn id(&self) -> &'static str {
        "s3_copy_conditional"
    }
    fn title(&self) -> &'static str {
        "CopyObject honours If-None-Match and If-Match on the destination"
    }
    fn severity(&self) -> Severity {
        Severity::Warning
    }
    fn explanation(&self) -> &'static str {
        "Tools that publish a record by copying it into place would overwrite a holder's record if the copy ignores its condition; casaas itself never copies."
    }

    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        let (store, bucket) = (&self.store, self.store.bucket());
        let source = store.object_key(&cx.base_key("copy-source"));
        let target = store.object_key(&cx.base_key("copy-target"));
        let fresh = store.object_key(&cx.base_key("copy-fresh"));
        for key in [&source, &target] {
            if let Err(answer) = put_raw(store, bucket, key, None).await {
                return Ok(Outcome::error("the objects to copy could not be written")
                    .with("answer", answer));
            }
        }
        let mut checks = serde_json::Map::new();
        let mut failures = Vec::new();
        let before = head_etag(store, bucket, &target).await;
        let onto_existing = self.copy(&source, &target, &Condition::Absent).await;
        let after = head_etag(store, bucket, &target).await;
        let unsupported = onto_existing.as_ref().err().is_some_and(not_implemented);
        judge_refusal(
            &mut checks,
            &mut failures,
            "if_none_match_onto_existing",
            &onto_existing,
            &before,
            &after,
        );
        let stale = self
            .copy(&source, &target, &Condition::Matches(STALE_ETAG.into()))
            .await;
        let after_stale = head_etag(store, bucket, &target).await;
        judge_refusal(
            &mut checks,
            &mut failures,
            "stale_if_match",
            &stale,
            &after,
            &after_stale,
        );
        if let Some(current) = after_stale {
            let current = self
                .copy(&source, &target, &Condition::Matches(current))
                .await;
            judge_accept(&mut checks, &mut failures, "current_if_match", &current);
        }
        let to_fresh = self.copy(&source, &fresh, &Condition::Absent).await;
        judge_accept(
            &mut checks,
            &mut failures,
            "if_none_match_to_fresh_key",
            &to_fresh,
        );
        Ok(raw_outcome(
            "CopyObject with conditions",
            checks,
            failures,
            unsupported,
        ))
    }
}

struct VersioningStates {
    store: S3Store,
}

impl VersioningStates {
    /// Creates a bucket in versioning state `state` (`Enabled`, or
    /// `Suspended` after enabling); `Err(reason)` when the store or the
    /// credentials do not allow it.
    async fn bucket_in(&self, state: &str) -> Result<String, Value> {
        use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
        let client = self.store.client();
        let bucket = format!(
            "casaas-conf-{}-{}",
            crate::probes::nonce().get(..10).unwrap_or("0"),
            state.to_ascii_lowercase()
        );
        client
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .map_err(|e| json!({ "step": "CreateBucket", "answer": answer_json(&e) }))?;
        let mut states = vec![BucketVersioningStatus::Enabled];
        if state == "Suspended" {
            states.push(BucketVersioningStatus::Suspended);
        }
        for status in states {
            let set = client
                .put_bucket_versioning()
                .bucket(&bucket)
                .versioning_configuration(VersioningConfiguration::builder().status(status).build())
                .send()
                .await;
            if let Err(e) = set {
                let answer = json!({ "step": "PutBucketVersioning", "answer": answer_json(&e) });
                self.remove_bucket(&bucket).await;
                return Err(answer);
            }
        }
        Ok(bucket)
    }

    /// Removes every version and delete marker, then the bucket (best
    /// effort: it is the probe's own, created by it).
    async fn remove_bucket(&self, bucket: &str) {
        let client = self.store.client();
        if let Ok(listed) = client.list_object_versions().bucket(bucket).send().await {
            let versions = listed.versions().iter().map(|v| {
                (
                    v.key().map(str::to_string),
                    v.version_id().map(str::to_string),
                )
            });
            let markers = listed.delete_markers().iter().map(|m| {
                (
                    m.key().map(str::to_string),
                    m.version_id().map(str::to_string),
                )
            });
            for (key, version) in versions.chain(markers).collect::<Vec<_>>() {
                let Some(key) = key else { continue };
                let _ = client
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .set_version_id(version)
                    .send()
                    .await;
            }
        }
        if let Err(e) = client.delete_bucket().bucket(bucket).send().await {
            tracing::warn!(
                "could not remove the probe's bucket {bucket}: {}",
                answer_json(&e)["answer"]
            );
        }
    }

    /// Create, replace and delete under conditions in `bucket`.
    async fn checks(&self, bucket: &str) -> (serde_json::Map<String, Value>, Vec<String>) {
        let store = &self.store;
        let key = "casaas-conformance-versioning";
        let mut checks = serde_json::Map::new();
        let mut failures = Vec::new();
        let created = put_raw(store, bucket, key, Some(&Condition::Absent)).await;
        judge_accept(&mut checks, &mut failures, "create_if_absent", &created);
        let v1 = head_etag(store, bucket, key).await;
        let again = put_raw(store, bucket, key, Some(&Condition::Absent)).await;
        let after = head_etag(store, bucket, key).await;
        judge_refusal(
            &mut checks,
            &mut failures,
            "second_create",
            &again,
            &v1,
            &after,
        );
        if let Some(current) = after.clone() {
            let replaced = put_raw(store, bucket, key, Some(&Condition::Matches(current))).await;
            judge_accept(&mut checks, &mut failures, "replace_current", &replaced);
        }
        let v2 = head_etag(store, bucket, key).await;
        if let Some(old) = v1.clone().filter(|old| Some(old) != v2.as_ref()) {
            let stale = put_raw(store, bucket, key, Some(&Condition::Matches(old))).await;
            let after = head_etag(store, bucket, key).await;
            judge_refusal(
                &mut checks,
                &mut failures,
                "replace_stale",
                &stale,
                &v2,
                &after,
            );
        }
        let wrong = store
            .client()
            .delete_object()
            .bucket(bucket)
            .key(key)
            .if_match(STALE_ETAG)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| answer_json(&e));
        let after = head_etag(store, bucket, key).await;
        judge_refusal(
            &mut checks,
            &mut failures,
            "delete_wrong_etag",
            &wrong,
            &v2,
            &after,
        );
        if let Some(current) = after {
            let deleted = store
                .client()
                .delete_object()
                .bucket(bucket)
                .key(key)
                .if_match(current)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| answer_json(&e));
            judge_accept(&mut checks, &mut failures, "delete_current", &deleted);
            if deleted.is_ok() {
                let gone = head_etag(store, bucket, key).await.is_none();
                if !gone {
                    failures.push("delete_current: the object is still readable".into());
                }
                // A delete marker is on top now: the key is absent again.
                let recreated = put_raw(store, bucket, key, Some(&Condition::Absent)).await;
                judge_accept(
                    &mut checks,
                    &mut failures,
                    "create_after_delete",
                    &recreated,
                );
            }
        }
        (checks, failures)
    }
}

#[async_trait]
impl Probe for VersioningStates {
    fn id(&self) -> &'static str {
        "s3_versioning_states"
    }
    fn title(&self) -> &'static str {
        "Conditional create, replace and delete with versioning enabled and suspended"
    }
    fn severity(&self) -> Severity {
        Severity::Warning
    }
    fn explanation(&self) -> &'static str {
        "A store that stops honouring conditions once bucket versioning is enabled or suspended would let two holders write after someone changes the bucket's settings."
    }

    async fn run(&self, _cx: &ProbeContext) -> Result<Outcome, StepError> {
        let mut states = serde_json::Map::new();
        let mut failures = Vec::new();
        let mut not_run = Vec::new();
        for state in ["Enabled", "Suspended"] {
            match self.bucket_in(state).await {
                Ok(bucket) => {
                    let (checks, failed) = self.checks(&bucket).await;
                    self.remove_bucket(&bucket).await;
                    failures.extend(failed.into_iter().map(|f| format!("{state}: {f}")));
                    states.insert(state.into(), Value::Object(checks));
                }
                Err(reason) => {
                    not_run.push(format!(
                        "{state} not run ({} answered {})",
                        reason["step"].as_str().unwrap_or("?"),
                        reason["answer"]["answer"].as_str().unwrap_or("?")
                    ));
                    states.insert(state.into(), json!({ "not_run": reason }));
                }
            }
        }
        let ran = 2 - not_run.len();
        let outcome = if ran == 0 {
            Outcome::unsupported(format!(
                "no bucket could be created in a versioning state: {}",
                not_run.join("; ")
            ))
        } else if failures.is_empty() {
            let mut detail =
                "create-if-absent, replace and delete kept their conditions (a delete with a wrong ETag kept the object)".to_string();
            if !not_run.is_empty() {
                detail.push_str(&format!("; {}", not_run.join("; ")));
            } else {
                detail.push_str(" with versioning enabled and suspended");
            }
            Outcome::pass(detail)
        } else {
            Outcome::fail(failures.join("; "))
        };
        Ok(outcome.with("states", Value::Object(states)))
    }
}

// ------------------------------------------------------------------------
// Vendor dialects of create-if-absent (forbid_overwrite=oss|cos): found by
// the ETag-forms probe when a store refuses If-None-Match as unimplemented.

/// Probes whose failure `forbid_overwrite=…` fixes: every probe that
/// creates, and this one.
const FIXED_BY_FORBID_OVERWRITE: [&str; 9] = [
    "create_if_absent",
    "create_conflict",
    "race_create",
    "read_after_write",
    "list_after_write",
    "lease_protocol",
    "throttle",
    "latency",
    "s3_etag_forms",
];

/// Did the store refuse a conditional PutObject as not implemented (501,
/// 400 `NotImplemented`, an unknown conditional header)?
fn refused_as_unsupported(answer: &Value) -> bool {
    let status = answer["status"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok());
    let code = answer["code"].as_str();
    classify(
        Operation::Create,
        Delivery::MaybeSent,
        status,
        code,
        &casaas_s3::error::code_table,
    ) == casaas_core::ErrorKind::Unsupported
}

/// Under a dialect whose conditions are not ETags, the ETag forms do not
/// apply: `forbid_overwrite` is checked instead, `gcs_interop` skipped.
async fn dialect_without_etags(store: &S3Store, cx: &ProbeContext) -> Option<Outcome> {
    let quirks = store.config().quirks;
    if let Some(dialect) = quirks.forbid_overwrite {
        let (honoured, evidence) = try_forbid_overwrite(store, cx, dialect).await;
        let header = dialect.header();
        return Some(
            Outcome::check(
                honoured,
                format!(
                    "no If-Match with forbid_overwrite={}: {header}: true makes a second create \
                     fail and leaves the object unchanged",
                    dialect.as_str()
                ),
                format!(
                    "{header}: true did not make a second create fail with the object unchanged"
                ),
            )
            .with("forbid_overwrite", evidence),
        );
    }
    quirks.gcs_interop.then(|| {
        Outcome::unsupported(
            "gcs_interop=true: conditions are GCS generations (x-goog-if-generation-match), not ETags",
        )
    })
}

/// After `If-None-Match` was refused as not implemented: tries each
/// vendor's forbid-overwrite header and recommends the first one honoured.
async fn suggest_forbid_overwrite(store: &S3Store, cx: &ProbeContext, refused: Value) -> Outcome {
    let mut tried = serde_json::Map::new();
    for dialect in [ForbidOverwrite::Oss, ForbidOverwrite::Cos] {
        let (honoured, evidence) = try_forbid_overwrite(store, cx, dialect).await;
        tried.insert(dialect.header().to_string(), evidence);
        if honoured {
            let option = format!("forbid_overwrite={}", dialect.as_str());
            return Outcome::fail(format!(
                "If-None-Match: * is refused as not implemented ({}), but {}: true makes \
                 a second create fail and leaves the object unchanged",
                refused["answer"].as_str().unwrap_or("?"),
                dialect.header()
            ))
            .with("if_none_match", refused)
            .with("forbid_overwrite", Value::Object(tried))
            .recommend(Recommendation {
                option,
                reason: format!(
                    "the store refuses If-None-Match and honours {}: true for create-if-absent \
                     (it has no conditional replace)",
                    dialect.header()
                ),
                fixes: FIXED_BY_FORBID_OVERWRITE
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            });
        }
    }
    Outcome::unsupported(
        "If-None-Match: * is refused as not implemented, and no vendor forbid-overwrite header \
         (x-oss-, x-cos-) is honoured either",
    )
    .with("if_none_match", refused)
    .with("forbid_overwrite", Value::Object(tried))
}

/// Two PutObjects of different bodies to one fresh key with `dialect`'s
/// header: honoured when the first succeeds, the second is refused, and
/// the key still holds the first body.
async fn try_forbid_overwrite(
    store: &S3Store,
    cx: &ProbeContext,
    dialect: ForbidOverwrite,
) -> (bool, Value) {
    let relative = cx.base_key(&format!("forbid-overwrite-{}", dialect.as_str()));
    let key = store.object_key(&relative);
    let first = payload("forbid overwrite");
    let first_answer = forbid_overwrite_put(store, cx, &key, dialect, first.clone()).await;
    if let Err(answer) = first_answer {
        return (false, json!({ "first": answer }));
    }
    let second_answer = forbid_overwrite_put(store, cx, &key, dialect, payload("second")).await;
    let unchanged = matches!(store.get(&relative).await, Ok(Some(o)) if o.body == first);
    let evidence = json!({
        "first": "accepted",
        "second": second_answer.as_ref().err().cloned().unwrap_or(json!("accepted")),
        "unchanged": unchanged,
    });
    let refused = second_answer.is_err_and(|a| matches!(a["status"].as_u64(), Some(409 | 412)));
    (refused && unchanged, evidence)
}

/// One paced PutObject with `dialect`'s header instead of `If-None-Match`.
async fn forbid_overwrite_put(
    store: &S3Store,
    cx: &ProbeContext,
    key: &str,
    dialect: ForbidOverwrite,
    body: bytes::Bytes,
) -> Result<(), Value> {
    if let Some(interval) = cx.min_write_interval() {
        tokio::time::sleep(interval).await;
    }
    let header = dialect.header();
    store
        .client()
        .put_object()
        .bucket(store.bucket())
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .customize()
        .mutate_request(move |request| {
            request.headers_mut().insert(header, "true");
        })
        .send()
        .await
        .map(|_| ())
        .map_err(|e| answer_json(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioning_enabled_is_a_warning_pointing_to_the_lifecycle_rule() {
        let enabled = versioning_outcome(Some("Enabled"));
        assert_eq!(enabled.verdict, crate::Verdict::Fail);
        assert!(
            enabled
                .detail
                .contains("one noncurrent version per renewal")
        );
        assert!(enabled.detail.contains(VERSIONED_BUCKET_DOCS));
        for off in [Some("Suspended"), None] {
            assert_eq!(
                versioning_outcome(off).verdict,
                crate::Verdict::Pass,
                "{off:?}"
            );
        }
    }

    #[test]
    fn a_versioning_answer_with_another_root_is_read() {
        let moto = r#"<?xml version="1.0" encoding="utf-8"?>
<GetBucketVersioningResponse xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></GetBucketVersioningResponse>"#;
        assert_eq!(
            lenient_versioning_status(moto),
            Some(Some("Enabled".to_string()))
        );
        let never =
            r#"<GetBucketVersioningResponse xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>"#;
        assert_eq!(lenient_versioning_status(never), Some(None));
        assert_eq!(lenient_versioning_status("<Error>odd</Error>"), None);
    }
}
