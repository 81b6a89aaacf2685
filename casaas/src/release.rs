//! `casaas release URL --force`: break a stale lock the safe way.
//!
//! The observed record is replaced, on condition that its version is still
//! the one shown, by the same record marked released with a fresh nonce.
//! The token is kept (the next holder gets token + 1) and the object is
//! never deleted.

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use casaas_core::lease::{Entropy, LeaseError, LeaseRecord};
use casaas_core::{CasError, ErrorKind, Version};

use crate::cli::ReleaseArgs;
use crate::duration::human;
use crate::exit::{FREE, Failure};
use crate::logging;
use crate::target::LockTarget;
use crate::time::rfc3339;
use crate::{holding, target};

/// Exit status when the user declined or the record changed.
const NOT_RELEASED: u8 = 1;

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
    let explain = |e: LeaseError| Failure::usage(format!("{}: {e}", target.display));
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
    eprint!("{}", describe(&target, &record, &version));
    if !args.yes && !confirm()? {
        logging::notice("not released");
        return Ok(NOT_RELEASED);
    }

    let mut broken = record.clone();
    broken.nonce = Entropy::from_os().nonce();
    broken.released = true;
    broken.renewed_at_ms = now_ms();
    match store.replace(&target.key, &version, broken.encode()).await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::PreconditionFailed || e.may_have_taken_effect() => {
            return resolve(&reader, &target, &broken, e).await;
        }
        Err(e) => return Err(Failure::usage(format!("{}: {e}", target.display))),
    }
    logging::notice(&format!(
        "released {} (token {} kept; the next holder gets {})",
        target.display,
        record.token,
        record.token + 1
    ));
    Ok(0)
}

/// After a refused or ambiguous write: did ours land?
async fn resolve(
    reader: &casaas_core::lease::Lease,
    target: &LockTarget,
    ours: &LeaseRecord,
    err: CasError,
) -> Result<u8, Failure> {
    let current = reader
        .read()
        .await
        .map_err(|e| Failure::usage(format!("{}: {e}", target.display)))?;
    match current {
        Some((record, _)) if record.nonce == ours.nonce => {
            logging::notice(&format!(
                "released {} (token {} kept)",
                target.display, record.token
            ));
            Ok(0)
        }
        Some((record, _)) => Err(Failure::with_code(
            NOT_RELEASED,
            format!(
                "{} changed since it was shown (now {} by {:?}, token {}); nothing was written: run again to see it",
                target.display,
                if record.released { "released" } else { "held" },
                record.owner,
                record.token
            ),
        )),
        None => Err(Failure::usage(format!(
            "{}: the lock object disappeared ({err}); nothing was written",
            target.display
        ))),
    }
}

fn describe(target: &LockTarget, record: &LeaseRecord, version: &Version) -> String {
    let age = Duration::from_millis(now_ms().saturating_sub(record.renewed_at_ms));
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
