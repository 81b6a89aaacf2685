#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Leader election: campaign, observe, resign, and the runner's ordering.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use casaas_core::lease::{
    Election, Leader, Lease, LeaseConfig, LeaseRecord, LostReason, WaitOptions,
};
use casaas_core::testkit::{FaultConfig, FaultyStore};
use casaas_core::{CasStore, MemoryStore};
use tokio_util::sync::CancellationToken;

const KEY: &str = "election/primary";

fn election(store: &Arc<dyn CasStore>, owner: &str) -> Election {
    Election::new(
        Lease::new(
            store.clone(),
            KEY,
            owner,
            LeaseConfig::from_ttl(Duration::from_secs(10)),
        )
        .unwrap(),
    )
}

fn leader(owner: &str, token: u64) -> Option<Leader> {
    Some(Leader::new(owner, token))
}

#[tokio::test(start_paused = true)]
async fn campaign_observe_resign() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let a = election(&store, "a");
    let b = election(&store, "b");
    let mut seen = b.observe();
    assert_eq!(*seen.borrow_and_update(), None);

    let lead_a = a.campaign(Default::default()).await.unwrap();
    assert_eq!(lead_a.token(), 1);
    seen.changed().await.unwrap();
    assert_eq!(*seen.borrow_and_update(), leader("a", 1));

    // b campaigns while a leads: blocked until a resigns.
    let campaign_b = tokio::spawn(async move {
        let l = b.campaign(Default::default()).await.unwrap();
        (b, l)
    });
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!campaign_b.is_finished());
    lead_a.resign().await.unwrap();
    let (b, lead_b) = campaign_b.await.unwrap();
    assert_eq!(lead_b.token(), 2);
    seen.changed().await.unwrap();
    assert_eq!(*seen.borrow_and_update(), leader("b", 2));
    assert_eq!(a.leader().await.unwrap(), leader("b", 2));

    lead_b.resign().await.unwrap();
    seen.changed().await.unwrap();
    assert_eq!(*seen.borrow_and_update(), None);
    drop(b);
}

#[tokio::test(start_paused = true)]
async fn observer_reports_expiry_of_a_crashed_leader() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let record = LeaseRecord::new("crashed", "n", 5, 10_000, 0);
    store.create(KEY, record.encode()).await.unwrap();
    let watcher = election(&store, "w");
    let mut stream = Box::pin(watcher.observe_stream());
    assert_eq!(futures::StreamExt::next(&mut stream).await.unwrap(), None);
    let mut seen = watcher.observe();
    seen.changed().await.unwrap();
    assert_eq!(*seen.borrow_and_update(), leader("crashed", 5));
    let start = tokio::time::Instant::now();
    seen.changed().await.unwrap();
    assert_eq!(*seen.borrow_and_update(), None);
    let after = start.elapsed();
    assert!(after >= Duration::from_millis(10_100), "{after:?}");
    assert!(after <= Duration::from_millis(11_200), "{after:?}");
}

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Started(u64),
    WorkStopped(u64),
    Stopped(LostReason),
    NewLeader(Option<Leader>),
}

fn recorder() -> Arc<Mutex<Vec<Event>>> {
    Arc::default()
}

fn runner(
    election: Election,
    events: &Arc<Mutex<Vec<Event>>>,
) -> casaas_core::lease::ElectionRunner {
    let (e1, e2, e3) = (events.clone(), events.clone(), events.clone());
    election
        .runner()
        .on_started_leading(move |token, cancel| {
            let events = e1.clone();
            async move {
                events.lock().unwrap().push(Event::Started(token));
                cancel.cancelled().await;
                // Cleanup takes a while; the lease must not be released before.
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                events.lock().unwrap().push(Event::WorkStopped(token));
            }
        })
        .on_stopped_leading(move |reason| e2.lock().unwrap().push(Event::Stopped(reason)))
        .on_new_leader(move |l| e3.lock().unwrap().push(Event::NewLeader(l)))
}

fn lifecycle(events: &Arc<Mutex<Vec<Event>>>) -> Vec<Event> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| !matches!(e, Event::NewLeader(_)))
        .cloned()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn runner_stops_work_before_releasing() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let events = recorder();
    let r = runner(election(&store, "a"), &events);
    let health = r.health_check();
    let cancel = CancellationToken::new();
    let run = tokio::spawn(r.run(WaitOptions::default().with_cancel(cancel.clone())));
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(lifecycle(&events), vec![Event::Started(1)]);
    assert!(health.check().is_ok());
    assert!(health.health().unwrap().is_healthy());
    assert!(
        events
            .lock()
            .unwrap()
            .contains(&Event::NewLeader(leader("a", 1)))
    );

    cancel.cancel();
    // While the work cleans up, the lease is still held (not yet released).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let object = store.get(KEY).await.unwrap().unwrap();
    assert!(!LeaseRecord::decode(KEY, &object.body).unwrap().released);
    run.await.unwrap().unwrap();
    assert_eq!(
        lifecycle(&events),
        vec![
            Event::Started(1),
            Event::WorkStopped(1),
            Event::Stopped(LostReason::Released)
        ]
    );
    let object = store.get(KEY).await.unwrap().unwrap();
    let record = LeaseRecord::decode(KEY, &object.body).unwrap();
    assert!(record.released);
    assert_eq!(record.token, 1);
    assert!(health.health().is_none());
}

#[tokio::test(start_paused = true)]
async fn runner_on_loss_stops_work_then_campaigns_again() {
    let faults = FaultyStore::new(MemoryStore::new(), 1, FaultConfig::default());
    let store: Arc<dyn CasStore> = Arc::new(faults.clone());
    let events = recorder();
    let r = runner(election(&store, "a"), &events);
    let health = r.health_check();
    let cancel = CancellationToken::new();
    let run = tokio::spawn(r.run(WaitOptions::default().with_cancel(cancel.clone())));
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Cut the leader off: it steps down at the renew deadline, stops its
    // work, and campaigns again once the store answers.
    faults.set_config(FaultConfig {
        fail_before_apply: 1.0,
        ..FaultConfig::default()
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Renewals are failing but the deadline has not passed: still healthy.
    let h = health.health().unwrap();
    assert!(h.since_last_renewal > Duration::from_secs(6), "{h:?}");
    assert!(health.check().is_ok());
    tokio::time::sleep(Duration::from_secs(5)).await;
    faults.set_config(FaultConfig::default());
    tokio::time::sleep(Duration::from_secs(30)).await;
    cancel.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(
        lifecycle(&events),
        vec![
            Event::Started(1),
            Event::WorkStopped(1),
            Event::Stopped(LostReason::RenewDeadlineExceeded),
            Event::Started(2),
            Event::WorkStopped(2),
            Event::Stopped(LostReason::Released),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn two_runners_never_lead_at_once() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let leading = Arc::new(Mutex::new(Vec::<String>::new()));
    let overlaps = Arc::new(Mutex::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let cancel = CancellationToken::new();
    let mut runs = Vec::new();
    for name in ["a", "b"] {
        let (leading, overlaps, terms) = (leading.clone(), overlaps.clone(), terms.clone());
        let store = store.clone();
        let cancel = cancel.clone();
        runs.push(tokio::spawn(async move {
            // Work that returns resigns and ends the run: run again.
            while !cancel.is_cancelled() {
                let (leading, overlaps, terms) = (leading.clone(), overlaps.clone(), terms.clone());
                election(&store, name)
                    .runner()
                    .on_started_leading(move |token, stop| {
                        let (leading, overlaps, terms) =
                            (leading.clone(), overlaps.clone(), terms.clone());
                        async move {
                            {
                                let mut l = leading.lock().unwrap();
                                if !l.is_empty() {
                                    *overlaps.lock().unwrap() += 1;
                                }
                                l.push(name.to_string());
                                terms.lock().unwrap().push(token);
                            }
                            tokio::select! {
                                () = stop.cancelled() => {}
                                () = tokio::time::sleep(Duration::from_secs(12)) => {}
                            }
                            leading.lock().unwrap().retain(|n| n != name);
                        }
                    })
                    .run(WaitOptions::default().with_cancel(cancel.clone()))
                    .await
                    .unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
    cancel.cancel();
    for r in runs {
        r.await.unwrap();
    }
    assert_eq!(*overlaps.lock().unwrap(), 0);
    let terms = terms.lock().unwrap().clone();
    assert!(terms.len() >= 8, "{terms:?}");
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
}

/// A slow `on_new_leader` (it runs synchronously, as a binding's callback
/// into another language does) must not hold the election's leader watch:
/// the campaign reports its win through that watch, and would wait for the
/// callback, which here waits for the win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_new_leader_callback_does_not_hold_up_the_campaign() {
    let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
    let (started_tx, started_rx) = std::sync::mpsc::channel::<u64>();
    let started_rx = Mutex::new(started_rx);
    let saw_start = Arc::new(Mutex::new(None));
    let seen = saw_start.clone();
    let cancel = CancellationToken::new();
    // "b" leads first, so that the callback's first call is under way
    // when "a" wins.
    let b = election(&store, "b")
        .campaign(WaitOptions::default())
        .await
        .unwrap();
    let runner = election(&store, "a")
        .runner()
        .on_started_leading(move |token, cancel| {
            let started_tx = started_tx.clone();
            async move {
                let _ = started_tx.send(token);
                cancel.cancelled().await;
            }
        })
        .on_new_leader(move |_| {
            // The first call waits (blocking its thread) for the win.
            let mut seen = seen.lock().unwrap();
            if seen.is_none() {
                *seen = Some(
                    started_rx
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(10))
                        .ok(),
                );
            }
        });
    let run = tokio::spawn(runner.run(WaitOptions::default().with_cancel(cancel.clone())));
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.resign().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while saw_start.lock().unwrap().is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(
        *saw_start.lock().unwrap(),
        Some(Some(2)),
        "the campaign's win waited for the new-leader callback"
    );
}
