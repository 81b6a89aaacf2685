//! What happened to a failed request, in one record every provider fills,
//! and the one check every adapter makes of a refusal.
//!
//! A provider reduces each failed SDK or HTTP call to a [`Failure`]: how far
//! the request got ([`Stage`]), the status and provider code if the store
//! answered, its message and its `Retry-After`. [`Failure::kind`] applies
//! the one error policy ([`classify`]) with the provider's code table, and
//! [`Failure::into_error`] builds the [`CasError`] with that evidence
//! attached. The wording of the message stays the provider's.

use std::time::Duration;

use bytes::Bytes;

use crate::error::CodeTable;
use crate::error::{Delivery, Operation, classify};
use crate::{CasError, CasStore, ErrorKind};

/// How far a failed request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// It was never sent: connection refused, DNS failure, TLS handshake.
    NotSent,
    /// Credentials could not be obtained, so it was never sent.
    Credentials,
    /// The client rejected it before sending (malformed name or URL, a
    /// setting the SDK cannot use).
    Rejected,
    /// The server answered with an error status.
    Answered,
    /// No answer within the deadline after it was (or may have been) sent.
    TimedOut,
    /// The connection broke after it was (or may have been) sent.
    Interrupted,
    /// An answer came that the client could not understand.
    Unreadable,
}

impl Stage {
    /// Whether the store may have received the request.
    pub fn delivery(self) -> Delivery {
        match self {
            Stage::NotSent | Stage::Credentials | Stage::Rejected => Delivery::NotSent,
            Stage::Answered | Stage::TimedOut | Stage::Interrupted | Stage::Unreadable => {
                Delivery::MaybeSent
            }
        }
    }
}

/// The facts of one failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// How far the request got.
    pub stage: Stage,
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// The provider's error code (S3 `Code`, Azure `x-ms-error-code`, GCS
    /// `errors[].reason` or a gRPC code name), when given.
    pub code: Option<String>,
    /// The provider's message or the client's description.
    pub message: String,
    /// The `Retry-After` the server asked for.
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// A failure at `stage` with a message and nothing else.
    pub fn at(stage: Stage, message: impl Into<String>) -> Self {
        Failure {
            stage,
            status: None,
            code: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// An error answer with HTTP `status` and the provider's `code`.
    pub fn answered(status: u16, code: Option<String>, message: impl Into<String>) -> Self {
        Failure {
            stage: Stage::Answered,
            status: Some(status),
            code: code.filter(|c| !c.is_empty()),
            message: message.into(),
            retry_after: None,
        }
    }

    /// Records the `Retry-After` delay.
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// The kind of this failure of `op`: credentials that could not be had
    /// are [`ErrorKind::Unauthorized`], a request the client would not build
    /// is [`ErrorKind::Misconfigured`], everything else is decided by
    /// [`classify`] with the provider's `table`.
    pub fn kind(&self, op: Operation, table: CodeTable<'_>) -> ErrorKind {
        match self.stage {
            Stage::Credentials => ErrorKind::Unauthorized,
            Stage::Rejected => ErrorKind::Misconfigured,
            stage => classify(
                op,
                stage.delivery(),
                self.status,
                self.code.as_deref(),
                table,
            ),
        }
    }

    /// The contract's error: `kind` and `message` (the provider's wording),
    /// for `key`, with the status, code and `Retry-After` as evidence.
    pub fn into_error(self, kind: ErrorKind, message: impl Into<String>, key: &str) -> CasError {
        let mut err = CasError::new(kind, message).with_key(key);
        if let Some(status) = self.status {
            err = err.with_status(status);
        }
        if let Some(code) = self.code {
            err = err.with_code(code);
        }
        if let Some(after) = self.retry_after {
            err = err.with_retry_after(after);
        }
        err
    }
}

/// Checks a refused conditional write made through a client that retries
/// writes itself (object_store, OpenDAL): the refusal may be the answer to
/// the client's retry of our own write that had taken effect. One read
/// tells: if the object holds exactly the bytes we wrote, the outcome is
/// [`ErrorKind::Ambiguous`] (code `RefusedAfterRetry`), for the protocol to
/// resolve by its nonce; if the read fails, it is `Ambiguous` too; else the
/// refusal stands. Anything but a precondition failure is returned as it is.
/// `client` names the retrying client in the message.
pub async fn confirm_refusal(
    store: &dyn CasStore,
    key: &str,
    body: &Bytes,
    refusal: CasError,
    client: &str,
) -> CasError {
    if refusal.kind() != ErrorKind::PreconditionFailed {
        return refusal;
    }
    match store.get(key).await {
        Ok(Some(stored)) if stored.body == *body => CasError::new(
            ErrorKind::Ambiguous,
            format!(
                "the store refused the conditional write ({}), but the object holds exactly \
                 the bytes written: {client} may have retried a write that had taken effect",
                refusal.evidence()
            ),
        )
        .with_key(key)
        .with_code("RefusedAfterRetry")
        .with_source(refusal),
        Ok(_) => refusal,
        Err(read) => CasError::new(
            ErrorKind::Ambiguous,
            format!(
                "the store refused the conditional write ({}) and reading it back failed \
                 ({read}): {client} may have retried a write that had taken effect",
                refusal.evidence()
            ),
        )
        .with_key(key)
        .with_source(refusal),
    }
}

/// The largest body an adapter sends with a condition unless its user opts
/// in: 5 MiB, S3's minimum part size. Above it a client or gateway may split
/// the write into a multipart or chunked upload, whose condition some stores
/// drop (`CompleteMultipartUpload` ignoring `If-None-Match`), and no casaas
/// profile proves that path.
pub const CONDITIONAL_SINGLE_PART_LIMIT: usize = 5 * 1024 * 1024;

/// The adapters' URL option (`large_conditional_writes=true`) that lets a
/// conditional write above [`CONDITIONAL_SINGLE_PART_LIMIT`] through; a
/// capability profile that proves assembled writes sets it for them.
pub const LARGE_CONDITIONAL_WRITES_OPTION: &str = "large_conditional_writes";

/// Refuses a conditional write of `len` bytes to `key` above
/// [`CONDITIONAL_SINGLE_PART_LIMIT`] unless `allowed` (the adapter's
/// `allow_large_conditional_writes`), as `InvalidInput` saying why.
pub fn check_single_part(key: &str, len: usize, allowed: bool) -> Result<(), CasError> {
    if allowed || len <= CONDITIONAL_SINGLE_PART_LIMIT {
        return Ok(());
    }
    Err(CasError::invalid_input(format!(
        "refused: a conditional write of {len} bytes is larger than the single-part limit of \
         {CONDITIONAL_SINGLE_PART_LIMIT} bytes; above it the write may go multipart or chunked, \
         where a store can silently drop the condition, and this store's multipart conditional \
         writes are not proven. Keep conditional records small, or open the store with the \
         capability profile saved by `casaas conformance URL --save-profile` once its multipart \
         probes pass (capability_profile=PATH; allow_large_conditional_writes(true) in code)"
    ))
    .with_key(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn no_table(_: Operation, _: Option<u16>, _: Option<&str>) -> Option<ErrorKind> {
        None
    }

    #[test]
    fn stages_decide_before_the_table() {
        let kind = |f: Failure, op| f.kind(op, &no_table);
        assert_eq!(
            kind(Failure::at(Stage::NotSent, "refused"), Operation::Create),
            ErrorKind::NotSent
        );
        assert_eq!(
            kind(Failure::at(Stage::Credentials, ""), Operation::Get),
            ErrorKind::Unauthorized
        );
        assert_eq!(
            kind(Failure::at(Stage::Rejected, ""), Operation::Get),
            ErrorKind::Misconfigured
        );
        for stage in [Stage::TimedOut, Stage::Interrupted, Stage::Unreadable] {
            assert_eq!(
                kind(Failure::at(stage, ""), Operation::Replace),
                ErrorKind::Ambiguous
            );
        }
        assert_eq!(
            kind(Failure::answered(412, None, ""), Operation::Replace),
            ErrorKind::PreconditionFailed
        );
    }

    #[test]
    fn the_error_carries_the_evidence() {
        let f = Failure::answered(503, Some("SlowDown".into()), "slow down")
            .with_retry_after(Some(Duration::from_secs(2)));
        let err = f.into_error(ErrorKind::Throttled, "throttled", "k");
        assert_eq!(err.status(), Some(503));
        assert_eq!(err.code(), Some("SlowDown"));
        assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(err.key(), Some("k"));
    }

    #[tokio::test]
    async fn a_refusal_over_our_own_bytes_is_ambiguous() {
        let store = MemoryStore::new();
        let ours = Bytes::from_static(b"ours");
        store.create("k", ours.clone()).await.unwrap();
        let refusal = || CasError::new(ErrorKind::PreconditionFailed, "412");
        let err = confirm_refusal(&store, "k", &ours, refusal(), "a client").await;
        assert_eq!(err.kind(), ErrorKind::Ambiguous);
        assert_eq!(err.code(), Some("RefusedAfterRetry"));
        let theirs = Bytes::from_static(b"theirs");
        let err = confirm_refusal(&store, "k", &theirs, refusal(), "a client").await;
        assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
        let other = CasError::new(ErrorKind::Throttled, "slow");
        let err = confirm_refusal(&store, "k", &ours, other, "a client").await;
        assert_eq!(err.kind(), ErrorKind::Throttled);
    }
}
