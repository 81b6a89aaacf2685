//! The report of a run: verdict, per-probe results, and renderings as a
//! table for people, JSON and Markdown for machines and docs.
//!
//! The JSON schema is stable within a `schema_version` and documented in
//! `docs/conformance.md`.

use std::fmt::Write as _;
use std::time::SystemTime;

use casaas_core::Capabilities;
use casaas_core::layout::{LAYOUT_OPTION, LeaseLayout};
use serde::{Deserialize, Serialize};

use crate::model::{ProbeResult, Recommendation, RunVerdict, Severity, Verdict};
use crate::paced::PacingReport;
use crate::redact::redact_text;

/// The version of the JSON schema; bumped on incompatible changes
/// (2: `verdict` is `safe` / `not_safe` / `inconclusive`, the verdict line
/// moved to `summary`, info probes report `note` rather than `fail`).
pub const SCHEMA_VERSION: u32 = 2;

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
    /// What the store was found to honour: what the backend declares,
    /// corrected by what the probes saw (a conditional delete answered
    /// unsupported, the per-key write interval the run was paced to).
    pub capabilities: Capabilities,
    /// What the backend declares it honours (with the URL's options).
    pub declared_capabilities: Capabilities,
    /// Whether the backend exposed the server's clock.
    pub server_clock: bool,
    /// The other endpoints of the same bucket and prefix (`--gateway`),
    /// without credentials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
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

/// A probe that could not reach a conclusion, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incomplete {
    /// The probe's id.
    pub id: String,
    /// Its severity: only critical ones make the verdict inconclusive.
    pub severity: Severity,
    /// Why, in a few words (the start of the probe's detail).
    pub reason: String,
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
    /// Safe, not safe, or inconclusive; the exit status follows it.
    pub verdict: RunVerdict,
    /// `verdict == safe`, kept for readers of schema 1.
    pub safe_for_leases: bool,
    /// The verdict line: `SAFE FOR LEASES`, `SAFE WITH OPTIONS: …`,
    /// `NOT SAFE: …` or `INCONCLUSIVE: …`, naming the probes that could not
    /// complete and why.
    pub summary: String,
    /// The lease layout the verdict is about: `record` (one object replaced
    /// in place) or `epochs` (the create-only layout, for stores that
    /// honour create-if-absent but not replace; see `casaas_core::layout`).
    #[serde(default = "record_layout")]
    pub layout: LeaseLayout,
    /// casaas options (URL query options) the store needs.
    pub recommended_options: Vec<Recommendation>,
    /// Options the affected probes were run again with, to prove them.
    pub options_applied: Vec<String>,
    /// Probes that could not reach a conclusion, and why.
    pub incomplete: Vec<Incomplete>,
    /// What pacing writes and retrying throttled answers cost.
    pub pacing: PacingReport,
    /// Every probe's result, in run order (run again with the options
    /// where options were proven).
    pub probes: Vec<ProbeResult>,
    /// What the run left behind.
    pub cleanup: CleanupReport,
}

impl Report {
    /// The result of probe `id` (see [`crate::evidence::probe_id`]), if it
    /// ran.
    pub fn probe(&self, id: &str) -> Option<&ProbeResult> {
        self.probes.iter().find(|p| p.id == id)
    }

    /// Assembles a report and computes its verdict.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        tool: ToolInfo,
        started_at: String,
        duration_ms: u64,
        settings: SettingsReport,
        backend: BackendReport,
        probes: Vec<ProbeResult>,
        options_applied: Vec<String>,
        pacing: PacingReport,
        cleanup: CleanupReport,
    ) -> Self {
        let judgement = judge(&probes, &options_applied);
        let layout = if options_applied
            .iter()
            .any(|o| o == &format!("{LAYOUT_OPTION}={}", LeaseLayout::Epochs))
        {
            LeaseLayout::Epochs
        } else {
            LeaseLayout::Record
        };
        Report {
            layout,
            schema_version: SCHEMA_VERSION,
            tool,
            started_at,
            duration_ms,
            settings,
            backend,
            verdict: judgement.verdict,
            safe_for_leases: judgement.verdict == RunVerdict::Safe,
            summary: judgement.summary,
            recommended_options: judgement.options,
            options_applied,
            incomplete: judgement.incomplete,
            pacing,
            probes,
            cleanup,
        }
    }

    /// The binary's exit status: 0 safe, 1 not safe, 3 inconclusive.
    pub fn exit_code(&self) -> u8 {
        self.verdict.exit_code()
    }

    /// Whether the run proved that the store keeps the condition of a write
    /// assembled from parts: every probe of one provider's assembled writes
    /// ran and passed (S3's two multipart probes, Azure's block list, GCS's
    /// compose). A saved profile records it, and the adapters then send
    /// conditional writes above the single-part limit.
    pub fn proves_large_conditional_writes(&self) -> bool {
        proves_large_conditional_writes(&self.probes)
    }

    /// Critical probes that did not pass.
    pub fn blockers(&self) -> Vec<&ProbeResult> {
        self.probes.iter().filter(|p| p.blocks_leases()).collect()
    }

    /// The report as pretty JSON (the documented schema), secrets redacted.
    pub fn to_json(&self) -> String {
        redact_text(
            &serde_json::to_string_pretty(self)
                .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
        )
    }

    /// A plain-text table for people, ending with the verdict line;
    /// secrets redacted.
    pub fn to_table(&self) -> String {
        redact_text(&self.table())
    }

    /// [`Report::to_table`] before redaction.
    fn table(&self) -> String {
        let mut out = String::new();
        self.table_header(&mut out);
        self.table_pacing(&mut out);
        out.push('\n');
        self.table_results(&mut out);
        out.push('\n');
        self.table_explanations(&mut out);
        self.table_footer(&mut out);
        out
    }

    /// The table's first lines: the tool, the store and the run's mode.
    fn table_header(&self, out: &mut String) {
        let _ = writeln!(out, "casaas-conformance {}", self.tool.version);
        let _ = writeln!(out, "store:    {}", self.backend.description);
        let _ = writeln!(out, "url:      {}", self.backend.url);
        for gateway in &self.backend.gateways {
            let _ = writeln!(out, "gateway:  {gateway}");
        }
        let _ = writeln!(
            out,
            "mode:     {} (concurrency {}, race rounds {}), {:.1} s, under {}/",
            self.settings.mode,
            self.settings.concurrency,
            self.settings.rounds,
            self.duration_ms as f64 / 1000.0,
            self.backend.prefix
        );
    }

    /// The pacing line, when writes were paced or throttled.
    fn table_pacing(&self, out: &mut String) {
        if let Some(ms) = self.pacing.min_write_interval_ms {
            let _ = writeln!(
                out,
                "pacing:   writes to one key at most every {ms} ms ({}); pacing and backing off added about {:.1} s to the run ({:.1} s over all writers), {} throttled answers",
                self.pacing.interval_source.map_or("declared", |s| match s {
                    crate::paced::IntervalSource::Option => "--min-write-interval",
                    crate::paced::IntervalSource::Measured => "measured by the throttle probe",
                    crate::paced::IntervalSource::Declared => "declared by the backend",
                    crate::paced::IntervalSource::Adapted => "raised after throttled answers",
                }),
                self.pacing.wall_waited_ms as f64 / 1000.0,
                self.pacing.waited_ms as f64 / 1000.0,
                self.pacing.throttled_answers
            );
        } else if self.pacing.throttled_answers > 0 {
            let _ = writeln!(
                out,
                "pacing:   {} throttled answers retried; backing off added about {:.1} s to the run",
                self.pacing.throttled_answers,
                self.pacing.wall_waited_ms as f64 / 1000.0
            );
        }
    }

    /// One row per probe, under a heading.
    fn table_results(&self, out: &mut String) {
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
    }

    /// What each probe that did not pass means for a lock.
    fn table_explanations(&self, out: &mut String) {
        let failing: Vec<&ProbeResult> = self
            .probes
            .iter()
            .filter(|p| matches!(p.verdict, Verdict::Fail | Verdict::Error | Verdict::Note))
            .collect();
        for p in &failing {
            let _ = writeln!(out, "{} ({}): {}", p.id, p.severity, p.explanation);
        }
        if !failing.is_empty() {
            out.push('\n');
        }
    }

    /// The table's last lines: leftovers, recommended options, the verdict.
    fn table_footer(&self, out: &mut String) {
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
            let proven = if self.options_applied.contains(&r.option) {
                " (the probes it affects were run again with it)"
            } else {
                ""
            };
            let _ = writeln!(out, "option {}: {}{proven}", r.option, r.reason);
        }
        let _ = writeln!(out, "{}", self.summary);
    }

    /// Markdown: a summary, the results table, then the evidence per
    /// probe; secrets redacted.
    pub fn to_markdown(&self) -> String {
        redact_text(&self.markdown())
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## Conformance of `{}`\n",
            md_escape(&self.backend.url)
        );
        let _ = writeln!(out, "**{}**\n", md_escape(&self.summary));
        for gateway in &self.backend.gateways {
            let _ = writeln!(out, "- gateway: `{}`", md_escape(gateway));
        }
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

/// The JSON verdict in capitals: `PASS`, `FAIL`, `NOTE`, `UNSUPPORTED`,
/// `ERROR` (one vocabulary for table, Markdown and JSON).
fn marker(verdict: Verdict, _severity: Severity) -> String {
    verdict.as_str().to_uppercase()
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

/// The verdict of a run, its line, the recommended options and the
/// probes that could not complete.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// Safe, not safe or inconclusive.
    pub verdict: RunVerdict,
    /// The verdict line.
    pub summary: String,
    /// Options the probes recommended, each once.
    pub options: Vec<Recommendation>,
    /// Probes that could not reach a conclusion.
    pub incomplete: Vec<Incomplete>,
}

/// The start of a detail, as a reason: its first clause, at most 120
/// characters.
fn short_reason(detail: &str) -> String {
    let first = detail.split("; ").next().unwrap_or(detail).trim();
    match first.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &first[..cut]),
        None => first.to_string(),
    }
}

/// Judges a run.
///
/// - **NOT SAFE** when a critical probe failed or is unsupported by the
///   store (as configured, plus any options applied).
/// - **INCONCLUSIVE** when no critical probe failed but some could not
///   complete (errors, throttling beyond the budget, races without a
///   winner).
/// - **SAFE** when every critical probe passed; **SAFE WITH OPTIONS** when
///   they passed with the options in `options_applied`, which the probes
///   they affect were run again with. An option that was recommended but
///   not applied proves nothing: the probes it would fix still count.
///
/// Warnings and info never change the verdict.
pub fn judge(probes: &[ProbeResult], options_applied: &[String]) -> Judgement {
    // The layout is not an option of the store but of the judgement: it is
    // named in the verdict line, not in the list of options.
    let create_only = options_applied
        .iter()
        .any(|o| o == &format!("{LAYOUT_OPTION}={}", LeaseLayout::Epochs));
    let options_applied: Vec<String> = options_applied
        .iter()
        .filter(|o| !o.starts_with(&format!("{LAYOUT_OPTION}=")))
        .cloned()
        .collect();
    let options = unique_recommendations(probes);
    let incomplete: Vec<Incomplete> = probes
        .iter()
        .filter(|p| p.verdict == Verdict::Error)
        .map(|p| Incomplete {
            id: p.id.clone(),
            severity: p.severity,
            reason: short_reason(&p.detail),
        })
        .collect();
    let (verdict, mut summary) = verdict_line(probes, &options, &options_applied, &incomplete);
    if verdict == RunVerdict::Safe && create_only {
        summary = naming_the_layout(summary);
    }
    if verdict == RunVerdict::Safe {
        let warnings: Vec<&str> = probes
            .iter()
            .filter(|p| p.severity == Severity::Warning && p.verdict == Verdict::Fail)
            .map(|p| p.id.as_str())
            .collect();
        if !warnings.is_empty() {
            summary.push_str(&format!(" (warnings: {})", warnings.join(", ")));
        }
    }
    // Say which probes could not complete, and why, on the last line.
    add_incomplete(&mut summary, verdict, &incomplete);
    Judgement {
        verdict,
        summary,
        options,
        incomplete,
    }
}

/// The options the probes recommend, each once, in order.
fn unique_recommendations(probes: &[ProbeResult]) -> Vec<Recommendation> {
    let mut options: Vec<Recommendation> = Vec::new();
    for r in probes.iter().flat_map(|p| p.recommended_options.iter()) {
        if !options.iter().any(|o| o.option == r.option) {
            options.push(r.clone());
        }
    }
    options
}

/// The incomplete probes as `id (reason)`, comma separated (only the
/// critical ones if `critical_only`); `None` if there are none.
fn incomplete_text(incomplete: &[Incomplete], critical_only: bool) -> Option<String> {
    let listed: Vec<String> = incomplete
        .iter()
        .filter(|i| !critical_only || i.severity == Severity::Critical)
        .map(|i| format!("{} ({})", i.id, i.reason))
        .collect();
    (!listed.is_empty()).then(|| listed.join(", "))
}

/// The verdict and the start of its line: not safe when a critical probe
/// failed or is unsupported, inconclusive when one could not complete,
/// else safe (with the options applied, if any).
fn verdict_line(
    probes: &[ProbeResult],
    options: &[Recommendation],
    options_applied: &[String],
    incomplete: &[Incomplete],
) -> (RunVerdict, String) {
    let failed: Vec<&ProbeResult> = probes
        .iter()
        .filter(|p| p.severity == Severity::Critical)
        .filter(|p| matches!(p.verdict, Verdict::Fail | Verdict::Unsupported))
        .collect();
    let critical_incomplete = incomplete.iter().any(|i| i.severity == Severity::Critical);
    if !failed.is_empty() {
        (
            RunVerdict::NotSafe,
            not_safe_line(&failed, options, options_applied),
        )
    } else if critical_incomplete {
        (
            RunVerdict::Inconclusive,
            format!(
                "INCONCLUSIVE: no critical probe failed, but these could not complete: {}",
                incomplete_text(incomplete, true).unwrap_or_default()
            ),
        )
    } else if !options_applied.is_empty() {
        let rerun = probes.iter().filter(|p| !p.options.is_empty()).count();
        (
            RunVerdict::Safe,
            format!(
                "SAFE WITH OPTIONS: {} (proven: the {rerun} probes it affects passed again with it)",
                options_applied.join(", ")
            ),
        )
    } else {
        (RunVerdict::Safe, "SAFE FOR LEASES".to_string())
    }
}

/// The NOT SAFE line for the `failed` critical probes, with advice: the
/// recommended options not yet applied that may fix them, or that none
/// will.
fn not_safe_line(
    failed: &[&ProbeResult],
    options: &[Recommendation],
    options_applied: &[String],
) -> String {
    let reasons: Vec<String> = failed
        .iter()
        .map(|p| match p.verdict {
            Verdict::Fail => format!("{} failed", p.id),
            _ => format!("{} unsupported", p.id),
        })
        .collect();
    // An option recommended but not applied proves nothing.
    let fixable: Vec<&Recommendation> = options
        .iter()
        .filter(|o| !options_applied.contains(&o.option))
        .filter(|o| failed.iter().any(|p| o.fixes.contains(&p.id)))
        .collect();
    let advice = if !fixable.is_empty() {
        let list: Vec<&str> = fixable.iter().map(|o| o.option.as_str()).collect();
        format!(
            "{} may help: run again with it in the URL to find out",
            list.join(", ")
        )
    } else if !options_applied.is_empty() {
        format!("even with {}", options_applied.join(", "))
    } else {
        "no casaas option makes this store safe".to_string()
    };
    format!("NOT SAFE: {} ({advice})", reasons.join(", "))
}

/// A SAFE line that names the create-only layout it was judged on.
fn naming_the_layout(summary: String) -> String {
    let layout = LeaseLayout::Epochs.describe();
    match summary.strip_prefix("SAFE FOR LEASES") {
        Some(rest) => format!("SAFE FOR LEASES ({layout}){rest}"),
        None => summary.replacen(
            "SAFE WITH OPTIONS:",
            &format!("SAFE WITH OPTIONS ({layout}):"),
            1,
        ),
    }
}

/// Ends the verdict line with the probes that could not complete: all of
/// them, or (when inconclusive, which named the critical ones) the others.
fn add_incomplete(summary: &mut String, verdict: RunVerdict, incomplete: &[Incomplete]) {
    if verdict != RunVerdict::Inconclusive
        && let Some(text) = incomplete_text(incomplete, false)
    {
        summary.push_str(&format!("; could not complete: {text}"));
    } else if verdict == RunVerdict::Inconclusive
        && let Some(text) = incomplete
            .iter()
            .filter(|i| i.severity != Severity::Critical)
            .map(|i| format!("{} ({})", i.id, i.reason))
            .reduce(|a, b| format!("{a}, {b}"))
    {
        summary.push_str(&format!("; also incomplete: {text}"));
    }
}

/// Formats a time as RFC 3339 UTC with seconds, e.g. `2026-01-02T03:04:05Z`.
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The result of one store in a comparison: its URL (without credentials)
/// and its report, or why it could not be probed.
pub type Compared = (String, Result<Report, String>);

/// Probe ids in first-seen order over every report.
fn compared_ids(results: &[Compared]) -> Vec<(String, Severity)> {
    let mut ids: Vec<(String, Severity)> = Vec::new();
    for report in results.iter().filter_map(|(_, r)| r.as_ref().ok()) {
        for p in &report.probes {
            if !ids.iter().any(|(id, _)| id == &p.id) {
                ids.push((p.id.clone(), p.severity));
            }
        }
    }
    ids
}

/// The verdict word of one store, or `not run` when it could not be probed.
fn compared_verdict(result: &Result<Report, String>) -> String {
    match result {
        Ok(r) => r.verdict.as_str().to_uppercase().replace('_', " "),
        Err(_) => "NOT RUN".to_string(),
    }
}

/// One comparison table in Markdown: a column per store, a row per probe,
/// the verdict first and each store's verdict line (or error) below.
pub fn comparison_markdown(results: &[Compared]) -> String {
    let mut out = String::from("## Conformance comparison\n\n| Probe | Severity |");
    for (i, _) in results.iter().enumerate() {
        let _ = write!(out, " store {} |", i + 1);
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(results.len()));
    out.push_str("\n| **verdict** | |");
    for (_, r) in results {
        let _ = write!(out, " **{}** |", compared_verdict(r));
    }
    out.push('\n');
    for (id, severity) in compared_ids(results) {
        let _ = write!(out, "| `{id}` | {severity} |");
        for (_, r) in results {
            let cell = compared_cell(r, &id).unwrap_or("-");
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out.push('\n');
    for (i, (url, r)) in results.iter().enumerate() {
        let line = compared_summary(r);
        let _ = writeln!(
            out,
            "- store {}: `{}` — {}",
            i + 1,
            md_escape(url),
            md_escape(&line)
        );
    }
    redact_text(&out)
}

/// Probe `id`'s verdict in one store's result, if the store ran it.
fn compared_cell<'a>(result: &'a Result<Report, String>, id: &str) -> Option<&'a str> {
    result
        .as_ref()
        .ok()
        .and_then(|r| r.probe(id))
        .map(|p| p.verdict.as_str())
}

/// One store's verdict line, or why it was not run.
fn compared_summary(result: &Result<Report, String>) -> String {
    match result {
        Ok(report) => report.summary.clone(),
        Err(e) => format!("not run: {e}"),
    }
}

/// The same comparison as plain text for people.
pub fn comparison_table(results: &[Compared]) -> String {
    let width = 12;
    let mut out = String::new();
    let _ = write!(out, "{:<28}{:<10}", "PROBE", "SEVERITY");
    for (i, _) in results.iter().enumerate() {
        let _ = write!(out, "{:<width$}", format!("STORE {}", i + 1));
    }
    out.push('\n');
    let _ = write!(out, "{:<28}{:<10}", "verdict", "");
    for (_, r) in results {
        let _ = write!(out, "{:<width$}", compared_verdict(r));
    }
    out.push('\n');
    for (id, severity) in compared_ids(results) {
        let _ = write!(out, "{id:<28}{:<10}", severity.as_str());
        for (_, r) in results {
            let cell = compared_cell(r, &id).map_or("-".to_string(), str::to_uppercase);
            let _ = write!(out, "{cell:<width$}");
        }
        out.push('\n');
    }
    out.push('\n');
    for (i, (url, r)) in results.iter().enumerate() {
        let line = compared_summary(r);
        let _ = writeln!(out, "store {}: {url}\n  {line}", i + 1);
    }
    redact_text(&out)
}

/// Reports written before the layout existed were about the record layout.
fn record_layout() -> LeaseLayout {
    LeaseLayout::Record
}

/// See [`Report::proves_large_conditional_writes`].
fn proves_large_conditional_writes(probes: &[ProbeResult]) -> bool {
    const PROOFS: [&[&str]; 3] = [
        &["s3_multipart_if_none_match", "s3_multipart_if_match"],
        &["azure_block_list_conditional"],
        &["gcs_compose_preconditions"],
    ];
    let passed = |id: &str| {
        probes
            .iter()
            .any(|p| p.id == id && p.verdict == Verdict::Pass)
    };
    PROOFS.iter().any(|ids| ids.iter().all(|id| passed(id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Evidence;
    use std::time::{Duration, UNIX_EPOCH};

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
            options: Vec::new(),
        }
    }

    #[test]
    fn assembled_writes_are_proven_only_by_every_probe_of_one_provider() {
        let w = Severity::Warning;
        let proves = |probes: &[ProbeResult]| proves_large_conditional_writes(probes);
        assert!(!proves(&[]));
        // S3 needs both multipart probes.
        let one = result("s3_multipart_if_none_match", w, Verdict::Pass);
        assert!(!proves(std::slice::from_ref(&one)));
        let both = [
            one.clone(),
            result("s3_multipart_if_match", w, Verdict::Pass),
        ];
        assert!(proves(&both));
        let failed = [one, result("s3_multipart_if_match", w, Verdict::Fail)];
        assert!(!proves(&failed));
        assert!(!proves(&[result(
            "s3_multipart_if_match",
            w,
            Verdict::Unsupported
        )]));
        assert!(proves(&[result(
            "azure_block_list_conditional",
            w,
            Verdict::Pass
        )]));
        assert!(!proves(&[result(
            "gcs_compose_preconditions",
            w,
            Verdict::Fail
        )]));
        assert!(proves(&[result(
            "gcs_compose_preconditions",
            w,
            Verdict::Pass
        )]));
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
            result("b", Severity::Info, Verdict::Note),
            result("c", Severity::Warning, Verdict::Unsupported),
        ];
        let j = judge(&ok, &[]);
        assert_eq!(j.verdict, RunVerdict::Safe);
        assert_eq!(j.summary, "SAFE FOR LEASES");

        let mut bad = ok.clone();
        bad.push(result("d", Severity::Critical, Verdict::Fail));
        let j = judge(&bad, &[]);
        assert_eq!(j.verdict, RunVerdict::NotSafe);
        assert!(j.summary.starts_with("NOT SAFE: d failed"), "{}", j.summary);

        // A recommended option proves nothing until the probes ran with it.
        bad[3].recommended_options.push(Recommendation {
            option: "etag_unquoted=true".into(),
            reason: "r".into(),
            fixes: vec!["d".into()],
        });
        let j = judge(&bad, &[]);
        assert_eq!(j.verdict, RunVerdict::NotSafe);
        assert!(
            j.summary.contains("etag_unquoted=true may help"),
            "{}",
            j.summary
        );
        assert_eq!(j.options.len(), 1);

        // Run again with it: the verdict follows the run with the option.
        let applied = vec!["etag_unquoted=true".to_string()];
        bad[3].verdict = Verdict::Pass;
        bad[3].options = applied.clone();
        let j = judge(&bad, &applied);
        assert_eq!(j.verdict, RunVerdict::Safe);
        assert!(
            j.summary
                .starts_with("SAFE WITH OPTIONS: etag_unquoted=true (proven"),
            "{}",
            j.summary
        );
        bad[3].verdict = Verdict::Fail;
        let j = judge(&bad, &applied);
        assert_eq!(j.verdict, RunVerdict::NotSafe);
        assert!(
            j.summary.contains("even with etag_unquoted=true"),
            "{}",
            j.summary
        );
    }

    #[test]
    fn errors_are_inconclusive_unless_something_failed() {
        let mut probes = vec![
            result("a", Severity::Critical, Verdict::Pass),
            result("b", Severity::Critical, Verdict::Error),
            result("c", Severity::Info, Verdict::Error),
        ];
        probes[1].detail = "throttled on key 'x'; more".into();
        let j = judge(&probes, &[]);
        assert_eq!(j.verdict, RunVerdict::Inconclusive);
        assert_eq!(j.verdict.exit_code(), 3);
        assert!(
            j.summary
                .starts_with("INCONCLUSIVE: no critical probe failed, but these could not complete: b (throttled on key 'x')"),
            "{}",
            j.summary
        );
        assert!(j.summary.contains("also incomplete: c"), "{}", j.summary);
        probes.push(result("d", Severity::Critical, Verdict::Fail));
        let j = judge(&probes, &[]);
        assert_eq!(j.verdict, RunVerdict::NotSafe);
        assert!(j.summary.contains("could not complete: b"), "{}", j.summary);
        probes.truncate(1);
        probes.push(result("e", Severity::Warning, Verdict::Error));
        let j = judge(&probes, &[]);
        assert_eq!(j.verdict, RunVerdict::Safe);
        assert!(j.summary.contains("could not complete: e"), "{}", j.summary);
    }
}
