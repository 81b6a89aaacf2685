//! Native Azure blob leases: an optional second lease mechanism.
//!
//! Azure can lease a blob: while a lease is active, writes and deletes of
//! that blob need the lease id, and a second acquire fails. The service
//! keeps the lease's clock, so no client clock matters.
//!
//! A lease id is **not a fencing token**: it is a random UUID, not ordered,
//! and a new holder's id says nothing about being newer than an old one. A
//! resource that must refuse a paused former holder still needs a
//! monotonically increasing token, which comes from a casaas lease record
//! written with the CAS contract. Native leases can complement that (for
//! example, to keep writers that do not know casaas away from a blob) but do
//! not replace it. Note also that a blob under a native lease refuses the
//! plain conditional writes of [`AzureBlobStore`](crate::AzureBlobStore)
//! (412 `LeaseIdMissing`, reported as precondition failed): lease a
//! dedicated blob, not a casaas record.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use azure_core::request_options::{LeaseBreakPeriod, LeaseDuration, LeaseId};
use azure_storage_blobs::prelude::BlobClient;
use bytes::Bytes;
use casaas_core::provider::validate_key;
use casaas_core::{CasError, CasStore, ErrorKind};

use crate::AzureBlobStore;
use casaas_core::provider::Operation;

use crate::error::{Failure, map_failure};

/// How long a native lease lasts unless renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NativeLeaseDuration {
    /// 15 to 60 seconds (the service's bounds).
    Seconds(u8),
    /// Until released or broken.
    Infinite,
}

impl NativeLeaseDuration {
    /// A finite duration, checked against the service's 15–60 s bounds.
    pub fn seconds(seconds: u64) -> Result<Self, CasError> {
        match u8::try_from(seconds) {
            Ok(s) if (15..=60).contains(&s) => Ok(NativeLeaseDuration::Seconds(s)),
            _ => Err(CasError::invalid_input(format!(
                "a native lease lasts 15 to 60 seconds or is infinite, not {seconds} s"
            ))),
        }
    }

    fn to_sdk(self) -> LeaseDuration {
        match self {
            NativeLeaseDuration::Seconds(s) => LeaseDuration::Seconds(s),
            NativeLeaseDuration::Infinite => LeaseDuration::Infinite,
        }
    }
}

/// The id of a native lease, as the service issued it (a UUID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeLeaseId(LeaseId);

impl fmt::Display for NativeLeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for NativeLeaseId {
    type Err = CasError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LeaseId::from_str(s)
            .map(NativeLeaseId)
            .map_err(|_| CasError::invalid_input(format!("{s:?} is not a lease id (a UUID)")))
    }
}

/// Why a native lease operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NativeLeaseError {
    /// Another holder has an active (or breaking) lease on the blob.
    #[error("the blob is leased by another holder ({code})")]
    HeldByAnother {
        /// The Azure error code (`LeaseAlreadyPresent`, `LeaseIsBreakingAndCannotBeAcquired`).
        code: String,
    },
    /// This lease id no longer holds the blob: it expired and was taken,
    /// was broken, released, or never matched.
    #[error("this lease no longer holds the blob ({code})")]
    Lost {
        /// The Azure error code (e.g. `LeaseIdMismatchWithLeaseOperation`,
        /// `LeaseIsBrokenAndCannotBeRenewed`, `LeaseNotPresentWithLeaseOperation`).
        code: String,
    },
    /// The blob does not exist (only renew, release and break can say so;
    /// acquire creates an empty blob first).
    #[error("the leased blob does not exist")]
    BlobNotFound,
    /// Any other failure, in the contract's terms (throttled, ambiguous,
    /// unauthorized, ...).
    #[error(transparent)]
    Store(#[from] CasError),
}

/// Maps a failed lease request: lease codes to their meaning, the rest as
/// the contract maps them.
///
/// ```
/// use casaas_azure::{Failure, NativeLeaseError, map_lease_failure};
/// let err = map_lease_failure(&Failure::status(409, Some("LeaseAlreadyPresent")), "c");
/// assert!(matches!(err, NativeLeaseError::HeldByAnother { .. }));
/// ```
pub fn map_lease_failure(failure: &Failure, container: &str) -> NativeLeaseError {
    match (failure.http_status(), failure.code()) {
        (
            Some(409),
            Some(code @ ("LeaseAlreadyPresent" | "LeaseIsBreakingAndCannotBeAcquired")),
        ) => NativeLeaseError::HeldByAnother {
            code: code.to_string(),
        },
        (
            Some(409 | 412),
            Some(
                code @ ("LeaseIdMismatchWithLeaseOperation"
                | "LeaseIsBrokenAndCannotBeRenewed"
                | "LeaseIsBreakingAndCannotBeChanged"
                | "LeaseNotPresentWithLeaseOperation"
                | "LeaseLost"),
            ),
        ) => NativeLeaseError::Lost {
            code: code.to_string(),
        },
        (Some(404), Some("BlobNotFound") | None) => NativeLeaseError::BlobNotFound,
        _ => NativeLeaseError::Store(map_failure(Operation::NativeLease, failure, container)),
    }
}

/// Native leases on one blob of an [`AzureBlobStore`].
///
/// ```no_run
/// # async fn demo(store: casaas_azure::AzureBlobStore) -> Result<(), casaas_azure::NativeLeaseError> {
/// use casaas_azure::NativeLeaseDuration;
/// let lease = store.native_lease("locks/compactor")?;
/// let id = lease.acquire(NativeLeaseDuration::seconds(30)?).await?;
/// lease.renew(id).await?;
/// lease.release(id).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct NativeBlobLease {
    store: AzureBlobStore,
    key: String,
    blob: BlobClient,
}

impl fmt::Debug for NativeBlobLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeBlobLease")
            .field("store", &self.store)
            .field("key", &self.key)
            .finish()
    }
}

impl AzureBlobStore {
    /// Native leases on the blob at `key` (relative to the store's prefix).
    pub fn native_lease(&self, key: &str) -> Result<NativeBlobLease, CasError> {
        validate_key(key)?;
        Ok(NativeBlobLease {
            store: self.clone(),
            key: key.to_string(),
            blob: self.blob(key),
        })
    }
}

impl NativeBlobLease {
    /// The key of the leased blob.
    pub fn key(&self) -> &str {
        &self.key
    }

    fn fail(&self, e: &azure_core::Error) -> NativeLeaseError {
        match map_lease_failure(&Failure::from_sdk(e), self.store.container()) {
            NativeLeaseError::Store(err) => NativeLeaseError::Store(err.with_key(self.key.clone())),
            other => other,
        }
    }

    /// Acquires a lease for `duration`, creating an empty blob first if none
    /// is there (a lease needs a blob). Fails with
    /// [`NativeLeaseError::HeldByAnother`] while someone else holds it.
    pub async fn acquire(
        &self,
        duration: NativeLeaseDuration,
    ) -> Result<NativeLeaseId, NativeLeaseError> {
        match self.blob.acquire_lease(duration.to_sdk()).await {
            Ok(answer) => Ok(NativeLeaseId(answer.lease_id)),
            Err(e) => match self.fail(&e) {
                NativeLeaseError::BlobNotFound => {
                    match self.store.create(&self.key, Bytes::new()).await {
                        Ok(_) => {}
                        Err(e) if e.kind() == ErrorKind::PreconditionFailed => {}
                        Err(e) => return Err(e.into()),
                    }
                    self.blob
                        .acquire_lease(duration.to_sdk())
                        .await
                        .map(|answer| NativeLeaseId(answer.lease_id))
                        .map_err(|e| self.fail(&e))
                }
                other => Err(other),
            },
        }
    }

    /// Renews the lease for its original duration. Works after expiry too,
    /// as long as nobody else has leased the blob since.
    pub async fn renew(&self, id: NativeLeaseId) -> Result<(), NativeLeaseError> {
        self.blob
            .blob_lease_client(id.0)
            .renew()
            .await
            .map(|_| ())
            .map_err(|e| self.fail(&e))
    }

    /// Releases the lease at once, so another holder may acquire it.
    pub async fn release(&self, id: NativeLeaseId) -> Result<(), NativeLeaseError> {
        self.blob
            .blob_lease_client(id.0)
            .release()
            .await
            .map(|_| ())
            .map_err(|e| self.fail(&e))
    }

    /// Breaks whoever's lease is active, without knowing its id: it ends
    /// after `period` (0–60 s; `None` lets a finite lease run out, and
    /// breaks an infinite one at once). Returns how long until the blob can
    /// be leased again.
    pub async fn break_lease(
        &self,
        period: Option<Duration>,
    ) -> Result<Duration, NativeLeaseError> {
        if let Some(p) = period
            && p > Duration::from_secs(60)
        {
            return Err(CasError::invalid_input(format!(
                "a lease break period is 0 to 60 seconds, not {p:?}"
            ))
            .into());
        }
        let mut builder = self.blob.break_lease();
        if let Some(p) = period {
            builder = builder.lease_break_period(LeaseBreakPeriod::from(p));
        }
        builder
            .await
            .map(|answer| Duration::from_secs(u64::from(answer.lease_time)))
            .map_err(|e| self.fail(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert!(NativeLeaseDuration::seconds(14).is_err());
        assert!(NativeLeaseDuration::seconds(61).is_err());
        assert!(NativeLeaseDuration::seconds(300).is_err());
        assert_eq!(
            NativeLeaseDuration::seconds(15).unwrap(),
            NativeLeaseDuration::Seconds(15)
        );
    }

    #[test]
    fn lease_ids_round_trip() {
        let text = "8b9a1c1e-9f5e-4c53-9b0e-3f1a2d4c5e6f";
        let id: NativeLeaseId = text.parse().unwrap();
        assert_eq!(id.to_string(), text);
        assert!("not-a-uuid".parse::<NativeLeaseId>().is_err());
    }
}
