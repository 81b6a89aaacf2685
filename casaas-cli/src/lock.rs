//! `casaas lock URL -- CMD`: run a command while holding a lock.

use std::io::IsTerminal;
use std::time::Duration;

use casaas_core::lease::{
    AcquireOutcome, FairLease, HeldBy, Lease, LeaseConfig, LeaseError, LeaseGuard, RwLock,
    Semaphore, WaitOptions, default_owner_id,
};
use tokio_util::sync::CancellationToken;

use crate::child::{self, Signals};
use crate::cli::LockArgs;
use crate::duration::{Wait, human};
use crate::exit::{Failure, LOST};
use crate::logging;
use crate::{holding, target};

/// The lease timing with `--poll`, if given: no longer than the TTL.
fn poll(config: LeaseConfig, poll: Option<Duration>) -> Result<LeaseConfig, Failure> {
    match poll {
        None => Ok(config),
        Some(poll) if poll <= config.ttl => Ok(config.with_poll_period(poll)),
        Some(poll) => Err(Failure::usage(format!(
            "--poll {} is longer than --ttl {}: a waiter would notice a release later than a crashed holder's lease expires; lower --poll",
            human(poll),
            human(config.ttl)
        ))),
    }
}

/// Runs `casaas lock`.
pub async fn run(args: LockArgs) -> Result<u8, Failure> {
    let mut signals = Signals::catch()?;
    misread_wait(&args)?;
    let wait = args.wait_limit().map_err(Failure::usage)?;
    let target = target::parse_with_root(&args.url, args.lease.root.as_deref())?;
    let config = poll(holding::lease_config(args.lease.ttl), args.poll)?;
    let grace = holding::grace(&args.lease, &config)?;
    let owner = args.owner.clone().unwrap_or_else(default_owner_id);
    let store = tokio::select! {
        store = target::open(&target) => store?,
        received = signals.recv() => return Ok(child::signal_exit(received)),
    };
    let lease = holding::lease(store, &target, &owner, config)?;

    let cancel = CancellationToken::new();
    let acquiring = acquire(&lease, &args, wait, &target.display, cancel.clone());
    tokio::pin!(acquiring);
    let acquired = tokio::select! {
        acquired = &mut acquiring => acquired?,
        received = signals.recv() => {
            tracing::info!(signal = %received, "interrupted while acquiring");
            // Let an attempt in flight finish, and give back what it won.
            cancel.cancel();
            if let Ok(Acquired::Guard(guard)) = acquiring.await {
                release(guard, &target.display).await;
            }
            return Ok(child::signal_exit(received));
        }
    };
    let guard = match acquired {
        Acquired::Guard(guard) => guard,
        Acquired::Conflict(message) => {
            logging::notice(&message);
            return Ok(args.conflict_exit_code);
        }
    };
    tracing::info!(url = %target.display, token = guard.token(), owner = %owner, "lock acquired");

    let mut env = holding::child_env(&guard, &target);
    if let Some(slots) = args.slots {
        // The slot is the last part of the guard's key (URL.slots/I).
        let slot = guard.key().rsplit('/').next().unwrap_or_default();
        env.push(("CASAAS_SLOT", slot.to_string()));
        env.push(("CASAAS_SLOTS", slots.to_string()));
    }
    let lease_end = holding::lease_end(&guard, lease.clock().clone());
    let end = child::supervise(&args.argv(), &env, lease_end, grace, &mut signals).await;
    finish(guard, end, &target.display).await
}

/// The end of a holding: release, and the exit status.
pub async fn finish(
    guard: LeaseGuard,
    end: Result<child::ChildEnd, Failure>,
    display: &str,
) -> Result<u8, Failure> {
    let end = match end {
        Ok(end) => end,
        Err(failure) => {
            release(guard, display).await;
            return Err(failure);
        }
    };
    if let Some(reason) = end.lost {
        drop(guard);
        logging::report_error(&format!(
            "lost the lock {display}: {reason}; the command was stopped (its status was {})",
            end.code
        ));
        return Ok(LOST);
    }
    release(guard, display).await;
    Ok(end.code)
}

async fn release(guard: LeaseGuard, display: &str) {
    let token = guard.token();
    match guard.release().await {
        Ok(()) => {
            let url = display.to_string();
            tracing::info!(%url, token, "lock released")
        }
        Err(LeaseError::Lost(reason)) => logging::notice(&format!(
            "the lock {display} was lost as the command ended ({reason})"
        )),
        Err(e) => logging::notice(&format!(
            "could not release {display} ({e}); it can be taken over once its TTL has passed"
        )),
    }
}

enum Acquired {
    Guard(LeaseGuard),
    Conflict(String),
}

async fn acquire(
    lease: &Lease,
    args: &LockArgs,
    wait: Option<Wait>,
    display: &str,
    cancel: CancellationToken,
) -> Result<Acquired, Failure> {
    if args.shared || args.exclusive || args.slots.is_some() || (args.fair && wait.is_some()) {
        return acquire_in_mode(lease, args, wait, display, cancel).await;
    }
    let explain = |e: LeaseError| Failure::lease(&e, format!("{display}: {e}"));
    // The first attempt tells who holds it (and costs no extra request:
    // a waiting acquisition would start with the same read).
    let held = match lease.try_acquire().await {
        Ok(AcquireOutcome::Acquired(guard)) => return Ok(Acquired::Guard(guard)),
        Ok(AcquireOutcome::Held(held)) => held,
        Ok(other) => {
            return Err(Failure::usage(format!(
                "{display}: an acquisition outcome this build does not know: {other:?}"
            )));
        }
        Err(e) if retryable(&e) && wait.is_some() => HeldBy::new("?", 0, Duration::ZERO),
        Err(e) => return Err(explain(e)),
    };
    let held_message = |held: &HeldBy| {
        format!(
            "{display} is held by {:?} (token {}); a takeover is possible in {} at the earliest if it stops renewing",
            held.owner,
            held.token,
            human(held.takeover_in)
        )
    };
    let Some(wait) = wait else {
        let how = if args.no_wait { "-n" } else { "a wait of 0" };
        return Ok(Acquired::Conflict(format!(
            "{}; not waiting ({how})",
            held_message(&held)
        )));
    };
    let deadline = match wait {
        Wait::AtMost(limit) => Some(limit),
        Wait::Forever => None,
    };
    let bar = progress(display, &held, held.token > 0);
    if cancel.is_cancelled() {
        return Err(Failure::usage("cancelled"));
    }
    let mut options = WaitOptions::default().with_cancel(cancel);
    options.deadline = deadline;
    let result = lease.acquire(options).await;
    bar.finish_and_clear();
    match result {
        Ok(guard) => Ok(Acquired::Guard(guard)),
        Err(LeaseError::DeadlineExceeded(waited)) => Ok(Acquired::Conflict(format!(
            "{display} is still held after waiting {} (the wait ran out)",
            human(waited)
        ))),
        Err(e) => Err(explain(e)),
    }
}

/// `--shared`, `--exclusive`, `--slots` and `--fair`: the primitive's own
/// waiting acquisition, within the wait (no wait makes one attempt; `-n
/// --fair` is a plain attempt, there being no one to queue behind).
async fn acquire_in_mode(
    lease: &Lease,
    args: &LockArgs,
    wait: Option<Wait>,
    display: &str,
    cancel: CancellationToken,
) -> Result<Acquired, Failure> {
    let explain = |e: LeaseError| Failure::lease(&e, format!("{display}: {e}"));
    let mut options = WaitOptions::default().with_cancel(cancel);
    options.deadline = match wait {
        None => Some(Duration::ZERO),
        Some(Wait::AtMost(limit)) => Some(limit),
        Some(Wait::Forever) => None,
    };
    let (result, held_by) = if let Some(slots) = args.slots {
        let semaphore = Semaphore::new(lease.clone(), slots).map_err(explain)?;
        (semaphore.acquire(options).await, "all its slots are held")
    } else if args.fair {
        let fair = FairLease::new(lease.clone()).map_err(explain)?;
        (fair.acquire(options).await, "its holder")
    } else {
        let rwlock = RwLock::new(lease.clone()).map_err(explain)?;
        if args.shared {
            (rwlock.read(options).await, "a writer holds or waits for it")
        } else {
            (
                rwlock.write(options).await,
                "held, or shared holders are left",
            )
        }
    };
    match result {
        Ok(guard) => Ok(Acquired::Guard(guard)),
        Err(LeaseError::DeadlineExceeded(waited)) => Ok(Acquired::Conflict(match wait {
            None => {
                let how = if args.no_wait { "-n" } else { "a wait of 0" };
                format!("{display} is not free ({held_by}); not waiting ({how})")
            }
            Some(_) => format!(
                "{display} is still not free ({held_by}) after waiting {} (the wait ran out)",
                human(waited)
            ),
        })),
        Err(e) => Err(explain(e)),
    }
}

/// `--wait 5s URL …` (a space, not `=`) reads as "wait forever" with the
/// lock URL `5s`: say what to type instead of failing on a strange URL.
fn misread_wait(args: &LockArgs) -> Result<(), Failure> {
    if args.wait == Some(Wait::Forever) && crate::duration::parse_wait_seconds(&args.url).is_ok() {
        return Err(Failure::usage(format!(
            "`--wait {url}` is read as --wait (forever) and the lock URL {url:?}: write --wait={url} (or -w SECONDS) before the URL",
            url = args.url
        )));
    }
    Ok(())
}

fn retryable(e: &LeaseError) -> bool {
    matches!(e, LeaseError::Store(err) if err.is_retryable())
}

/// A spinner on stderr while waiting, only on a terminal.
fn progress(display: &str, held: &HeldBy, known: bool) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() || logging::json_logs() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let holder = if known {
        format!(" held by {:?} (token {})", held.owner, held.token)
    } else {
        String::new()
    };
    bar.set_message(format!("waiting for {display}{holder}"));
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_sets_the_waiters_poll_period_and_is_refused_past_the_ttl() {
        let config = holding::lease_config(Duration::from_secs(15));
        assert_eq!(config.poll_period, Duration::from_millis(100));
        let kept = poll(config.clone(), None).unwrap();
        assert_eq!(kept.poll_period, Duration::from_millis(100));
        let set = poll(config.clone(), Some(Duration::from_secs(2))).unwrap();
        assert_eq!(set.poll_period, Duration::from_secs(2));
        assert_eq!(set.retry_period, config.retry_period);
        let Err(refused) = poll(config, Some(Duration::from_secs(16))) else {
            panic!("a poll longer than the TTL was accepted");
        };
        assert!(
            refused
                .message()
                .contains("--poll 16s is longer than --ttl 15s"),
            "{refused:?}"
        );
    }
}
