//! Checks that keep the docs and the code telling the same story.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;

/// The fields of `cargo metadata` read here.
#[derive(Deserialize)]
struct Metadata {
    packages: Vec<Package>,
}

#[derive(Deserialize)]
struct Package {
    name: String,
    dependencies: Vec<Dependency>,
}

#[derive(Deserialize)]
struct Dependency {
    name: String,
    kind: Option<String>,
}

/// Each workspace crate and the workspace crates it depends on (normal and
/// build dependencies), as cargo sees them.
fn cargo_graph(root: &Path) -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .expect("running cargo metadata");
    assert!(output.status.success(), "cargo metadata failed");
    let metadata: Metadata = serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let names: Vec<&str> = metadata.packages.iter().map(|p| p.name.as_str()).collect();
    metadata
        .packages
        .iter()
        .map(|p| {
            let mut deps: Vec<String> = p
                .dependencies
                .iter()
                .filter(|d| d.kind.as_deref() != Some("dev"))
                .filter(|d| d.name != p.name && names.contains(&d.name.as_str()))
                .map(|d| d.name.clone())
                .collect();
            deps.sort();
            deps.dedup();
            (p.name.clone(), deps)
        })
        .collect()
}

/// The graph ARCHITECTURE.md lists between its `crate-graph` markers.
fn documented_graph(text: &str) -> BTreeMap<String, Vec<String>> {
    let start = text
        .find("<!-- crate-graph -->")
        .expect("the crate-graph marker");
    let end = text
        .find("<!-- /crate-graph -->")
        .expect("the closing marker");
    text[start..end]
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| !name.contains(' ') && !name.starts_with("<!--"))
        .map(|(name, deps)| {
            let mut deps: Vec<String> = deps
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(str::to_string)
                .collect();
            deps.sort();
            (name.trim().to_string(), deps)
        })
        .collect()
}

#[test]
fn the_crate_graph_here_is_cargos() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let documented = documented_graph(&text);
    let real = cargo_graph(&root);
    assert!(
        real.len() >= 10,
        "cargo metadata listed too little: {real:?}"
    );
    assert_eq!(
        documented, real,
        "ARCHITECTURE.md's crate graph differs from cargo metadata"
    );
}
