//! The committed manual page (`man/casaas.1`, shipped in the package) is
//! the one the command's definitions produce: `cargo xtask man` rewrites it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;

#[test]
fn the_committed_man_page_is_the_commands() {
    let out = casaas().arg("__man").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.starts_with(".ie"), "not a roff page: {page}");
    for section in ["CASAAS LOCK", "CASAAS DOCTOR", "Exit status"] {
        assert!(page.contains(section), "{section} missing");
    }
    let committed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("man/casaas.1"),
    )
    .unwrap_or_default();
    assert!(
        committed == page,
        "casaas-cli/man/casaas.1 is not the command's page: run `cargo xtask man` and commit it"
    );
}
