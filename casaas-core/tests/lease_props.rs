#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Property tests of the lease record codec and of `LeaseConfig::validate`.
//!
//! Case counts are kept modest so that the file runs in a few seconds in a
//! debug build; raise them with `PROPTEST_CASES=100000` for a longer search.

use std::time::Duration;

use casaas_core::lease::{
    ExpiryMode, LEASE_RECORD_KIND, LEASE_SCHEMA_VERSION, LeaseConfig, LeaseError, LeaseRecord,
    SessionRef,
};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};

const KEY: &str = "locks/prop";

/// 256 cases unless `PROPTEST_CASES` says otherwise; failures are printed
/// (minimised) rather than written into the source tree.
fn cases() -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(256);
    if let Some(n) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.cases = n;
    }
    config.failure_persistence = None;
    config
}

// ---------------------------------------------------------------------------
// Record codec
// ---------------------------------------------------------------------------

/// Any Unicode string (every scalar value, not only printable ones).
fn unicode(max: usize) -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..max).prop_map(String::from_iter)
}

fn record() -> impl Strategy<Value = LeaseRecord> {
    (
        unicode(40),
        prop_oneof![unicode(40), "[0-9a-f]{32}"],
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
        proptest::option::of((unicode(20), any::<u64>())),
    )
        .prop_map(
            |(owner, nonce, token, ttl_ms, acquired, renewed, released, session)| {
                let mut r = LeaseRecord::new(owner, nonce, token, ttl_ms, renewed);
                r.acquired_at_ms = acquired;
                r.released = released;
                match session {
                    Some((heartbeat, term)) => {
                        let mut named = SessionRef::new("lock", "heartbeat", term);
                        named.heartbeat = heartbeat;
                        r.under_session(named)
                    }
                    None => r,
                }
            },
        )
}

/// The schema a record is written with: 2 when it names a session.
fn schema_of(r: &LeaseRecord) -> u64 {
    if r.session.is_some() {
        LEASE_SCHEMA_VERSION
    } else {
        1
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        unicode(12).prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(unicode(8), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A JSON value that is not a `u64` (for a numeric field).
fn not_u64() -> impl Strategy<Value = Value> {
    json_value().prop_filter("not a u64", |v| !v.is_u64())
}

/// Checks the contract of `decode` on any input: a record that re-encodes
/// to itself, or one of the typed errors, with a sanitized excerpt.
fn check_decode(key: &str, body: &[u8]) -> Result<Option<LeaseRecord>, TestCaseError> {
    match LeaseRecord::decode(key, body) {
        Ok(r) => {
            prop_assert_eq!(r.kind.as_str(), LEASE_RECORD_KIND);
            prop_assert_eq!(r.schema, schema_of(&r));
            let again = LeaseRecord::decode(key, &r.encode()).unwrap();
            prop_assert_eq!(&again, &r);
            Ok(Some(r))
        }
        Err(LeaseError::ForeignObject { key: k, found }) => {
            prop_assert_eq!(k.as_str(), key);
            // At most 48 bytes shown (quotes and backslashes escaped), plus
            // a length note; printable ASCII only.
            prop_assert!(found.len() <= 2 + 2 * 48 + 32, "{}", found);
            prop_assert!(
                found.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "{:?}",
                found
            );
            Ok(None)
        }
        Err(LeaseError::UnsupportedSchema { key: k, version }) => {
            prop_assert_eq!(k.as_str(), key);
            prop_assert!(version > LEASE_SCHEMA_VERSION);
            Ok(None)
        }
        Err(LeaseError::Codec { key: k, .. }) => {
            prop_assert_eq!(k.as_str(), key);
            Ok(None)
        }
        Err(other) => Err(TestCaseError::fail(format!("unexpected error {other:?}"))),
    }
}

fn is_foreign(result: Result<LeaseRecord, LeaseError>) -> bool {
    matches!(result, Err(LeaseError::ForeignObject { .. }))
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn encode_decode_round_trip(r in record()) {
        let body = r.encode();
        let back = LeaseRecord::decode(KEY, &body).unwrap();
        prop_assert_eq!(&back, &r);
        // The encoding is a JSON object carrying the envelope.
        let v: Value = serde_json::from_slice(&body).unwrap();
        prop_assert_eq!(&v["kind"], &json!(LEASE_RECORD_KIND));
        prop_assert_eq!(&v["schema"], &json!(schema_of(&r)));
    }

    #[test]
    fn arbitrary_bytes_never_panic(key in "[a-z]{1,8}(/[a-z0-9]{1,8}){0,2}", body in vec(any::<u8>(), 0..300)) {
        check_decode(&key, &body)?;
    }

    #[test]
    fn mutated_records_never_panic(
        r in record(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut body = r.encode().to_vec();
        for (at, byte, op) in edits {
            let i = at.index(body.len() + 1);
            match op {
                0 if i < body.len() => body[i] = byte,
                1 => body.insert(i, byte),
                _ if i < body.len() => { body.remove(i); }
                _ => {}
            }
        }
        if truncate {
            body.truncate(cut.index(body.len() + 1));
        }
        check_decode(KEY, &body)?;
    }

    #[test]
    fn a_truncated_record_is_foreign(r in record(), cut in any::<prop::sample::Index>()) {
        let body = r.encode();
        // Any proper prefix of a JSON object is not valid JSON.
        let prefix = &body[..cut.index(body.len())];
        prop_assert!(is_foreign(LeaseRecord::decode(KEY, prefix)));
    }

    #[test]
    fn json_of_another_shape_is_foreign(v in json_value()) {
        // Random JSON essentially never carries our envelope; make sure.
        prop_assume!(v.get("kind") != Some(&json!(LEASE_RECORD_KIND)));
        let body = serde_json::to_vec(&v).unwrap();
        prop_assert!(is_foreign(LeaseRecord::decode(KEY, &body)));
    }

    #[test]
    fn another_kind_is_foreign(r in record(), kind in json_value()) {
        prop_assume!(kind != json!(LEASE_RECORD_KIND));
        let mut v = serde_json::to_value(&r).unwrap();
        v["kind"] = kind;
        let body = serde_json::to_vec(&v).unwrap();
        prop_assert!(is_foreign(LeaseRecord::decode(KEY, &body)));
    }

    #[test]
    fn our_envelope_with_a_wrong_body_is_foreign(
        r in record(),
        field in prop::sample::select(vec!["owner", "nonce", "token", "ttl_ms", "acquired_at_ms", "renewed_at_ms", "released"]),
        replacement in prop::option::of(not_u64()),
    ) {
        let mut v = serde_json::to_value(&r).unwrap();
        let wrong_type = match (field, &replacement) {
            (_, None) => true, // removed
            ("owner" | "nonce", Some(x)) => !x.is_string(),
            ("released", Some(x)) => !x.is_boolean(),
            (_, Some(_)) => true, // numeric fields get a non-u64
        };
        prop_assume!(wrong_type);
        let removed = replacement.is_none();
        match replacement {
            Some(x) => { v[field] = x; }
            None => { v.as_object_mut().unwrap().remove(field); }
        }
        let body = serde_json::to_vec(&v).unwrap();
        let result = LeaseRecord::decode(KEY, &body);
        if field == "released" && removed {
            // `released` defaults to false when missing.
            let mut expected = r.clone();
            expected.released = false;
            prop_assert_eq!(result.unwrap(), expected);
        } else {
            prop_assert!(is_foreign(result));
        }
    }

    #[test]
    fn unknown_fields_are_tolerated(r in record(), extra in btree_map("x_[a-z]{1,6}", json_value(), 1..4)) {
        let mut v = serde_json::to_value(&r).unwrap();
        for (k, x) in extra {
            v[k] = x;
        }
        let body = serde_json::to_vec(&v).unwrap();
        prop_assert_eq!(LeaseRecord::decode(KEY, &body).unwrap(), r);
    }

    #[test]
    fn a_future_schema_is_unsupported(
        key in "[a-z]{1,8}/[a-z]{1,8}",
        version in (LEASE_SCHEMA_VERSION + 1)..=u64::MAX,
        rest in btree_map(unicode(8), json_value(), 0..4),
    ) {
        // Whatever else the body holds: a newer schema may use other fields.
        let mut m: Map<String, Value> = rest.into_iter().collect();
        m.insert("kind".into(), json!(LEASE_RECORD_KIND));
        m.insert("schema".into(), json!(version));
        let body = serde_json::to_vec(&Value::Object(m)).unwrap();
        match LeaseRecord::decode(&key, &body) {
            Err(LeaseError::UnsupportedSchema { key: k, version: found }) => {
                prop_assert_eq!(k, key);
                prop_assert_eq!(found, version);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn a_schema_that_is_not_a_newer_integer_is_foreign(r in record(), schema in json_value()) {
        prop_assume!(schema.as_u64().is_none_or(|s| s < LEASE_SCHEMA_VERSION));
        let mut v = serde_json::to_value(&r).unwrap();
        v["schema"] = schema;
        let body = serde_json::to_vec(&v).unwrap();
        prop_assert!(is_foreign(LeaseRecord::decode(KEY, &body)));
    }
}

// ---------------------------------------------------------------------------
// LeaseConfig::validate against an independent oracle
// ---------------------------------------------------------------------------

/// The configuration fields, as named in messages.
const FIELDS: [&str; 9] = [
    "ttl",
    "renew_interval",
    "renew_deadline",
    "retry_period",
    "poll_period",
    "drift_margin",
    "safety_margin",
    "request_timeout",
    "expiry",
];

/// The documented inequalities (`config.rs`, `docs/protocol.md`), each with
/// the fields whose change can satisfy it.
#[derive(Debug)]
struct Constraint {
    name: &'static str,
    fix: &'static [&'static str],
    /// `Some(holds)`, or `None` when a floating-point product lies within
    /// rounding distance of the bound (the implementation computes it with
    /// `Duration::mul_f64`; a nanosecond either way is not a contract).
    holds: Option<bool>,
}

fn ns(d: Duration) -> u128 {
    d.as_nanos()
}

/// Compares `lhs` with a real-valued bound: `Some(lhs < bound)` (or `<=`
/// when `inclusive`) unless `lhs` is within rounding distance of it.
fn below(lhs: u128, bound: f64, scale: f64, inclusive: bool) -> Option<bool> {
    let tolerance = 2.0 + scale * 1e-12;
    let lhs = lhs as f64;
    if lhs < bound - tolerance {
        Some(true)
    } else if lhs > bound + tolerance {
        Some(false)
    } else if inclusive && lhs == bound {
        Some(true)
    } else {
        None
    }
}

fn oracle(c: &LeaseConfig) -> Vec<Constraint> {
    let rho = c.drift_margin;
    let drift_ok = rho.is_finite() && (0.0..0.5).contains(&rho);
    let ttl = ns(c.ttl) as f64;
    let mut out = vec![
        Constraint {
            name: "ttl >= 1ms",
            fix: &["ttl"],
            holds: Some(c.ttl >= Duration::from_millis(1)),
        },
        Constraint {
            name: "0 <= drift_margin < 0.5",
            fix: &["drift_margin"],
            holds: Some(drift_ok),
        },
        Constraint {
            name: "retry_period > 0",
            fix: &["retry_period"],
            holds: Some(!c.retry_period.is_zero()),
        },
        Constraint {
            name: "poll_period > 0",
            fix: &["poll_period"],
            holds: Some(!c.poll_period.is_zero()),
        },
        Constraint {
            name: "poll_period <= ttl",
            fix: &["poll_period", "ttl"],
            holds: Some(c.poll_period <= c.ttl),
        },
        Constraint {
            name: "renew_interval > 0",
            fix: &["renew_interval"],
            holds: Some(!c.renew_interval.is_zero()),
        },
        Constraint {
            name: "request_timeout > 0",
            fix: &["request_timeout"],
            holds: Some(!c.request_timeout.is_zero()),
        },
    ];
    if drift_ok {
        // renew_deadline < max(0, ttl·(1−ρ) − safety_margin)
        let validity = (ttl * (1.0 - rho) - ns(c.safety_margin) as f64).max(0.0);
        out.push(Constraint {
            name: "renew_deadline < ttl*(1-drift_margin) - safety_margin",
            fix: &["renew_deadline", "safety_margin", "ttl"],
            holds: below(ns(c.renew_deadline), validity, ttl, false),
        });
    }
    out.push(Constraint {
        name: "renew_interval + retry_period <= renew_deadline",
        fix: &["renew_interval", "retry_period", "renew_deadline"],
        holds: Some(ns(c.renew_interval) + ns(c.retry_period) <= ns(c.renew_deadline)),
    });
    out.push(Constraint {
        name: "request_timeout <= renew_deadline",
        fix: &["request_timeout", "renew_deadline"],
        holds: Some(c.request_timeout <= c.renew_deadline),
    });
    if let ExpiryMode::WallClock { max_skew } = c.expiry {
        out.push(Constraint {
            name: "max_skew < ttl",
            fix: &["expiry", "ttl"],
            holds: Some(max_skew < c.ttl),
        });
        if drift_ok {
            // safety_margin >= 2·ρ·ttl, i.e. 2·ρ·ttl <= safety_margin.
            let needed = 2.0 * rho * ttl;
            let holds = below(ns(c.safety_margin), needed, ttl, false).map(|lt| !lt);
            out.push(Constraint {
                name: "safety_margin >= 2*drift_margin*ttl (wall-clock mode)",
                fix: &["safety_margin", "drift_margin", "ttl"],
                holds,
            });
        }
    }
    out
}

/// Durations up to 2^62 s: from zero and single nanoseconds to ages.
/// (Sums and `mul_f64` products of these cannot overflow `Duration`.)
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        3 => prop::sample::select(vec![
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(999_999),
            Duration::from_millis(1),
            Duration::from_secs(1),
            Duration::from_secs(15),
        ]),
        4 => (0u64..=120_000).prop_map(Duration::from_millis),
        2 => any::<u64>().prop_map(Duration::from_nanos),
        1 => (0u64..=(1 << 62), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn drift() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => prop::sample::select(vec![
            0.0, -0.0, 0.01, 0.05, 0.499_999_999, 0.5, -1e-12, 1.0,
            f64::NAN, f64::INFINITY, f64::NEG_INFINITY,
        ]),
        4 => 0.0..0.05f64,
        2 => 0.0..0.5f64,
        1 => -1.0..2.0f64,
        1 => any::<f64>(),
    ]
}

/// How one field is set: kept from `with_ttl`, random, or placed exactly on
/// (or one nanosecond either side of) the bound it takes part in.
#[derive(Debug, Clone, Copy)]
enum Tweak {
    Keep,
    Random,
    Bound,
    Above,
    Below,
}

fn tweak() -> impl Strategy<Value = Tweak> {
    prop_oneof![
        12 => Just(Tweak::Keep),
        1 => Just(Tweak::Random),
        2 => Just(Tweak::Bound),
        1 => Just(Tweak::Above),
        1 => Just(Tweak::Below),
    ]
}

/// `step` is the smallest offset from `bound` that the oracle decides:
/// 1 ns for integer bounds, more for bounds computed in floating point.
fn apply(t: Tweak, kept: Duration, random: Duration, bound: Duration, step: Duration) -> Duration {
    match t {
        Tweak::Keep => kept,
        Tweak::Random => random,
        Tweak::Bound => bound,
        Tweak::Above => bound + step,
        Tweak::Below => bound.saturating_sub(step),
    }
}

/// `d·f` without `Duration::mul_f64` (which panics on NaN or overflow).
fn scaled(d: Duration, f: f64) -> Duration {
    let x = d.as_secs_f64() * f;
    Duration::try_from_secs_f64(x).unwrap_or(Duration::ZERO)
}

fn config() -> impl Strategy<Value = LeaseConfig> {
    (
        duration(),
        drift(),
        vec((tweak(), duration()), 7),
        prop::option::of(duration()),
        any::<bool>(),
    )
        .prop_map(|(ttl, rho, tw, skew, skew_on_bound)| {
            let mut c = LeaseConfig::from_ttl(ttl);
            c.drift_margin = rho;
            let one = Duration::from_nanos(1);
            c.ttl = apply(tw[0].0, c.ttl, tw[0].1, Duration::from_millis(1), one);
            let ttl = c.ttl;
            let float_step = Duration::from_nanos(3) + scaled(ttl, 2e-12);
            // Wall-clock bound first, else the validity bound.
            let safety_bound = match skew {
                Some(_) => scaled(ttl, 2.0 * rho),
                None => scaled(ttl, 1.0 - rho).saturating_sub(c.renew_deadline),
            };
            c.safety_margin = apply(tw[1].0, c.safety_margin, tw[1].1, safety_bound, float_step);
            let validity = scaled(ttl, 1.0 - rho).saturating_sub(c.safety_margin);
            c.renew_deadline = apply(tw[2].0, c.renew_deadline, tw[2].1, validity, float_step);
            c.retry_period = apply(
                tw[3].0,
                c.retry_period,
                tw[3].1,
                c.renew_deadline.saturating_sub(c.renew_interval),
                one,
            );
            c.renew_interval = apply(
                tw[4].0,
                c.renew_interval,
                tw[4].1,
                c.renew_deadline.saturating_sub(c.retry_period),
                one,
            );
            c.request_timeout = apply(tw[5].0, c.request_timeout, tw[5].1, c.renew_deadline, one);
            if let Some(random) = skew {
                let max_skew = if skew_on_bound {
                    apply(tw[6].0, ttl / 10, random, ttl, one)
                } else {
                    random
                };
                c.expiry = ExpiryMode::WallClock { max_skew };
            }
            c
        })
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn validate_accepts_exactly_the_documented_configurations(c in config()) {
        let constraints = oracle(&c);
        let violated: Vec<&str> = constraints
            .iter()
            .filter(|k| k.holds == Some(false))
            .map(|k| k.name)
            .collect();
        let undecided = constraints.iter().any(|k| k.holds.is_none());
        match c.validate() {
            Ok(()) => {
                prop_assert!(violated.is_empty(), "accepted {:?} violating {:?}", c, violated);
            }
            Err(LeaseError::InvalidConfig(message)) => {
                prop_assert!(
                    !violated.is_empty() || undecided,
                    "rejected {:?} satisfying every constraint: {}", c, message
                );
                // The message starts with the field to change, and changing
                // that field can satisfy a violated constraint.
                let first = message
                    .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .find(|w| !w.is_empty())
                    .unwrap_or_default();
                prop_assert!(FIELDS.contains(&first), "message does not start with a field: {}", message);
                let fixable = constraints
                    .iter()
                    .filter(|k| k.holds != Some(true))
                    .any(|k| k.fix.contains(&first));
                prop_assert!(fixable, "message names {} but violated are {:?}: {}", first, violated, message);
            }
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }

    /// `with_ttl` defaults are valid for every TTL from 10 ms up, and the
    /// derived margins are what the documentation states.
    #[test]
    fn with_ttl_is_valid(ms in 10u64..=86_400_000) {
        let c = LeaseConfig::from_ttl(Duration::from_millis(ms));
        prop_assert!(c.validate().is_ok(), "{:?}: {:?}", c, c.validate());
        let validity = c.holder_validity();
        prop_assert!(validity < c.ttl);
        prop_assert!(c.takeover_wait(c.ttl) > c.ttl);
    }
}

/// The generator must exercise both sides of the oracle, and rounding must
/// leave almost every case decided.
#[test]
fn config_generator_covers_both_outcomes() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};

    let mut runner = TestRunner::new_with_rng(
        ProptestConfig::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = config();
    let (mut accepted, mut rejected, mut undecided) = (0, 0, 0);
    let n = 2_000;
    for _ in 0..n {
        let c = strategy.new_tree(&mut runner).unwrap().current();
        let constraints = oracle(&c);
        if constraints.iter().any(|k| k.holds == Some(false)) {
            rejected += 1;
        } else if constraints.iter().all(|k| k.holds == Some(true)) {
            accepted += 1;
        } else {
            undecided += 1;
        }
    }
    eprintln!("accepted {accepted}, rejected {rejected}, undecided {undecided} of {n}");
    assert!(accepted >= n / 10, "{accepted}");
    assert!(rejected >= n / 10, "{rejected}");
    assert!(undecided <= n / 8, "{undecided}");
}
