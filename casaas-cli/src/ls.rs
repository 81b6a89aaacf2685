//! `casaas ls PREFIX_URL`: every lock under a prefix, read once, nothing
//! written.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use casaas_core::lease::{Heartbeat, LockEntry, LockListing};
use serde::Serialize;

use crate::cli::LsArgs;
use crate::duration::human;
use crate::exit::Failure;
use crate::sessions::{self, Places, SessionState};
use crate::target;
use crate::time::rfc3339;

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

/// Runs `casaas ls`: the library lists, this only formats.
pub async fn run(args: LsArgs) -> Result<u8, Failure> {
    let prefix = target::parse_prefix(&args.url)?;
    let store = target::open_read_only(&prefix).await?;
    let mut locks = LockListing::new(store.clone())
        .list()
        .await
        .map_err(|e| Failure::lease(&e, format!("{}: {e}", prefix.display)))?;
    // A heartbeat named above the prefix is out of the listed store's
    // reach: it is read from the directories above, opened read-only.
    let now = SystemTime::now();
    let mut places = Places::new(&prefix.store_url, &prefix.display, store);
    for lock in &mut locks {
        let Some(session) = &lock.session else {
            continue;
        };
        if session.heartbeat_key.is_some() || session.liveness.is_none() {
            continue;
        }
        let beat = places.heartbeat(&lock.key, &session.named).await?;
        let beat = match (beat.state, beat.read) {
            (SessionState::Unreadable(why), _) => Heartbeat::Unreadable(why),
            (_, Some((record, _))) => Heartbeat::Read(record),
            (_, None) => Heartbeat::Absent,
        };
        lock.judge_session(&beat, now);
    }
    let entries: Vec<Entry> = locks.iter().map(entry).collect();
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

/// Unix milliseconds of a wall-clock time read from a record.
fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn entry(lock: &LockEntry) -> Entry {
    let session = lock.session.as_ref();
    Entry {
        key: lock.key.clone(),
        state: lock.state.as_str(),
        holder: lock.holder.clone(),
        token: lock.token,
        ttl_ms: lock
            .ttl
            .map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
        acquired_at: lock.acquired_at.map(|at| rfc3339(unix_ms(at))),
        renewed_at: lock.renewed_at.map(|at| rfc3339(unix_ms(at))),
        version: lock.version.clone(),
        layout: lock.layout.map(|l| l.as_str()),
        waiting_for: lock.waiting_for.clone(),
        found: lock.found.clone(),
        session: session.map(|s| sessions::name(&lock.key, &s.named)),
        session_term: session.map(|s| s.named.term),
        session_state: session.and_then(|s| s.liveness).map(|l| l.as_str()),
    }
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
