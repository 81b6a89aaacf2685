//! The lease modules import each other without a circle: each can be read,
//! changed and tested from the modules below it. A module that needs
//! something from one above it gets a trait or a type moved down instead
//! (the guard's `ReleaseNote`, the guard's `SessionLink`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `super::name` and `super::{a, b::c}` uses of `text`, as module names.
fn sibling_imports(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("super::") {
        let rest = &text[at + "super::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end].split(',').collect()
        } else {
            vec![rest]
        };
        for name in names {
            let name: String = name
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                found.insert(name);
            }
        }
    }
    found
}

/// A circle in `graph`, if there is one, as the modules along it.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(circle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(circle);
        }
    }
    None
}

#[test]
fn the_lease_modules_import_each_other_without_a_circle() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lease");
    let mut sources = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            sources.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    assert!(sources.contains_key("acquire") && sources.contains_key("handle"));
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let graph: BTreeMap<String, BTreeSet<String>> = sources
        .iter()
        .map(|(name, text)| {
            let mut imports = sibling_imports(text, &modules);
            imports.remove(name);
            (name.clone(), imports)
        })
        .collect();
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "the lease modules import in a circle: {}",
            circle.join(" → ")
        );
    }
}

#[test]
fn a_circle_is_found() {
    let modules: BTreeSet<String> = ["acquire", "handle", "session"].map(String::from).into();
    let graph: BTreeMap<String, BTreeSet<String>> = [
        (
            "acquire",
            sibling_imports("use super::handle::LeaseGuard;", &modules),
        ),
        (
            "handle",
            sibling_imports("use super::{session::SessionLink, x};", &modules),
        ),
        (
            "session",
            sibling_imports("let _ = super::acquire::Lease::new;", &modules),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let circle = find_circle(&graph).expect("acquire → handle → session → acquire");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 4);
}
