#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Lease protocol tests on the in-memory store (paused tokio time) and on
//! the file store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use casaas_core::lease::{
    AcquireOutcome, Clock, DriftingClock, Entropy, LEASE_SCHEMA_VERSION, Lease, LeaseConfig,
    LeaseError, LeaseRecord, LostReason, SystemClock, WaitOptions,
};
use casaas_core::testkit::{Fault, FaultConfig, FaultyStore};
use casaas_core::{CasStore, ErrorKind, FileStore, ForwardingStore, MemoryStore};

const KEY: &str = "locks/leader";

fn config() -> LeaseConfig {
    LeaseConfig::from_ttl(Duration::from_secs(10))
}

fn lease(store: &Arc<dyn CasStore>, owner: &str) -> Lease {
    Lease::new(store.clone(), KEY, owner, config())
        .unwrap()
        .with_entropy(Entropy::seeded(
            owner.len() as u64 + owner.as_bytes()[0] as u64,
        ))
}

async fn stored(store: &dyn CasStore) -> LeaseRecord {
    let object = store.get(KEY).await.unwrap().unwrap();
    LeaseRecord::decode(KEY, &object.body).unwrap()
}

fn acquired(outcome: AcquireOutcome) -> casaas_core::lease::LeaseGuard {
    match outcome {
        AcquireOutcome::Acquired(g) => g,
        AcquireOutcome::Held(h) => panic!("expected to acquire, held by {h:?}"),
        other => panic!("unexpected outcome {other:?}"),
    }
}

/// Writes a record as a holder that then crashes (never renews).
async fn crashed_holder(store: &dyn CasStore, token: u64) {
    let record = LeaseRecord::new("crashed", "feedface", token, 10_000, 0);
    store.create(KEY, record.encode()).await.unwrap();
}

async fn lifecycle(store: Arc<dyn CasStore>) {
    let a = lease(&store, "a");
    let guard = a.acquire(WaitOptions::default()).await.unwrap();
    assert_eq!(guard.token(), 1);
    let first_version = guard.version();
    assert!(guard.remaining() > Duration::from_secs(9));

    // Renewals keep it alive well past the TTL.
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert!(guard.is_held(), "{:?}", guard.lost_reason());
    assert_ne!(guard.version(), first_version);
    assert!(guard.health().is_healthy());
    let record = stored(store.as_ref()).await;
    assert_eq!(
        (record.owner.as_str(), record.token, record.released),
        ("a", 1, false)
    );

    // Someone else cannot take it while it is renewed.
    let b = lease(&store, "b");
    let err = b
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(25)))
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::DeadlineExceeded(_)), "{err:?}");

    // Release keeps the token; the next holder gets token + 1 at once.
    guard.release().await.unwrap();
    let record = stored(store.as_ref()).await;
    assert!(record.released);
    assert_eq!(record.token, 1);
    let guard = acquired(b.try_acquire().await.unwrap());
    assert_eq!(guard.token(), 2);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn acquire_renew_release_memory() {
    lifecycle(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(start_paused = true)]
async fn acquire_renew_release_file() {
    let dir = tempfile::tempdir().unwrap();
    lifecycle(Arc::new(FileStore::open(dir.path()).await.unwrap())).await;
}

async fn takeover(store: Arc<dyn CasStore>) {
    crashed_holder(store.as_ref(), 41).await;
    let b = lease(&store, "b");
    let AcquireOutcome::Held(held) = b.try_acquire().await.unwrap() else {
        panic!("took over at once")
    };
    assert_eq!((held.owner.as_str(), held.token), ("crashed", 41));
    // TTL plus 1% drift margin, measured from the first observation.
    assert_eq!(held.takeover_in, Duration::from_millis(10_100));

    tokio::time::sleep(Duration::from_secs(10)).await;
    let AcquireOutcome::Held(held) = b.try_acquire().await.unwrap() else {
        panic!("took over before the TTL plus drift margin")
    };
    assert!(held.takeover_in <= Duration::from_millis(100));

    tokio::time::sleep(Duration::from_millis(100)).await;
    let guard = acquired(b.try_acquire().await.unwrap());
    assert_eq!(guard.token(), 42);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn takeover_only_after_ttl_observed_memory() {
    takeover(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(start_paused = true)]
async fn takeover_only_after_ttl_observed_file() {
    let dir = tempfile::tempdir().unwrap();
    takeover(Arc::new(FileStore::open(dir.path()).await.unwrap())).await;
}

#[tokio::test(start_paused = true)]
async fn blocking_acquire_waits_for_expiry_and_can_be_cancelled() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    crashed_holder(store.as_ref(), 1).await;
    let b = lease(&store, "b");
    let cancel = tokio_util::sync::CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        canceller.cancel();
    });
    let err = b
        .acquire(WaitOptions::default().with_cancel(cancel))
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Cancelled));

    let start = tokio::time::Instant::now();
    let guard = b.acquire(WaitOptions::default()).await.unwrap();
    // The observation started at the first read, 3 s before.
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(7_100), "{waited:?}");
    assert!(waited < Duration::from_millis(8_500), "{waited:?}");
    assert_eq!(guard.token(), 2);
}

#[tokio::test(start_paused = true)]
async fn tokens_strictly_increase_across_acquisitions() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let owners = [lease(&store, "a"), lease(&store, "b"), lease(&store, "c")];
    let mut last = 0;
    for round in 0..12 {
        let l = &owners[round % 3];
        let guard = l.acquire(WaitOptions::default()).await.unwrap();
        assert!(guard.token() > last, "{} after {last}", guard.token());
        last = guard.token();
        if round % 4 == 3 {
            // Abandon without release: the next one waits for expiry.
            drop(guard);
            tokio::time::sleep(Duration::from_millis(1)).await;
            // Dropping releases in the background when a runtime is present.
            assert!(stored(store.as_ref()).await.released);
        } else {
            guard.release().await.unwrap();
        }
    }
    assert_eq!(last, 12);
}

#[tokio::test(start_paused = true)]
async fn foreign_object_is_never_overwritten() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let body = Bytes::from_static(b"{\"terraform\":\"state lock\"}\n\x01\x02");
    let version = store.create(KEY, body.clone()).await.unwrap();
    let a = lease(&store, "a");
    match a.try_acquire().await.unwrap_err() {
        LeaseError::ForeignObject { key, found } => {
            assert_eq!(key, KEY);
            assert!(found.starts_with("\"{\\\"terraform\\\""), "{found}");
            assert!(found.ends_with("..\""), "{found}");
        }
        other => panic!("{other:?}"),
    }
    let err = a
        .acquire(WaitOptions::default().with_deadline(Duration::from_secs(60)))
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::ForeignObject { .. }), "{err:?}");
    assert!(err.to_string().contains("not a casaas record"));
    let after = store.get(KEY).await.unwrap().unwrap();
    assert_eq!((after.body, after.version), (body, version));
}

#[tokio::test(start_paused = true)]
async fn future_schema_is_rejected_and_untouched() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let mut value = serde_json::to_value(LeaseRecord::new("future", "n", 9, 10_000, 0)).unwrap();
    value["schema"] = (LEASE_SCHEMA_VERSION + 1).into();
    value["released"] = true.into();
    let body = Bytes::from(serde_json::to_vec(&value).unwrap());
    store.create(KEY, body.clone()).await.unwrap();
    let err = lease(&store, "a").try_acquire().await.unwrap_err();
    assert!(
        matches!(err, LeaseError::UnsupportedSchema { ref key, version } if key == KEY && version == LEASE_SCHEMA_VERSION + 1),
        "{err:?}"
    );
    assert_eq!(store.get(KEY).await.unwrap().unwrap().body, body);
}

/// A fault-injecting store that has passed the store guard, so that
/// injected faults meet the protocol's requests only.
async fn faulty() -> (FaultyStore<MemoryStore>, Arc<dyn CasStore>) {
    let store = FaultyStore::new(MemoryStore::new(), 5, FaultConfig::default());
    let dyn_store: Arc<dyn CasStore> = Arc::new(store.clone());
    casaas_core::testkit::pass_store_guard(dyn_store.as_ref())
        .await
        .unwrap();
    (store, dyn_store)
}

/// Lets the next request (the read) through, then injects `fault` into the write.
fn on_write(store: &FaultyStore<MemoryStore>, fault: Fault) {
    store.inject(Fault::Delay(Duration::ZERO));
    store.inject(fault);
}

#[tokio::test(start_paused = true)]
async fn ambiguous_create_that_landed_is_ours() {
    for fault in [Fault::LoseResponse, Fault::Duplicate] {
        let (faults, store) = faulty().await;
        on_write(&faults, fault);
        let guard = acquired(lease(&store, "a").try_acquire().await.unwrap());
        assert_eq!(guard.token(), 1, "{fault:?}");
        let record = stored(faults.inner()).await;
        assert_eq!(record.owner, "a");
        // The guard tracks the version that is really stored.
        assert_eq!(
            faults.inner().get(KEY).await.unwrap().unwrap().version,
            guard.version()
        );
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(guard.is_held(), "{fault:?}: {:?}", guard.lost_reason());
        guard.release().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn ambiguous_create_that_did_not_land_is_retried() {
    let (faults, store) = faulty().await;
    on_write(&faults, Fault::ServerErrorNotApplied);
    let a = lease(&store, "a");
    let err = a.try_acquire().await.unwrap_err();
    assert_eq!(err.store_kind(), Some(ErrorKind::Ambiguous));
    assert!(faults.inner().get(KEY).await.unwrap().is_none());
    on_write(&faults, Fault::ServerErrorNotApplied);
    let guard = a.acquire(WaitOptions::default()).await.unwrap();
    assert_eq!(guard.token(), 1);
    assert_eq!(faults.counts().server_errors, 2);
}

#[tokio::test(start_paused = true)]
async fn ambiguous_takeover_and_renewal_resolve_by_nonce() {
    let (faults, store) = faulty().await;
    crashed_holder(faults.inner(), 7).await;
    let b = lease(&store, "b");
    assert!(matches!(
        b.try_acquire().await.unwrap(),
        AcquireOutcome::Held(_)
    ));
    tokio::time::sleep(Duration::from_secs(11)).await;
    on_write(&faults, Fault::LoseResponse);
    let guard = acquired(b.try_acquire().await.unwrap());
    assert_eq!(guard.token(), 8);

    // The next renewal's response is lost, then the one after is duplicated.
    faults.inject(Fault::LoseResponse);
    tokio::time::sleep(Duration::from_secs(4)).await;
    faults.inject(Fault::Duplicate);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(guard.is_held(), "{:?}", guard.lost_reason());
    assert_eq!(faults.counts().lost_responses, 2);
    assert_eq!(faults.counts().duplicated, 1);
    assert_eq!(
        faults.inner().get(KEY).await.unwrap().unwrap().version,
        guard.version()
    );
    guard.release().await.unwrap();
    assert!(stored(faults.inner()).await.released);
}

#[tokio::test(start_paused = true)]
async fn renewal_precondition_failure_is_lost_at_once() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let guard = lease(&store, "a")
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    let cancel = guard.cancellation();
    let current = store.get(KEY).await.unwrap().unwrap();
    let intruder = LeaseRecord::new("intruder", "0bad", 2, 10_000, 0);
    store
        .replace(KEY, &current.version, intruder.encode())
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    let reason = guard.lost().await;
    // At the next renewal (timers have millisecond granularity).
    assert!(start.elapsed() <= config().renew_interval + Duration::from_millis(2));
    assert_eq!(
        reason,
        LostReason::Superseded {
            owner: Some("intruder".into()),
            token: Some(2)
        }
    );
    assert!(cancel.is_cancelled());
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(matches!(
        guard.ensure_held_for(Duration::ZERO),
        Err(LeaseError::Lost(LostReason::Superseded { .. }))
    ));
    assert!(matches!(
        guard.release().await,
        Err(LeaseError::Lost(LostReason::Superseded { .. }))
    ));
    // Our release did not touch the intruder's record.
    assert_eq!(stored(store.as_ref()).await.owner, "intruder");
}

#[tokio::test(start_paused = true)]
async fn steps_down_before_validity_ends_when_renewals_fail() {
    for fault in [
        FaultConfig {
            fail_before_apply: 1.0,
            ..FaultConfig::default()
        },
        FaultConfig {
            server_error: 1.0,
            ..FaultConfig::default()
        },
        FaultConfig {
            // Every request hangs past the request timeout.
            delay: 1.0,
            max_delay: Duration::from_secs(3_600),
            ..FaultConfig::default()
        },
    ] {
        let (faults, store) = faulty().await;
        let a = lease(&store, "a");
        let start = tokio::time::Instant::now();
        let guard = a.acquire(WaitOptions::default()).await.unwrap();
        faults.set_config(fault.clone());
        let mut status = guard.subscribe();
        let reason = guard.lost().await;
        let stepped_down = start.elapsed();
        assert_eq!(reason, LostReason::RenewDeadlineExceeded, "{fault:?}");
        // The renew deadline (6.67 s) is before the validity ends (9.4 s).
        assert!(stepped_down >= config().renew_deadline, "{stepped_down:?}");
        assert!(
            stepped_down < config().holder_validity(),
            "{stepped_down:?}"
        );
        assert!(status.has_changed().unwrap());
        assert!(matches!(
            *status.borrow_and_update(),
            casaas_core::lease::LeaseStatus::Lost(LostReason::RenewDeadlineExceeded)
        ));
        assert!(!guard.health().is_healthy());
        // A contender still waits for the full TTL it observes.
        faults.set_config(FaultConfig::default());
        let b = lease(&store, "b");
        assert!(matches!(
            b.try_acquire().await.unwrap(),
            AcquireOutcome::Held(_)
        ));
    }
}

#[tokio::test(start_paused = true)]
async fn throttled_renewals_are_retried() {
    let (faults, store) = faulty().await;
    let guard = lease(&store, "a")
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    for _ in 0..2 {
        faults.inject(Fault::Throttle);
    }
    faults.inject(Fault::FailBeforeApply);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(guard.is_held(), "{:?}", guard.lost_reason());
    assert_eq!(faults.counts().throttled, 2);
}

#[tokio::test(start_paused = true)]
async fn ensure_held_for_reports_remaining_validity() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let guard = lease(&store, "a")
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    guard.ensure_held_for(Duration::from_secs(9)).unwrap();
    match guard.ensure_held_for(Duration::from_secs(10)) {
        Err(LeaseError::InsufficientValidity {
            remaining,
            required,
        }) => {
            assert_eq!(remaining, Duration::from_millis(9_400));
            assert_eq!(required, Duration::from_secs(10));
        }
        other => panic!("{other:?}"),
    }
    // Validity is counted from the send time of the last renewal.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let expected =
        Duration::from_secs(10) / 3 + Duration::from_millis(9_400) - Duration::from_secs(4);
    let remaining = guard.remaining();
    // Timers have millisecond granularity.
    assert!(
        remaining.abs_diff(expected) <= Duration::from_millis(2),
        "{remaining:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_configuration_names_the_number() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let mut c = config();
    c.renew_deadline = Duration::from_secs(10);
    let err = Lease::new(store.clone(), KEY, "a", c).unwrap_err();
    assert!(err.to_string().contains("renew_deadline"), "{err}");
    let slow: Arc<dyn CasStore> = Arc::new(SlowStore(MemoryStore::new()));
    let err = Lease::new(slow, KEY, "a", config()).unwrap_err();
    assert!(err.to_string().contains("renew_interval"), "{err}");
    assert!(Lease::new(store, "/bad", "a", config()).is_err());
}

/// A store that asks for at most one write per 5 s per key.
#[derive(Debug)]
struct SlowStore(MemoryStore);

impl ForwardingStore for SlowStore {
    type Inner = MemoryStore;
    fn inner(&self) -> &MemoryStore {
        &self.0
    }
    fn wrap_capabilities(&self) -> casaas_core::Capabilities {
        casaas_core::Capabilities::full().with_min_write_interval(Duration::from_secs(5))
    }
    fn wrap_describe(&self) -> String {
        "slow".into()
    }
}

#[tokio::test(start_paused = true)]
async fn wall_clock_mode_takes_over_by_record_expiry() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    // A record whose wall-clock expiry is long past.
    crashed_holder(store.as_ref(), 3).await;
    let mut c = config();
    c.expiry = casaas_core::lease::ExpiryMode::WallClock {
        max_skew: Duration::from_secs(1),
    };
    let b = Lease::new(store.clone(), KEY, "b", c).unwrap();
    let guard = acquired(b.try_acquire().await.unwrap());
    assert_eq!(guard.token(), 4);
}

#[tokio::test(start_paused = true)]
async fn deleted_lock_object_is_lost() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let guard = lease(&store, "a")
        .acquire(WaitOptions::default())
        .await
        .unwrap();
    store.delete(KEY, &guard.version()).await.unwrap();
    assert_eq!(guard.lost().await, LostReason::Deleted);
}

/// Three contenders with clocks drifting within `rates`, each behind its
/// own faulty connection to one store (requests dropped, delayed,
/// duplicated, throttled), sometimes cut off entirely while holding: at no
/// instant do two of them consider themselves holders.
async fn exclusion(seed: u64, rates: [f64; 3]) -> Result<(), String> {
    let memory = MemoryStore::new();
    let base: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let slots: Vec<Arc<Mutex<Option<casaas_core::lease::LeaseGuard>>>> =
        (0..3).map(|_| Arc::default()).collect();
    let acquisitions = Arc::new(Mutex::new(Vec::new()));
    let noisy = FaultConfig::uniform(0.05, Duration::from_millis(1_500));
    let mut tasks = Vec::new();
    let mut connections = Vec::new();
    for (i, rate) in rates.into_iter().enumerate() {
        let connection =
            FaultyStore::new(memory.clone(), seed * 10 + i as u64, FaultConfig::default());
        // The store guard first (once for all three: one store), so that
        // the faults below meet the protocol's requests.
        casaas_core::testkit::pass_store_guard(&connection)
            .await
            .unwrap();
        connection.set_config(noisy.clone());
        connections.push(connection.clone());
        let clock: Arc<dyn Clock> = Arc::new(DriftingClock::new(base.clone(), rate, 0));
        // Polled at the retry period, the schedule these seeds were chosen
        // for (every seed loses some write responses); a faster poll only
        // adds reads, which cannot lose a write's answer.
        let polled = config().with_poll_period(config().retry_period);
        let l = Lease::new(Arc::new(connection.clone()), KEY, format!("c{i}"), polled)
            .unwrap()
            .with_clock(clock.clone())
            .with_entropy(Entropy::seeded(seed * 10 + i as u64));
        let slot = slots[i].clone();
        let acquisitions = acquisitions.clone();
        let noisy = noisy.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0u64.. {
                let Ok(guard) = l.acquire(WaitOptions::default()).await else {
                    continue;
                };
                acquisitions.lock().unwrap().push(guard.token());
                let lost = guard.lost();
                *slot.lock().unwrap() = Some(guard);
                let hold = Duration::from_millis(
                    1_000 + (round * 7_919 + seed * 31 + i as u64 * 104_729) % 12_000,
                );
                tokio::select! {
                    () = clock.sleep(hold) => {}
                    _ = lost => {}
                }
                if (round + i as u64) % 2 == 1 {
                    // Cut off while holding: it must step down on its own
                    // before anyone else may take over.
                    connection.set_config(FaultConfig {
                        fail_before_apply: 1.0,
                        ..FaultConfig::default()
                    });
                    let lost = slot.lock().unwrap().as_ref().unwrap().lost();
                    lost.await;
                    clock.sleep(Duration::from_secs(5)).await;
                    connection.set_config(noisy.clone());
                }
                let guard = slot.lock().unwrap().take().unwrap();
                let _ = guard.release().await;
                clock.sleep(Duration::from_millis(500)).await;
            }
        }));
    }
    let mut held_samples = 0;
    for _ in 0..20_000 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let holders: Vec<_> = slots
            .iter()
            .filter_map(|s| {
                s.lock()
                    .unwrap()
                    .as_ref()
                    .filter(|g| g.is_held())
                    .map(|g| (g.owner().to_string(), g.token()))
            })
            .collect();
        if holders.len() > 1 {
            for task in tasks {
                task.abort();
            }
            return Err(format!("seed {seed}: two holders at once: {holders:?}"));
        }
        held_samples += holders.len();
    }
    for task in tasks {
        task.abort();
    }
    let tokens = acquisitions.lock().unwrap().clone();
    assert!(tokens.len() >= 5, "{tokens:?}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(held_samples > 8_000, "seed {seed}: {held_samples}");
    let lost_responses: u64 = connections.iter().map(|c| c.counts().lost_responses).sum();
    assert!(
        lost_responses > 0,
        "seed {seed}: {:?} {tokens:?}",
        connections.iter().map(|c| c.counts()).collect::<Vec<_>>()
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn mutual_exclusion_under_faults_and_drift() {
    for seed in 0..4 {
        // Each clock within the 1% drift bound of real time, at the bound.
        exclusion(seed, [0.99, 1.0, 1.01]).await.unwrap();
        exclusion(seed + 100, [1.01, 0.99, 1.0]).await.unwrap();
    }
}

/// The check above has teeth: with clocks drifting far beyond the declared
/// bound (a 30% slow holder, a 40% fast contender), it catches an overlap.
#[tokio::test(start_paused = true)]
async fn drift_beyond_the_bound_breaks_exclusion() {
    let mut violations = 0;
    for seed in 0..4 {
        if exclusion(seed, [0.7, 1.0, 1.4]).await.is_err() {
            violations += 1;
        }
    }
    assert!(violations > 0);
}

/// What each operation costs in requests (documented in docs/protocol.md).
#[tokio::test(start_paused = true)]
async fn request_costs() {
    let counting = casaas_core::testkit::CountingStore::new(MemoryStore::new());
    let store: Arc<dyn CasStore> = Arc::new(counting.clone());
    casaas_core::testkit::pass_store_guard(store.as_ref())
        .await
        .unwrap();
    counting.reset();
    let a = lease(&store, "a");
    let guard = acquired(a.try_acquire().await.unwrap());
    let c = counting.counts();
    assert_eq!((c.get, c.create, c.total()), (1, 1, 2), "acquire free");

    // One replace per renew interval (10 s / 3), nothing else.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let c = counting.counts();
    assert_eq!((c.replace, c.total()), (18, 20), "renew");

    guard.release().await.unwrap();
    assert_eq!(counting.counts().replace, 19, "release = 1 write");

    // Acquiring a released lease: 1 GET + 1 replace.
    let b = lease(&store, "b");
    let before = counting.counts();
    let guard = acquired(b.try_acquire().await.unwrap());
    let c = counting.counts();
    assert_eq!((c.get - before.get, c.replace - before.replace), (1, 1));
    guard.abandon();

    // Waiting out a crashed holder: one GET per poll period (100 ms plus up
    // to 20 ms of jitter) until the TTL plus drift margin (10.1 s) has been
    // observed, then one replace. `a`
    // released last time, so it first tries a replace from its release's
    // version, refused since b wrote: one more write.
    let before = counting.counts();
    let guard = a.acquire(WaitOptions::default()).await.unwrap();
    let c = counting.counts();
    let gets = c.get - before.get;
    assert!((85..=103).contains(&gets), "{gets}");
    assert_eq!(c.replace - before.replace, 2);
    assert_eq!(guard.token(), 3);
}

/// The store as a holder sees it until it "crashes": once armed, the next
/// write that succeeds is its last, and every later call hangs, as a killed
/// process's would.
#[derive(Debug)]
struct MortalStore {
    inner: Arc<dyn CasStore>,
    armed: std::sync::atomic::AtomicBool,
    died_at: Mutex<Option<tokio::time::Instant>>,
}

impl MortalStore {
    async fn alive(&self) {
        if self.died_at.lock().unwrap().is_some() {
            std::future::pending::<()>().await;
        }
    }

    fn wrote(&self) {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            let mut died = self.died_at.lock().unwrap();
            died.get_or_insert_with(tokio::time::Instant::now);
        }
    }
}

#[async_trait::async_trait]
impl ForwardingStore for MortalStore {
    type Inner = dyn CasStore;
    fn inner(&self) -> &dyn CasStore {
        &self.inner
    }
    async fn wrap_get(
        &self,
        key: &str,
    ) -> Result<Option<casaas_core::StoredObject>, casaas_core::CasError> {
        self.alive().await;
        self.inner.get(key).await
    }
    async fn wrap_create(
        &self,
        key: &str,
        body: Bytes,
    ) -> Result<casaas_core::Version, casaas_core::CasError> {
        self.alive().await;
        let version = self.inner.create(key, body).await?;
        self.wrote();
        Ok(version)
    }
    async fn wrap_replace(
        &self,
        key: &str,
        expected: &casaas_core::Version,
        body: Bytes,
    ) -> Result<casaas_core::Version, casaas_core::CasError> {
        self.alive().await;
        let version = self.inner.replace(key, expected, body).await?;
        self.wrote();
        Ok(version)
    }
    async fn wrap_delete(
        &self,
        key: &str,
        expected: &casaas_core::Version,
    ) -> Result<(), casaas_core::CasError> {
        self.alive().await;
        self.inner.delete(key, expected).await
    }
    async fn wrap_list(
        &self,
        prefix: &str,
    ) -> Result<Vec<casaas_core::ListEntry>, casaas_core::CasError> {
        self.alive().await;
        self.inner.list(prefix).await
    }
    fn wrap_describe(&self) -> String {
        "mortal".into()
    }
}

/// A contender waiting in `acquire` holds the lease within
/// `LeaseConfig::failover_bound` of its holder's crash, including the worst
/// case: a crash right after a renewal, at every phase of the contender's
/// polls. Requests take no time here (paused clock, memory store), so the
/// bound is `takeover_wait + poll_period + 2·poll_jitter`.
#[tokio::test(start_paused = true)]
async fn a_waiting_contender_takes_over_within_the_failover_bound() {
    let ttl = Duration::from_secs(2);
    let config = LeaseConfig::from_ttl(ttl);
    let bound = config.failover_bound(Duration::ZERO, Duration::ZERO);
    let mut longest = Duration::ZERO;
    for trial in 0..40u64 {
        let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
        let holder_store = Arc::new(MortalStore {
            inner: store.clone(),
            armed: Default::default(),
            died_at: Mutex::new(None),
        });
        let holder = Lease::new(holder_store.clone(), KEY, "holder", config.clone())
            .unwrap()
            .with_entropy(Entropy::seeded(1000 + trial));
        let guard = holder.acquire(WaitOptions::default()).await.unwrap();
        let contender = Lease::new(store.clone(), KEY, "contender", config.clone())
            .unwrap()
            .with_entropy(Entropy::seeded(trial));
        let waiting = tokio::spawn(async move {
            let guard = contender.acquire(WaitOptions::default()).await.unwrap();
            (guard, tokio::time::Instant::now())
        });
        // Spread the crash over the phases of the contender's polls, then
        // die right after the next renewal.
        tokio::time::sleep(Duration::from_millis(1000 + trial * 37)).await;
        holder_store
            .armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (taken, held_at) = waiting.await.unwrap();
        let died_at = holder_store.died_at.lock().unwrap().unwrap();
        let failover = held_at.duration_since(died_at);
        assert!(
            failover <= bound,
            "trial {trial}: took over {failover:?} after the crash, bound {bound:?}"
        );
        assert!(taken.token() > guard.token());
        longest = longest.max(failover);
        std::mem::forget(guard);
    }
    // The worst cases were reached, and they need the jitter terms: the
    // longest failover is past `takeover_wait + poll_period`.
    eprintln!("longest failover {longest:?} of a {bound:?} bound");
    assert!(
        longest > config.takeover_wait(ttl) + config.poll_period,
        "longest failover {longest:?}"
    );
}
