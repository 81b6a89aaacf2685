//! The workspace's README and every page under docs/, compiled (and run,
//! unless marked `no_run`) as doctests, so that no code a reader copies is
//! stale. Not published: a published crate cannot include files outside its
//! own folder.

#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../docs/README.md")]
    struct DocsIndex;
    #[doc = include_str!("../../docs/adapters.md")]
    struct Adapters;
    #[doc = include_str!("../../docs/cli.md")]
    struct Cli;
    #[doc = include_str!("../../docs/conformance.md")]
    struct Conformance;
    #[doc = include_str!("../../docs/embedded.md")]
    struct Embedded;
    #[doc = include_str!("../../docs/iceberg.md")]
    struct Iceberg;
    #[doc = include_str!("../../docs/performance.md")]
    struct Performance;
    #[doc = include_str!("../../docs/protocol.md")]
    struct Protocol;
    #[doc = include_str!("../../docs/python.md")]
    struct Python;
    #[doc = include_str!("../../docs/reliability.md")]
    struct Reliability;
    #[doc = include_str!("../../docs/security.md")]
    struct Security;
    #[doc = include_str!("../../docs/simulation.md")]
    struct Simulation;
    #[doc = include_str!("../../docs/vendors.md")]
    struct Vendors;
    #[doc = include_str!("../../docs/vendors-ceph-notes.md")]
    struct VendorsCephNotes;
    #[doc = include_str!("../../docs/vendors-public-reports.md")]
    struct VendorsPublicReports;
    #[doc = include_str!("../../docs/providers/s3.md")]
    struct ProviderS3;
    #[doc = include_str!("../../docs/providers/gcs.md")]
    struct ProviderGcs;
    #[doc = include_str!("../../docs/providers/azure.md")]
    struct ProviderAzure;
}

#[cfg(test)]
mod tests {
    /// Every Markdown page of the docs is compiled by the `docs` module:
    /// a new page must be added there.
    #[test]
    fn every_docs_page_is_compiled() {
        let lib = include_str!("lib.rs");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // casaas/README.md is compiled by the casaas crate itself.
        let mut pages = vec!["README.md".to_string()];
        for dir in ["docs", "docs/providers"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let name = entry.unwrap().file_name().into_string().unwrap();
                if name.ends_with(".md") {
                    pages.push(format!("{dir}/{name}"));
                }
            }
        }
        for page in pages {
            let include = format!("include_str!(\"../../{page}\")");
            assert!(
                lib.contains(&include),
                "{page} is not compiled by the docs module"
            );
        }
    }
}
