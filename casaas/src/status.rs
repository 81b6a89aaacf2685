//! `casaas status URL`: who holds a lock, and when it could be taken over.

use std::time::{Duration, Instant};

use casaas_core::Version;
use casaas_core::lease::{LeaseError, LeaseRecord};
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::duration::human;
use crate::exit::{FREE, Failure, USAGE};
use crate::target::LockTarget;
use crate::time::rfc3339;
use crate::{holding, target};

/// How often `--observe-for` reads the record.
const OBSERVE_PERIOD: Duration = Duration::from_secs(1);

/// What `status` reports (also its JSON form).
#[derive(Debug, Serialize)]
struct StatusReport {
    /// The lock URL, without user-info.
    url: String,
    /// The lock object's key in its store.
    key: String,
    /// `held`, `released`, `free` (no object), `expired` (unchanged for a
    /// full TTL while watched) or `foreign` (not a casaas lock).
    state: &'static str,
    holder: Option<String>,
    token: Option<u64>,
    ttl_ms: Option<u64>,
    /// The holder's wall clock at acquisition (advisory).
    acquired_at: Option<String>,
    /// The holder's wall clock at its last write (advisory).
    renewed_at: Option<String>,
    released: Option<bool>,
    version: Option<String>,
    /// How long this command watched the record.
    observed_for_ms: u64,
    /// How long this command saw the current version unchanged.
    observed_unchanged_ms: Option<u64>,
    /// The earliest a contender that started watching with this command
    /// could take over, if the holder stopped renewing (0: now).
    takeover_possible_in_ms: Option<u64>,
    /// What a foreign object starts with.
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<String>,
}

/// Runs `casaas status`.
pub async fn run(args: StatusArgs) -> Result<u8, Failure> {
    let target = target::parse(&args.url)?;
    let store = target::open_read_only(&target).await?;
    let config = holding::lease_config(Duration::from_secs(15));
    let reader = holding::lease(store, &target, "casaas-status", config.clone())?;
    let start = Instant::now();
    let watch = args.observe_for.unwrap_or(Duration::ZERO);
    let mut seen: Option<(Version, Instant)> = None;
    let current = loop {
        let read = reader.read().await;
        let now = Instant::now();
        let current = match read {
            Ok(current) => current,
            Err(LeaseError::ForeignObject { key, found }) => {
                return foreign(&args, &target, key, found, start);
            }
            Err(e) => return Err(Failure::usage(format!("{}: {e}", target.display))),
        };
        if let Some((_, version)) = &current
            && seen.as_ref().is_none_or(|(v, _)| v != version)
        {
            seen = Some((version.clone(), now));
        }
        let elapsed = now.duration_since(start);
        if elapsed >= watch {
            break current;
        }
        tokio::time::sleep(OBSERVE_PERIOD.min(watch - elapsed)).await;
    };
    let observed_for = start.elapsed();
    let report = match current {
        None => StatusReport::empty(&target, "free", observed_for),
        Some((record, version)) => {
            let unchanged = seen.map_or(Duration::ZERO, |(_, since)| since.elapsed());
            held_report(&target, &record, &version, unchanged, observed_for, &config)
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", report.table(args.observe_for.is_some()));
    }
    Ok(if report.state == "held" { 0 } else { FREE })
}

fn held_report(
    target: &LockTarget,
    record: &LeaseRecord,
    version: &Version,
    unchanged: Duration,
    observed_for: Duration,
    config: &casaas_core::lease::LeaseConfig,
) -> StatusReport {
    let takeover_in = if record.released {
        Duration::ZERO
    } else {
        config.takeover_wait(record.ttl()).saturating_sub(unchanged)
    };
    let state = if record.released {
        "released"
    } else if takeover_in.is_zero() {
        "expired"
    } else {
        "held"
    };
    StatusReport {
        state,
        holder: Some(record.owner.clone()),
        token: Some(record.token),
        ttl_ms: Some(record.ttl_ms),
        acquired_at: Some(rfc3339(record.acquired_at_ms)),
        renewed_at: Some(rfc3339(record.renewed_at_ms)),
        released: Some(record.released),
        version: Some(version.to_string()),
        observed_unchanged_ms: Some(millis(unchanged)),
        takeover_possible_in_ms: Some(millis(takeover_in)),
        ..StatusReport::empty(target, state, observed_for)
    }
}

fn foreign(
    args: &StatusArgs,
    target: &LockTarget,
    key: String,
    found: String,
    start: Instant,
) -> Result<u8, Failure> {
    if args.json {
        let mut report = StatusReport::empty(target, "foreign", start.elapsed());
        report.found = Some(found.clone());
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    }
    Err(Failure::with_code(
        USAGE,
        format!(
            "{}: the object at key '{key}' is not a casaas lock (found {found}); it was left untouched",
            target.display
        ),
    ))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl StatusReport {
    fn empty(target: &LockTarget, state: &'static str, observed_for: Duration) -> Self {
        StatusReport {
            url: target.display.clone(),
            key: target.key.clone(),
            state,
            holder: None,
            token: None,
            ttl_ms: None,
            acquired_at: None,
            renewed_at: None,
            released: None,
            version: None,
            observed_for_ms: millis(observed_for),
            observed_unchanged_ms: None,
            takeover_possible_in_ms: None,
            found: None,
        }
    }

    fn table(&self, watched: bool) -> String {
        let mut out = format!("lock       {}\nstate      {}\n", self.url, self.state);
        let (Some(holder), Some(token), Some(ttl)) = (&self.holder, self.token, self.ttl_ms) else {
            out.push_str(
                "           no lock object: the first `casaas lock` creates it with token 1\n",
            );
            return out;
        };
        out.push_str(&format!(
            "holder     {holder}\ntoken      {token}\nttl        {}\n",
            human(Duration::from_millis(ttl))
        ));
        if let (Some(acquired), Some(renewed)) = (&self.acquired_at, &self.renewed_at) {
            out.push_str(&format!(
                "acquired   {acquired} (holder's clock, advisory)\nwritten    {renewed} (holder's clock, advisory)\n"
            ));
        }
        let unchanged = Duration::from_millis(self.observed_unchanged_ms.unwrap_or(0));
        if watched {
            out.push_str(&format!(
                "unchanged  {} (watched for {})\n",
                human(unchanged),
                human(Duration::from_millis(self.observed_for_ms))
            ));
        } else {
            out.push_str("unchanged  not watched (--observe-for DURATION watches whether the holder still renews)\n");
        }
        let takeover = Duration::from_millis(self.takeover_possible_in_ms.unwrap_or(0));
        out.push_str(&match self.state {
            "released" => "takeover   now: released by its holder\n".to_string(),
            "expired" => "takeover   now: not renewed for a full TTL\n".to_string(),
            _ => format!(
                "takeover   in {} at the earliest, if the holder stops renewing\n",
                human(takeover)
            ),
        });
        out
    }
}
