//! `casaas status URL`: who holds a lock, and when it could be taken over.

use std::time::{Duration, Instant};

use casaas_core::Version;
use casaas_core::lease::{LeaseError, LeaseRecord};
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::duration::human;
use crate::exit::{FOREIGN, FREE, Failure};
use crate::sessions::{self, Heartbeat, Places, SessionState};
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
    /// The key of the session the lock is held under (its heartbeat key,
    /// as the holder named it); absent for a lock held on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    /// The session term the lock names (the heartbeat's fencing token).
    #[serde(skip_serializing_if = "Option::is_none")]
    session_term: Option<u64>,
    /// What the heartbeat says of that term: `alive`, `expired` (in the
    /// term, unchanged for a full TTL while watched), `released`,
    /// `superseded` (in a later term) or `missing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_state: Option<&'static str>,
    /// Where the heartbeat was found (or first looked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    session_url: Option<String>,
    /// The heartbeat's TTL.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_ttl_ms: Option<u64>,
    /// The heartbeat's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_version: Option<String>,
    /// The value the holder publishes (`casaas elect --value`); absent when
    /// it publishes none.
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
}

/// Runs `casaas status`.
pub async fn run(args: StatusArgs) -> Result<u8, Failure> {
    let target = target::parse(&args.url)?;
    let store = target::open_read_only(&target).await?;
    let config = holding::lease_config(Duration::from_secs(15));
    let reader = holding::lease(store.clone(), &target, "casaas-status", config.clone())?;
    let dir_display = target::parse_prefix(&target.store_url)
        .map_or_else(|_| target.display.clone(), |p| p.display);
    let mut places = Places::new(&target.store_url, &dir_display, store);
    let start = Instant::now();
    let watch = args.observe_for.unwrap_or(Duration::ZERO);
    let mut seen: Option<(Version, Instant)> = None;
    // For a lock under a session, what is watched is its heartbeat (or its
    // absence), as a contender watches it.
    let mut seen_beat: Option<(String, Instant)> = None;
    let (current, beat) = loop {
        let read = reader.read().await;
        let current = match read {
            Ok(current) => current,
            Err(LeaseError::ForeignObject { key, found }) => {
                return foreign(&args, &target, key, found, start);
            }
            Err(e) => return Err(Failure::lease(&e, format!("{}: {e}", target.display))),
        };
        // Read after the lock: the term to judge is the one it names.
        let beat = match &current {
            Some((record, _)) if !record.released => match &record.session {
                Some(session) => {
                    places.forget_reads();
                    Some(places.heartbeat(&target.key, session).await?)
                }
                None => None,
            },
            _ => None,
        };
        let now = Instant::now();
        if let Some((_, version)) = &current
            && seen.as_ref().is_none_or(|(v, _)| v != version)
        {
            seen = Some((version.clone(), now));
        }
        if let (Some(beat), Some((record, _))) = (&beat, &current) {
            let sighting = sighting(beat, record);
            if seen_beat.as_ref().is_none_or(|(s, _)| *s != sighting) {
                seen_beat = Some((sighting, now));
            }
        }
        let elapsed = now.duration_since(start);
        if elapsed >= watch {
            break (current, beat);
        }
        tokio::time::sleep(OBSERVE_PERIOD.min(watch - elapsed)).await;
    };
    let observed_for = start.elapsed();
    let report = match (current, beat) {
        (None, _) => StatusReport::empty(&target, "free", observed_for),
        (Some((record, version)), None) => {
            let unchanged = seen.map_or(Duration::ZERO, |(_, since)| since.elapsed());
            held_report(&target, &record, &version, unchanged, observed_for, &config)
        }
        (Some((record, version)), Some(beat)) => {
            let unchanged = seen_beat.map_or(Duration::ZERO, |(_, since)| since.elapsed());
            let plain = held_report(&target, &record, &version, unchanged, observed_for, &config);
            session_report(&target, plain, &record, &beat, unchanged, &config)?
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

/// What is watched of a session lock's heartbeat: its version while in the
/// lock's term, or the term's absence from it.
fn sighting(beat: &Heartbeat, lock: &LeaseRecord) -> String {
    match (&beat.read, &lock.session) {
        (Some((_, version)), _) if beat.state == SessionState::Alive => {
            format!("{} at {version}", beat.url)
        }
        (_, Some(session)) => format!(
            "{} {} of term {}",
            beat.state.name(),
            beat.url,
            session.term
        ),
        _ => beat.state.name().to_string(),
    }
}

/// The report of a lock held under a session: its state is its session
/// term's, judged from the heartbeat read after it, never from the lock
/// object, which its holder does not rewrite while holding it.
fn session_report(
    target: &LockTarget,
    plain: StatusReport,
    lock: &LeaseRecord,
    beat: &Heartbeat,
    unchanged: Duration,
    config: &casaas_core::lease::LeaseConfig,
) -> Result<StatusReport, Failure> {
    let Some(session) = &lock.session else {
        return Ok(plain);
    };
    let (state, session_state, takeover) = match &beat.state {
        SessionState::Unreadable(found) => {
            return Err(Failure::with_code(
                FOREIGN,
                format!(
                    "{}: held under session '{}' (term {}), but its heartbeat {} is unreadable: {found}; \
                 no contender can judge this lock until that object is a casaas lease again",
                    target.display,
                    sessions::name(&target.key, session),
                    session.term,
                    beat.url
                ),
            ));
        }
        SessionState::Released => ("released", "released", Duration::ZERO),
        SessionState::Superseded => ("expired", "superseded", Duration::ZERO),
        SessionState::Alive => {
            let ttl = beat.read.as_ref().map_or(lock.ttl(), |(b, _)| b.ttl());
            let wait = sessions::takeover_in(config, ttl, unchanged);
            if wait.is_zero() {
                ("expired", "expired", wait)
            } else {
                ("held", "alive", wait)
            }
        }
        SessionState::Missing => {
            // As a contender does: the term is over once its absence was
            // seen for the lock's own TTL.
            let wait = sessions::takeover_in(config, lock.ttl(), unchanged);
            (
                if wait.is_zero() { "expired" } else { "held" },
                "missing",
                wait,
            )
        }
    };
    Ok(StatusReport {
        state,
        takeover_possible_in_ms: Some(millis(takeover)),
        session: Some(sessions::name(&target.key, session)),
        session_term: Some(session.term),
        session_state: Some(session_state),
        session_url: Some(beat.url.clone()),
        session_ttl_ms: beat.read.as_ref().map(|(b, _)| b.ttl_ms),
        session_version: beat.read.as_ref().map(|(_, v)| v.to_string()),
        ..plain
    })
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
        value: record.value.clone(),
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
        FOREIGN,
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
            session: None,
            session_term: None,
            session_state: None,
            session_url: None,
            session_ttl_ms: None,
            session_version: None,
            value: None,
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
        if let Some(value) = &self.value {
            // The holder's text, shown as a quoted string so that no byte
            // of it can move the terminal.
            out.push_str(&format!("value      {value:?}\n"));
        }
        if let (Some(acquired), Some(renewed)) = (&self.acquired_at, &self.renewed_at) {
            out.push_str(&format!(
                "acquired   {acquired} (holder's clock, advisory)\nwritten    {renewed} (holder's clock, advisory)\n"
            ));
        }
        if let (Some(session), Some(term), Some(state), Some(url)) = (
            &self.session,
            self.session_term,
            self.session_state,
            &self.session_url,
        ) {
            out.push_str(&format!(
                "session    {session} (term {term}): {state}\nheartbeat  {url}\n           \
                 a lock under a session is not rewritten while held: its session's heartbeat says whether it is\n"
            ));
        }
        let watched_what = if self.session.is_some() {
            "heartbeat unchanged"
        } else {
            "unchanged"
        };
        let unchanged = Duration::from_millis(self.observed_unchanged_ms.unwrap_or(0));
        if watched {
            out.push_str(&format!(
                "unchanged  {} ({watched_what}; watched for {})\n",
                human(unchanged),
                human(Duration::from_millis(self.observed_for_ms))
            ));
        } else if self.session.is_some() {
            out.push_str("unchanged  not watched (--observe-for DURATION watches whether the session's holder still renews its heartbeat)\n");
        } else {
            out.push_str("unchanged  not watched (--observe-for DURATION watches whether the holder still renews)\n");
        }
        let takeover = Duration::from_millis(self.takeover_possible_in_ms.unwrap_or(0));
        out.push_str(&match (self.state, self.session_state) {
            ("released", Some("released")) => "takeover   now: its session was closed\n".to_string(),
            ("released", _) => "takeover   now: released by its holder\n".to_string(),
            ("expired", Some("superseded")) => {
                "takeover   now: its session is in a later term\n".to_string()
            }
            ("expired", Some("missing")) => {
                "takeover   now: its session's heartbeat was missing for a full TTL\n".to_string()
            }
            ("expired", Some(_)) => {
                "takeover   now: its session's heartbeat was not renewed for a full TTL\n".to_string()
            }
            ("expired", None) => "takeover   now: not renewed for a full TTL\n".to_string(),
            (_, Some("missing")) => format!(
                "takeover   in {} at the earliest: its session's heartbeat is missing\n",
                human(takeover)
            ),
            (_, Some(_)) => format!(
                "takeover   in {} at the earliest, if the session's holder stops renewing its heartbeat\n",
                human(takeover)
            ),
            _ => format!(
                "takeover   in {} at the earliest, if the holder stops renewing\n",
                human(takeover)
            ),
        });
        out
    }
}
