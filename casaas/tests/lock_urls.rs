//! One URL, one lock: the library splits every lock URL of the shared table
//! (`lock_urls.tsv`, also read by the command's and the Python package's
//! tests) into the store URL and key the table names, and refuses the URLs
//! that name no lock object.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use casaas::StoreUrl;

#[test]
fn every_lock_url_of_the_table_names_the_same_object() {
    let table = include_str!("lock_urls.tsv");
    let mut rows = 0;
    for line in table
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "{line:?}");
        let (url, store, key) = (fields[0], fields[1], fields[2]);
        let got = StoreUrl::split_lock_url(url);
        if store == "!refused" {
            let err = got.expect_err(url);
            assert_eq!(err.kind(), casaas::ErrorKind::Misconfigured, "{url}: {err}");
        } else {
            assert_eq!(
                got.unwrap_or_else(|e| panic!("{url}: {e}")),
                (store.to_string(), key.to_string()),
                "{url}"
            );
        }
        rows += 1;
    }
    assert!(rows >= 20, "the table has {rows} rows");
}
