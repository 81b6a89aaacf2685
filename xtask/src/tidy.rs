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

/// The crate that only unifies features; left out of the documented graph,
/// where it would be an edge from every crate.
const WORKSPACE_HACK: &str = "workspace-hack";

/// Each workspace crate and the workspace crates it depends on (normal and
/// build dependencies), as cargo sees them, the workspace hack left out.
fn cargo_graph(root: &Path) -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .expect("running cargo metadata");
    assert!(output.status.success(), "cargo metadata failed");
    let metadata: Metadata = serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let names: Vec<&str> = metadata
        .packages
        .iter()
        .map(|p| p.name.as_str())
        .filter(|name| *name != WORKSPACE_HACK)
        .collect();
    metadata
        .packages
        .iter()
        .filter(|p| p.name != WORKSPACE_HACK)
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

/// Each external package and its enabled features, in the build of
/// `packages` (`-p` each; none means `--workspace`) with `edges`.
fn feature_sets(root: &Path, packages: &[&str], edges: &str) -> BTreeMap<String, String> {
    let mut sets: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut args = vec!["tree", "--prefix", "none", "-f", "{p}|{f}", "-e", edges];
    if packages.is_empty() {
        args.push("--workspace");
    }
    for package in packages {
        args.extend(["-p", package]);
    }
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(root)
        .output()
        .expect("running cargo tree");
    assert!(output.status.success(), "cargo tree {args:?} failed");
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let line = line
            .trim_end_matches(" (*)")
            .trim_end_matches(" (proc-macro)");
        if let Some((package, features)) = line.split_once('|')
            && !package.starts_with("casaas")
            && !package.starts_with("xtask")
        {
            // A package built for the host and the target: the union.
            sets.entry(package.to_string()).or_default().extend(
                features
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(str::to_string),
            );
        }
    }
    sets.into_iter()
        .map(|(package, features)| (package, features.into_iter().collect::<Vec<_>>().join(",")))
        .collect()
}

/// Building one package, another, both or the whole workspace (tests
/// included) compiles every shared dependency with the same features, so
/// switching between them rebuilds nothing but the workspace's own crates'
/// binaries: the workspace hack (cargo-hakari's) declares the union.
#[test]
fn every_build_compiles_shared_dependencies_with_the_same_features() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let reference = feature_sets(&root, &[], "normal,build,dev");
    assert!(reference.len() > 100, "cargo tree listed too little");
    // Not `-p casaas-conformance` alone: it and the Python extension keep
    // no edge to the hack, whose tokio `parking_lot` feature is not
    // fork-safe (see `.config/hakari.toml`); with the command it is unified.
    let builds: [&[&str]; 4] = [
        &[],
        &["casaas-cli"],
        &["casaas-cli", "casaas-conformance"],
        &["casaas-sim"],
    ];
    let mut diverging = Vec::new();
    for packages in builds {
        for (package, features) in feature_sets(&root, packages, "normal,build") {
            match reference.get(&package) {
                Some(all) if *all != features => diverging.push(format!(
                    "{package}: [{features}] in `-p {}`, [{all}] with the whole workspace and its tests",
                    packages.join(" -p ")
                )),
                _ => {}
            }
        }
    }
    assert!(
        diverging.is_empty(),
        "shared dependencies are built with other features depending on what is built; run \
         `cargo xtask hakari --write` (one that `.config/hakari.toml` excludes needs its \
         exclusion lifted):\n{}",
        diverging.join("\n")
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
