//! Exit statuses, and the failures that end a run before or around the command.
//!
//! One meaning per code across every subcommand, so that a script can act
//! on it (retry 69, fix the configuration on 78, alert on 1); [`TABLE`] is
//! printed by `casaas --help` and checked against docs/cli.md by a test.

/// The store does not honour the conditional writes leases rely on (the
/// store guard or a NOT SAFE capability profile refuses it).
pub const NOT_SAFE: u8 = casaas_conformance::cli::EXIT_NOT_SAFE;
/// Bad input on the command line: nothing was run or written.
pub const USAGE: u8 = casaas_conformance::cli::EXIT_USAGE;
/// `status`: the lock is free (absent, released, or expired while
/// watched); `release`: no lock object.
pub const FREE: u8 = 4;
/// `release`: declined, changed since shown, or held under a live session;
/// nothing was written.
pub const NOT_RELEASED: u8 = 5;
/// The object at the key is not a casaas lock (foreign, corrupt or of a
/// newer schema); it was left untouched.
pub const FOREIGN: u8 = 65;
/// The store could not be reached, timed out, throttled, or its answer was
/// lost: running again later may succeed.
pub const UNAVAILABLE: u8 = casaas_conformance::cli::EXIT_UNAVAILABLE;
/// The lock was not acquired (`-n`, or `--wait` ran out); `--conflict-exit-code` changes it.
pub const CONFLICT_DEFAULT: u8 = 75;
/// The lease was lost while the command ran; the command was stopped.
pub const LOST: u8 = 76;
/// The store refused the configuration (a missing bucket, wrong
/// credentials or permissions, an unsupported request); retrying will not
/// help.
pub const CONFIG: u8 = casaas_conformance::cli::EXIT_CONFIG;
/// The command exists but could not be executed (as in shells).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as in shells).
pub const NOT_FOUND: u8 = 127;

/// Every exit status: the code as docs/cli.md's table writes it, and its
/// meaning.
pub const TABLE: &[(&str, &str)] = &[
    (
        "the command's",
        "lock / elect: the command exited with this status (128+N if killed by signal N)",
    ),
    (
        "0",
        "success: status held; ls listed; release released (or already released); doctor / conformance safe",
    ),
    (
        "1",
        "the store is not safe for leases: the store guard, a NOT SAFE capability profile, or doctor / conformance found it breaks a condition",
    ),
    (
        "2",
        "usage: a typo in a command or option, conflicting options, a bad value (a lock URL that is no URL, a TTL under 1s or too short for the store, --grace too long); nothing was run",
    ),
    (
        "3",
        "doctor / conformance: inconclusive (a critical check could not complete)",
    ),
    (
        "4",
        "status: free (no object, released, or unchanged for a full TTL while watched); release: no lock object",
    ),
    (
        "5",
        "release: not released (declined, changed since it was shown, or held under a live session)",
    ),
    (
        "65",
        "the object at the key is not a casaas lock (foreign, corrupt or a newer schema); it was left untouched",
    ),
    (
        "69",
        "the store could not be reached, timed out, throttled or lost an answer: retry later",
    ),
    (
        "75",
        "lock: not acquired (-n, -w / --wait ran out); -E / --conflict-exit-code changes it",
    ),
    (
        "76",
        "lock / elect: the lease was lost while the command ran; it was stopped",
    ),
    (
        "78",
        "the store's configuration is refused (an unknown URL option or scheme, a missing bucket or file:// directory, credentials, permissions, the other layout, an unsupported request): fix it, retrying will not help",
    ),
    (
        "126, 127",
        "the command could not be executed / was not found",
    ),
    (
        "128+N",
        "interrupted by signal N before the command started",
    ),
];

/// The table for `--help`.
pub fn help_table() -> String {
    let mut out = String::from("Exit status (one meaning per code, every command):\n");
    for (code, meaning) in TABLE {
        out.push_str(&format!("  {code:<14} {meaning}\n"));
    }
    out
}

/// The exit status of a store error.
pub fn store_code(e: &casaas_core::CasError) -> u8 {
    casaas_conformance::cli::exit_code_for(e.kind())
}

/// The exit status of a lease error.
pub fn lease_code(e: &casaas_core::lease::LeaseError) -> u8 {
    use casaas_core::lease::LeaseError as L;
    match e {
        L::Store(e) => store_code(e),
        L::UnsafeStore(_) => NOT_SAFE,
        L::ForeignObject { .. } | L::UnsupportedSchema { .. } | L::Codec { .. } => FOREIGN,
        L::Lost(_) | L::FencedOut { .. } | L::InsufficientValidity { .. } => LOST,
        L::InvalidConfig(_) | L::HeartbeatOutOfReach { .. } => USAGE,
        L::Contended { .. } => UNAVAILABLE,
        _ => CONFIG,
    }
}

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

    /// A store error's failure: [`UNAVAILABLE`], [`CONFIG`], [`NOT_SAFE`]
    /// or [`USAGE`] by its kind.
    pub fn store(e: &casaas_core::CasError, message: impl Into<String>) -> Self {
        Self::with_code(store_code(e), message)
    }

    /// A lease error's failure, its code by [`lease_code`].
    pub fn lease(e: &casaas_core::lease::LeaseError, message: impl Into<String>) -> Self {
        Self::with_code(lease_code(e), message)
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
