//! `casaas release URL --force`: break a stale lock the safe way.
//!
//! The observed record is replaced, on condition that its version is still
//! the one shown, by the same record marked released with a fresh nonce.
//! The token is kept (the next holder gets token + 1) and the object is
//! never deleted.
//!
//! A lock held under a session is broken only once its session's term is
//! over (or its heartbeat is gone): its holder never rewrites it, so it
//! would not learn of a break while its heartbeat still succeeds. The
//! session's heartbeat, a plain lease, is what to break instead.

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use casaas_core::lease::{Entropy, LeaseError, LeaseRecord, SessionRef};
use casaas_core::{CasStore, ErrorKind, Version};

use crate::cli::ReleaseArgs;
use crate::duration::human;
use crate::exit::{FOREIGN, FREE, Failure, NOT_RELEASED};
use crate::logging;
use crate::sessions::{Heartbeat, Places, SessionState};
use crate::target::LockTarget;
use crate::time::rfc3339;
use crate::{holding, sessions, target};

/// Runs `casaas release --force`.
pub async fn run(args: ReleaseArgs) -> Result<u8, Failure> {
    let target = target::parse(&args.url)?;
    let store = target::open(&target).await?;
    let reader = holding::lease(
        store.clone(),
        &target,
        "casaas-release",
        holding::lease_config(Duration::from_secs(15)),
    )?;
    let explain = |e: LeaseError| Failure::lease(&e, format!("{}: {e}", target.display));
    let Some((record, version)) = reader.read().await.map_err(explain)? else {
        logging::notice(&format!(
            "{}: no lock object; nothing to release",
            target.display
        ));
        return Ok(FREE);
    };
    if record.released {
        logging::notice(&format!(
            "{}: already released (token {}); nothing to do",
            target.display, record.token
        ));
        return Ok(0);
    }
    // Read after the lock: the term to judge is the one it names.
    let session = match &record.session {
        Some(session) => Some(session_of(&target, store.clone(), &record, session).await?),
        None => None,
    };
    eprint!("{}", describe(&target, &record, &version, session.as_ref()));
    if !args.yes && !confirm()? {
        logging::notice("not released");
        return Ok(NOT_RELEASED);
    }

    // Through the lease's own view of the store: in the create-only layout
    // the record is the head epoch, and breaking it writes the next one.
    let outcome = break_observed(reader.store().as_ref(), &target.key, &record, &version)
        .await
        .map_err(|e| {
            Failure::lease(
                &e,
                format!(
                    "{}: {e}; nothing is known to have been written: run again",
                    target.display
                ),
            )
        })?;
    match outcome {
        Broken::Released(stored) => {
            logging::notice(&format!(
                "released {} (token {} kept; the next holder gets {})",
                target.display,
                stored.token,
                stored.token + 1
            ));
            Ok(0)
        }
        Broken::Changed(None) => Err(Failure::with_code(
            NOT_RELEASED,
            format!(
                "{}: the lock object disappeared; nothing was written",
                target.display
            ),
        )),
        Broken::Changed(Some(now)) => Err(Failure::with_code(
            NOT_RELEASED,
            format!(
                "{} changed since it was shown (now {} by {:?}, token {}); nothing was written: run again to see it",
                target.display,
                if now.released { "released" } else { "held" },
                now.owner,
                now.token
            ),
        )),
    }
}

/// The heartbeat of the session `lock` is held under, if breaking the lock
/// is safe: the term is over (the session was closed or is in a later
/// term), or its heartbeat is missing (its holder's next renewal finds no
/// heartbeat, so it learns it lost as it would of a broken plain lock).
/// While the term runs, the holder would never learn of it: it does not
/// rewrite the lock while holding it, and its heartbeat keeps succeeding.
async fn session_of(
    target: &LockTarget,
    store: Arc<dyn CasStore>,
    lock: &LeaseRecord,
    session: &SessionRef,
) -> Result<Heartbeat, Failure> {
    let dir_display = target::parse_prefix(&target.store_url)
        .map_or_else(|_| target.display.clone(), |p| p.display);
    let mut places = Places::new(&target.store_url, &dir_display, store);
    let beat = places.heartbeat(&target.key, session).await?;
    match &beat.state {
        SessionState::Alive => Err(Failure::with_code(
            NOT_RELEASED,
            format!(
                "{url} is held by {owner:?} under session '{key}' (term {term}), which is alive: its heartbeat {hb} \
                 is in that term and not released. The holder of a lock under a session never rewrites the lock, \
                 so it would never learn that it was broken; nothing was written. Break the session instead: \
                 `casaas release --force {hb}` ends every lock of that session, and its holder learns it at its \
                 next heartbeat; this lock is free from then on (`casaas lock` takes it at once)",
                url = target.display,
                owner = lock.owner,
                key = sessions::name(&target.key, session),
                term = session.term,
                hb = beat.url,
            ),
        )),
        SessionState::Unreadable(found) => Err(Failure::with_code(
            FOREIGN,
            format!(
                "{}: held under session '{}' (term {}), but its heartbeat {} is unreadable ({found}): \
             whether the session is alive cannot be known, so nothing was written",
                target.display,
                sessions::name(&target.key, session),
                session.term,
                beat.url
            ),
        )),
        SessionState::Released | SessionState::Superseded | SessionState::Missing => Ok(beat),
    }
}

/// What breaking an observed record did.
#[derive(Debug)]
enum Broken {
    /// Our released record is stored.
    Released(LeaseRecord),
    /// The record changed since it was observed (or disappeared); nothing
    /// of ours was written.
    Changed(Option<LeaseRecord>),
}

/// Replaces the `observed` record at `version` (and nothing else) with the
/// same record marked released, with a fresh nonce and the same token. A
/// refused or ambiguous write is resolved by reading the nonce back.
async fn break_observed(
    store: &dyn CasStore,
    key: &str,
    observed: &LeaseRecord,
    version: &Version,
) -> Result<Broken, LeaseError> {
    let mut broken = observed.clone();
    broken.nonce = Entropy::from_os().nonce();
    broken.released = true;
    broken.renewed_at_ms = now_ms();
    let err = match store.replace(key, version, broken.encode()).await {
        Ok(_) => return Ok(Broken::Released(broken)),
        Err(err) => err,
    };
    let refused = matches!(
        err.kind(),
        ErrorKind::PreconditionFailed | ErrorKind::NotFound
    );
    if !refused && !err.may_have_taken_effect() {
        return Err(err.into());
    }
    let Some(object) = store.get(key).await? else {
        return Ok(Broken::Changed(None));
    };
    let current = LeaseRecord::decode(key, &object.body)?;
    if current.nonce == broken.nonce {
        Ok(Broken::Released(current))
    } else if current.nonce == observed.nonce && !refused {
        // The ambiguous write did not land; the record is as shown.
        Err(err.into())
    } else {
        Ok(Broken::Changed(Some(current)))
    }
}

fn describe(
    target: &LockTarget,
    record: &LeaseRecord,
    version: &Version,
    session: Option<&Heartbeat>,
) -> String {
    let age = Duration::from_millis(now_ms().saturating_sub(record.renewed_at_ms));
    if let (Some(beat), Some(named)) = (session, &record.session) {
        let consequence = match beat.state {
            SessionState::Missing => {
                "Its session's heartbeat is missing: if the holder is still running, it loses the session\n\
                 (and this lock) at its next heartbeat, which finds none.\n"
            }
            _ => "Its session's term is over: nobody holds this lock any more.\n",
        };
        return format!(
            "About to break the lock {url}\n  holder   {owner}\n  token    {token} (kept; the next holder gets {next})\n  \
             session  {key} (term {term}): {state}\n  heartbeat {hb}\n  version  {version}\n{consequence}",
            url = target.display,
            owner = record.owner,
            token = record.token,
            next = record.token + 1,
            key = sessions::name(&target.key, named),
            term = named.term,
            state = beat.state.name(),
            hb = beat.url,
        );
    }
    format!(
        "About to break the lock {url}\n  holder   {owner}\n  token    {token} (kept; the next holder gets {next})\n  \
         ttl      {ttl}\n  written  {written} (holder's clock: {age} ago)\n  version  {version}\n\
         If the holder is still running, it loses the lease at its next renewal; writes it makes\n\
         meanwhile are refused only by resources that check the fencing token.\n",
        url = target.display,
        owner = record.owner,
        token = record.token,
        next = record.token + 1,
        ttl = human(record.ttl()),
        written = rfc3339(record.renewed_at_ms),
        age = human(age),
    )
}

/// Asks on the terminal; refuses to guess when there is none.
fn confirm() -> Result<bool, Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "not a terminal, so cannot ask for confirmation: pass --yes to release without asking",
        ));
    }
    eprint!("Release it? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::usage(format!("reading the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use casaas_core::MemoryStore;

    fn held(nonce: &str) -> LeaseRecord {
        LeaseRecord::new("crashed-host/1", nonce, 4, 15_000, 1_700_000_000_000)
    }

    #[tokio::test]
    async fn breaking_keeps_the_token_and_the_object() {
        let store = MemoryStore::new();
        let version = store.create("lock", held("n1").encode()).await.unwrap();
        let Broken::Released(stored) = break_observed(&store, "lock", &held("n1"), &version)
            .await
            .unwrap()
        else {
            panic!("not released")
        };
        let object = store.get("lock").await.unwrap().unwrap();
        let now = LeaseRecord::decode("lock", &object.body).unwrap();
        assert_eq!(now, stored);
        assert!(now.released);
        assert_eq!((now.token, now.owner.as_str()), (4, "crashed-host/1"));
        assert_ne!(now.nonce, "n1");
    }

    #[tokio::test]
    async fn a_record_changed_since_shown_is_not_broken() {
        let store = MemoryStore::new();
        let shown = store.create("lock", held("n1").encode()).await.unwrap();
        // The holder renews after the record was shown.
        let renewed = store
            .replace("lock", &shown, held("n2").encode())
            .await
            .unwrap();
        let outcome = break_observed(&store, "lock", &held("n1"), &shown)
            .await
            .unwrap();
        let Broken::Changed(Some(now)) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(now.nonce, "n2");
        let object = store.get("lock").await.unwrap().unwrap();
        assert_eq!(object.version, renewed, "something was written");
    }
}
