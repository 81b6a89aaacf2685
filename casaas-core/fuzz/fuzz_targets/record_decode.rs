//! Fuzzes the lease record parser: `LeaseRecord::decode` must never panic on
//! any body found at a lock key, must answer with a record or a typed error,
//! and a record it accepts must re-encode and decode to itself.

#![no_main]

use casaas_core::lease::{LEASE_RECORD_KIND, LEASE_SCHEMA_VERSION, LeaseError, LeaseRecord};
use libfuzzer_sys::fuzz_target;

const KEY: &str = "fuzz/lock";

fuzz_target!(|body: &[u8]| {
    match LeaseRecord::decode(KEY, body) {
        Ok(record) => {
            assert_eq!(record.kind, LEASE_RECORD_KIND);
            assert_eq!(record.schema, LEASE_SCHEMA_VERSION);
            let again = LeaseRecord::decode(KEY, &record.encode())
                .expect("an accepted record must decode after re-encoding");
            assert_eq!(again, record);
        }
        Err(LeaseError::ForeignObject { key, found }) => {
            assert_eq!(key, KEY);
            // The excerpt shown in error messages is sanitized and bounded.
            assert!(
                found.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "{found:?}"
            );
            assert!(found.len() <= 2 + 2 * 48 + 32, "{found:?}");
        }
        Err(LeaseError::UnsupportedSchema { key, version }) => {
            assert_eq!(key, KEY);
            assert!(version > LEASE_SCHEMA_VERSION);
        }
        Err(LeaseError::Codec { .. }) => {}
        Err(other) => panic!("unexpected error: {other:?}"),
    }
});
