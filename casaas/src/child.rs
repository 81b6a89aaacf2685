//! The command run under a lease: its own process group, forwarded
//! signals, and a stop sequence when the lease is lost.

use std::ffi::OsString;
use std::future::Future;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::duration::human;
use crate::exit::{CANNOT_EXECUTE, Failure, NOT_FOUND, status_code};
use crate::logging;

/// SIGINT, SIGTERM and SIGHUP, caught from the start so that none of them
/// kills casaas while it holds a lease.
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts catching the signals.
    pub fn catch() -> Result<Self, Failure> {
        let make = |kind: SignalKind| {
            signal(kind)
                .map_err(|e| Failure::usage(format!("cannot install a signal handler: {e}")))
        };
        Ok(Signals {
            interrupt: make(SignalKind::interrupt())?,
            terminate: make(SignalKind::terminate())?,
            hangup: make(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// The exit status for "interrupted by `signal` before the command ran".
pub fn signal_exit(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(255)
}

/// How the command ended.
#[derive(Debug)]
pub struct ChildEnd {
    /// Its exit status (128 + N if killed by signal N).
    pub code: u8,
    /// Why the lease ended while it ran, if it did (it was then stopped).
    pub lost: Option<String>,
}

/// Runs `command` in its own process group with `env` added, until it
/// exits or `lease_end` resolves. Signals received meanwhile go to its
/// group. When the lease ends, the group gets SIGTERM at once and SIGKILL
/// after `grace`.
pub async fn supervise(
    command: &[OsString],
    env: &[(&str, String)],
    lease_end: impl Future<Output = String>,
    grace: Duration,
    signals: &mut Signals,
) -> Result<ChildEnd, Failure> {
    let mut child = spawn(command, env)?;
    let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        // Already reaped: it exited at once.
        let status = child
            .wait()
            .await
            .map_err(|e| Failure::usage(format!("waiting for the command: {e}")))?;
        return Ok(ChildEnd {
            code: status_code(status),
            lost: None,
        });
    };
    let group = Pid::from_raw(pid);
    tokio::pin!(lease_end);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::usage(format!("waiting for the command: {e}")))?;
                return Ok(ChildEnd { code: status_code(status), lost: None });
            }
            received = signals.recv() => {
                tracing::info!(signal = %received, "forwarding to the command's process group");
                send(group, received);
            }
            reason = &mut lease_end => {
                let code = stop(&mut child, group, grace, &reason, signals).await?;
                return Ok(ChildEnd { code, lost: Some(reason) });
            }
        }
    }
}

fn spawn(command: &[OsString], env: &[(&str, String)]) -> Result<Child, Failure> {
    let Some((program, args)) = command.split_first() else {
        return Err(Failure::usage("no command given: put it after `--`"));
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        // Its own group: casaas signals the whole group, and a terminal's
        // signals reach the command only through casaas.
        .process_group(0)
        .kill_on_drop(false);
    cmd.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => {
                Failure::with_code(NOT_FOUND, format!("cannot run {name:?}: command not found"))
            }
            _ => Failure::with_code(CANNOT_EXECUTE, format!("cannot run {name:?}: {e}")),
        }
    })
}

/// SIGTERM to the group, SIGKILL after `grace` to whatever is left of it;
/// returns the command's exit status.
async fn stop(
    child: &mut Child,
    group: Pid,
    grace: Duration,
    reason: &str,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    logging::notice(&format!(
        "lease lost ({reason}); stopping the command: SIGTERM now, SIGKILL in {}",
        human(grace)
    ));
    send(group, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let mut status = None;
    // Until the deadline, wait for the command and for every process of its
    // group to be gone.
    loop {
        if status.is_some() && !group_alive(group) {
            break;
        }
        let poll = tokio::time::sleep(Duration::from_millis(20));
        tokio::select! {
            exited = child.wait(), if status.is_none() => {
                status = Some(exited.map_err(|e| Failure::usage(format!("waiting for the command: {e}")))?);
            }
            received = signals.recv() => send(group, received),
            () = tokio::time::sleep_until(deadline) => break,
            () = poll, if status.is_some() => {}
        }
    }
    if group_alive(group) {
        tracing::warn!("the command's process group outlived the grace period; sending SIGKILL");
        send(group, Signal::SIGKILL);
    }
    let status = match status {
        Some(status) => status,
        None => child
            .wait()
            .await
            .map_err(|e| Failure::usage(format!("waiting for the command: {e}")))?,
    };
    Ok(status_code(status))
}

fn send(group: Pid, signal: Signal) {
    match killpg(group, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(%signal, error = %e, "could not signal the command's process group")
        }
    }
}

fn group_alive(group: Pid) -> bool {
    !matches!(killpg(group, None), Err(Errno::ESRCH))
}
