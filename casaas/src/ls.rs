//! `casaas ls PREFIX_URL`: every lock under a prefix, read once, nothing
//! written.

use std::time::{Duration, SystemTime};

use casaas_core::CasStore;
use casaas_core::layout::EpochStore;
use casaas_core::lease::{LeaseError, LeaseRecord};
use futures::StreamExt;
use serde::Serialize;

use crate::cli::LsArgs;
use crate::duration::human;
use crate::exit::Failure;
use crate::target;
use crate::time::rfc3339;

/// The sub-prefix the library's store guard keeps its probe objects under;
/// they are not locks, so they are not listed.
const GUARD_PREFIX: &str = ".casaas-guard/";

/// Reads this many objects at once.
const CONCURRENT_READS: usize = 8;

/// One object under the prefix (also the JSON form).
#[derive(Debug, Serialize)]
struct Entry {
    /// The key, relative to the prefix.
    key: String,
    /// `held`, `expired` (its holder's last write plus its TTL is past on
    /// this machine's clock: as far as seen, advisory), `released`, or
    /// `foreign` (not a casaas lock).
    state: &'static str,
    holder: Option<String>,
    token: Option<u64>,
    ttl_ms: Option<u64>,
    /// The holder's wall clock at acquisition (advisory).
    acquired_at: Option<String>,
    /// The holder's wall clock at its last write (advisory).
    renewed_at: Option<String>,
    version: String,
    /// How the lock is laid out: `record` (one object replaced in place) or
    /// `epochs` (the create-only layout; `version` is then its epoch);
    /// none for a foreign object, which is no lock.
    layout: Option<&'static str>,
    /// What a foreign object starts with.
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<String>,
}

/// Runs `casaas ls`.
pub async fn run(args: LsArgs) -> Result<u8, Failure> {
    let prefix = target::parse_prefix(&args.url)?;
    let store = target::open_read_only(&prefix).await?;
    let explain = |e: casaas_core::CasError| Failure::usage(format!("{}: {e}", prefix.display));
    let mut keys = store.list("").await.map_err(explain)?;
    // The epochs and collection markers of a create-only-layout lock are
    // its parts: the lock is listed once, under its own key.
    keys.retain(|entry| {
        !entry.key.starts_with(GUARD_PREFIX) && EpochStore::lock_of(&entry.key).is_none()
    });
    let epochs = EpochStore::new(store.clone());
    keys.sort_by(|a, b| a.key.cmp(&b.key));
    let now = SystemTime::now();
    let reads = futures::stream::iter(keys)
        .map(|listed| {
            let (store, epochs) = (store.clone(), epochs.clone());
            async move {
                let Some(object) = store.get(&listed.key).await? else {
                    return Ok(None);
                };
                if !EpochStore::is_marker(&object.body) {
                    return Ok(Some((listed.key, "record", object)));
                }
                // A create-only-layout lock: its current epoch is its state.
                let head = epochs.get(&listed.key).await?;
                Ok::<_, casaas_core::CasError>(head.map(|o| (listed.key, "epochs", o)))
            }
        })
        .buffered(CONCURRENT_READS)
        .collect::<Vec<_>>()
        .await;
    let mut entries = Vec::new();
    for read in reads {
        // Deleted between the listing and the read: gone, not listed.
        let Some((key, layout, object)) = read.map_err(explain)? else {
            continue;
        };
        let mut entry = entry(key, &object.body, object.version.to_string(), now);
        if entry.layout.is_some() {
            entry.layout = Some(layout);
        }
        entries.push(entry);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&entries).unwrap_or_default()
        );
    } else {
        print!("{}", table(&entries));
    }
    Ok(0)
}

fn entry(key: String, body: &[u8], version: String, now: SystemTime) -> Entry {
    let record = match LeaseRecord::decode(&key, body) {
        Ok(record) => record,
        Err(e) => {
            let found = match e {
                LeaseError::ForeignObject { found, .. } => found,
                other => other.to_string(),
            };
            return Entry {
                key,
                state: "foreign",
                holder: None,
                token: None,
                ttl_ms: None,
                acquired_at: None,
                renewed_at: None,
                version,
                layout: None,
                found: Some(found),
            };
        }
    };
    let state = if record.released {
        "released"
    } else if record.wall_expiry() <= now {
        "expired"
    } else {
        "held"
    };
    Entry {
        key,
        state,
        holder: Some(record.owner.clone()),
        token: Some(record.token),
        ttl_ms: Some(record.ttl_ms),
        acquired_at: Some(rfc3339(record.acquired_at_ms)),
        renewed_at: Some(rfc3339(record.renewed_at_ms)),
        version,
        layout: Some("record"),
        found: None,
    }
}

fn table(entries: &[Entry]) -> String {
    let rows: Vec<[String; 6]> = entries
        .iter()
        .map(|e| {
            let dash = || "-".to_string();
            [
                e.key.clone(),
                e.state.to_string(),
                e.holder
                    .clone()
                    .or_else(|| e.found.as_ref().map(|f| format!("(found {f})")))
                    .unwrap_or_else(dash),
                e.token.map_or_else(dash, |t| t.to_string()),
                e.ttl_ms
                    .map_or_else(dash, |ms| human(Duration::from_millis(ms))),
                e.renewed_at.clone().unwrap_or_else(dash),
            ]
        })
        .collect();
    let header = [
        "KEY",
        "STATE",
        "HOLDER",
        "TOKEN",
        "TTL",
        "WRITTEN (holder's clock)",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header);
    for row in &rows {
        out.push_str(&line(row.each_ref().map(String::as_str)));
    }
    out
}
