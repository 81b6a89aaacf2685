//! The command run under a lease: its own process group, forwarded
//! signals, a stop sequence when the lease is lost, and a watchdog that
//! kills the group if casaas itself dies (SIGKILL, OOM killer).
//!
//! The watchdog is a process inside the command's process group, reading a
//! pipe whose write end only casaas holds. The kernel closes that end when
//! casaas dies, however it dies; on end of file the watchdog SIGKILLs its
//! group. When the command ends normally, casaas writes one byte first, and
//! the watchdog leaves quietly (so a daemon the command started survives,
//! as before). On Linux it is a fork of casaas that closes every inherited
//! descriptor and never executes anything (starting it costs a fork, not a
//! second start of this binary: a measurable share of a short `casaas
//! lock`); elsewhere it is casaas re-executed as `casaas __watchdog`. On
//! Linux the command is also started with `PR_SET_PDEATHSIG`, which covers
//! the moment before the watchdog runs.
//!
//! The fork is a copy of casaas's memory, credentials included, so it is
//! made not dumpable (no core file, no ptrace or /proc/PID/mem by other
//! processes of the user). It blocks every signal that can be blocked: one
//! sent to the command's group (SIGUSR1, SIGTSTP, ...) neither ends nor
//! stops it. SIGSTOP cannot be blocked; casaas sends SIGCONT with the
//! stop sequence's SIGTERM and, if the watchdog has still not left at the
//! grace deadline, SIGKILLs it: a stopped watchdog never holds casaas past
//! that deadline.

use std::ffi::OsString;
use std::future::Future;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use nix::errno::Errno;
#[cfg(target_os = "linux")]
use nix::libc;
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::{Pid, getpgrp};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::duration::human;
use crate::exit::{CANNOT_EXECUTE, Failure, NOT_FOUND, status_code};

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, caught from the start so that none
/// of them kills casaas while it holds a lease (SIGQUIT's core dump would
/// leave the command running without its lock).
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
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
            quit: make(SignalKind::quit())?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
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
    // The group exists until the command is reaped (a zombie leader still
    // counts), so the watchdog can always join it here.
    let mut watchdog = Watchdog::start(group);
    tokio::pin!(lease_end);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::usage(format!("waiting for the command: {e}")))?;
                // The release need not wait for the watchdog to leave.
                watchdog.dismiss_in_background();
                return Ok(ChildEnd { code: status_code(status), lost: None });
            }
            received = signals.recv() => {
                tracing::info!(signal = %received, "forwarding to the command's process group");
                send(group, received);
            }
            reason = &mut lease_end => {
                let code = stop(&mut child, group, &mut watchdog, grace, &reason, signals).await?;
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
    die_with_parent(&mut cmd);
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
    watchdog: &mut Watchdog,
    grace: Duration,
    reason: &str,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    // Reported once, when casaas exits; here only for -v.
    tracing::info!(
        %reason,
        "lease lost; stopping the command: SIGTERM now, SIGKILL in {}",
        human(grace)
    );
    send(group, Signal::SIGTERM);
    // A stopped member would act on SIGTERM only once continued.
    send(group, Signal::SIGCONT);
    let deadline = tokio::time::Instant::now() + grace;
    let mut status = None;
    // Until the deadline, wait for the command and for every process of its
    // group to be gone.
    loop {
        if status.is_some() {
            // The watchdog is a member of the group: once the command is
            // gone it leaves, so that the group's end can be seen (by the
            // deadline, or it is killed).
            watchdog.dismiss_by(deadline).await;
            if !group_alive(group) {
                break;
            }
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
    watchdog
        .dismiss_by(tokio::time::Instant::now() + Duration::from_secs(1))
        .await;
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

/// The hidden argument that makes casaas a watchdog.
pub const WATCHDOG_ARG: &str = "__watchdog";

/// Asks the kernel to SIGKILL the command when casaas dies (Linux), and
/// refuses to start it if casaas is already gone.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe system calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // casaas died before the prctl: the signal will never come.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// Makes the watchdog a fork of casaas that watches without executing
/// anything (Linux): `std` has set the group, the pipe on stdin, /dev/null
/// on stdout and a clean signal state when the closure runs; the closure
/// closes every other inherited descriptor (the pipe's write end, which
/// must close with casaas alone; sockets; a file store's `flock`ed
/// descriptors; the pipe through which `spawn` waits for an exec, so that
/// `spawn` returns) and then watches until casaas writes or dies.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn watch_in_fork(cmd: &mut Command) {
    // Computed here: sysconf/getrlimit are not async-signal-safe.
    let fallback_limit = {
        let mut limit = libc::rlimit {
            rlim_cur: 1024,
            rlim_max: 1024,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        libc::c_int::try_from(limit.rlim_cur.min(1 << 16)).unwrap_or(1024)
    };
    // SAFETY: the closure runs between fork and exec in a copy of a
    // multi-threaded process, so it makes only async-signal-safe system
    // calls (prctl, sigprocmask, close_range, close, read, kill, _exit) and
    // allocates nothing; it never returns.
    unsafe {
        cmd.pre_exec(move || {
            // A copy of casaas's memory: no core file of it, and no other
            // process of the user may read it through ptrace or /proc.
            if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
                libc::kill(0, libc::SIGKILL);
                libc::_exit(1);
            }
            let mut blocked: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut blocked);
            libc::sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
                for fd in 3..fallback_limit {
                    libc::close(fd);
                }
            }
            let mut byte = 0u8;
            loop {
                match libc::read(0, (&raw mut byte).cast(), 1) {
                    1 => libc::_exit(0),
                    -1 if *libc::__errno_location() == libc::EINTR => {}
                    // End of file (casaas died) or an unreadable pipe,
                    // which cannot say casaas is alive.
                    _ => {
                        libc::kill(0, libc::SIGKILL);
                        libc::_exit(1);
                    }
                }
            }
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn watch_in_fork(_cmd: &mut Command) {}

/// casaas's side of the watchdog: the child process and the pipe's write
/// end, which nobody else holds (it is close-on-exec).
struct Watchdog {
    running: Option<(Child, std::io::PipeWriter)>,
}

impl Watchdog {
    /// Starts `casaas __watchdog` in `group`. Without it (no executable
    /// path, no pipe), the command still runs; only PR_SET_PDEATHSIG then
    /// covers casaas's death, and a warning says so.
    fn start(group: Pid) -> Self {
        match Self::spawn(group) {
            Ok(running) => Watchdog {
                running: Some(running),
            },
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not start the watchdog: if casaas is killed, the command's children may outlive it"
                );
                Watchdog { running: None }
            }
        }
    }

    fn spawn(group: Pid) -> std::io::Result<(Child, std::io::PipeWriter)> {
        let exe = std::env::current_exe()?;
        let (reader, writer) = std::io::pipe()?;
        let mut command = Command::new(exe);
        command
            .arg(WATCHDOG_ARG)
            .stdin(reader)
            .stdout(std::process::Stdio::null())
            .process_group(group.as_raw())
            .kill_on_drop(false);
        watch_in_fork(&mut command);
        let child = command.spawn()?;
        Ok((child, writer))
    }

    /// Tells the watchdog to leave without killing anything, and reaps it
    /// on a task of its own: the byte is in the pipe before its write end
    /// closes, so the watchdog leaves quietly whenever it reads it, even
    /// after casaas has exited (then init reaps it).
    fn dismiss_in_background(&mut self) {
        let Some((mut child, mut writer)) = self.running.take() else {
            return;
        };
        let _ = writer.write_all(b"q");
        drop(writer);
        tokio::spawn(async move {
            if let Err(e) = child.wait().await {
                tracing::debug!(error = %e, "reaping the watchdog");
            }
        });
    }

    /// Tells the watchdog to leave without killing anything, and reaps it;
    /// one that has not left by `deadline` (stopped with SIGSTOP) is
    /// SIGKILLed, which ends a stopped process too.
    async fn dismiss_by(&mut self, deadline: tokio::time::Instant) {
        let Some((mut child, mut writer)) = self.running.take() else {
            return;
        };
        // A failed write (it was killed with the group) needs no handling:
        // either way it is reaped below.
        let _ = writer.write_all(b"q");
        drop(writer);
        let waited = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(waited) => waited,
            Err(_) => {
                tracing::warn!("the watchdog did not leave by the grace deadline; sending SIGKILL");
                let _ = child.start_kill();
                child.wait().await
            }
        };
        if let Err(e) = waited {
            tracing::debug!(error = %e, "reaping the watchdog");
        }
    }
}

/// `casaas __watchdog`: waits on stdin; one byte means "leave", end of
/// file means casaas died, and the whole process group is SIGKILLed.
pub fn watchdog_main() -> ExitCode {
    // Signals sent to the command's group neither end nor stop it.
    let _ = SigSet::all().thread_block();
    let mut stdin = std::io::stdin().lock();
    let mut byte = [0u8; 1];
    loop {
        match stdin.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => return ExitCode::SUCCESS,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // An unreadable pipe cannot say casaas is alive.
            Err(_) => break,
        }
    }
    let _ = killpg(getpgrp(), Signal::SIGKILL);
    ExitCode::FAILURE
}
