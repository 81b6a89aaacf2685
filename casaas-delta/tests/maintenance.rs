//! One maintenance runner at a time, fenced by its lease token: a runner
//! that believes its lease too long (its clock runs slow, its renewals are
//! cut off) is refused at its next step once a newer runner started.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{DriftingClock, LeaseConfig, LeaseError, SystemClock, WaitOptions};
use casaas_core::{CasError, CasStore, ErrorKind, ForwardingStore, Version};
use casaas_delta::{MAINTENANCE_STEPS_KEY, Maintenance};
use deltalake_core::DeltaTable;
use deltalake_core::kernel::{DataType, PrimitiveType, StructField};

/// A maintenance job's own error: the lease's, or the vacuum's.
#[derive(Debug)]
#[allow(dead_code, reason = "read through Debug when a test fails")]
enum JobError {
    Lease(LeaseError),
    Delta(deltalake_core::DeltaTableError),
}

impl From<LeaseError> for JobError {
    fn from(err: LeaseError) -> Self {
        JobError::Lease(err)
    }
}

impl From<deltalake_core::DeltaTableError> for JobError {
    fn from(err: deltalake_core::DeltaTableError) -> Self {
        JobError::Delta(err)
    }
}

/// A Delta table on the local disk, created through casaas; returns its
/// commit store.
async fn table() -> (tempfile::TempDir, DeltaTable, Arc<dyn CasStore>) {
    casaas_delta::register();
    let dir = tempfile::tempdir().unwrap();
    let url = url::Url::from_directory_path(dir.path()).unwrap();
    let table = DeltaTable::try_from_url(url)
        .await
        .unwrap()
        .create()
        .with_columns([StructField::new(
            "id",
            DataType::Primitive(PrimitiveType::Long),
            false,
        )])
        .await
        .unwrap();
    let store = casaas_delta::commit_store(&table).await.unwrap();
    (dir, table, store)
}

/// A store whose writes to the maintenance lease are cut off (nothing
/// sent) once `cut` is set: the runner's renewals never arrive.
#[derive(Debug)]
struct CutOff {
    inner: Arc<dyn CasStore>,
    cut: Arc<AtomicBool>,
}

impl CutOff {
    fn refuse(&self, key: &str) -> Result<(), CasError> {
        let lease_key =
            key.starts_with("_casaas/maintenance") && !key.starts_with(MAINTENANCE_STEPS_KEY);
        if self.cut.load(Ordering::SeqCst) && lease_key {
            return Err(CasError::new(ErrorKind::NotSent, "cut off from the store"));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl ForwardingStore for CutOff {
    type Inner = dyn CasStore;

    fn inner(&self) -> &dyn CasStore {
        self.inner.as_ref()
    }
    async fn wrap_create(&self, key: &str, body: Bytes) -> Result<Version, CasError> {
        self.refuse(key)?;
        self.inner.create(key, body).await
    }
    async fn wrap_replace(
        &self,
        key: &str,
        expected: &Version,
        body: Bytes,
    ) -> Result<Version, CasError> {
        self.refuse(key)?;
        self.inner.replace(key, expected, body).await
    }
    async fn wrap_delete(&self, key: &str, expected: &Version) -> Result<(), CasError> {
        self.refuse(key)?;
        self.inner.delete(key, expected).await
    }
    // The same store for the guard: only the lease's writes are cut.
    fn wrap_identity(&self) -> String {
        self.inner.identity()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_resumed_after_a_newer_one_started_is_fenced_out() {
    let (_dir, _table, store) = table().await;
    let cut = Arc::new(AtomicBool::new(false));
    let config = LeaseConfig::from_ttl(Duration::from_secs(2));
    // Runner A's clock runs at a twentieth of real time, far outside the
    // drift bound: it believes its lease long after it expired.
    let slow = Arc::new(DriftingClock::new(Arc::new(SystemClock::new()), 0.05, 0));
    let a = Maintenance::new(
        Arc::new(CutOff {
            inner: store.clone(),
            cut: cut.clone(),
        }),
        "runner-a",
        config.clone(),
    )
    .unwrap()
    .with_clock(slow);
    let b = Maintenance::new(store.clone(), "runner-b", config).unwrap();
    let b_inside = b.clone();

    let (a_token, b_token) = a
        .run("vacuum", WaitOptions::default(), |fence| async move {
            fence.step("list files", Duration::from_millis(100)).await?;
            // A pauses; its renewals are lost. B waits out the lease and
            // starts.
            cut.store(true, Ordering::SeqCst);
            let b_token = b_inside
                .run(
                    "vacuum",
                    WaitOptions::default().with_deadline(Duration::from_secs(30)),
                    |fence| async move {
                        fence.step("list files", Duration::from_millis(100)).await?;
                        Ok::<_, LeaseError>(fence.token())
                    },
                )
                .await?;
            // A resumes: by its clock the lease is still good, and the
            // check passes; the fence refuses it.
            assert!(
                fence
                    .guard()
                    .ensure_held_for(Duration::from_millis(100))
                    .is_ok()
            );
            let err = fence
                .step("delete files", Duration::from_millis(100))
                .await
                .unwrap_err();
            assert!(
                matches!(err, LeaseError::FencedOut { .. }),
                "a stale runner was let act: {err:?}"
            );
            // Reconnected, A's release finds B's lease and gives up at once.
            cut.store(false, Ordering::SeqCst);
            Ok::<_, LeaseError>((fence.token(), b_token))
        })
        .await
        .unwrap();
    assert!(b_token > a_token, "B started later: {b_token} > {a_token}");
    let last = b.last_step().await.unwrap().unwrap();
    assert_eq!((last.owner.as_str(), last.token), ("runner-b", b_token));
}

#[tokio::test]
async fn vacuum_runs_as_the_only_runner_and_its_steps_are_recorded() {
    let (_dir, table, store) = table().await;
    let runner = Maintenance::new(store.clone(), "runner-1", LeaseConfig::default()).unwrap();
    let other = Maintenance::new(store.clone(), "runner-2", LeaseConfig::default()).unwrap();
    let (other_ref, table_ref) = (&other, &table);
    let deleted = runner
        .run("vacuum", WaitOptions::default(), |fence| async move {
            // A second runner cannot start while this one runs.
            let busy = other_ref
                .run(
                    "vacuum",
                    WaitOptions::default().with_deadline(Duration::from_millis(200)),
                    |_| async { Ok::<_, LeaseError>(()) },
                )
                .await
                .unwrap_err();
            assert!(
                matches!(busy, LeaseError::DeadlineExceeded { .. }),
                "{busy:?}"
            );
            fence.step("vacuum", Duration::from_secs(5)).await?;
            // The vacuum's own error has a place: the job's error type.
            let (_, metrics) = table_ref.clone().vacuum().with_dry_run(true).await?;
            Ok::<_, JobError>(metrics.files_deleted)
        })
        .await
        .unwrap();
    assert!(deleted.is_empty(), "a fresh table has nothing to vacuum");
    let last = runner.last_step().await.unwrap().unwrap();
    assert_eq!(
        (last.job.as_str(), last.step.as_str()),
        ("vacuum", "vacuum")
    );
    assert_eq!(last.owner, "runner-1");
    // Released: the other runner starts at once now, with a higher token.
    let token = other
        .run(
            "optimize",
            WaitOptions::default().with_deadline(Duration::from_secs(1)),
            |fence| async move { Ok::<_, LeaseError>(fence.token()) },
        )
        .await
        .unwrap();
    assert!(token > last.token);
}
