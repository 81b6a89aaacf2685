//! `casaas.list_locks`: every lock under a prefix, as `casaas ls` shows
//! it, from the library's `LockListing`; the package wraps each row in a
//! `LockInfo`.

use std::time::{SystemTime, UNIX_EPOCH};

use casaas::lease::{LockEntry, LockListing};
use pyo3::prelude::*;

use crate::Store;
use crate::errors::Fail;
use crate::runtime::{Task, start, wait};

/// The session of a listed lock: its name, term and liveness.
type SessionRow = (String, u64, Option<String>);

/// One listed object: key, state, holder, token, TTL in seconds, acquired
/// and renewed at (Unix ms, the holder's clock), version, layout, the lock a
/// ticket waits for, what a foreign object starts with, and its session.
type Row = (
    String,
    String,
    Option<String>,
    Option<u64>,
    Option<f64>,
    Option<u64>,
    Option<u64>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<SessionRow>,
);

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn row(e: LockEntry) -> Row {
    let session = e.session.as_ref().map(|s| {
        (
            s.name().to_string(),
            s.named.term,
            s.liveness.map(|l| l.as_str().to_string()),
        )
    });
    (
        e.key,
        e.state.as_str().to_string(),
        e.holder,
        e.token,
        e.ttl.map(|t| t.as_secs_f64()),
        e.acquired_at.map(unix_ms),
        e.renewed_at.map(unix_ms),
        e.version,
        e.layout.map(|l| l.as_str().to_string()),
        e.waiting_for,
        e.found,
        session,
    )
}

async fn list(listing: LockListing) -> Result<Vec<Row>, Fail> {
    Ok(listing.list().await?.into_iter().map(row).collect())
}

fn listing(store: &Store, prefix: String) -> Result<LockListing, Fail> {
    Ok(LockListing::new(store.get()?).with_prefix(prefix))
}

/// Lists every object under `prefix` in `store`: one read each, nothing
/// written.
#[pyfunction]
#[pyo3(signature = (store, prefix=String::new()))]
fn list_locks(py: Python<'_>, store: &Store, prefix: String) -> Result<Vec<Row>, Fail> {
    let listing = listing(store, prefix)?;
    wait(py, None, list(listing))
}

/// `list_locks` for asyncio.
#[pyfunction]
#[pyo3(signature = (store, prefix=String::new()))]
fn list_locks_start(store: &Store, prefix: String) -> Result<Task, Fail> {
    let listing = listing(store, prefix)?;
    start(None, list(listing))
}

/// Adds the listing to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(list_locks, m)?)?;
    m.add_function(wrap_pyfunction!(list_locks_start, m)?)?;
    Ok(())
}
