//! `docs/vendors.md` from a run's [`Page`]: one function per section of the
//! page, nothing started, nothing read but what is passed in.

use casaas_conformance::evidence::{
    Answer, ClockSkewEvidence, CreateConflictEvidence, LatencyEvidence, Percentiles, RaceEvidence,
    ReplaceStaleEvidence, ThrottleEvidence, probe_id,
};
use casaas_conformance::{Report, RunVerdict, Severity, Verdict};

use super::server_of;
use super::stored::{Page, Run};
use crate::servers;

/// Stores we cannot run here: what public sources say, with links. Not
/// measured by us; edited by hand in docs/, copied into every generated
/// document.
const PUBLIC_REPORTS: &str = include_str!("../../../docs/vendors-public-reports.md");

/// What the page says besides the run: known findings of each server (from
/// other tests) and the hand-written public reports section.
pub struct Known<'a> {
    /// Server name and its findings, in server order.
    pub findings: Vec<(&'a str, &'a [&'a str])>,
    /// The closing section, verbatim.
    pub public_reports: &'a str,
}

impl Known<'static> {
    /// What this tree knows: [`servers::all`]'s findings and
    /// `docs/vendors-public-reports.md`.
    pub fn of_this_tree() -> Self {
        Known {
            findings: servers::all()
                .iter()
                .map(|s| (s.name(), s.known_findings()))
                .collect(),
            public_reports: PUBLIC_REPORTS,
        }
    }
}

/// The whole page.
pub fn render(page: &Page, known: &Known) -> String {
    let reported: Vec<(&Run, &Report)> = page
        .runs
        .iter()
        .filter_map(|run| Some((run, run.report.as_ref()?)))
        .collect();
    [
        header(page),
        verdict_table(&page.runs),
        not_built(&page.not_built),
        urls(&page.runs),
        probe_table(&reported),
        answers_table(&reported),
        findings(&reported, &page.runs, known),
        format!("\n{}", known.public_reports),
    ]
    .concat()
}

/// The title, how the page was made, and what its two parts are.
fn header(page: &Page) -> String {
    format!(
        "# Vendor matrix\n\n\
         > **Generated** by `{}` on {} (UTC) with {}, {} mode. \
         Do not edit by hand: run the command again. Each store's full JSON report \
         (schema in [conformance.md](conformance.md)) is kept in `.casaas/vendor-matrix/`.\n\n\
         The first part is **measured here**: the `casaas-conformance` binary run against \
         each store that xtask can install and start on this machine, on loopback. \
         The second part, clearly marked, collects **public reports** about stores we \
         cannot run here; it is not measured by us.\n\n",
        page.command_line,
        page.date,
        page.tool_version,
        page.mode.as_str()
    )
}

/// One row per store with its verdict, then what the verdicts mean.
fn verdict_table(runs: &[Run]) -> String {
    let mut md = String::from(
        "## Measured here\n\n\
         | Store | What | Version | Verdict | Verdict line | Options needed | Exit | Time |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for run in runs {
        md.push_str(&verdict_row(run));
    }
    md.push_str(
        "\nVerdicts: **SAFE** (exit 0), **NOT SAFE** (a critical probe failed; exit 1), \
         **INCONCLUSIVE** (no critical probe failed, but some could not complete; exit 3); \
         see [conformance.md](conformance.md).\n",
    );
    md
}

fn verdict_row(run: &Run) -> String {
    let word = run.report.as_ref().map_or("-", verdict_word);
    let (verdict, options) = match &run.report {
        Some(report) => (
            verdict_line(report).to_string(),
            options_needed(run, report),
        ),
        None => (
            format!("not run: {}", run.problem.as_deref().unwrap_or("no report")),
            "-".into(),
        ),
    };
    format!(
        "| {} | {} | {} | **{word}** | {} | {} | {} | {:.0} s |\n",
        run.name,
        run.kind,
        cell(&run.version),
        cell(&verdict),
        cell(&options),
        run.exit.map_or_else(|| "-".into(), |c| c.to_string()),
        run.seconds
    )
}

/// The options the report recommends, else those already in the URL.
fn options_needed(run: &Run, report: &Report) -> String {
    let recommended = report
        .recommended_options
        .iter()
        .map(|o| o.option.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Some(recommended)
        .filter(|s| !s.is_empty())
        .or_else(|| quirk_options_in_url(run.url.as_deref()))
        .unwrap_or_else(|| "-".into())
}

/// The servers left out because they are built only on request.
fn not_built(not_built: &[String]) -> String {
    if not_built.is_empty() {
        return String::new();
    }
    format!(
        "\nNot run this time (built from source on request, which takes long): {}. \
         Start one with `cargo xtask servers up NAME`, then run this command again.\n",
        not_built.join(", ")
    )
}

/// Each row's URL and gateways, ports masked.
fn urls(runs: &[Run]) -> String {
    let mut md = String::from("\nURLs used (ports vary per run):\n\n");
    for run in runs {
        let url = run
            .url
            .as_deref()
            .map_or_else(|| "(none: embedded file backend)".to_string(), stable_url);
        md.push_str(&format!("- {}: `{}`\n", run.name, url));
        for gateway in &run.gateways {
            md.push_str(&format!("  - `--gateway {}`\n", stable_url(gateway)));
        }
    }
    md
}

/// Probe × store: each probe's verdict on each store with a report, probes
/// in the first report's order.
fn probe_table(reported: &[(&Run, &Report)]) -> String {
    let Some((_, first)) = reported.first() else {
        return String::new();
    };
    let mut md = String::from("\n### Probe results\n\n| Probe | Severity |");
    for (run, _) in reported {
        md.push_str(&format!(" {} |", run.name));
    }
    md.push_str("\n|---|---|");
    md.push_str(&"---|".repeat(reported.len()));
    md.push('\n');
    for probe in &first.probes {
        let id = probe.id.as_str();
        md.push_str(&format!("| `{id}` | {} |", probe.severity));
        for (_, report) in reported {
            let mark = report
                .probe(id)
                .map_or("-", |p| verdict_mark(p.verdict, p.severity));
            md.push_str(&format!(" {mark} |"));
        }
        md.push('\n');
    }
    md.push_str(
        "\n`note` = an info probe observed something worth knowing (for example \
         content-hash versions); it never changes the verdict.\n",
    );
    md
}

/// What each store answered: the refusals, race losers, rates, latencies
/// and clock skew its report holds.
fn answers_table(reported: &[(&Run, &Report)]) -> String {
    let mut md = String::from(
        "\n### What each store answered\n\n\
         | Store | Losing create | Stale replace | Race losers (create) | Race losers (replace) \
         | Per-key writes/s | Replace p50 / p99 ms \
         | Contended replace p50 / p99 ms (won; refused) | Clock skew |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (run, report) in reported {
        md.push_str(&answers_row(&run.name, report));
    }
    md
}

fn answers_row(name: &str, report: &Report) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        cell(&losing_create(report)),
        cell(&stale_replace(report)),
        cell(&race_losers(report, probe_id::RACE_CREATE)),
        cell(&race_losers(report, probe_id::RACE_REPLACE)),
        cell(&per_key_rate(report)),
        replace_latency(report),
        contended_latency(report),
        clock_skew(report)
    )
}

/// What a second create of one key was answered.
fn losing_create(report: &Report) -> String {
    let second_create = report
        .probe(probe_id::CREATE_CONFLICT)
        .and_then(|p| p.evidence_as::<CreateConflictEvidence>())
        .and_then(|e| e.second_create);
    answer(second_create.as_ref())
}

/// What a replace with a stale version was answered.
fn stale_replace(report: &Report) -> String {
    let stale_replace = report
        .probe(probe_id::REPLACE_STALE)
        .and_then(|p| p.evidence_as::<ReplaceStaleEvidence>())
        .and_then(|e| e.stale_replace);
    answer(stale_replace.as_ref())
}

/// The losers' answers of race probe `id`, with counts.
fn race_losers(report: &Report, id: &str) -> String {
    let losers = report
        .probe(id)
        .and_then(|p| p.evidence_as::<RaceEvidence>())
        .map(|e| e.loser_answers)
        .unwrap_or_default();
    if losers.is_empty() {
        return "-".into();
    }
    losers
        .iter()
        .map(|(k, v)| format!("{k} ×{v}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The per-key write rate at which the store throttled, or the rate it
/// sustained.
fn per_key_rate(report: &Report) -> String {
    let Some(probe) = report.probe(probe_id::THROTTLE) else {
        return "-".into();
    };
    let number = |v: Option<f64>| v.map_or_else(|| "null".into(), json_number);
    let e: ThrottleEvidence = probe.evidence_as().unwrap_or_default();
    if e.throttled {
        format!(
            "throttled at ~{} ({})",
            number(e.throttled_at_per_s),
            answer(e.throttle_answer.as_ref())
        )
    } else if probe.verdict == Verdict::Pass {
        format!(
            "≥ {} ({})",
            number(e.max_sustained_per_s),
            e.stopped_because.as_deref().unwrap_or("?")
        )
    } else {
        probe.verdict.as_str().to_string()
    }
}

/// Uncontended replace latency, p50 / p99.
fn replace_latency(report: &Report) -> String {
    percentiles(
        report
            .probe(probe_id::LATENCY)
            .and_then(|p| p.evidence_as::<LatencyEvidence>())
            .and_then(|e| e.replace),
    )
}

/// Contended replace latency of the winners and of the refused.
fn contended_latency(report: &Report) -> String {
    report
        .probe(probe_id::RACE_REPLACE)
        .and_then(|p| p.evidence_as::<RaceEvidence>())
        .map(|e| e.contended_latency_ms)
        .map_or_else(
            || "-".into(),
            |c| format!("{}; {}", percentiles(c.winners), percentiles(c.losers)),
        )
}

/// The median skew of the store's clock.
fn clock_skew(report: &Report) -> String {
    report
        .probe(probe_id::CLOCK_SKEW)
        .and_then(|p| p.evidence_as::<ClockSkewEvidence>())
        .and_then(|e| e.median_skew_s)
        .map_or_else(|| "-".into(), |v| format!("{} s", json_number(v)))
}

/// `p50 / p99`, or `-`.
fn percentiles(p: Option<Percentiles>) -> String {
    p.map_or_else(
        || "-".into(),
        |p| format!("{} / {}", json_number(p.p50_ms), json_number(p.p99_ms)),
    )
}

/// Failed probes in words, then what other tests found on the servers that
/// ran; nothing if there is neither.
fn findings(reported: &[(&Run, &Report)], runs: &[Run], known: &Known) -> String {
    let items = [probe_failures(reported), known_findings(runs, known)].concat();
    if items.is_empty() {
        return String::new();
    }
    format!("\n### Findings\n\n{items}")
}

/// Each failed or errored probe that is not info-only.
fn probe_failures(reported: &[(&Run, &Report)]) -> String {
    let mut md = String::new();
    for (run, report) in reported {
        for p in &report.probes {
            let (verdict, severity) = (p.verdict, p.severity);
            if matches!(verdict, Verdict::Fail | Verdict::Error) && severity != Severity::Info {
                md.push_str(&format!(
                    "- **{}** `{}` ({severity}, {verdict}): {} — {}\n",
                    run.name,
                    p.id,
                    cell(&p.detail),
                    cell(&p.explanation)
                ));
            }
        }
    }
    md
}

/// What other tests found on a server in the run, which the probes may miss.
fn known_findings(runs: &[Run], known: &Known) -> String {
    let mut md = String::new();
    for (server, findings) in &known.findings {
        if !runs.iter().any(|r| server_of(&r.name) == Some(*server)) {
            continue;
        }
        for finding in *findings {
            md.push_str(&format!(
                "- **{server}** (found by other tests, not reliably by the probes): {finding}\n"
            ));
        }
    }
    md
}

/// Replaces loopback ports (`127.0.0.1:41234`) with `PORT`, so the document
/// does not change with every run's random ports.
fn stable_url(url: &str) -> String {
    let mut out = String::new();
    let mut rest = url;
    while let Some(i) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..i + "127.0.0.1:".len()]);
        rest = &rest[i + "127.0.0.1:".len()..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("PORT");
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// The day of the run, from the reports' own `started_at` (RFC 3339).
pub fn run_date(runs: &[Run]) -> String {
    runs.iter()
        .find_map(|run| {
            let started = &run.report.as_ref()?.started_at;
            started.get(..10).map(str::to_string)
        })
        .unwrap_or_else(|| "an unknown date".to_string())
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The verdict word of a report: `SAFE`, `NOT SAFE` or `INCONCLUSIVE`.
fn verdict_word(report: &Report) -> &'static str {
    match report.verdict {
        RunVerdict::Safe => "SAFE",
        RunVerdict::NotSafe => "NOT SAFE",
        RunVerdict::Inconclusive => "INCONCLUSIVE",
    }
}

/// The verdict line of a report.
pub fn verdict_line(report: &Report) -> &str {
    &report.summary
}

fn verdict_mark(verdict: Verdict, severity: Severity) -> &'static str {
    match (verdict, severity) {
        (Verdict::Pass, _) => "pass",
        (Verdict::Fail, Severity::Info) | (Verdict::Note, _) => "note",
        (Verdict::Fail, _) => "**FAIL**",
        (Verdict::Unsupported, _) => "unsupported",
        (Verdict::Error, _) => "error",
    }
}

/// What a store answered, in short: a word, or its error's answer.
fn answer(value: Option<&Answer>) -> String {
    match value {
        Some(Answer::Word(word)) => word.clone(),
        Some(Answer::Error(error)) => error.answer.clone().unwrap_or_else(|| "?".into()),
        None => "-".into(),
    }
}

/// A number as the JSON report wrote it (`51.0`, not `51`).
fn json_number(value: f64) -> String {
    serde_json::Number::from_f64(value).map_or_else(|| "null".into(), |n| n.to_string())
}

/// The casaas quirk options already set in a store's URL, shown as
/// "needed" for that store: xtask's env file gives each server the options it
/// needs, so the binary then has nothing left to recommend.
fn quirk_options_in_url(url: Option<&str>) -> Option<String> {
    let url = casaas_core::StoreUrl::parse(url?).ok()?;
    let given: Vec<String> = casaas_s3::S3Quirks::OPTIONS
        .iter()
        .filter_map(|name| Some(format!("{name}={}", url.option(name)?)))
        .collect();
    (!given.is_empty()).then(|| format!("{} (set in the URL)", given.join(", ")))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::stored;
    use super::*;

    /// A stored run: `runs.json` with a SAFE store (memory), a NOT SAFE one
    /// (s3rver, with a gateway) and one that could not start (ceph), and
    /// the page rendered from it (`vendors.md`).
    const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/vendor_matrix/testdata");

    /// Fixed stand-ins for what the tree knows, so that editing a server's
    /// findings or the public reports does not change the snapshot.
    fn known() -> Known<'static> {
        Known {
            findings: vec![
                ("s3rver", &["a finding of other tests"]),
                ("moto", &["not in this run, so not on the page"]),
            ],
            public_reports: "## Public reports\n\n(hand-written, copied verbatim)\n",
        }
    }

    /// The page of the stored run equals the committed one. After an
    /// intended change of the page, `XTASK_BLESS=1 cargo test -p xtask`
    /// rewrites `testdata/vendors.md`; review its diff.
    #[test]
    fn the_page_rendered_from_stored_reports_is_the_committed_snapshot() {
        let dir = Path::new(TESTDATA);
        let page = stored::load(dir).expect("the stored run");
        let markdown = render(&page, &known());
        let expected_path = dir.join("vendors.md");
        if std::env::var_os("XTASK_BLESS").is_some() {
            std::fs::write(&expected_path, &markdown).expect("writing the snapshot");
        }
        let expected = std::fs::read_to_string(&expected_path).expect("the snapshot");
        assert!(
            markdown == expected,
            "the page differs from {} (XTASK_BLESS=1 accepts it):\n{markdown}",
            expected_path.display()
        );
    }

    #[test]
    fn ports_are_masked_in_urls() {
        assert_eq!(
            stable_url("s3://b/?endpoint=http://127.0.0.1:45627&x=127.0.0.1:"),
            "s3://b/?endpoint=http://127.0.0.1:PORT&x=127.0.0.1:"
        );
    }
}
