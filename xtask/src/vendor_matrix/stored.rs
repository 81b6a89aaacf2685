//! What a vendor-matrix run keeps besides the binary's JSON reports:
//! `runs.json`, the metadata of every row, so that `cargo xtask
//! vendor-matrix --render` can write the same page again without starting
//! anything.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use casaas_conformance::Report;
use serde::{Deserialize, Serialize};

/// The run metadata file, next to the reports.
pub const RUNS_FILE: &str = "runs.json";

/// How thoroughly the stores were probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Quick,
    Thorough,
}

impl Mode {
    pub fn of(quick: bool) -> Self {
        if quick { Mode::Quick } else { Mode::Thorough }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Quick => "quick",
            Mode::Thorough => "thorough",
        }
    }
}

/// Everything the page is made from: the run's own facts (`runs.json`) and
/// each row's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// The command that made the run, as typed.
    pub command_line: String,
    /// The day of the run (UTC), from the reports.
    pub date: String,
    pub mode: Mode,
    /// `casaas-conformance --version` of the binary that ran.
    pub tool_version: String,
    /// Servers not run because they are built only on request.
    pub not_built: Vec<String>,
    /// The rows, in run order.
    pub runs: Vec<Run>,
}

/// The outcome of one row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Row name: `memory`, `file`, a server name or `SERVER+ADAPTER`.
    pub name: String,
    /// What it is, for people.
    pub kind: String,
    /// Version of the server software, as installed.
    pub version: String,
    /// The URL given to the binary (none = embedded file backend).
    pub url: Option<String>,
    /// Names of the environment variables given to the binary; their
    /// values (credentials) are never stored.
    pub env_names: Vec<String>,
    /// Other endpoints of the same bucket (`--gateway`).
    pub gateways: Vec<String>,
    /// Exit status of the binary.
    pub exit: Option<i32>,
    /// How long the binary ran.
    pub seconds: f64,
    /// Why there is no report (start failure, exit 2 message).
    pub problem: Option<String>,
    /// The report's file name in the output directory, if the binary
    /// produced one that could be read.
    pub report_file: Option<String>,
    /// The report itself (read from `report_file`, not stored twice).
    #[serde(skip)]
    pub report: Option<Report>,
}

/// Writes `page`'s metadata to `dir/runs.json`.
pub fn save(dir: &Path, page: &Page) -> Result<()> {
    let path = dir.join(RUNS_FILE);
    let mut json = serde_json::to_string_pretty(page)?;
    json.push('\n');
    fs::write(&path, json).with_context(|| format!("writing {}", path.display()))
}

/// Reads `dir/runs.json` and every report it names.
pub fn load(dir: &Path) -> Result<Page> {
    let path = dir.join(RUNS_FILE);
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (written by a run of `cargo xtask vendor-matrix`)",
            path.display()
        )
    })?;
    let mut page: Page =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for run in &mut page.runs {
        if let Some(file) = &run.report_file {
            run.report = Some(read_report(&dir.join(file))?);
        }
    }
    Ok(page)
}

/// A report written by the conformance binary.
pub fn read_report(path: &Path) -> Result<Report> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/vendor_matrix/testdata");

    #[test]
    fn a_saved_run_loads_back_unchanged() {
        let page = load(Path::new(TESTDATA)).expect("the stored run");
        assert_eq!(page.runs.len(), 3);
        assert!(page.runs[0].report.is_some() && page.runs[1].report.is_some());
        assert!(page.runs[2].report.is_none());

        let dir = std::env::temp_dir().join(format!("xtask-vendor-matrix-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("a temporary directory");
        for file in page.runs.iter().filter_map(|r| r.report_file.as_ref()) {
            fs::copy(Path::new(TESTDATA).join(file), dir.join(file)).expect("copying a report");
        }
        save(&dir, &page).expect("saving");
        let again = load(&dir);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(again.expect("loading"), page);
    }

    #[test]
    fn environment_values_are_not_stored() {
        let json = serde_json::to_value(load(Path::new(TESTDATA)).expect("the stored run"))
            .expect("serializing");
        let run = &json["runs"][1];
        assert!(run.get("env").is_none(), "{run}");
        assert_eq!(run["env_names"][0], "AWS_ACCESS_KEY_ID");
        assert!(run.get("report").is_none(), "{run}");
    }
}
