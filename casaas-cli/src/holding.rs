//! What `lock` and `elect` share: lease timing, the grace check, the
//! child's environment, and the watch that says when the lease ended.

use std::sync::Arc;
use std::time::Duration;

use casaas_core::CasStore;
use casaas_core::lease::{
    Clock, Lease, LeaseConfig, LeaseError, LeaseGuard, LeaseStatus, LostReason,
};

use crate::cli::LeaseArgs;
use crate::duration::human;
use crate::exit::Failure;
use crate::target::LockTarget;

/// The longest default grace period.
const MAX_DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The lease timing for a TTL: the library's renewal cadence (every TTL/3),
/// but give up (and stop the command) when no renewal succeeded for TTL/2
/// rather than the library's 2·TTL/3, which leaves about 0.44·TTL before
/// anyone can take over for the stop sequence.
pub fn lease_config(ttl: Duration) -> LeaseConfig {
    let mut config = LeaseConfig::from_ttl(ttl);
    config.renew_deadline = ttl / 2;
    config
}

/// Time from the moment casaas gives up renewing to the end of its
/// validity (before which no contender can take over).
pub fn stop_budget(config: &LeaseConfig) -> Duration {
    config
        .holder_validity()
        .saturating_sub(config.renew_deadline)
}

/// The grace period: as given if it fits in the stop budget, else refused;
/// by default half the budget, at most 10s.
pub fn grace(args: &LeaseArgs, config: &LeaseConfig) -> Result<Duration, Failure> {
    let budget = stop_budget(config);
    match args.grace {
        None => Ok((budget / 2).min(MAX_DEFAULT_GRACE)),
        Some(grace) if grace < budget => Ok(grace),
        Some(grace) => Err(Failure::usage(format!(
            "--grace {} is not shorter than the {} left between giving up renewal and a possible takeover with --ttl {}: \
             lower --grace below {} or raise --ttl (to about {} or more)",
            human(grace),
            human(budget),
            human(config.ttl),
            human(budget),
            human(grace.mul_f64(2.5)),
        ))),
    }
}

/// The lease on `target`'s key, with the configuration checked against the
/// store (e.g. a TTL too short for its write rate limit).
pub fn lease(
    store: Arc<dyn CasStore>,
    target: &LockTarget,
    owner: &str,
    config: LeaseConfig,
) -> Result<Lease, Failure> {
    let ttl = config.ttl;
    Lease::new(store, target.key.clone(), owner, config).map_err(|e| match e {
        LeaseError::InvalidConfig(message)
            if message.contains("minimum interval between writes") =>
        {
            Failure::usage(format!(
                "--ttl {} is too short for {}: casaas renews every TTL/3, and {message}",
                human(ttl),
                target.display
            ))
        }
        LeaseError::InvalidConfig(message) => {
            Failure::usage(format!("--ttl {} cannot be used: {message}", human(ttl)))
        }
        other => Failure::lease(&other, format!("{}: {other}", target.display)),
    })
}

/// The environment of the command run under `guard`.
pub fn child_env(guard: &LeaseGuard, target: &LockTarget) -> Vec<(&'static str, String)> {
    vec![
        ("CASAAS_FENCING_TOKEN", guard.token().to_string()),
        ("CASAAS_LOCK_URL", target.display.clone()),
        ("CASAAS_OWNER", guard.owner().to_string()),
    ]
}

/// Resolves with a reason once the lease is lost, or once its validity
/// ends without a renewal (a watchdog independent of the renewal task).
pub fn lease_end(
    guard: &LeaseGuard,
    clock: Arc<dyn Clock>,
) -> impl std::future::Future<Output = String> + Send + 'static {
    let mut status = guard.subscribe();
    let (owner, token) = (guard.owner().to_string(), guard.token());
    async move {
        loop {
            let current = status.borrow_and_update().clone();
            let valid_until = match current {
                LeaseStatus::Lost(reason) => return explain_loss(&reason, &owner, token),
                LeaseStatus::Held { valid_until, .. } => valid_until,
                other => {
                    return format!(
                        "its lease entered a state this build does not know: {other:?}"
                    );
                }
            };
            let now = clock.now();
            if now >= valid_until {
                return "its validity ended without a successful renewal".to_string();
            }
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        return "the lease handle was dropped".to_string();
                    }
                }
                () = clock.sleep(valid_until - now) => {}
            }
        }
    }
}

/// Why the lease ended, for people. The library calls any foreign write
/// "superseded" and names the owner in the record; after `casaas release
/// --force` that is the holder's own id (the release keeps owner and
/// token), which reads as if it had superseded itself.
pub fn explain_loss(reason: &LostReason, own_owner: &str, own_token: u64) -> String {
    match reason {
        LostReason::Superseded {
            owner: Some(owner),
            token: Some(token),
        } if owner == own_owner && *token == own_token => format!(
            "released by force by another process (casaas release --force), token {token} kept, the next holder gets {}",
            token + 1
        ),
        LostReason::Superseded {
            owner: Some(owner),
            token: Some(token),
        } => format!("taken over by {owner:?} (token {token})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_timing_is_valid_and_leaves_a_stop_budget() {
        for ms in [1_000, 15_000, 600_000] {
            let config = lease_config(Duration::from_millis(ms));
            config.validate().unwrap();
            let budget = stop_budget(&config);
            assert!(
                budget > config.ttl / 3 && budget < config.ttl / 2,
                "{budget:?}"
            );
        }
    }

    #[test]
    fn casaas_renews_at_the_librarys_cadence_of_a_third_of_the_ttl() {
        for ms in [1_000, 15_000, 30_000, 600_000] {
            let ttl = Duration::from_millis(ms);
            let config = lease_config(ttl);
            assert_eq!(config.renew_interval, ttl / 3, "{ttl:?}");
            assert_eq!(
                config.renew_interval,
                LeaseConfig::from_ttl(ttl).renew_interval,
                "{ttl:?}: the README's cost per lease-month assumes the library's cadence"
            );
            assert_eq!(config.renew_deadline, ttl / 2, "{ttl:?}");
        }
    }

    #[test]
    fn grace_must_fit_in_the_budget() {
        let config = lease_config(Duration::from_secs(15));
        let args = |grace| LeaseArgs {
            ttl: config.ttl,
            grace,
            root: None,
        };
        let default = grace(&args(None), &config).unwrap();
        assert_eq!(default, stop_budget(&config) / 2);
        assert!(grace(&args(Some(Duration::from_secs(5))), &config).is_ok());
        let err = grace(&args(Some(Duration::from_secs(10))), &config).unwrap_err();
        assert!(
            err.message().contains("--grace 10s is not shorter"),
            "{}",
            err.message()
        );
        let long = lease_config(Duration::from_secs(120));
        assert_eq!(grace(&args(None), &long).unwrap(), MAX_DEFAULT_GRACE);
    }
}
