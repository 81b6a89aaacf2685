//! `casaas ls PREFIX_URL`: every lock under a prefix, read once, nothing
//! written.

use std::time::{Duration, SystemTime};

use casaas_core::CasStore;
use casaas_core::layout::EpochStore;
use casaas_core::lease::{LeaseError, LeaseRecord, SessionRef};
use futures::StreamExt;
use serde::Serialize;

use crate::cli::LsArgs;
use crate::duration::human;
use crate::exit::Failure;
use crate::sessions::{self, Heartbeat, Places, SessionState};
use crate::target;
use crate::time::rfc3339;

/// The sub-prefix the library's store guard keeps its probe objects under;
/// they are not locks, so they are not listed.
const GUARD_PREFIX: &str = ".casaas-guard/";

/// What follows a lock's key to name the folder of its fair-mode queue
/// tickets (`KEY.queue/` and twenty digits: casaas-core's `FairLease`).
const QUEUE_SUFFIX: &str = ".queue/";

/// The lock a fair-mode queue ticket waits for, if `key` is a ticket.
fn ticket_of(key: &str) -> Option<&str> {
    let (lock, number) = key.rsplit_once(QUEUE_SUFFIX)?;
    (!lock.is_empty() && number.len() == 20 && number.bytes().all(|b| b.is_ascii_digit()))
        .then_some(lock)
}

/// Reads this many objects at once.
const CONCURRENT_READS: usize = 8;

/// One object under the prefix (also the JSON form).
#[derive(Debug, Serialize)]
struct Entry {
    /// The key, relative to the prefix.
    key: String,
    /// `held`, `waiting` (a fair-mode queue ticket whose waiter is live:
    /// a waiter, not a holder), `expired` (its holder's last write plus its TTL is past on
    /// this machine's clock: as far as seen, advisory; for a lock under a
    /// session, its heartbeat's), `released`, `foreign` (not a casaas
    /// lock) or `unknown` (a lock under a session whose heartbeat is
    /// unreadable).
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
    /// For a fair-mode queue ticket: the lock it waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting_for: Option<String>,
    /// What a foreign object starts with.
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<String>,
    /// The key of the session the lock is held under (its heartbeat key,
    /// as the holder named it); absent for a lock held on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    /// The session term the lock names.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_term: Option<u64>,
    /// What the heartbeat says of that term: `alive`, `expired` (its last
    /// write plus its TTL is past on this machine's clock), `released`,
    /// `superseded`, `missing` or `unreadable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_state: Option<&'static str>,
}

/// Runs `casaas ls`.
pub async fn run(args: LsArgs) -> Result<u8, Failure> {
    let prefix = target::parse_prefix(&args.url)?;
    let store = target::open_read_only(&prefix).await?;
    let explain = |e: casaas_core::CasError| Failure::store(&e, format!("{}: {e}", prefix.display));
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
    let mut under_sessions = Vec::new();
    for read in reads {
        // Deleted between the listing and the read: gone, not listed.
        let Some((key, layout, object)) = read.map_err(explain)? else {
            continue;
        };
        let (mut entry, record) = entry(key, &object.body, object.version.to_string(), now);
        if entry.layout.is_some() {
            entry.layout = Some(layout);
        }
        // A ticket's waiter renews it as a holder renews a lock, but it
        // holds nothing: it waits for its turn.
        if let Some(lock) = ticket_of(&entry.key) {
            entry.waiting_for = Some(lock.to_string());
            if entry.state == "held" {
                entry.state = "waiting";
            }
        }
        if let Some(record) = record.filter(|r| r.session.is_some() && !r.released) {
            under_sessions.push((entries.len(), record));
        }
        entries.push(entry);
    }
    // Every lock was read before any heartbeat (the term to judge is the
    // one the lock names), and each distinct heartbeat is read once.
    let mut places = Places::new(&prefix.store_url, &prefix.display, store.clone());
    for (at, record) in under_sessions {
        let (Some(entry), Some(session)) = (entries.get_mut(at), &record.session) else {
            continue;
        };
        let beat = places.heartbeat(&entry.key, session).await?;
        judge_entry(entry, session, &beat, now);
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

/// Sets the state of a session lock's entry from its session's heartbeat:
/// its holder never rewrites the lock while holding it, so the lock's own
/// times say nothing.
fn judge_entry(entry: &mut Entry, session: &SessionRef, beat: &Heartbeat, now: SystemTime) {
    let (state, session_state) = match &beat.state {
        SessionState::Alive => match &beat.read {
            Some((record, _)) if record.wall_expiry() <= now => ("expired", "expired"),
            _ => ("held", "alive"),
        },
        SessionState::Released => ("released", "released"),
        SessionState::Superseded => ("expired", "superseded"),
        // A contender takes it only after watching the absence for the
        // lock's TTL, which one read cannot do.
        SessionState::Missing => ("held", "missing"),
        SessionState::Unreadable(_) => ("unknown", "unreadable"),
    };
    entry.state = state;
    entry.session = Some(sessions::name(&entry.key, session));
    entry.session_term = Some(session.term);
    entry.session_state = Some(session_state);
}

fn entry(
    key: String,
    body: &[u8],
    version: String,
    now: SystemTime,
) -> (Entry, Option<LeaseRecord>) {
    let record = match LeaseRecord::decode(&key, body) {
        Ok(record) => record,
        Err(e) => {
            let found = match e {
                LeaseError::ForeignObject { found, .. } => found,
                other => other.to_string(),
            };
            let entry = Entry {
                key,
                state: "foreign",
                holder: None,
                token: None,
                ttl_ms: None,
                acquired_at: None,
                renewed_at: None,
                version,
                layout: None,
                waiting_for: None,
                found: Some(found),
                session: None,
                session_term: None,
                session_state: None,
            };
            return (entry, None);
        }
    };
    let state = if record.released {
        "released"
    } else if record.wall_expiry() <= now {
        "expired"
    } else {
        "held"
    };
    let session = record.session.as_ref().map(|s| sessions::name(&key, s));
    let entry = Entry {
        key,
        state,
        holder: Some(record.owner.clone()),
        token: Some(record.token),
        ttl_ms: Some(record.ttl_ms),
        acquired_at: Some(rfc3339(record.acquired_at_ms)),
        renewed_at: Some(rfc3339(record.renewed_at_ms)),
        version,
        layout: Some("record"),
        waiting_for: None,
        found: None,
        // A session lock's own fields are set from its heartbeat later.
        session,
        session_term: record.session.as_ref().map(|s| s.term),
        session_state: None,
    };
    (entry, Some(record))
}

fn table(entries: &[Entry]) -> String {
    // The session column only when some lock is held under a session, so a
    // listing without any reads as before.
    let sessions = entries.iter().any(|e| e.session.is_some());
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let dash = || "-".to_string();
            let mut row = vec![
                e.key.clone(),
                e.state.to_string(),
                e.holder
                    .clone()
                    .or_else(|| e.found.as_ref().map(|f| format!("(found {f})")))
                    .unwrap_or_else(dash),
                e.token.map_or_else(dash, |t| t.to_string()),
                e.ttl_ms
                    .map_or_else(dash, |ms| human(Duration::from_millis(ms))),
            ];
            if sessions {
                row.push(match (&e.session, e.session_term) {
                    (Some(key), Some(term)) => format!(
                        "{key} (term {term}, {})",
                        e.session_state.unwrap_or("released with the lock")
                    ),
                    _ => dash(),
                });
            }
            row.push(e.renewed_at.clone().unwrap_or_else(dash));
            row
        })
        .collect();
    let mut header = vec!["KEY", "STATE", "HOLDER", "TOKEN", "TTL"];
    if sessions {
        header.push("SESSION");
    }
    header.push("WRITTEN (holder's clock)");
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(&header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        out.push_str(&line(&cells));
    }
    out
}
