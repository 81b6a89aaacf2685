//! The README's failover bound is the one `LeaseConfig::failover_bound`
//! documents (the term after the TTL's wait, which the README spells out
//! as `ttl·(1+ρ)`), so that renaming a period in the code cannot leave
//! the headline naming the old one.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

#[test]
fn the_readme_states_the_failover_bound_of_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let config = std::fs::read_to_string(root.join("casaas-core/src/lease/config.rs")).unwrap();
    let stated = readme
        .split("`LeaseConfig::failover_bound` = `")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("the README states the failover bound");
    let (wait, rest) = stated.split_once(" + ").unwrap();
    assert_eq!(wait, "ttl·(1+ρ)", "{stated}");
    let documented = format!("`takeover_wait(ttl) + {rest}`");
    assert!(
        config.contains(&documented),
        "README's bound {stated:?} is not the one failover_bound documents"
    );
}
