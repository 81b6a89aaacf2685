//! `cargo xtask api`: the public API of every published crate, as rustdoc
//! shows it, compared with the listing committed under `api/`.
//!
//! The docs are built on stable (`cargo doc --workspace --no-deps`, with
//! warnings denied), then again for the published crates alone (`-p` each:
//! no test feature a dev-only member enables is in them), and each crate's
//! listing is read from the HTML: every
//! item of `all.html` with its declaration (fields and variants included)
//! and the headers of its methods, associated items and trait
//! implementations (blanket implementations left out: they follow the
//! standard library, not this crate), plus the re-exports of the crate
//! root and its modules. A listing that differs from `api/CRATE.txt` fails
//! with the difference; `cargo xtask api --accept` records it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A published crate: its package name and its library's name.
struct Published {
    package: String,
    lib: String,
}

/// Builds the docs and checks (or, with `accept`, records) every published
/// crate's listing.
pub fn api(root: &Path, accept: bool) -> Result<()> {
    let (target, crates) = metadata(root)?;
    eprintln!("xtask: RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .current_dir(root)
        .status()
        .context("running cargo doc")?;
    if !status.success() {
        bail!("cargo doc failed ({status}): the docs have warnings");
    }
    // The listing is what a user of the published crates sees: their docs
    // again, built with the published crates alone, so that no test support
    // a workspace member turns on (casaas-core's `testkit`, wanted by the
    // simulation, the bench and xtask) reads as public API.
    let mut args = vec!["doc".to_string(), "--no-deps".to_string()];
    for krate in &crates {
        args.push("-p".into());
        args.push(krate.package.clone());
    }
    eprintln!(
        "xtask: RUSTDOCFLAGS=\"-D warnings\" cargo {}",
        args.join(" ")
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(&args)
        .env("RUSTDOCFLAGS", "-D warnings")
        .current_dir(root)
        .status()
        .context("running cargo doc")?;
    if !status.success() {
        bail!("cargo doc of the published crates failed ({status})");
    }
    let dir = root.join("api");
    std::fs::create_dir_all(&dir)?;
    let mut changed = Vec::new();
    for krate in &crates {
        let listing = listing(&target.join("doc").join(&krate.lib))
            .with_context(|| format!("reading the docs of {}", krate.package))?;
        let path = dir.join(format!("{}.txt", krate.package));
        let recorded = std::fs::read_to_string(&path).unwrap_or_default();
        if recorded == listing {
            continue;
        }
        if accept {
            std::fs::write(&path, &listing)?;
            eprintln!("xtask: recorded api/{}.txt", krate.package);
        } else {
            eprintln!("xtask: the public API of {} changed:", krate.package);
            eprint!("{}", diff(&recorded, &listing));
            changed.push(krate.package.clone());
        }
    }
    if !changed.is_empty() {
        bail!(
            "the public API of {} changed without being recorded; if intended, run \
             `cargo xtask api --accept` and commit api/",
            changed.join(", ")
        );
    }
    eprintln!("xtask: the public API matches api/");
    Ok(())
}

/// The target directory and the published crates with a library.
fn metadata(root: &Path) -> Result<(PathBuf, Vec<Published>)> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed");
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let target = meta["target_directory"]
        .as_str()
        .context("no target_directory")?;
    let mut crates = Vec::new();
    for package in meta["packages"].as_array().context("no packages")? {
        // `publish = false` is an empty list; null means crates.io.
        if !package["publish"].is_null() {
            continue;
        }
        let lib = package["targets"].as_array().and_then(|targets| {
            targets.iter().find(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "lib"))
            })
        });
        if let (Some(name), Some(lib)) = (package["name"].as_str(), lib) {
            crates.push(Published {
                package: name.to_string(),
                lib: lib["name"].as_str().unwrap_or(name).replace('-', "_"),
            });
        }
    }
    crates.sort_by(|a, b| a.package.cmp(&b.package));
    Ok((PathBuf::from(target), crates))
}

/// The listing of one crate's docs directory.
fn listing(doc: &Path) -> Result<String> {
    let all = std::fs::read_to_string(doc.join("all.html"))?;
    let mut out = String::new();
    let mut modules = BTreeSet::from([String::new()]);
    for (kind, href, name) in all_items(&all) {
        if let Some((module, _)) = name.rsplit_once("::") {
            let mut prefix = String::new();
            for part in module.split("::") {
                prefix = if prefix.is_empty() {
                    part.to_string()
                } else {
                    format!("{prefix}::{part}")
                };
                modules.insert(prefix.clone());
            }
        }
        let page =
            std::fs::read_to_string(doc.join(&href)).with_context(|| format!("reading {href}"))?;
        out.push_str(&format!("{kind} {name}\n"));
        for line in item_lines(&page) {
            out.push_str(&format!("    {line}\n"));
        }
    }
    for module in &modules {
        let path = doc.join(module.replace("::", "/")).join("index.html");
        let Ok(page) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in reexports(&page) {
            let at = if module.is_empty() { "crate" } else { module };
            out.push_str(&format!("reexport {at}: {line}\n"));
        }
    }
    Ok(out)
}

/// `(kind, href, name)` for each entry of `all.html`.
fn all_items(html: &str) -> Vec<(String, String, String)> {
    let mut items = Vec::new();
    for section in html.split("<h3 id=\"").skip(1) {
        let Some((kind, rest)) = section.split_once('"') else {
            continue;
        };
        for entry in rest.split("<li><a href=\"").skip(1) {
            if let Some((href, rest)) = entry.split_once("\">")
                && let Some((name, _)) = rest.split_once("</a>")
            {
                items.push((kind.to_string(), href.to_string(), text(name)));
            }
        }
    }
    items
}

/// An item page's declaration and its code headers (methods, associated
/// items, implementations), blanket implementations left out.
fn item_lines(html: &str) -> Vec<String> {
    let html = match html.find("id=\"blanket-implementations\"") {
        Some(end) => &html[..end],
        None => html,
    };
    let mut lines = Vec::new();
    if let Some(decl) = between(html, "<pre class=\"rust item-decl\">", "</pre>") {
        lines.push(text(&decl.replace("</div>", " ")));
    }
    // `<h3 class="code-header">` (an implementation) and `<h4 …>` (an item
    // of it); an `<h4>` before any `<h3>` is a trait's own method.
    let marker = " class=\"code-header\">";
    let mut blocks: Vec<Vec<String>> = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(marker) {
        let tag = &rest[at.saturating_sub(2)..at];
        let after = &rest[at + marker.len()..];
        let close = format!("</{tag}>");
        let Some(end) = after.find(&close) else {
            break;
        };
        let header = text(&after[..end]);
        if tag == "h4" {
            match blocks.last_mut() {
                Some(block) => block.push(format!("    {header}")),
                None => lines.push(format!("    {header}")),
            }
        } else {
            blocks.push(vec![header]);
        }
        rest = &after[end..];
    }
    // Rustdoc orders implementors by the order in which crates were
    // documented, which a parallel `cargo doc` does not fix: sort them.
    blocks.sort();
    lines.extend(blocks.into_iter().flatten());
    lines
}

/// The `pub use` lines of a module page's re-exports section.
fn reexports(html: &str) -> Vec<String> {
    let Some(section) = between(html, "id=\"reexports\"", "</dl>") else {
        return Vec::new();
    };
    section
        .split("<code>")
        .skip(1)
        .filter_map(|code| code.split_once("</code>").map(|(c, _)| text(c)))
        .collect()
}

fn between<'a>(html: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = html.find(open)? + open.len();
    let end = html[start..].find(close)?;
    Some(&html[start..start + end])
}

/// The text of an HTML fragment: tags dropped, entities decoded, white
/// space collapsed.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The lines only in `old` (`-`) and only in `new` (`+`), in order.
fn diff(old: &str, new: &str) -> String {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    // Longest common subsequence, for a readable difference.
    let (n, m) = (old_lines.len(), new_lines.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if old_lines[i] == new_lines[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < n || j < m {
        if i < n && j < m && old_lines[i] == new_lines[j] {
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("+ {}\n", new_lines[j]));
            j += 1;
        } else {
            out.push_str(&format!("- {}\n", old_lines[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_drops_tags_and_decodes() {
        assert_eq!(
            text("pub fn <a href=\"#\">f</a>(x: &amp;Option&lt;u8&gt;)\n   -&gt; bool"),
            "pub fn f(x: &Option<u8>) -> bool"
        );
    }

    #[test]
    fn items_declarations_and_headers() {
        let all = "<h3 id=\"structs\">Structs</h3><ul class=\"all-items\"><li><a href=\"struct.A.html\">A</a></li></ul>\
                   <h3 id=\"functions\">Functions</h3><ul><li><a href=\"m/fn.f.html\">m::f</a></li></ul>";
        assert_eq!(
            all_items(all),
            [
                ("structs".into(), "struct.A.html".into(), "A".into()),
                ("functions".into(), "m/fn.f.html".into(), "m::f".into()),
            ]
        );
        let page = "<pre class=\"rust item-decl\"><code><div class=\"code-attribute\">#[non_exhaustive]</div>pub struct A {\n    pub x: u8,\n}</code></pre>\
                    <h3 class=\"code-header\">impl A</h3><h4 class=\"code-header\">pub fn new() -&gt; Self</h4>\
                    <h2 id=\"blanket-implementations\"></h2><h3 class=\"code-header\">impl&lt;T&gt; Any for T</h3>";
        assert_eq!(
            item_lines(page),
            [
                "#[non_exhaustive] pub struct A { pub x: u8, }",
                "impl A",
                "    pub fn new() -> Self",
            ]
        );
    }

    #[test]
    fn implementations_are_listed_in_one_order_whatever_rustdoc_chose() {
        let page = "<h4 class=\"code-header\">fn own(&amp;self)</h4>\
                    <h3 class=\"code-header\">impl T for B</h3><h4 class=\"code-header\">fn f()</h4>\
                    <h3 class=\"code-header\">impl T for A</h3>";
        assert_eq!(
            item_lines(page),
            [
                "    fn own(&self)",
                "impl T for A",
                "impl T for B",
                "    fn f()"
            ]
        );
    }

    #[test]
    fn a_changed_line_shows_as_removed_and_added() {
        assert_eq!(diff("a\nb\nc\n", "a\nB\nc\nd\n"), "+ B\n- b\n+ d\n");
    }
}
