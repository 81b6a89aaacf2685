//! The one error type of the CAS-object contract.
//!
//! Every backend maps its provider's failures into [`CasError`], whose
//! [`ErrorKind`] has a precise meaning. The protocols above never look at
//! status codes or strings: they ask [`CasError::may_have_taken_effect`] and
//! [`CasError::is_retryable`].

use std::fmt;
use std::time::Duration;

/// What went wrong, with a precise meaning for the protocol layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The condition did not hold: someone else's write is there (HTTP 412;
    /// Azure answers 409 `BlobAlreadyExists` to a losing create). Nothing
    /// was written by this request.
    PreconditionFailed,
    /// Another conditional request on the same key was in flight (S3 409
    /// `ConditionalRequestConflict`). Nothing was written; retrying is sensible.
    ConcurrentRequest,
    /// The store asked us to slow down (429, 503 SlowDown / ServerBusy).
    /// Nothing was written.
    Throttled,
    /// The key does not exist (for a conditional replace or delete: the
    /// object named by the condition is gone).
    NotFound,
    /// The request may or may not have taken effect: a timeout or reset after
    /// the body was sent, or a 5xx. The caller must resolve it by reading.
    Ambiguous,
    /// The store does not implement the requested condition or operation
    /// (501, or 400 for an unknown conditional header).
    Unsupported,
    /// Credentials were missing, wrong or lack permission (401/403).
    Unauthorized,
    /// The backend is configured wrongly: missing bucket, bad endpoint,
    /// malformed URL. The message says what to fix.
    Misconfigured,
    /// The caller passed something the contract rejects (bad key, oversized
    /// body). The message says what to fix.
    InvalidInput,
    /// The request was definitely not sent (connection refused, DNS
    /// failure): nothing was written and a retry is sensible. Serialized as
    /// `not_sent`; reports that say `transport` (its former name) still read.
    #[serde(alias = "transport")]
    NotSent,
    /// The store does not honour the conditions leases rely on: the
    /// [store guard](crate::guard) saw it accept a write it should have
    /// refused, or refuse one it should have accepted. The message names
    /// what it did. Nothing casaas builds on such a store excludes anyone.
    UnsafeStore,
}

impl ErrorKind {
    /// A short human description of the kind, used in messages.
    pub fn describe(self) -> &'static str {
        match self {
            ErrorKind::PreconditionFailed => "precondition failed",
            ErrorKind::ConcurrentRequest => "concurrent conditional request",
            ErrorKind::Throttled => "throttled",
            ErrorKind::NotFound => "not found",
            ErrorKind::Ambiguous => "outcome unknown",
            ErrorKind::Unsupported => "unsupported by this store",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Misconfigured => "misconfigured",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotSent => "request not sent",
            ErrorKind::UnsafeStore => "store does not honour conditional writes",
        }
    }

    /// A stable snake_case name, for evidence and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::PreconditionFailed => "precondition_failed",
            ErrorKind::ConcurrentRequest => "concurrent_request",
            ErrorKind::Throttled => "throttled",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Ambiguous => "ambiguous",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Misconfigured => "misconfigured",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::NotSent => "not_sent",
            ErrorKind::UnsafeStore => "unsafe_store",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

type BoxedSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error from a [`CasStore`](crate::CasStore) operation.
///
/// Carries the [`ErrorKind`], the key involved, and the provider's evidence
/// (HTTP status and error code) so that conformance probes can report exactly
/// what a store answered. Never carries credentials.
///
/// ```
/// use casaas_core::{CasError, ErrorKind};
///
/// let err = CasError::new(ErrorKind::PreconditionFailed, "someone else wrote first")
///     .with_key("locks/leader")
///     .with_status(412)
///     .with_code("PreconditionFailed");
/// assert!(!err.may_have_taken_effect());
/// assert!(!err.is_retryable());
/// assert_eq!(err.status(), Some(412));
/// ```
pub struct CasError {
    kind: ErrorKind,
    message: String,
    key: Option<String>,
    status: Option<u16>,
    code: Option<String>,
    retry_after: Option<Duration>,
    bucket_missing: bool,
    source: Option<BoxedSource>,
}

impl CasError {
    /// A new error of `kind` with a message that says what happened and,
    /// where the caller can act, what to fix.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CasError {
            kind,
            message: message.into(),
            key: None,
            status: None,
            code: None,
            retry_after: None,
            bucket_missing: false,
            source: None,
        }
    }

    /// Shorthand for an [`ErrorKind::InvalidInput`] error.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for an [`ErrorKind::Misconfigured`] error.
    pub fn misconfigured(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Misconfigured, message)
    }

    /// Shorthand for an [`ErrorKind::Unsupported`] error.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// Records the key the operation was about.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Records the HTTP status the store answered.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Records the provider's error code (e.g. `PreconditionFailed`, `SlowDown`).
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Records how long the store asked us to wait (Retry-After).
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// Marks the error as the store saying its bucket or container does not
    /// exist (S3 `NoSuchBucket`, Azure `ContainerNotFound`, a GCS 404 on an
    /// upload), so that callers can offer to create it without reading the
    /// message.
    #[must_use]
    pub fn with_bucket_missing(mut self) -> Self {
        self.bucket_missing = true;
        self
    }

    /// Did the store say its bucket or container does not exist?
    pub fn is_bucket_missing(&self) -> bool {
        self.bucket_missing
    }

    /// Attaches the underlying error. It must not contain credentials.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without key or status decoration.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The key the operation was about, if known.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The HTTP status the store answered, if there was a response.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The provider's error code, if the response carried one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// How long the store asked us to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// May the write this error answers have taken effect on the store?
    ///
    /// Only [`ErrorKind::Ambiguous`] answers yes: every other kind means the
    /// store rejected the request or never received it. A protocol that gets
    /// `true` must re-read and look for its own nonce before deciding.
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(self.kind, ErrorKind::Ambiguous)
    }

    /// Is retrying the same request (after resolving any ambiguity) sensible?
    ///
    /// Yes for transient conditions (throttling, concurrent request,
    /// requests not sent, ambiguous outcomes once resolved); no for answers
    /// that will not change by asking again (precondition failed, not found,
    /// unsupported, auth, configuration, input).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::ConcurrentRequest
                | ErrorKind::Throttled
                | ErrorKind::Ambiguous
                | ErrorKind::NotSent
        )
    }

    /// The `status code` pair as evidence, e.g. `412 PreconditionFailed`,
    /// or the kind's name when the store gave neither.
    pub fn evidence(&self) -> String {
        match (self.status, self.code.as_deref()) {
            (Some(s), Some(c)) => format!("{s} {c}"),
            (Some(s), None) => s.to_string(),
            (None, Some(c)) => c.to_string(),
            (None, None) => self.kind.as_str().to_string(),
        }
    }
}

impl fmt::Display for CasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.describe())?;
        if let Some(key) = &self.key {
            write!(f, " on key '{key}'")?;
        }
        match (self.status, self.code.as_deref()) {
            (Some(s), Some(c)) => write!(f, " (HTTP {s} {c})")?,
            (Some(s), None) => write!(f, " (HTTP {s})")?,
            (None, Some(c)) => write!(f, " ({c})")?,
            (None, None) => {}
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(after) = self.retry_after {
            write!(f, " (retry after {after:?})")?;
        }
        Ok(())
    }
}

impl fmt::Debug for CasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CasError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("key", &self.key)
            .field("status", &self.status)
            .field("code", &self.code)
            .field("retry_after", &self.retry_after)
            .field("bucket_missing", &self.bucket_missing)
            .field("source", &self.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl std::error::Error for CasError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}

/// The store operation a request belongs to: the same answer means
/// different things for a read and for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Reading an object.
    Get,
    /// Create-if-absent.
    Create,
    /// Replace-if-version-matches.
    Replace,
    /// Delete-if-version-matches.
    Delete,
    /// Listing a prefix.
    List,
    /// Creating the bucket or container ([`CasStore::create_bucket`](crate::CasStore::create_bucket)).
    CreateBucket,
    /// A provider's own lease call (Azure blob leases).
    NativeLease,
}

impl Operation {
    /// Does this operation change the store?
    pub fn writes(self) -> bool {
        !matches!(self, Operation::Get | Operation::List)
    }

    /// Does this operation carry a condition on the object's version?
    pub fn is_conditional(self) -> bool {
        matches!(
            self,
            Operation::Create | Operation::Replace | Operation::Delete
        )
    }

    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Get => "read",
            Operation::Create => "create",
            Operation::Replace => "replace",
            Operation::Delete => "delete",
            Operation::List => "list",
            Operation::CreateBucket => "bucket creation",
            Operation::NativeLease => "native lease",
        }
    }
}

/// How far a failed request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// Certainly not sent: the connection was refused, DNS failed, the
    /// request could not be signed.
    NotSent,
    /// Possibly sent: the store may have received it, whether or not it
    /// answered.
    MaybeSent,
}

/// A provider's table of error codes: what (operation, HTTP status,
/// provider code) means when the provider documents it, `None` otherwise.
pub type CodeTable<'a> = &'a dyn Fn(Operation, Option<u16>, Option<&str>) -> Option<ErrorKind>;

/// The one error policy: the kind of a failed request.
///
/// The rule: **anything unexpected after a write may have been sent may
/// have taken effect** ([`ErrorKind::Ambiguous`]), so the protocol resolves
/// it by reading rather than assuming it failed. In order:
///
/// 1. Not sent ([`Delivery::NotSent`]): [`ErrorKind::NotSent`].
/// 2. The provider's `table` names the answer: its kind. A provider names a
///    "nothing was written" kind (throttled, concurrent request) only where
///    the store documents that the request was refused, e.g. S3's 503
///    `SlowDown` or Azure's 503 `ServerBusy`.
/// 3. No answer (timeout, reset, unreadable answer): `Ambiguous`, for reads
///    too (retrying the read is the fix).
/// 4. Statuses with one meaning everywhere: 412 precondition failed, 404 not
///    found, 401/403 unauthorized, 429 throttled, 501 unsupported; 408 (the
///    store gave up reading the request) and every 5xx, a bare 503
///    included, are `Ambiguous`.
/// 5. A 409 the provider's table does not name: on a write `Ambiguous`
///    (a conflict with something unknown does not prove nothing was
///    written), on a read invalid input. Any other 4xx: the store refused
///    the request as invalid.
/// 6. Anything else (a status no store should send): `Ambiguous` on a
///    write, unsupported on a read (the store does not speak the protocol).
///
/// ```
/// use casaas_core::ErrorKind;
/// use casaas_core::provider::{Delivery, Operation, classify};
///
/// let none = |_: Operation, _: Option<u16>, _: Option<&str>| -> Option<ErrorKind> { None };
/// assert_eq!(classify(Operation::Create, Delivery::MaybeSent, Some(412), None, &none), ErrorKind::PreconditionFailed);
/// assert_eq!(classify(Operation::Replace, Delivery::MaybeSent, Some(409), None, &none), ErrorKind::Ambiguous);
/// assert_eq!(classify(Operation::Replace, Delivery::MaybeSent, Some(503), None, &none), ErrorKind::Ambiguous);
/// assert_eq!(classify(Operation::Replace, Delivery::NotSent, None, None, &none), ErrorKind::NotSent);
/// ```
pub fn classify(
    op: Operation,
    delivery: Delivery,
    status: Option<u16>,
    code: Option<&str>,
    table: CodeTable<'_>,
) -> ErrorKind {
    if delivery == Delivery::NotSent {
        return ErrorKind::NotSent;
    }
    let code = code.filter(|c| !c.is_empty());
    if let Some(kind) = table(op, status, code) {
        return kind;
    }
    let Some(status) = status else {
        return ErrorKind::Ambiguous;
    };
    match status {
        412 => ErrorKind::PreconditionFailed,
        404 => ErrorKind::NotFound,
        401 | 403 => ErrorKind::Unauthorized,
        429 => ErrorKind::Throttled,
        501 => ErrorKind::Unsupported,
        408 | 500..=599 => ErrorKind::Ambiguous,
        409 if op.writes() => ErrorKind::Ambiguous,
        400..=499 => ErrorKind::InvalidInput,
        _ if op.writes() => ErrorKind::Ambiguous,
        _ => ErrorKind::Unsupported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ambiguous_may_have_taken_effect() {
        for kind in [
            ErrorKind::PreconditionFailed,
            ErrorKind::ConcurrentRequest,
            ErrorKind::Throttled,
            ErrorKind::NotFound,
            ErrorKind::Unsupported,
            ErrorKind::Unauthorized,
            ErrorKind::Misconfigured,
            ErrorKind::InvalidInput,
            ErrorKind::NotSent,
        ] {
            assert!(
                !CasError::new(kind, "x").may_have_taken_effect(),
                "{kind:?}"
            );
        }
        assert!(CasError::new(ErrorKind::Ambiguous, "x").may_have_taken_effect());
    }

    #[test]
    fn retryable_kinds() {
        let retryable: Vec<_> = [
            ErrorKind::PreconditionFailed,
            ErrorKind::ConcurrentRequest,
            ErrorKind::Throttled,
            ErrorKind::NotFound,
            ErrorKind::Ambiguous,
            ErrorKind::Unsupported,
            ErrorKind::Unauthorized,
            ErrorKind::Misconfigured,
            ErrorKind::InvalidInput,
            ErrorKind::NotSent,
        ]
        .into_iter()
        .filter(|k| CasError::new(*k, "").is_retryable())
        .collect();
        assert_eq!(
            retryable,
            vec![
                ErrorKind::ConcurrentRequest,
                ErrorKind::Throttled,
                ErrorKind::Ambiguous,
                ErrorKind::NotSent
            ]
        );
    }

    #[test]
    fn policy_without_a_table() {
        use ErrorKind::*;
        use Operation::*;
        let none = |_: Operation, _: Option<u16>, _: Option<&str>| -> Option<ErrorKind> { None };
        for (op, delivery, status, kind) in [
            (Create, Delivery::NotSent, None, NotSent),
            (Get, Delivery::NotSent, None, NotSent),
            (Create, Delivery::MaybeSent, None, Ambiguous),
            (Get, Delivery::MaybeSent, None, Ambiguous),
            (Create, Delivery::MaybeSent, Some(412), PreconditionFailed),
            (Delete, Delivery::MaybeSent, Some(404), NotFound),
            (List, Delivery::MaybeSent, Some(403), Unauthorized),
            (Replace, Delivery::MaybeSent, Some(429), Throttled),
            (Replace, Delivery::MaybeSent, Some(501), Unsupported),
            (Replace, Delivery::MaybeSent, Some(413), InvalidInput),
            (Replace, Delivery::MaybeSent, Some(409), Ambiguous),
            (Replace, Delivery::MaybeSent, Some(503), Ambiguous),
            (Create, Delivery::MaybeSent, Some(408), Ambiguous),
            (Delete, Delivery::MaybeSent, Some(405), InvalidInput),
            (Create, Delivery::MaybeSent, Some(302), Ambiguous),
            (NativeLease, Delivery::MaybeSent, Some(409), Ambiguous),
            (Get, Delivery::MaybeSent, Some(503), Ambiguous),
            (Get, Delivery::MaybeSent, Some(409), InvalidInput),
            (List, Delivery::MaybeSent, Some(302), Unsupported),
        ] {
            assert_eq!(
                classify(op, delivery, status, None, &none),
                kind,
                "{op:?} {delivery:?} {status:?}"
            );
        }
        // The table decides before the defaults, but never for a request
        // that was not sent.
        let table = |_: Operation, s: Option<u16>, c: Option<&str>| {
            (s == Some(503) && c == Some("SlowDown")).then_some(Throttled)
        };
        assert_eq!(
            classify(
                Create,
                Delivery::MaybeSent,
                Some(503),
                Some("SlowDown"),
                &table
            ),
            Throttled
        );
        assert_eq!(
            classify(
                Create,
                Delivery::NotSent,
                Some(503),
                Some("SlowDown"),
                &table
            ),
            NotSent
        );
    }

    #[test]
    fn kind_names_are_stable() {
        let json = serde_json::to_string(&ErrorKind::NotSent).unwrap();
        assert_eq!(json, "\"not_sent\"");
        let old: ErrorKind = serde_json::from_str("\"transport\"").unwrap();
        assert_eq!(old, ErrorKind::NotSent);
    }

    #[test]
    fn display_names_key_status_and_code() {
        let err = CasError::new(ErrorKind::Throttled, "slow down")
            .with_key("a/b")
            .with_status(503)
            .with_code("SlowDown")
            .with_retry_after(Duration::from_secs(2));
        assert_eq!(
            err.to_string(),
            "throttled on key 'a/b' (HTTP 503 SlowDown): slow down (retry after 2s)"
        );
        assert_eq!(err.evidence(), "503 SlowDown");
    }
}
