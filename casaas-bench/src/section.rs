//! What each measurement hands the report.

/// One part of docs/performance.md.
#[derive(Debug, Default)]
pub struct Section {
    /// Markdown, starting with a `##` heading.
    pub markdown: String,
    /// SVG plots: (file name, content), written next to the report and
    /// referenced from `markdown` as `performance/NAME`.
    pub svgs: Vec<(String, String)>,
    /// `name=value` lines printed last.
    pub headlines: Vec<String>,
}

/// Formats milliseconds for a table.
pub fn ms(value: f64) -> String {
    if value.is_nan() {
        "–".to_string()
    } else if value < 10.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.0}")
    }
}
