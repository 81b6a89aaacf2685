//! The report of a run: verdict, per-probe results, and renderings as a
//! table for people, JSON and Markdown for machines and docs.
//!
//! The JSON schema is stable within a `schema_version` and documented in
//! `docs/conformance.md`.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use casaas_core::Capabilities;
use serde::{Deserialize, Serialize};

use crate::model::{ProbeResult, Recommendation, Severity, Verdict};

/// The version of the JSON schema; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// The tool that produced a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// `casaas-conformance`.
    pub name: String,
    /// The crate version.
    pub version: String,
}

impl ToolInfo {
    /// This build.
    pub fn current() -> Self {
        ToolInfo {
            name: "casaas-conformance".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// How the run was configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsReport {
    /// `quick` or `thorough`.
    pub mode: String,
    /// Concurrent writers per race round.
    pub concurrency: usize,
    /// Race rounds.
    pub rounds: usize,
}

/// The store that was probed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendReport {
    /// The URL it was opened from (without credentials).
    pub url: String,
    /// The backend's own one-line description.
    pub description: String,
    /// The URL scheme (`file`, `s3`, `gs`, `az`, `memory`).
    pub scheme: String,
    /// The key prefix the run worked under.
    pub prefix: String,
    /// What the backend declares it honours.
    pub capabilities: Capabilities,
    /// Whether the backend exposed the server's clock.
    pub server_clock: bool,
}

/// What the run left behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupReport {
    /// Objects removed by conditional delete.
    pub deleted: u64,
    /// Full keys that could not be removed.
    pub leftovers: Vec<String>,
    /// Why, when something was left.
    pub note: Option<String>,
}

/// The outcome of a conformance run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Which tool made it.
    pub tool: ToolInfo,
    /// When the run started, RFC 3339 UTC.
    pub started_at: String,
    /// How long the run took.
    pub duration_ms: u64,
    /// How the run was configured.
    pub settings: SettingsReport,
    /// The store.
    pub backend: BackendReport,
    /// Whether leases can be built on the store (possibly with the
    /// recommended options).
    pub safe_for_leases: bool,
    /// The verdict line: `SAFE FOR LEASES`, `SAFE WITH OPTIONS: …` or
    /// `NOT SAFE: …`.
    pub verdict: String,
    /// casaas options (URL query options) the store needs.
    pub recommended_options: Vec<Recommendation>,
    /// Every probe's result, in run order.
    pub probes: Vec<ProbeResult>,
    /// What the run left behind.
    pub cleanup: CleanupReport,
}

impl Report {
    /// Assembles a report and computes its verdict.
    pub fn new(
        tool: ToolInfo,
        started_at: String,
        duration_ms: u64,
        settings: SettingsReport,
        backend: BackendReport,
        probes: Vec<ProbeResult>,
        cleanup: CleanupReport,
    ) -> Self {
        let (safe_for_leases, verdict, recommended_options) = judge(&probes);
        Report {
            schema_version: SCHEMA_VERSION,
            tool,
            started_at,
            duration_ms,
            settings,
            backend,
            safe_for_leases,
            verdict,
            recommended_options,
            probes,
            cleanup,
        }
    }

    /// Critical probes that did not pass and that no recommended option fixes.
    pub fn blockers(&self) -> Vec<&ProbeResult> {
        blockers(&self.probes, &self.recommended_options)
    }

    /// The report as pretty JSON (the documented schema).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A plain-text table for people, ending with the verdict line.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "casaas-conformance {}", self.tool.version);
        let _ = writeln!(out, "store:    {}", self.backend.description);
        let _ = writeln!(out, "url:      {}", self.backend.url);
        let _ = writeln!(
            out,
            "mode:     {} (concurrency {}, race rounds {}), {:.1} s, under {}/",
            self.settings.mode,
            self.settings.concurrency,
            self.settings.rounds,
            self.duration_ms as f64 / 1000.0,
            self.backend.prefix
        );
        out.push('\n');
        let id_w = self
            .probes
            .iter()
            .map(|p| p.id.len())
            .max()
            .unwrap_or(2)
            .max(5);
        let _ = writeln!(
            out,
            "{:<id_w$}  {:<8}  {:<11}  {:>7}  DETAIL",
            "PROBE", "SEVERITY", "VERDICT", "TIME"
        );
        for p in &self.probes {
            let _ = writeln!(
                out,
                "{:<id_w$}  {:<8}  {:<11}  {:>7}  {}",
                p.id,
                p.severity.as_str(),
                marker(p.verdict, p.severity),
                format_ms(p.duration_ms),
                p.detail
            );
        }
        out.push('\n');
        let failing: Vec<&ProbeResult> = self
            .probes
            .iter()
            .filter(|p| matches!(p.verdict, Verdict::Fail | Verdict::Error))
            .collect();
        for p in &failing {
            let _ = writeln!(out, "{} ({}): {}", p.id, p.severity, p.explanation);
        }
        if !failing.is_empty() {
            out.push('\n');
        }
        if !self.cleanup.leftovers.is_empty() {
            let _ = writeln!(
                out,
                "cleanup: {} objects deleted, {} left under {}/ ({})",
                self.cleanup.deleted,
                self.cleanup.leftovers.len(),
                self.backend.prefix,
                self.cleanup.note.as_deref().unwrap_or("")
            );
        }
        for r in &self.recommended_options {
            let _ = writeln!(out, "option {}: {}", r.option, r.reason);
        }
        let _ = writeln!(out, "{}", self.verdict);
        out
    }

    /// Markdown: a summary, the results table, then the evidence per probe.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## Conformance of `{}`\n",
            md_escape(&self.backend.url)
        );
        let _ = writeln!(out, "**{}**\n", md_escape(&self.verdict));
        let _ = writeln!(
            out,
            "- store: {}\n- mode: {} (concurrency {}, race rounds {})\n- started: {}, took {:.1} s\n- tool: casaas-conformance {}\n",
            md_escape(&self.backend.description),
            self.settings.mode,
            self.settings.concurrency,
            self.settings.rounds,
            self.started_at,
            self.duration_ms as f64 / 1000.0,
            self.tool.version
        );
        for r in &self.recommended_options {
            let _ = writeln!(out, "- recommended option `{}`: {}", r.option, r.reason);
        }
        out.push_str("| Probe | Severity | Verdict | Detail |\n|---|---|---|---|\n");
        for p in &self.probes {
            let _ = writeln!(
                out,
                "| `{}` {} | {} | {} | {} |",
                p.id,
                md_escape(&p.title),
                p.severity,
                marker(p.verdict, p.severity),
                md_escape(&p.detail)
            );
        }
        out.push_str("\n<details><summary>Evidence</summary>\n\n");
        for p in &self.probes {
            if p.evidence.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "- `{}`: `{}`",
                p.id,
                serde_json::to_string(&p.evidence).unwrap_or_default()
            );
        }
        out.push_str("\n</details>\n");
        out
    }
}

/// `PASS`, `FAIL`, `UNSUPPORTED`, `ERROR`; a failing info probe is `NOTE`.
fn marker(verdict: Verdict, severity: Severity) -> &'static str {
    match (verdict, severity) {
        (Verdict::Pass, _) => "PASS",
        (Verdict::Fail, Severity::Info) => "NOTE",
        (Verdict::Fail, _) => "FAIL",
        (Verdict::Unsupported, _) => "UNSUPPORTED",
        (Verdict::Error, _) => "ERROR",
    }
}

fn format_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

fn md_escape(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn blockers<'a>(probes: &'a [ProbeResult], options: &[Recommendation]) -> Vec<&'a ProbeResult> {
    probes
        .iter()
        .filter(|p| p.blocks_leases())
        .filter(|p| !options.iter().any(|o| o.fixes.contains(&p.id)))
        .collect()
}

/// Computes `(safe_for_leases, verdict line, recommended options)`.
///
/// A critical probe that did not pass (fail, unsupported, or could not be
/// verified) makes the store not safe, unless a recommended option names it
/// as fixed. Warnings and info never change the verdict.
pub fn judge(probes: &[ProbeResult]) -> (bool, String, Vec<Recommendation>) {
    let mut options: Vec<Recommendation> = Vec::new();
    for r in probes.iter().flat_map(|p| p.recommended_options.iter()) {
        if !options.iter().any(|o| o.option == r.option) {
            options.push(r.clone());
        }
    }
    let blocking = blockers(probes, &options);
    if !blocking.is_empty() {
        let reasons: Vec<String> = blocking
            .iter()
            .map(|p| match p.verdict {
                Verdict::Fail => format!("{} failed", p.id),
                Verdict::Unsupported => format!("{} unsupported", p.id),
                _ => format!("{} could not be verified", p.id),
            })
            .collect();
        let cannot_fix = if blocking.iter().any(|p| p.verdict == Verdict::Error) {
            "fix the errors and run again"
        } else {
            "no casaas option makes this store safe"
        };
        return (
            false,
            format!("NOT SAFE: {} ({cannot_fix})", reasons.join(", ")),
            options,
        );
    }
    let warnings: Vec<&str> = probes
        .iter()
        .filter(|p| p.severity == Severity::Warning && p.verdict == Verdict::Fail)
        .filter(|p| !options.iter().any(|o| o.fixes.contains(&p.id)))
        .map(|p| p.id.as_str())
        .collect();
    let warn = if warnings.is_empty() {
        String::new()
    } else {
        format!(" (warnings: {})", warnings.join(", "))
    };
    if options.is_empty() {
        (true, format!("SAFE FOR LEASES{warn}"), options)
    } else {
        let list: Vec<&str> = options.iter().map(|o| o.option.as_str()).collect();
        // Probes the options fix could not run without them: say so.
        let unverified = probes
            .iter()
            .any(|p| p.blocks_leases() && options.iter().any(|o| o.fixes.contains(&p.id)));
        let verify = if unverified {
            " (run again with these options in the URL to verify the probes they affect)"
        } else {
            ""
        };
        (
            true,
            format!("SAFE WITH OPTIONS: {}{verify}{warn}", list.join(", ")),
            options,
        )
    }
}

/// Formats a time as RFC 3339 UTC with seconds, e.g. `2026-01-02T03:04:05Z`.
pub fn rfc3339(at: SystemTime) -> String {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Evidence;
    use std::time::Duration;

    fn result(id: &str, severity: Severity, verdict: Verdict) -> ProbeResult {
        ProbeResult {
            id: id.into(),
            title: id.into(),
            severity,
            verdict,
            detail: String::new(),
            evidence: Evidence::default(),
            explanation: String::new(),
            recommended_options: Vec::new(),
            duration_ms: 0,
        }
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29T12:34:56Z
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn verdicts() {
        let ok = vec![
            result("a", Severity::Critical, Verdict::Pass),
            result("b", Severity::Info, Verdict::Fail),
            result("c", Severity::Warning, Verdict::Unsupported),
        ];
        let (safe, line, _) = judge(&ok);
        assert!(safe);
        assert_eq!(line, "SAFE FOR LEASES");

        let mut bad = ok.clone();
        bad.push(result("d", Severity::Critical, Verdict::Fail));
        let (safe, line, _) = judge(&bad);
        assert!(!safe);
        assert!(line.starts_with("NOT SAFE: d failed"), "{line}");

        bad[3].recommended_options.push(Recommendation {
            option: "etag_unquoted=true".into(),
            reason: "r".into(),
            fixes: vec!["d".into()],
        });
        let (safe, line, options) = judge(&bad);
        assert!(safe);
        assert!(
            line.starts_with("SAFE WITH OPTIONS: etag_unquoted=true (run again"),
            "{line}"
        );
        assert_eq!(options.len(), 1);
    }
}
