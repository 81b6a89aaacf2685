//! The command line: options, help texts and examples.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration::{Wait, parse_duration, parse_wait, parse_wait_seconds};
use crate::exit::CONFLICT_DEFAULT;

/// Flock for a bucket: run a command while holding a lease on an object in
/// S3, GCS, Azure Blob Storage or a local directory.
#[derive(Parser, Debug)]
#[command(
    name = "casaas",
    version,
    propagate_version = true,
    after_help = AFTER_HELP,
    after_long_help = format!("{AFTER_HELP}\n\n{}", crate::exit::help_table())
)]
pub struct Cli {
    /// Log format on stderr: text for people (the default), json (one
    /// object a line) for services. Also from CASAAS_LOG_FORMAT; the flag
    /// wins over it.
    // CASAAS_LOG_FORMAT is read by `log_format()`, not by clap, so that a
    // bad value is named as the variable's.
    #[arg(long, value_enum, global = true)]
    pub log_format: Option<LogFormat>,
    /// More log output (-v: what casaas does; -vv: every request). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Check the store with the store guard even if an earlier run proved
    /// it within the hour (the verdict cached in $XDG_CACHE_HOME/casaas/guard
    /// or ~/.cache/casaas/guard), and record nothing. Also CASAAS_NO_CACHE=1.
    #[arg(long, global = true, env = "CASAAS_NO_CACHE", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_cache: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The log format: `--log-format`, else `$CASAAS_LOG_FORMAT`, else text.
    pub fn log_format(&self) -> Result<LogFormat, String> {
        if let Some(format) = self.log_format {
            return Ok(format);
        }
        match std::env::var(LOG_FORMAT_VAR) {
            Ok(value) if !value.is_empty() => LogFormat::from_str(&value, true)
                .map_err(|_| format!("{LOG_FORMAT_VAR}={value:?}: use text or json")),
            _ => Ok(LogFormat::Text),
        }
    }
}

/// The variable the log format may come from.
pub const LOG_FORMAT_VAR: &str = "CASAAS_LOG_FORMAT";

/// Log output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command while holding a lock; stop it if the lock is lost.
    #[command(after_long_help = LOCK_HELP)]
    Lock(LockArgs),
    /// Show who holds a lock, its fencing token, and when a takeover could happen.
    #[command(after_long_help = STATUS_HELP)]
    Status(StatusArgs),
    /// List every lock under a prefix: state, holder, token, TTL; nothing is written.
    #[command(after_long_help = LS_HELP)]
    Ls(LsArgs),
    /// Campaign for leadership and run a command only while leading.
    #[command(after_long_help = ELECT_HELP)]
    Elect(ElectArgs),
    /// Break a stale lock: mark the observed record released, keeping its token.
    #[command(after_long_help = RELEASE_HELP)]
    Release(ReleaseArgs),
    /// Check whether a store honours conditional writes (same as casaas-conformance).
    #[command(after_help = casaas_conformance::cli::CONFORMANCE_AFTER_HELP)]
    Conformance(casaas_conformance::cli::ConformanceArgs),
    /// A deploy gate: the store guard and the quick probes, one line each;
    /// exit 0 safe, 1 not safe, 3 inconclusive, 69 unreachable (retry).
    #[command(after_help = casaas_conformance::cli::DOCTOR_AFTER_HELP)]
    Doctor(casaas_conformance::cli::DoctorArgs),
    /// Manage the store guard's verdicts kept between runs.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Print a shell completion script.
    #[command(
        after_long_help = "Example:\n  casaas completions bash > /etc/bash_completion.d/casaas"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `casaas cache`.
#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// Remove every recorded store-guard verdict ($XDG_CACHE_HOME/casaas/guard
    /// or ~/.cache/casaas/guard): the next run on every store checks it again.
    /// Run it after changing what answers behind a store URL.
    Clear,
}

/// Options shared by the commands that hold a lease.
#[derive(Args, Debug, Clone)]
pub struct LeaseArgs {
    /// How long the lease lasts without renewal (e.g. 15s, 2m; at least
    /// 1s). casaas renews every TTL/3 (as the library does) and stops the
    /// command if no renewal succeeded for TTL/2. A crashed holder's lock
    /// can be taken over after about one TTL.
    #[arg(long, default_value = "15s", value_parser = parse_ttl, value_name = "DURATION", env = "CASAAS_TTL")]
    pub ttl: Duration,
    /// Time between SIGTERM and SIGKILL to the command's process group when
    /// the lease is lost. It must be shorter than the time left before
    /// anyone can take over after casaas gives up on renewing (about
    /// 0.44×TTL); a longer one is refused. Default: half of that, at most 10s.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "CASAAS_GRACE")]
    pub grace: Option<Duration>,
    /// Open the store at URL, a directory above the lock's, instead of at
    /// the lock's own directory; the lock's key is then its path below URL.
    /// Needed to take over a lock held under a session whose heartbeat lies
    /// outside the lock's directory (e.g. --root s3://bucket/locks for
    /// s3://bucket/locks/shards/7 held under sessions/worker-1). Same
    /// scheme, bucket and options as the lock URL.
    #[arg(long, value_name = "URL", env = "CASAAS_ROOT")]
    pub root: Option<String>,
}

/// `casaas lock`.
#[derive(Args, Debug)]
pub struct LockArgs {
    /// The lock object, e.g. s3://bucket/locks/nightly-backup or file:///var/lib/app/locks/x.
    pub url: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Wait for the lock: forever (--wait, the default) or at most DURATION
    /// (--wait=5m; --wait=0 makes one attempt, as -n). Also from
    /// CASAAS_WAIT (0, 10m, forever); -n, -w and --wait win over it.
    // CASAAS_WAIT is read by `wait_limit`, not by clap: clap counts a value
    // from the environment as given for `conflicts_with`, so the variable
    // would make `-n` and `-w` errors instead of losing to them.
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "forever",
        value_parser = parse_wait,
        value_name = "DURATION"
    )]
    pub wait: Option<Wait>,
    /// Wait at most SECONDS (as flock -w; fractions allowed, 0 makes one attempt).
    #[arg(short = 'w', value_parser = parse_wait_seconds, value_name = "SECONDS", conflicts_with = "wait")]
    pub wait_seconds: Option<Duration>,
    /// Do not wait: if the lock is held, exit at once with the conflict code.
    #[arg(short = 'n', long, conflicts_with_all = ["wait", "wait_seconds"])]
    pub no_wait: bool,
    /// How often to read a held lock while waiting for it (e.g. 100ms, 1s;
    /// at most the TTL). Default: TTL/10, at most 100ms, so a released
    /// lock is taken about 50ms later; each read is one GET (10 per
    /// waiting second at 100ms).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "CASAAS_POLL")]
    pub poll: Option<Duration>,
    /// Exit status when the lock was not acquired (held, or the wait ran out).
    #[arg(short = 'E', long, default_value_t = CONFLICT_DEFAULT, value_name = "N", env = "CASAAS_CONFLICT_EXIT_CODE")]
    pub conflict_exit_code: u8,
    /// Owner id written into the lock (default: HOSTNAME/PID).
    #[arg(long, value_name = "ID", env = "CASAAS_OWNER")]
    pub owner: Option<String>,
    /// Hold the lock shared with other --shared holders (a reader slot
    /// under URL.readers/), as flock -s; holders that must exclude them
    /// take it with --exclusive. Needs a store that lists keys.
    #[arg(short = 's', long, conflicts_with_all = ["exclusive", "fair", "slots"])]
    pub shared: bool,
    /// Hold the lock exclusively against --shared holders too (as flock
    /// -x): take the lock, then wait for every shared holder to finish.
    /// Without it, `casaas lock` does not look at shared holders.
    #[arg(short = 'x', long, conflicts_with_all = ["fair", "slots"])]
    pub exclusive: bool,
    /// Wait in turns: waiters are served in the order they arrived (a
    /// ticket each under URL.queue/). Needs a store that lists keys.
    #[arg(long)]
    pub fair: bool,
    /// Let up to N holders in at once (a counting semaphore): each holder
    /// takes one of N slots under URL.slots/, a lease with its own fencing
    /// token (CASAAS_FENCING_TOKEN is its slot's, CASAAS_SLOT its number).
    /// Waiters take turns. Every holder of URL must pass the same N.
    #[arg(long, value_name = "N", conflicts_with = "fair", value_parser = clap::value_parser!(u32).range(1..=i64::from(casaas_core::lease::MAX_SLOTS)))]
    pub slots: Option<u32>,
    /// Run SHELL_COMMAND through `sh -c` (as flock -c) instead of CMD.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SHELL_COMMAND",
        conflicts_with = "command"
    )]
    pub shell: Option<String>,
    /// The command and its arguments, right after the URL or after `--`.
    #[arg(
        trailing_var_arg = true,
        value_name = "CMD",
        required_unless_present = "shell"
    )]
    pub command: Vec<OsString>,
}

impl LockArgs {
    /// The command to run: CMD, or `sh -c SHELL_COMMAND`.
    pub fn argv(&self) -> Vec<OsString> {
        match &self.shell {
            Some(line) => vec!["sh".into(), "-c".into(), line.into()],
            None => self.command.clone(),
        }
    }

    /// How long to wait: `-n`, `-w`, then `--wait`, then `$CASAAS_WAIT`
    /// (flags win over the environment); `None` is one attempt.
    pub fn wait_limit(&self) -> Result<Option<Wait>, String> {
        let env = std::env::var(WAIT_VAR).ok().filter(|v| !v.is_empty());
        self.wait_limit_with(env.as_deref())
    }

    /// [`wait_limit`](Self::wait_limit) with `env` as the value of
    /// `$CASAAS_WAIT`.
    pub fn wait_limit_with(&self, env: Option<&str>) -> Result<Option<Wait>, String> {
        if self.no_wait {
            return Ok(None);
        }
        let from_flags = self.wait_seconds.map(Wait::AtMost).or(self.wait);
        let wait = match (from_flags, env) {
            (Some(wait), _) => wait,
            (None, Some(text)) => {
                parse_wait(text).map_err(|e| format!("{WAIT_VAR}={text:?}: {e}"))?
            }
            (None, None) => Wait::Forever,
        };
        Ok(match wait {
            Wait::AtMost(limit) if limit.is_zero() => None,
            other => Some(other),
        })
    }
}

/// `casaas status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The lock object.
    pub url: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Watch the record this long (e.g. 20s) to see whether its holder still
    /// renews: a version unchanged for a full TTL means it can be taken over.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub observe_for: Option<Duration>,
}

/// `casaas ls`.
#[derive(Args, Debug)]
pub struct LsArgs {
    /// The prefix (directory) that holds the locks, e.g. s3://bucket/locks.
    pub url: String,
    /// Print one JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `casaas elect`.
#[derive(Args, Debug)]
pub struct ElectArgs {
    /// The election's lock object.
    pub url: String,
    /// This candidate's id (required to campaign, i.e. with a command).
    #[arg(long, value_name = "ID", env = "CASAAS_ID")]
    pub id: Option<String>,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Publish VALUE with this candidate's terms (its address, say; at most
    /// 4096 bytes): written in the election's record with each term and
    /// kept by every renewal, shown by --observe and `casaas status`.
    #[arg(long, value_name = "VALUE", env = "CASAAS_VALUE")]
    pub value: Option<String>,
    /// Print who leads as JSON lines on stdout, at start and at every change.
    #[arg(long)]
    pub observe: bool,
    /// Print this candidate's own transitions (elected, stopped leading) as
    /// JSON lines on stderr instead of text.
    #[arg(long)]
    pub json: bool,
    /// The command to run while leading, right after the URL or after
    /// `--`. Without one, --observe only watches.
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `casaas release`.
#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The lock object.
    pub url: String,
    /// Required: this breaks someone else's lock.
    #[arg(long, required = true)]
    pub force: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// The end of `casaas --help`: what a lock URL looks like, and where the
/// rest is (the installed command has no docs directory beside it).
const AFTER_HELP: &str = "Lock URLs name the lock object: s3://bucket/locks/NAME, gs://bucket/locks/NAME, \
az://account/container/locks/NAME, file:///var/lib/app/locks/NAME. Store options go in the query \
(e.g. s3://bucket/locks/NAME?endpoint=http://127.0.0.1:9000&path_style=true). Credentials come \
from the environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*), never from the URL.\n\n\
Run `casaas help COMMAND` for examples, `casaas --help` for the exit codes, `man casaas` for the \
manual. What a lock cannot promise: https://github.com/casaas/casaas/blob/main/docs/cli.md";

const LOCK_HELP: &str = "Examples:\n\
  # Nightly backup from cron on three hosts; only one runs, the others skip (exit 75):\n\
  casaas lock -n s3://ops-bucket/locks/nightly-backup -- /usr/local/bin/backup.sh\n\n\
  # Wait up to 10 minutes for a migration lock held elsewhere:\n\
  casaas lock --wait=10m --ttl 30s gs://ops/locks/migrate -- ./migrate up\n\n\
  # On one machine, with the embedded file backend (the directory must exist):\n\
  casaas lock file:///var/lib/app/locks/reindex -- ./reindex\n\n\
  # flock(1) style: a shell command, a bounded wait in seconds, a conflict code:\n\
  casaas lock -w 30 -E 0 -c 'make deploy' s3://ops-bucket/locks/deploy\n\n\
The command runs in its own process group with CASAAS_FENCING_TOKEN, CASAAS_LOCK_URL and\n\
CASAAS_OWNER in its environment. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to its group.\n\
When it exits, the lock is released and casaas exits with its status (128+N if killed by\n\
signal N). If the lease is lost, the group gets SIGTERM at once and SIGKILL after --grace,\n\
and casaas exits with 76.\n\n\
Exit status: the command's; 75 (--conflict-exit-code) not acquired; 76 lease lost;\n\
2 bad input; 1 unsafe store; 65 foreign object at the key; 69 store unreachable (retry);\n\
78 store configuration refused; 126/127 the command could not be run (nothing was run\n\
for any but the command's own).\n\n\
A lock cannot stop a paused holder from writing late: pass CASAAS_FENCING_TOKEN to whatever\n\
the command writes, and have it refuse lower tokens\n\
(https://github.com/casaas/casaas/blob/main/docs/cli.md#what-a-lock-cannot-promise).";

const STATUS_HELP: &str = "Examples:\n\
  casaas status s3://ops-bucket/locks/nightly-backup\n\
  casaas status --json --observe-for 20s file:///var/lib/app/locks/reindex\n\n\
The holder's times are advisory (its own wall clock). Whether a holder has stopped renewing\n\
can only be seen by watching the record: --observe-for watches it (one read per second).\n\
An object that is not a casaas lock is reported and never touched.\n\n\
Exit status: 0 held; 4 free (absent, released, or unchanged for a full TTL while watched);\n\
65 foreign object; 2 bad input; 69 store unreachable (retry); 78 store configuration refused.";

const LS_HELP: &str = "Examples:\n\
  casaas ls s3://ops-bucket/locks\n\
  casaas ls --json file:///var/lib/app/locks\n\n\
Reads each object under the prefix once and writes nothing. STATE is held, waiting (a\n\
fair-mode queue ticket: a waiter for the lock named before .queue/, not a holder), released,\n\
expired (the holder's last write plus its TTL is past on this machine's clock: advisory,\n\
as far as seen; `casaas status --observe-for` watches for certain) or foreign (not a casaas\n\
lock; left untouched). Objects under .casaas-guard/ (the library's store probes) are not\n\
listed.\n\n\
Exit status: 0 listed (also when empty); 2 bad input; 69 store unreachable (retry);\n\
78 store configuration refused.";

const ELECT_HELP: &str = "Examples:\n\
  # A singleton service on several hosts, restarted by systemd (Restart=always):\n\
  casaas elect s3://ops-bucket/elections/scheduler --id \"$(hostname)\" -- /usr/local/bin/scheduler\n\n\
  # Watch who leads (JSON lines, for scripts and dashboards):\n\
  casaas elect s3://ops-bucket/elections/scheduler --observe\n\n\
The command runs only while this candidate leads, with the same child handling as `lock`.\n\
When it exits, leadership is resigned and casaas exits with its status; if leadership is\n\
lost, the command is stopped and casaas exits with 76.";

const RELEASE_HELP: &str = "Example:\n\
  casaas release --force s3://ops-bucket/locks/nightly-backup\n\n\
Shows the record it will break and asks (unless --yes). The write is conditional on the\n\
version shown: if the lock changed meanwhile, nothing is written. The record is marked\n\
released and keeps its fencing token, so the next holder gets a higher one; it is never\n\
deleted. A holder that is still running loses its lease at its next renewal.\n\n\
Exit status: 0 released (or already released); 4 no lock object; 5 declined, changed or\n\
held under a live session; 65 foreign object; 2 bad input; 69 store unreachable (retry);\n\
78 store configuration refused.";

/// A TTL: a duration of at least [`MIN_TTL`], for every backend (below
/// it, a renewal every TTL/3 and the stop sequence cannot fit in the
/// scheduling noise of an ordinary machine, let alone a store's latency).
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_duration(text)?;
    if ttl < MIN_TTL {
        return Err(format!(
            "a TTL under {}s cannot be held reliably on any store; use --ttl 1s or more",
            MIN_TTL.as_secs()
        ));
    }
    Ok(ttl)
}

/// The variable `--wait`'s value may come from.
pub const WAIT_VAR: &str = "CASAAS_WAIT";

/// The shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(1);
