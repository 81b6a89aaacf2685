//! docs/performance.md: header (date, versions, machine), the sections,
//! and the SVGs next to it.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::section::Section;

/// Today's date (UTC) as YYYY-MM-DD.
pub fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Cores, CPU model, memory and kernel of this machine.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "?".into());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cores} cores ({model}), {memory} memory, Linux {}",
        kernel.trim()
    )
}

/// Writes `out` (Markdown) and its SVGs in `out`'s sibling directory
/// `performance/`.
pub fn write(out: &Path, header: &str, sections: &[Section]) -> Result<()> {
    let dir = out
        .parent()
        .context("the report path has no directory")?
        .join("performance");
    std::fs::create_dir_all(&dir)?;
    let mut md = header.to_string();
    for section in sections {
        md.push_str(&section.markdown);
        for (name, svg) in &section.svgs {
            std::fs::write(dir.join(name), svg)
                .with_context(|| format!("writing {}", dir.join(name).display()))?;
        }
    }
    std::fs::write(out, md).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
