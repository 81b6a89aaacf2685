//! Exit statuses, and the failures that end a run before or around the command.

/// Bad input, a configuration the store cannot honour, a foreign object, or
/// a store error: nothing was run.
pub const USAGE: u8 = 2;
/// `status`: the lock is free (absent, released, or expired while watched).
pub const FREE: u8 = 3;
/// The lock was not acquired (`-n`, or `--wait` ran out); `--conflict-exit-code` changes it.
pub const CONFLICT_DEFAULT: u8 = 75;
/// The lease was lost while the command ran; the command was stopped.
pub const LOST: u8 = 76;
/// The command exists but could not be executed (as in shells).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as in shells).
pub const NOT_FOUND: u8 = 127;

/// A failure with the exit status it maps to and one line saying what to fix.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// Exit status 2: bad input, configuration or store error.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: USAGE,
            message: message.into(),
        }
    }

    /// A failure with a specific exit status.
    pub fn with_code(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// The exit status.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// The one-line message.
    pub fn message(&self) -> String {
        // One line, whatever the cause's formatting.
        self.message.replace('\n', " ")
    }
}

/// The exit status for a child's wait status: its code, or 128 + the signal
/// that killed it.
pub fn status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(255),
        (None, None) => 1,
    }
}
