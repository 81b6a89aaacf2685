//! The two lease layouts side by side on one store (see
//! `casaas_core::layout`): the record layout (one lock object, replaced in
//! place) and the epoch layout (one new object per write, created only if
//! absent). Per held lease-hour: requests by kind, objects left behind and
//! their price; and the lock round trip in each layout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use casaas_core::layout::{
    DEFAULT_COLLECT_BLOCK, DEFAULT_KEEP, EpochStore, LeaseLayout, with_layout,
};
use casaas_core::lease::{Lease, LeaseConfig};
use casaas_core::testkit::{CountingStore, RequestCounts};
use casaas_core::{CasStore, ListEntry};

use crate::cost::{HOURS_PER_MONTH, s3_standard_name, s3_standard_per_month};
use crate::section::{Section, ms};
use crate::stats::percentile;
use crate::targets::{StoreTarget, Targets};

/// How long the lease is held (on paused time).
const HELD: Duration = Duration::from_secs(3600);
/// Hours in a year (12 months of [`HOURS_PER_MONTH`]).
const HOURS_PER_YEAR: f64 = 12.0 * HOURS_PER_MONTH;
/// Where this section's locks live.
const PREFIX: &str = "bench/layouts";
const LAYOUTS: [LeaseLayout; 2] = [LeaseLayout::Record, LeaseLayout::Epochs];
/// Untimed round trips per layout before the timed ones.
const WARMUP: usize = 10;

/// The objects of one lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Objects {
    /// The object at the lock's key: the record (record layout) or the
    /// layout marker (epoch layout).
    pub lock: u64,
    /// Live epochs.
    pub epochs: u64,
    /// Collection markers.
    pub markers: u64,
    /// Anything else under the lock's key (expected none).
    pub other: u64,
}

impl Objects {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.lock + self.epochs + self.markers + self.other
    }

    /// Sorts a listing of the lock at `key` (`list(key)`).
    fn of_listing(key: &str, listed: &[ListEntry]) -> Objects {
        let collected = format!("{key}.collected/");
        let mut objects = Objects::default();
        for entry in listed {
            if entry.key == key {
                objects.lock += 1;
            } else if EpochStore::epoch_of(key, &entry.key).is_some() {
                objects.epochs += 1;
            } else if entry.key.starts_with(&collected) {
                objects.markers += 1;
            } else {
                objects.other += 1;
            }
        }
        objects
    }
}

/// The objects of one lock in the epoch layout whose head is epoch `head`
/// (epochs `1..=head` written), once collection has caught up: the layout
/// marker, one collection marker per block of `block` epochs lying wholly
/// more than `keep` epochs below the head (those blocks deleted), and the
/// epochs above them. `EpochStore`'s rule, as a model to extrapolate with.
pub fn epoch_objects(head: u64, block: u64, keep: u64) -> Objects {
    let (block, keep) = (block.max(1), keep.max(1));
    let markers = head.saturating_sub(keep) / block;
    // Epoch 0 is never written: block 0 holds `block - 1` epochs.
    let first_live = (markers * block).max(1);
    Objects {
        lock: 1,
        epochs: (head + 1).saturating_sub(first_live),
        markers,
        other: 0,
    }
}

/// One layout held for [`HELD`].
#[derive(Debug, Clone)]
pub struct HourRow {
    /// The layout.
    pub layout: LeaseLayout,
    /// Renewals in the hour (replaces the lease asked of the layout).
    pub renewals: u64,
    /// Requests sent to the store in the hour, by kind.
    pub counts: RequestCounts,
    /// The lock's objects at the end of the hour.
    pub objects: Objects,
    /// The lease was still held at the end.
    pub held: bool,
}

impl HourRow {
    /// `count` requests (over the hour) per renewal.
    fn per_renewal(&self, count: u64) -> f64 {
        count as f64 / self.renewals.max(1) as f64
    }

    /// The objects after `hours` of holding, extrapolated: the record
    /// layout keeps its one object; the epoch layout writes one epoch per
    /// renewal (after the acquisition's epoch 1) and collects as
    /// [`epoch_objects`] says.
    fn objects_after(&self, hours: f64) -> Objects {
        match self.layout {
            LeaseLayout::Epochs => {
                let per_hour = self.renewals as f64 * 3600.0 / HELD.as_secs_f64();
                let head = 1 + (per_hour * hours).round() as u64;
                epoch_objects(head, DEFAULT_COLLECT_BLOCK, DEFAULT_KEEP)
            }
            _ => self.objects,
        }
    }
}

/// One layout's round trips on one store.
#[derive(Debug, Clone)]
pub struct RttRow {
    /// The store's short name.
    pub store: String,
    /// The layout.
    pub layout: LeaseLayout,
    /// Acquire + release, ms.
    pub samples: Vec<f64>,
    /// Requests sent over the timed round trips (background collection
    /// included).
    pub counts: RequestCounts,
}

/// The whole measurement.
#[derive(Debug)]
pub struct LayoutsResult {
    /// The lease configuration of both parts.
    pub config: LeaseConfig,
    /// Where the hour was held.
    pub hour_store: String,
    /// Record, then epochs.
    pub hours: Vec<HourRow>,
    /// Timed round trips per layout.
    pub iterations: usize,
    /// Per store: record, then epochs.
    pub rtt: Vec<RttRow>,
}

/// Holds a lease in each layout for an hour of paused time on the file
/// store, then times round trips in both layouts on every store.
pub async fn run(targets: &Targets, iterations: usize) -> Result<Section> {
    let file = targets.store("file").context("no file store")?.clone();
    let hour_store = file.name.clone();
    // Paused time needs a runtime of its own (current-thread, started
    // paused); a thread of its own runs it.
    let holder = std::thread::spawn(move || held_hours(&file));
    let hours = tokio::task::spawn_blocking(move || holder.join())
        .await?
        .map_err(|_| anyhow!("the held-hour thread panicked"))??;
    let mut rtt = Vec::new();
    for target in &targets.stores {
        eprintln!("bench: layouts: round trips on {}", target.name);
        rtt.extend(rtt_rows(target, iterations).await?);
    }
    Ok(LayoutsResult {
        config: LeaseConfig::default(),
        hour_store,
        hours,
        iterations,
        rtt,
    }
    .section())
}

/// [`held_hour`] in both layouts on `target`, on a paused clock: the
/// renewals are real requests, the time between them is skipped (tokio
/// does not skip time while a blocking file operation is running).
fn held_hours(target: &StoreTarget) -> Result<Vec<HourRow>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    runtime.block_on(async {
        let store = target.open().await?;
        let mut rows = Vec::new();
        for layout in LAYOUTS {
            eprintln!(
                "bench: layouts: {} held for {} s of paused time on {}",
                layout.describe(),
                HELD.as_secs(),
                target.name
            );
            rows.push(held_hour(store.clone(), layout).await?);
        }
        Ok(rows)
    })
}

/// What leases in `layout` write through on `store`: the store itself
/// (chosen for the record layout), or the epoch view over it with the
/// default collection settings.
fn view(store: Arc<dyn CasStore>, layout: LeaseLayout) -> Arc<dyn CasStore> {
    match layout {
        LeaseLayout::Epochs => Arc::new(EpochStore::new(store)),
        _ => with_layout(store, layout),
    }
}

/// Acquires a lease (default configuration) in `layout` on `store`, holds
/// it for [`HELD`] and counts the requests of the renewals; lists the
/// lock's objects at the end. Meant for a paused clock.
async fn held_hour(store: Arc<dyn CasStore>, layout: LeaseLayout) -> Result<HourRow> {
    // `sent`: what reaches the store; `asked`: what the lease asks of the
    // layout (its replaces are the renewals).
    let sent = CountingStore::new(store.clone());
    let asked = CountingStore::new(view(Arc::new(sent.clone()), layout));
    let key = format!("{PREFIX}/held-{layout}");
    let lease = Lease::new(
        Arc::new(asked.clone()),
        key.clone(),
        "bench-layouts",
        LeaseConfig::default(),
    )?;
    let guard = lease
        .try_acquire()
        .await?
        .into_result()
        .map_err(|held| anyhow!("{key} is held by {}", held.owner))?;
    sent.reset();
    asked.reset();
    // The hour is (acquisition, acquisition + HELD]: the renewal due at
    // its last instant counts (without the millisecond, whether it ran
    // before this task woke would be up to the timer wheel).
    tokio::time::sleep(HELD + Duration::from_millis(1)).await;
    let counts = sent.counts();
    let renewals = asked.counts().replace;
    let held = guard.is_held();
    let objects = Objects::of_listing(&key, &store.list(&key).await?);
    anyhow::ensure!(
        renewals > 0,
        "{key}: no renewal in {} s (lost: {:?}; requests: {counts:?}; asked: {:?})",
        HELD.as_secs(),
        guard.lost_reason(),
        asked.counts()
    );
    guard.release().await?;
    Ok(HourRow {
        layout,
        renewals,
        counts,
        objects,
        held,
    })
}

/// Interleaved acquire + release round trips (default configuration,
/// uncontended) in both layouts on `target`; one layout view per process,
/// as a service keeps it.
async fn rtt_rows(target: &StoreTarget, iterations: usize) -> Result<Vec<RttRow>> {
    let store = target.open().await?;
    let mut systems = Vec::new();
    for layout in LAYOUTS {
        let sent = CountingStore::new(store.clone());
        let lease = Lease::new(
            view(Arc::new(sent.clone()), layout),
            format!("{PREFIX}/rtt-{layout}"),
            "bench-layouts",
            LeaseConfig::default(),
        )?;
        for _ in 0..WARMUP {
            round_trip(&lease).await?;
        }
        sent.reset();
        systems.push((layout, sent, lease, Vec::with_capacity(iterations)));
    }
    for i in 0..iterations {
        // Alternate which layout goes first.
        for j in 0..systems.len() {
            let (_, _, lease, samples) = &mut systems[(i + j) % 2];
            samples.push(round_trip(lease).await?);
        }
    }
    Ok(systems
        .into_iter()
        .map(|(layout, sent, _, samples)| RttRow {
            store: target.name.clone(),
            layout,
            samples,
            counts: sent.counts(),
        })
        .collect())
}

/// One acquire + release, ms.
async fn round_trip(lease: &Lease) -> Result<f64> {
    let started = Instant::now();
    let guard = lease
        .try_acquire()
        .await?
        .into_result()
        .map_err(|held| anyhow!("{} is held by {}", lease.key(), held.owner))?;
    guard.release().await?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// Counts per round trip, by kind, e.g. `4 GET + 2 PUT create`.
fn by_kind(counts: &RequestCounts, per: f64) -> String {
    let kinds = [
        (counts.get, "GET"),
        (counts.create, "PUT create"),
        (counts.replace, "PUT replace"),
        (counts.delete, "DELETE"),
        (counts.list, "LIST"),
    ];
    let parts: Vec<String> = kinds
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, kind)| format!("{} {kind}", trim(*n as f64 / per)))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(" + ")
    }
}

/// `2` rather than `2.00`; `2.01` when it is not whole.
fn trim(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl LayoutsResult {
    fn hour(&self, layout: LeaseLayout) -> Option<&HourRow> {
        self.hours.iter().find(|h| h.layout == layout)
    }

    /// The section of the report: the held hour, then the round trips.
    fn section(&self) -> Section {
        let mut md = String::from("## Lease layouts\n\n");
        let mut headlines = Vec::new();
        self.hour_requests(&mut md);
        self.hour_objects(&mut md);
        self.hour_comparison(&mut md, &mut headlines);
        self.round_trips(&mut md, &mut headlines);
        md.push('\n');
        Section {
            markdown: md,
            svgs: Vec::new(),
            headlines,
        }
    }

    /// The held lease-hour's requests by kind, per renewal, per layout.
    fn hour_requests(&self, md: &mut String) {
        let ttl = self.config.ttl.as_secs();
        let renew = self.config.renew_interval.as_secs();
        md.push_str(&format!(
            "The record layout (one lock object, replaced in place with a conditional PUT) and the \
             epoch layout (every write creates the next epoch object with create-if-absent, for \
             stores without conditional replace; `casaas_core::layout`, default collection: blocks \
             of {DEFAULT_COLLECT_BLOCK} epochs, the newest {DEFAULT_KEEP} kept) side by side on \
             the same store.\n\n\
             **A held lease-hour.** One lease in each layout, default configuration (TTL {ttl} s, \
             renewed every {renew} s), held for {} s on the {} store with tokio's clock paused: \
             every renewal is a real request on disk, the time between renewals is skipped. \
             Requests sent to the store during the hour, by kind, per renewal (the epoch layout's \
             collection included):\n\n\
             | layout | renewals in the hour | GET | PUT create | PUT replace | DELETE | LIST | requests per renewal |\n\
             |---|---|---|---|---|---|---|---|\n",
            HELD.as_secs(),
            self.hour_store
        ));
        for h in &self.hours {
            let c = &h.counts;
            md.push_str(&format!(
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                h.layout,
                h.renewals,
                h.per_renewal(c.get),
                h.per_renewal(c.create),
                h.per_renewal(c.replace),
                h.per_renewal(c.delete),
                h.per_renewal(c.list),
                h.per_renewal(c.total())
            ));
        }
    }

    /// The objects each layout leaves after the hour and after a year, and
    /// the price of a held lease-month.
    fn hour_objects(&self, md: &mut String) {
        md.push_str(&format!(
            "\nObjects the lock leaves on the store after the hour (listed while still held), the \
             objects after a held lease-year extrapolated from the hour's renewals with the epoch \
             layout's collection rule, and the price of a held lease-month ({HOURS_PER_MONTH:.0} h) \
             of these requests at {} prices (PUT and LIST $ per 1,000 writes, GET per 1,000 reads, \
             DELETE free; see *Cost* below):\n\n\
             | layout | objects after 1 h | of which: lock object / live epochs / collection markers | collection rule after 1 h | objects per lease-year | USD per lease-month |\n\
             |---|---|---|---|---|---|\n",
            s3_standard_name()
        ));
        for h in &self.hours {
            let o = &h.objects;
            let model = h.objects_after(HELD.as_secs_f64() / 3600.0);
            let year = h.objects_after(HOURS_PER_YEAR);
            md.push_str(&format!(
                "| {} | {} | {} / {} / {} | {} | {} | ${:.2} |\n",
                h.layout,
                o.total(),
                o.lock,
                o.epochs,
                o.markers,
                model.total(),
                year.total(),
                s3_standard_per_month(&h.counts)
            ));
        }
    }

    /// The epoch layout against the record layout over the hour, in words
    /// and headlines, when both were held.
    fn hour_comparison(&self, md: &mut String, headlines: &mut Vec<String>) {
        let (Some(record), Some(epochs)) = (
            self.hour(LeaseLayout::Record),
            self.hour(LeaseLayout::Epochs),
        ) else {
            return;
        };
        let (r_month, e_month) = (
            s3_standard_per_month(&record.counts),
            s3_standard_per_month(&epochs.counts),
        );
        let year = epochs.objects_after(HOURS_PER_YEAR);
        md.push_str(&format!(
            "\nA renewal is {:.2} requests in the epoch layout against {:.2} in the record \
             layout; a held lease-month costs ${e_month:.2} against ${r_month:.2} \
             ({:.2}×). The epoch layout keeps at most {} live epochs per lock but one \
             collection marker per {DEFAULT_COLLECT_BLOCK} epochs for ever (a late write \
             into collected history is told by its block's marker): {} objects after a held \
             lease-year ({} markers), against 1. A marker is a few bytes, so their storage is \
             negligible. In the first hour only the collected blocks' epochs were deleted; \
             held longer, every epoch is deleted once, so a renewal tends to 1 GET + 1 PUT \
             create + 1 DELETE (free on S3) + 1/{DEFAULT_COLLECT_BLOCK} of a marker PUT and a \
             LIST, and the price per month stays where it is.{}\n",
            epochs.per_renewal(epochs.counts.total()),
            record.per_renewal(record.counts.total()),
            e_month / r_month,
            DEFAULT_KEEP + 2 * DEFAULT_COLLECT_BLOCK,
            year.total(),
            year.markers,
            if record.held && epochs.held {
                ""
            } else {
                " **A lease was lost during the hour.**"
            }
        ));
        headlines.push(format!(
            "layouts_requests_per_renewal record={:.2} epochs={:.2}",
            record.per_renewal(record.counts.total()),
            epochs.per_renewal(epochs.counts.total())
        ));
        headlines.push(format!(
            "layouts_objects_per_lease_hour record={} epochs={} epochs_per_lease_year={}",
            record.objects.total(),
            epochs.objects.total(),
            year.total()
        ));
        headlines.push(format!(
            "layouts_s3_usd_per_lease_month record={r_month:.2} epochs={e_month:.2}"
        ));
    }

    /// The lock round trip in each layout on each store, with the epoch
    /// layout's ratios to the record layout.
    fn round_trips(&self, md: &mut String, headlines: &mut Vec<String>) {
        md.push_str(&format!(
            "\n**Lock round trip.** Acquire a free lock and release it, {} iterations per layout \
             on each store, interleaved (the order alternates), real time, default configuration; \
             one layout view per process, as a service keeps it. Requests per round trip include \
             the epoch layout's background collection, amortized.\n\n\
             | store | layout | requests per acquire + release | p50 ms | p99 ms | epochs / record p50 | epochs / record p99 |\n\
             |---|---|---|---|---|---|---|\n",
            self.iterations
        ));
        for pair in self.rtt.chunks(2) {
            let [record, epochs] = pair else { continue };
            let (r50, r99) = (
                percentile(&record.samples, 50.0),
                percentile(&record.samples, 99.0),
            );
            let (e50, e99) = (
                percentile(&epochs.samples, 50.0),
                percentile(&epochs.samples, 99.0),
            );
            for (row, p50, p99, ratios) in [
                (record, r50, r99, String::from("| |")),
                (
                    epochs,
                    e50,
                    e99,
                    format!("{:.2} | {:.2} |", e50 / r50, e99 / r99),
                ),
            ] {
                md.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {ratios}\n",
                    row.store,
                    row.layout,
                    by_kind(&row.counts, row.samples.len() as f64),
                    ms(p50),
                    ms(p99)
                ));
            }
            headlines.push(format!(
                "layouts_lock_rtt_{}_epochs_vs_record p50={:.2} p99={:.2}",
                record.store,
                e50 / r50,
                e99 / r99
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use casaas_core::MemoryStore;

    #[test]
    fn the_collection_rule() {
        let o = |head| epoch_objects(head, 256, 32);
        assert_eq!(
            o(0),
            Objects {
                lock: 1,
                ..Objects::default()
            }
        );
        // Nothing collected until a whole block lies 32 below the head.
        assert_eq!((o(287).epochs, o(287).markers), (287, 0));
        assert_eq!((o(288).epochs, o(288).markers), (33, 1));
        // An hour at the default TTL: epoch 1 + 720 renewals.
        assert_eq!(
            (o(721).epochs, o(721).markers, o(721).total()),
            (210, 2, 213)
        );
        // Live epochs stay bounded; markers grow with the writes.
        let year = o(1 + 720 * 8760);
        assert!(year.epochs > 32 && year.epochs <= 32 + 256, "{year:?}");
        assert_eq!(year.markers, (720 * 8760 + 1 - 32) / 256);
    }

    #[test]
    fn the_extrapolation_scales_the_hour() {
        let row = |layout, objects| HourRow {
            layout,
            renewals: 720,
            counts: RequestCounts::default(),
            objects,
            held: true,
        };
        let record = row(
            LeaseLayout::Record,
            Objects {
                lock: 1,
                ..Objects::default()
            },
        );
        assert_eq!(record.objects_after(HOURS_PER_YEAR).total(), 1);
        let epochs = row(LeaseLayout::Epochs, Objects::default());
        assert_eq!(epochs.objects_after(1.0).total(), 213);
        assert_eq!(
            epochs.objects_after(HOURS_PER_YEAR),
            epoch_objects(1 + 720 * 8760, DEFAULT_COLLECT_BLOCK, DEFAULT_KEEP)
        );
    }

    #[test]
    fn a_record_lease_month_is_the_cost_tables() {
        let hour = RequestCounts {
            replace: 720,
            ..RequestCounts::default()
        };
        assert!((s3_standard_per_month(&hour) - 2.628).abs() < 1e-9);
        // DELETE is free; LIST is a write; GET a read.
        let other = RequestCounts {
            delete: 1000,
            list: 1000,
            get: 1000,
            ..RequestCounts::default()
        };
        assert!((s3_standard_per_month(&other) - (0.005 + 0.0004) * 730.0).abs() < 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_hour_on_paused_time_matches_the_rule() {
        let store: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
        let record = held_hour(store.clone(), LeaseLayout::Record).await.unwrap();
        let interval = LeaseConfig::default().renew_interval;
        let expected = HELD.as_secs() / interval.as_secs();
        assert!(record.held);
        assert!(record.renewals.abs_diff(expected) <= 1, "{record:?}");
        assert_eq!(record.counts.total(), record.renewals, "{record:?}");
        assert_eq!(
            record.objects,
            Objects {
                lock: 1,
                ..Objects::default()
            }
        );
        let epochs = held_hour(store, LeaseLayout::Epochs).await.unwrap();
        assert!(epochs.held);
        assert_eq!(
            epochs.counts.create - epochs.objects.markers,
            epochs.renewals
        );
        assert_eq!(epochs.objects, epochs.objects_after(1.0), "{epochs:?}");
    }
}
