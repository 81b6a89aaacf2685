//! `casaas`: flock for a bucket.
//!
//! Runs a command only while holding a lease on an object in S3, GCS, Azure
//! Blob Storage, an S3-compatible store or a local directory; shows who
//! holds a lock; runs a command only while elected leader; breaks a stale
//! lock without ever resetting its fencing token; and checks whether a
//! store can be trusted with any of this (`casaas conformance`).
//!
//! See `docs/cli.md` for examples, exit codes and what a lock cannot
//! promise.

mod child;
mod cli;
mod duration;
mod elect;
mod exit;
mod holding;
mod lock;
mod logging;
mod ls;
mod providers;
mod release;
mod sessions;
mod status;
mod target;
mod time;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use casaas_conformance::cli::LogFormat as ConformanceLogFormat;

use crate::cli::{Cli, Command};
use crate::exit::Failure;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The watchdog re-executes casaas; it must start nothing else (no
    // logger, no runtime) and stay tiny.
    if args.get(1).is_some_and(|a| a == child::WATCHDOG_ARG) && args.len() == 2 {
        return child::watchdog_main();
    }
    // The manual page, from the same definitions as --help (`cargo xtask
    // man` writes it to man/casaas.1).
    if args.get(1).is_some_and(|a| a == MAN_ARG) && args.len() == 2 {
        return man();
    }
    // Secrets in any URL argument are masked from the first message on.
    for arg in &args {
        target::register_userinfo(&arg.to_string_lossy());
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let format = match cli.log_format() {
        Ok(format) => format,
        Err(e) => {
            logging::report_error(&format!("{e} (see casaas --help)"));
            return ExitCode::from(exit::USAGE);
        }
    };
    logging::init(format, cli.verbose);
    providers::register();
    if cli.no_cache {
        target::disable_guard_cache();
    }
    // The conformance crate's logs keep the subscriber installed above
    // (format and verbosity from the options, wherever they were given).
    let log_format = match format {
        cli::LogFormat::Text => ConformanceLogFormat::Text,
        cli::LogFormat::Json => ConformanceLogFormat::Json,
    };
    let outcome = match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "casaas", &mut std::io::stdout());
            Ok(0)
        }
        Command::Conformance(args) => {
            return casaas_conformance::cli::run_conformance(args, log_format);
        }
        Command::Doctor(args) => return casaas_conformance::cli::run_doctor(args, log_format),
        Command::Cache(cli::CacheCommand::Clear) => clear_cache(),
        command => run_async(command),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            logging::report_error(&failure.message());
            ExitCode::from(failure.code())
        }
    }
}

/// `casaas cache clear`: removes every recorded store-guard verdict.
fn clear_cache() -> Result<u8, Failure> {
    use casaas_core::guard::cache::GuardCache;
    let Some(dir) = GuardCache::default_dir() else {
        return Err(Failure::with_code(
            exit::CONFIG,
            "no cache directory: set XDG_CACHE_HOME or HOME",
        ));
    };
    if !dir.exists() {
        println!(
            "no store-guard verdicts recorded ({} does not exist)",
            dir.display()
        );
        return Ok(0);
    }
    let removed = GuardCache::open(&dir)
        .and_then(|cache| cache.clear())
        .map_err(|e| Failure::with_code(exit::CONFIG, e.to_string()))?;
    println!(
        "removed {removed} store-guard verdict{} from {}",
        if removed == 1 { "" } else { "s" },
        dir.display()
    );
    Ok(0)
}

/// The hidden argument that prints the manual page.
const MAN_ARG: &str = "__man";

/// Prints `casaas(1)`: the command, its options, every subcommand with its
/// own, and the exit codes.
fn man() -> ExitCode {
    let command = Cli::command();
    let mut page = Vec::new();
    let rendered = clap_mangen::Man::new(command.clone())
        .render(&mut page)
        .and_then(|()| {
            for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
                let title = format!(".SH \"CASAAS {}\"\n", sub.get_name().to_uppercase());
                page.extend_from_slice(title.as_bytes());
                let man = clap_mangen::Man::new(sub.clone());
                man.render_description_section(&mut page)?;
                man.render_options_section(&mut page)?;
                man.render_extra_section(&mut page)?;
            }
            Ok(())
        });
    match rendered.and_then(|()| std::io::Write::write_all(&mut std::io::stdout(), &page)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            logging::report_error(&format!("cannot write the manual page: {e}"));
            ExitCode::from(1)
        }
    }
}

/// Help and version go out as clap renders them; a usage error becomes one
/// line saying what was wrong, and exit status 2.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if err.kind() == ErrorKind::DisplayVersion {
        // The same line for `casaas --version` and `casaas lock --version`
        // (clap would name the subcommand, e.g. casaas-lock).
        println!("casaas {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = err.print();
        return ExitCode::from(if err.use_stderr() { exit::USAGE } else { 0 });
    }
    let rendered = err.render().to_string();
    // The first paragraph (e.g. "required arguments were not provided:"
    // and the list that follows), as one line.
    let line = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    let tip = rendered
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("tip: "))
        .map(|t| format!("; {t}"))
        .unwrap_or_default();
    logging::report_error(&format!("{line}{tip} (see casaas --help)"));
    ExitCode::from(exit::USAGE)
}

fn run_async(command: Command) -> Result<u8, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        match command {
            Command::Lock(args) => lock::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Ls(args) => ls::run(args).await,
            Command::Elect(args) => elect::run(args).await,
            Command::Release(args) => release::run(args).await,
            Command::Completions { .. }
            | Command::Conformance(_)
            | Command::Doctor(_)
            | Command::Cache(_) => Err(Failure::usage(
                "this command runs outside the async runtime",
            )),
        }
    })
}
