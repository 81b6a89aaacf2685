#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Smoke tests of the deterministic simulation: a seed replays exactly, the
//! protocol shows no violation, and a broken configuration is caught, which
//! proves the checker can fail.

use casaas_sim::{Primitive, SimConfig, run};

const OPS: u64 = 4_000;

#[test]
fn same_seed_same_history() {
    let first = run(&SimConfig::new(OPS, 7)).unwrap();
    let again = run(&SimConfig::new(OPS, 7)).unwrap();
    let other = run(&SimConfig::new(OPS, 8)).unwrap();
    assert_eq!(
        first.digest, again.digest,
        "{}\n{}",
        first.summary, again.summary
    );
    assert_eq!(first.ops, again.ops);
    assert_ne!(first.digest, other.digest);
    assert!(first.ops >= OPS);
    for report in [&first, &other] {
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }
}

#[test]
fn wall_clock_expiry_within_declared_skew_is_safe() {
    let report = run(&SimConfig::new(OPS, 3).wall_clock()).unwrap();
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
}

#[test]
fn drift_beyond_the_declared_bound_is_caught() {
    // Clocks drift by up to 30% while the lease declares 5%: a frozen slow
    // holder still believes when a fast contender has waited its TTL out.
    // The lease primitives alone, with enough operations that their share
    // does not depend on how many other primitives there are.
    let config =
        SimConfig::drift_beyond_bound(100_000, 1).only(&[Primitive::Lease, Primitive::SharedLease]);
    let report = run(&config).unwrap();
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("mutual exclusion")),
        "the checker missed the broken configuration: {}",
        report.summary
    );
}

#[test]
fn wall_clock_expiry_beyond_declared_skew_is_caught() {
    // The wall-clock rule declares 1 s of skew; clocks are up to 8 s apart.
    // The lease primitives alone, with enough operations that the verdict
    // does not hang on a few acquisitions (or on how many other primitives
    // share the run).
    let config = SimConfig::wall_clock_undeclared_skew(100_000, 1)
        .only(&[Primitive::Lease, Primitive::SharedLease]);
    let report = run(&config).unwrap();
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("mutual exclusion")),
        "the checker missed the broken configuration: {}",
        report.summary
    );
}

#[test]
fn no_drift_margin_is_caught() {
    // Clocks drift by 5% but the lease declares none: holders count a bare
    // TTL on slow clocks while contenders wait a bare TTL on fast ones.
    let mut config = SimConfig::new(20_000, 1);
    config.lease.drift_margin = 0.0;
    config.lease.safety_margin = std::time::Duration::ZERO;
    let report = run(&config).unwrap();
    assert!(
        !report.violations.is_empty(),
        "the checker missed the broken configuration: {}",
        report.summary
    );
}

#[test]
fn explored_configurations_replay_and_stay_safe() {
    let first = run(&SimConfig::new(OPS, 5).explore()).unwrap();
    let again = run(&SimConfig::new(OPS, 5).explore()).unwrap();
    let fixed = run(&SimConfig::new(OPS, 5)).unwrap();
    assert_eq!(first.digest, again.digest, "{}", first.summary);
    assert_ne!(first.digest, fixed.digest, "the clients drew no timing");
    assert!(first.violations.is_empty(), "{:#?}", first.violations);
}

#[test]
fn drawn_configurations_are_valid_and_reach_the_edges() {
    use rand::SeedableRng;
    let base = SimConfig::new(OPS, 1).lease;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let drawn: Vec<_> = (0..400)
        .map(|_| casaas_sim::draw_lease(&base, &mut rng))
        .collect();
    for c in &drawn {
        c.validate().unwrap();
    }
    assert!(drawn.iter().any(|c| c.drift_margin == 0.0));
    assert!(drawn.iter().any(|c| c.drift_margin > 0.2));
    assert!(drawn.iter().any(|c| c.safety_margin.is_zero()));
    assert!(
        drawn
            .iter()
            .any(|c| c.renew_deadline.as_secs_f64() > 0.97 * c.holder_validity().as_secs_f64())
    );
    assert!(
        drawn
            .iter()
            .any(|c| c.request_timeout.as_secs_f64() > 0.9 * c.renew_deadline.as_secs_f64())
    );
    assert!(
        drawn.iter().filter(|c| **c == base).count() < 4,
        "draws fell back"
    );
}
