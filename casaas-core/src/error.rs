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
    /// failure): nothing was written and a retry is sensible.
    Transport,
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
            ErrorKind::Transport => "request not sent",
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
            ErrorKind::Transport => "transport",
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
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Records the HTTP status the store answered.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Records the provider's error code (e.g. `PreconditionFailed`, `SlowDown`).
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Records how long the store asked us to wait (Retry-After).
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// Attaches the underlying error. It must not contain credentials.
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
    /// transport failures, ambiguous outcomes once resolved); no for answers
    /// that will not change by asking again (precondition failed, not found,
    /// unsupported, auth, configuration, input).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::ConcurrentRequest
                | ErrorKind::Throttled
                | ErrorKind::Ambiguous
                | ErrorKind::Transport
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
            ErrorKind::Transport,
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
            ErrorKind::Transport,
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
                ErrorKind::Transport
            ]
        );
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
