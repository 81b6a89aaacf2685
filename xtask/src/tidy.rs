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

/// The protocol's time comes from its injected clock (`lease/clock.rs`),
/// so that the simulation controls every instant and every wait: no other
/// file of the protocol reads the system's clocks or sleeps on its own.
#[test]
fn the_protocol_reads_time_only_through_its_clock() {
    const FORBIDDEN: [&str; 6] = [
        "Instant::now(",
        "SystemTime::now(",
        "time::sleep(",
        "thread::sleep(",
        "sleep_until(",
        "time::timeout(",
    ];
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../casaas-core/src");
    let mut files = vec![core.join("guard.rs"), core.join("layout.rs")];
    for entry in std::fs::read_dir(core.join("lease")).expect("casaas-core/src/lease") {
        let path = entry.expect("a directory entry").path();
        if path.file_name().is_some_and(|n| n != "clock.rs") {
            files.push(path);
        }
    }
    assert!(files.len() >= 10, "too few protocol files found: {files:?}");
    let mut found = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a protocol file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if let Some(call) = FORBIDDEN.iter().find(|f| code.contains(*f)) {
                found.push(format!("{}:{}: {call}", path.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the protocol reads time or sleeps past its clock (use the injected Clock): {found:#?}"
    );
}
