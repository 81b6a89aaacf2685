//! The crate root is the contract, the one way in, the embedded stores and
//! the protocol modules; provider plumbing lives in `provider`. This test
//! lists the root's public items from the source of `lib.rs` and fails
//! when one appears or disappears without this list (and the crate docs)
//! changing with it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

/// The root's public API, as the crate docs describe it.
const DOCUMENTED: &[&str] = &[
    "Capabilities",
    "CasError",
    "CasStore",
    "ErrorKind",
    "FileStore",
    "ForwardingStore",
    "ListEntry",
    "MemoryStore",
    "StoreUrl",
    "StoredObject",
    "Version",
    "guard",
    "layout",
    "lease",
    "open_store",
    "open_store_with",
    "profile",
    "provider",
    "testkit",
];

/// Kept at the root `#[doc(hidden)]`: none (provider plumbing lives only in
/// `provider`).
const HIDDEN: &[&str] = &[];

/// `(name, hidden)` for every `pub use` and `pub mod` at the top level of
/// `source` (column 0; `pub(crate)` is not public).
fn root_items(source: &str) -> Vec<(String, bool)> {
    let mut items = Vec::new();
    let mut hidden = false;
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("#[doc(hidden)]") {
            hidden = true;
            continue;
        }
        if line.starts_with("#[") || line.starts_with("//") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("pub mod ") {
            let name = rest.trim_end_matches([';', '{', ' ']);
            items.push((name.to_string(), hidden));
        } else if line.starts_with("pub use ") {
            let mut statement = line.to_string();
            while !statement.trim_end().ends_with(';') {
                statement.push_str(lines.next().unwrap());
            }
            let body = statement
                .trim_start_matches("pub use ")
                .trim_end_matches(';');
            let names = match body.split_once('{') {
                Some((_, list)) => list.trim_end_matches('}').to_string(),
                None => body.to_string(),
            };
            for path in names.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let name = match path.split_once(" as ") {
                    Some((_, alias)) => alias,
                    None => path.rsplit("::").next().unwrap(),
                };
                items.push((name.to_string(), hidden));
            }
        }
        hidden = false;
    }
    items
}

#[test]
fn the_root_exports_exactly_the_documented_items() {
    let items = root_items(include_str!("../src/lib.rs"));
    let public: BTreeSet<&str> = items
        .iter()
        .filter(|(_, hidden)| !hidden)
        .map(|(n, _)| n.as_str())
        .collect();
    let hidden: BTreeSet<&str> = items
        .iter()
        .filter(|(_, hidden)| *hidden)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        public,
        DOCUMENTED.iter().copied().collect::<BTreeSet<_>>(),
        "the root's public items changed: plumbing belongs in `provider`; an intended \
         change updates DOCUMENTED and the crate docs"
    );
    assert_eq!(
        hidden,
        HIDDEN.iter().copied().collect::<BTreeSet<_>>(),
        "a hidden root item appeared or went: the exceptions only shrink"
    );
}

#[test]
fn the_listing_sees_plumbing_added_to_the_root() {
    let source = "pub use url::{StoreUrl, is_secret_name};\n#[doc(hidden)]\npub use a::b;\npub(crate) use c::d;\npub mod provider {\n";
    assert_eq!(
        root_items(source),
        [
            ("StoreUrl".to_string(), false),
            ("is_secret_name".to_string(), false),
            ("b".to_string(), true),
            ("provider".to_string(), false),
        ]
    );
}
