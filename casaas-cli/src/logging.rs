//! Logs on stderr (text or JSON), with every known secret masked.
//!
//! Secrets are the values of the credential variables of every provider and
//! the user-info part of any URL given on the command line; whatever
//! prints them (an SDK at trace level, an error message quoting a URL),
//! they are replaced by `[redacted]` before reaching stderr, by the same
//! rules as every report and message of the conformance suite.

use std::io::Write;
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::cli::LogFormat;

/// `text` with every secret masked: URL user parts, credential-looking
/// `name=value` pairs and every registered secret value, by the one set of
/// redaction rules (`casaas_conformance::redact_text`, `[redacted]`).
pub fn redact(text: &str) -> String {
    casaas_conformance::redact_text(text)
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the stderr logger. Default level: warnings (`-v` info for
/// casaas, `-vv` debug everywhere); `RUST_LOG` overrides.
pub fn init(format: LogFormat, verbose: u8) {
    let _ = FORMAT.set(format);
    // Read the secret variables now, before anything could print them.
    casaas_conformance::register_secrets_from_env();
    let default = match verbose {
        // The library warns when a lease is lost; casaas reports that
        // itself, once, with what it did about it.
        0 => "warn,casaas_core::lease::handle=error",
        1 => "warn,casaas=info,casaas_core=info",
        _ => "debug",
    };
    let filter = casaas_conformance::cli::sdk_capped(
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour())
        .with_writer(RedactingStderr);
    let installed = match format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // A second installation attempt (never expected) keeps the first.
    let _ = installed;
}

/// Colour only for a person at a terminal: never in a file or a pipe, and
/// never when `NO_COLOR` is set to anything but the empty string
/// (no-color.org).
fn colour() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// Prints a one-line error on stderr: `casaas: MESSAGE`, or a JSON log
/// object with --log-format json.
pub fn report_error(message: &str) {
    let message = redact(message);
    match FORMAT.get() {
        Some(LogFormat::Json) => tracing::error!("{message}"),
        _ => {
            let _ = writeln!(std::io::stderr(), "casaas: {message}");
        }
    }
}

/// Prints a one-line notice on stderr (text), or an info event (JSON).
pub fn notice(message: &str) {
    let message = redact(message);
    match FORMAT.get() {
        Some(LogFormat::Json) => tracing::warn!("{message}"),
        _ => {
            let _ = writeln!(std::io::stderr(), "casaas: {message}");
        }
    }
}

/// Is the log format JSON?
pub fn json_logs() -> bool {
    FORMAT.get() == Some(&LogFormat::Json)
}

/// Writes each log event to stderr at once, secrets masked.
struct RedactingStderr;

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        EventBuffer(Vec::new())
    }
}

/// One event's bytes, written (redacted) when dropped.
struct EventBuffer(Vec<u8>);

impl Write for EventBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = redact(&String::from_utf8_lossy(&self.0));
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_also_when_percent_encoded() {
        crate::target::register_userinfo("s3://u:p%40ss-w0rd@b/x");
        assert_eq!(
            redact("url s3://u:p%40ss-w0rd@b/x"),
            "url s3://[redacted]@b/x"
        );
        assert_eq!(redact("said p@ss-w0rd"), "said [redacted]");
        assert_eq!(redact("and p%40ss-w0rd"), "and [redacted]");
        assert_eq!(redact("nothing here"), "nothing here");
    }
}
