//! The built-in probes.

mod clock;
mod consistency;
mod lease;
mod performance;
mod races;
mod semantics;

pub(crate) use consistency::patiently;

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::{CasError, Version};
use futures::future::BoxFuture;

use crate::evidence::probe_id;
use crate::model::{Outcome, Severity, StepError};
use crate::probe::{Probe, ProbeContext};

type RunFn = for<'a> fn(&'a ProbeContext) -> BoxFuture<'a, Result<Outcome, StepError>>;

/// A built-in probe: metadata plus an async function.
struct BuiltIn {
    id: &'static str,
    title: &'static str,
    severity: Severity,
    explanation: &'static str,
    run: RunFn,
}

#[async_trait]
impl Probe for BuiltIn {
    fn id(&self) -> &'static str {
        self.id
    }
    fn title(&self) -> &'static str {
        self.title
    }
    fn severity(&self) -> Severity {
        self.severity
    }
    fn explanation(&self) -> &'static str {
        self.explanation
    }
    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        (self.run)(cx).await
    }
}

macro_rules! builtin {
    ($func:path, $id:expr, $severity:ident, $title:literal, $explanation:literal $(,)?) => {
        Box::new(BuiltIn {
            id: $id,
            title: $title,
            severity: Severity::$severity,
            explanation: $explanation,
            run: |cx| Box::pin($func(cx)),
        }) as Box<dyn Probe>
    };
}

/// `race_across_endpoints`: critical when the run has more than one
/// endpoint, an info note otherwise (one endpoint cannot see it).
struct RaceAcrossEndpoints;

#[async_trait]
impl Probe for RaceAcrossEndpoints {
    fn id(&self) -> &'static str {
        "race_across_endpoints"
    }
    fn title(&self) -> &'static str {
        "Concurrent writes through several endpoints: exactly one winner"
    }
    fn severity(&self) -> Severity {
        Severity::Critical
    }
    fn severity_for(&self, endpoints: usize) -> Severity {
        if endpoints > 1 {
            Severity::Critical
        } else {
            Severity::Info
        }
    }
    fn explanation(&self) -> &'static str {
        "A store that serializes conditional writes within each gateway but not across gateways lets two processes behind different gateways acquire the same lock."
    }
    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        races::race_across_endpoints(cx).await
    }
}

/// A probe this backend cannot run: always answers unsupported with a
/// reason. The binary replaces these placeholders (by id) with real probes
/// for backends that give the access they need.
#[derive(Debug, Clone)]
pub struct UnavailableProbe {
    /// The probe's id.
    pub id: &'static str,
    /// Its title.
    pub title: &'static str,
    /// Its severity.
    pub severity: Severity,
    /// What a failure would mean for a lock.
    pub explanation: &'static str,
    /// Why it cannot run here.
    pub reason: String,
}

#[async_trait]
impl Probe for UnavailableProbe {
    fn id(&self) -> &'static str {
        self.id
    }
    fn title(&self) -> &'static str {
        self.title
    }
    fn severity(&self) -> Severity {
        self.severity
    }
    fn explanation(&self) -> &'static str {
        self.explanation
    }
    async fn run(&self, _cx: &ProbeContext) -> Result<Outcome, StepError> {
        Ok(Outcome::unsupported(self.reason.clone()))
    }
}

/// Ids of the S3-only probes, which need raw S3 access.
pub const S3_ONLY_PROBES: [&str; 6] = [
    "s3_etag_forms",
    "s3_multipart_if_none_match",
    "s3_versioned_bucket",
    "s3_multipart_if_match",
    "s3_copy_conditional",
    "s3_versioning_states",
];

/// Id, title and explanation of the S3-only bucket versioning probe.
pub(crate) const VERSIONED_BUCKET: (&str, &str, &str) = (
    "s3_versioned_bucket",
    "Bucket versioning is off (renewals keep no noncurrent versions)",
    "On a bucket with versioning enabled every renewal of a lock keeps the previous record as a noncurrent version (one per renewal, billed as stored data, slowing listings); a lifecycle rule on the locks prefix expires them (docs/cli.md, Versioned buckets).",
);

/// Id, title and explanation of the Azure-only Put Block List probe.
pub(crate) const AZURE_BLOCK_LIST: (&str, &str, &str) = (
    "azure_block_list_conditional",
    "Put Block List honours If-None-Match and If-Match",
    "A large blob committed from blocks with an ignored condition would overwrite a holder's record; casaas lease records are single Put Blob writes.",
);

/// Id, title and explanation of the GCS-only compose probe.
pub(crate) const GCS_COMPOSE: (&str, &str, &str) = (
    "gcs_compose_preconditions",
    "Compose honours ifGenerationMatch",
    "An object composed from parts with an ignored generation precondition would overwrite a holder's record; casaas lease records are single uploads.",
);

fn s3_placeholders() -> Vec<Box<dyn Probe>> {
    let reason = "needs raw S3 access: not available for this backend".to_string();
    vec![
        Box::new(UnavailableProbe {
            id: "s3_etag_forms",
            title: "If-Match accepts quoted, unquoted and weak ETag forms",
            severity: Severity::Warning,
            explanation: "If the store accepts only one ETag spelling, every renew can be refused until the matching casaas option (etag_unquoted) is set.",
            reason: reason.clone(),
        }),
        Box::new(UnavailableProbe {
            id: "s3_multipart_if_none_match",
            title: "CompleteMultipartUpload honours If-None-Match",
            severity: Severity::Warning,
            explanation: "Large records written by multipart upload could overwrite an existing object; casaas lease records are small single-part writes, so leases are unaffected.",
            reason: reason.clone(),
        }),
        Box::new(UnavailableProbe {
            id: VERSIONED_BUCKET.0,
            title: VERSIONED_BUCKET.1,
            severity: Severity::Warning,
            explanation: VERSIONED_BUCKET.2,
            reason: reason.clone(),
        }),
        Box::new(UnavailableProbe {
            id: "s3_multipart_if_match",
            title: "CompleteMultipartUpload honours If-Match",
            severity: Severity::Warning,
            explanation: "A large record replaced by multipart upload with a stale If-Match would overwrite a newer one; casaas lease records are small single-part writes, and the adapters refuse larger conditional writes unless allowed.",
            reason: reason.clone(),
        }),
        Box::new(UnavailableProbe {
            id: "s3_copy_conditional",
            title: "CopyObject honours If-None-Match and If-Match on the destination",
            severity: Severity::Warning,
            explanation: "Tools that publish a record by copying it into place would overwrite a holder's record if the copy ignores its condition; casaas itself never copies.",
            reason: reason.clone(),
        }),
        Box::new(UnavailableProbe {
            id: "s3_versioning_states",
            title: "Conditional create, replace and delete with versioning enabled and suspended",
            severity: Severity::Warning,
            explanation: "A store that stops honouring conditions once bucket versioning is enabled or suspended would let two holders write after someone changes the bucket's settings.",
            reason,
        }),
        Box::new(UnavailableProbe {
            id: AZURE_BLOCK_LIST.0,
            title: AZURE_BLOCK_LIST.1,
            severity: Severity::Warning,
            explanation: AZURE_BLOCK_LIST.2,
            reason: "needs an Azure Blob Storage store (az://): not available for this backend"
                .to_string(),
        }),
        Box::new(UnavailableProbe {
            id: GCS_COMPOSE.0,
            title: GCS_COMPOSE.1,
            severity: Severity::Warning,
            explanation: GCS_COMPOSE.2,
            reason: "needs a Google Cloud Storage store (gs://): not available for this backend"
                .to_string(),
        }),
    ]
}

/// Every built-in probe, in run order.
pub fn standard() -> Vec<Box<dyn Probe>> {
    let mut probes = vec![
        // First: the rate it measures paces every later probe's writes.
        builtin!(
            performance::throttle,
            probe_id::THROTTLE,
            Info,
            "Per-key write rate the store sustains",
            "A low per-key write limit bounds how short a lease TTL can be, since a holder renews about three times per TTL.",
        ),
        builtin!(
            semantics::create_if_absent,
            "create_if_absent",
            Critical,
            "Create-if-absent writes a fresh key",
            "Without create-if-absent the first holder of a lock cannot be chosen by the store, so two processes can both believe they acquired it.",
        ),
        builtin!(
            semantics::create_conflict,
            probe_id::CREATE_CONFLICT,
            Critical,
            "Losing create leaves the object unchanged",
            "A create that silently overwrites an existing object lets a second contender replace the holder's lease, so two processes hold the lock at once.",
        ),
        builtin!(
            semantics::replace_if_match,
            "replace_if_match",
            Critical,
            "Replace-if-match from the current version",
            "If a replace from the current version is refused, holders cannot renew or release and contenders cannot take over: the lock stops working.",
        ),
        builtin!(
            semantics::replace_stale,
            probe_id::REPLACE_STALE,
            Critical,
            "Stale replace rejected, object unchanged",
            "If a replace from an old version succeeds, a paused holder's renewal overwrites the new holder's lease and both act as holder.",
        ),
        builtin!(
            semantics::missing_key,
            "missing_key",
            Critical,
            "Conditions on a missing key",
            "If a conditional write to a missing key succeeds, the condition is being ignored and a lock record can appear out of nowhere.",
        ),
        builtin!(
            semantics::conditional_delete,
            "conditional_delete",
            Warning,
            "Conditional delete and stale delete",
            "Leases never delete their object, but cleanup and fenced helpers that delete would remove someone else's newer object.",
        ),
        builtin!(
            semantics::identical_rewrite,
            "identical_rewrite",
            Info,
            "Version changes on an identical rewrite (ABA)",
            "Versions that repeat for identical bodies let a version-only lock be fooled by ABA; casaas records carry a fresh nonce, so its leases are unaffected.",
        ),
        builtin!(
            consistency::read_after_write,
            "read_after_write",
            Warning,
            "Read-after-write consistency",
            "Stale reads do not break mutual exclusion (writes stay conditional) but make acquisitions fail spuriously and delay takeovers.",
        ),
        builtin!(
            consistency::list_after_write,
            "list_after_write",
            Warning,
            "List-after-write consistency",
            "Leases do not list, but tools that discover locks or clean up by listing would miss or misreport objects.",
        ),
        builtin!(
            races::race_create,
            probe_id::RACE_CREATE,
            Critical,
            "Concurrent creates: exactly one winner",
            "More than one winner of a create race means two processes acquire the same free lock at the same time.",
        ),
        builtin!(
            races::race_replace,
            probe_id::RACE_REPLACE,
            Critical,
            "Concurrent replaces from one version: exactly one winner",
            "More than one winner of a replace race means two contenders take over the same expired lease, both holding it.",
        ),
        Box::new(RaceAcrossEndpoints),
        builtin!(
            lease::lease_protocol,
            "lease_protocol",
            Critical,
            "Lease protocol end to end",
            "If acquire, renew, release and takeover do not behave as specified on this store, casaas leases cannot be trusted on it.",
        ),
        builtin!(
            performance::latency,
            probe_id::LATENCY,
            Info,
            "Latency of read, create and replace",
            "High or erratic latency eats into the lease's safety margin: set the TTL well above the p99 of a replace.",
        ),
        builtin!(
            clock::clock_skew,
            probe_id::CLOCK_SKEW,
            Info,
            "Server clock skew (HTTP Date header)",
            "Default leases do not rely on wall clocks; a large skew only matters for the opt-in rule that trusts record expiry times.",
        ),
    ];
    probes.extend(s3_placeholders());
    probes
}

/// A random tag that makes every body unique to this run.
pub(crate) fn nonce() -> String {
    use rand::Rng;
    format!("{:016x}", rand::rng().random::<u64>())
}

/// A body `label nonce`, unique per call.
pub(crate) fn payload(label: &str) -> Bytes {
    Bytes::from(format!("{label} {}", nonce()))
}

/// How a version is spelled, as evidence.
pub(crate) fn version_form(version: &Version) -> &'static str {
    match version {
        Version::Generation(_) => "generation",
        Version::ETag(t) if t.starts_with("W/") => "weak etag",
        Version::ETag(t) if t.starts_with('"') => "quoted etag",
        Version::ETag(_) => "unquoted etag",
        _ => "another form",
    }
}

/// A short label for a store error: `412 PreconditionFailed
/// (precondition_failed)`, or the kind alone when the store gave no status
/// or code.
pub(crate) fn answer_label(err: &CasError) -> String {
    let kind = err.kind().as_str();
    let evidence = err.evidence();
    if evidence == kind {
        kind.to_string()
    } else {
        format!("{evidence} ({kind})")
    }
}
