//! The tokio runtime the bindings run on, and the two ways Python waits for
//! it: blocking (the GIL released, signals checked) and through an asyncio
//! future.

use std::future::Future;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::errors::{Fail, runtime_error};

/// How often a blocking wait looks at Python's signal handlers (Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// How long a cancelled operation gets to finish cleanly (a lock acquired
/// at the moment of cancellation is released) before the wait gives up.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

struct Owned {
    pid: u32,
    runtime: Arc<Runtime>,
}

static RUNTIME: Mutex<Option<Owned>> = Mutex::new(None);

/// The process's runtime, made on first use. A forked child gets a runtime
/// of its own: the parent's worker threads do not exist in the child.
pub(crate) fn runtime() -> Result<Arc<Runtime>, Fail> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(owned) = slot.as_ref().filter(|owned| owned.pid == pid) {
        return Ok(owned.runtime.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("casaas")
        .enable_all()
        .build()
        .map_err(|e| runtime_error(format!("could not start the casaas runtime: {e}")))?;
    let runtime = Arc::new(runtime);
    if let Some(parent) = slot.replace(Owned {
        pid,
        runtime: runtime.clone(),
    }) {
        // The parent's runtime: its threads are gone here, and dropping it
        // would wait for them for ever.
        std::mem::forget(parent);
    }
    Ok(runtime)
}

/// The process an object was made in; objects made before a fork refuse to
/// run in the child (their connections and tasks belong to the parent).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Birth(u32);

impl Birth {
    pub(crate) fn now() -> Self {
        Birth(std::process::id())
    }

    pub(crate) fn in_this_process(self) -> bool {
        self.0 == std::process::id()
    }

    pub(crate) fn check(self, what: &str) -> Result<(), Fail> {
        if self.in_this_process() {
            Ok(())
        } else {
            Err(runtime_error(format!(
                "this {what} was made in process {} before a fork; objects do not cross a fork: \
                 open the store again in the child (process {})",
                self.0,
                std::process::id()
            )))
        }
    }
}

/// Runs `fut` on the runtime and waits for it with the GIL released.
/// Python signal handlers run every [`SIGNAL_POLL`]; when one raises
/// (Ctrl-C), `cancel` is cancelled and the operation gets [`CANCEL_GRACE`]
/// to end cleanly (without a cancellation token, the task is aborted), then
/// the handler's exception is raised.
pub(crate) fn wait<F, T>(
    py: Python<'_>,
    cancel: Option<CancellationToken>,
    fut: F,
) -> Result<T, Fail>
where
    F: Future<Output = Result<T, Fail>> + Send + 'static,
    T: Send + 'static,
{
    let runtime = runtime()?;
    let (tx, rx) = sync_channel(1);
    // Shared with the detached closure, which needs `Sync`.
    let rx = Mutex::new(rx);
    let recv = |timeout| {
        rx.lock()
            .unwrap_or_else(|p| p.into_inner())
            .recv_timeout(timeout)
    };
    let task = runtime.spawn(async move {
        // The receiver is gone only if the waiter gave up; nothing to tell.
        let _ = tx.send(fut.await);
    });
    loop {
        match py.detach(|| recv(SIGNAL_POLL)) {
            Ok(result) => return result,
            Err(RecvTimeoutError::Timeout) => {
                if let Err(signal) = py.check_signals() {
                    match cancel {
                        Some(cancel) => {
                            cancel.cancel();
                            let finished = py.detach(|| recv(CANCEL_GRACE));
                            if let Ok(Ok(value)) = finished {
                                // Cancelled operations release what they
                                // got; anything else is dropped on the
                                // runtime, where drops that write can run.
                                runtime.spawn(async move { drop(value) });
                            }
                        }
                        None => task.abort(),
                    }
                    return Err(Fail::Python(signal));
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(runtime_error(
                    "the casaas runtime stopped before the operation answered".to_string(),
                ));
            }
        }
    }
}

/// The outcome of an operation started for asyncio, turned into Python
/// objects only when Python asks for it (on its own thread).
type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// A running operation started for asyncio. The runtime never calls into
/// Python (a runtime thread inside the interpreter could race its exit):
/// it stores the outcome and writes a byte to a socket pair, whose other
/// end the event loop watches (`fileno()`); then `result()` answers.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct Task {
    cancel: CancellationToken,
    abort: tokio::task::AbortHandle,
    cooperative: bool,
    outcome: Arc<Mutex<Option<Outcome>>>,
    ready: UnixStream,
    birth: Birth,
}

#[pymethods]
impl Task {
    /// Cancels the operation: a waiting acquisition or campaign stops (and
    /// releases what it got, if it got it at that moment); any other
    /// operation is abandoned where it is.
    fn cancel(&self) {
        self.cancel.cancel();
        if !self.cooperative {
            self.abort.abort();
        }
    }

    /// The descriptor that becomes readable when the outcome is ready.
    fn fileno(&self) -> i32 {
        self.ready.as_raw_fd()
    }

    /// The outcome (raises the operation's exception); `None` before it is
    /// ready.
    fn result(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match outcome {
            Some(outcome) => outcome(py).map(Some),
            None => Ok(None),
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // An outcome nobody took (a cancelled wait) may hold a lease guard,
        // whose drop releases through the runtime.
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(outcome) = outcome {
            drop_in_runtime(self.birth, outcome);
        }
    }
}

/// Starts `fut` on the runtime for asyncio (see [`Task`]).
pub(crate) fn start<F, T>(cancel: Option<CancellationToken>, fut: F) -> Result<Task, Fail>
where
    F: Future<Output = Result<T, Fail>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let runtime = runtime()?;
    let (ready, mut signal) = UnixStream::pair()
        .map_err(|e| runtime_error(format!("could not make the asyncio wake-up socket: {e}")))?;
    let cooperative = cancel.is_some();
    let cancel = cancel.unwrap_or_default();
    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::default();
    let slot = outcome.clone();
    let handle = runtime.spawn(async move {
        let result = fut.await;
        let boxed: Outcome = match result {
            Ok(value) => Box::new(move |py: Python<'_>| value.into_py_any(py)),
            Err(fail) => Box::new(move |py: Python<'_>| Err(fail.into_pyerr(py))),
        };
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(boxed);
        // The Python side may have gone (a closed loop); nothing to wake.
        let _ = signal.write_all(b"!");
    });
    Ok(Task {
        cancel,
        abort: handle.abort_handle(),
        cooperative,
        outcome,
        ready,
        birth: Birth::now(),
    })
}

/// Calls into Python from a task of the runtime (a group-commit update, a
/// `create_once` or `SwapOnce` callback, the Iceberg catalog's lineage
/// check). The core calls these synchronously, so they cannot be awaited on
/// a blocking pool; instead the worker hands its other tasks (every lease's
/// renewal among them) to a fresh thread for the length of the call, so a
/// slow callback, or one waiting for the GIL, never stalls a renewal.
pub(crate) fn call_python<T>(f: impl for<'py> FnOnce(Python<'py>) -> T) -> T {
    let on_worker = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_worker {
        tokio::task::block_in_place(|| Python::attach(f))
    } else {
        Python::attach(f)
    }
}

/// Drops `value` inside the runtime (a lease guard's drop releases through
/// it), or forgets it in a forked child, where it belongs to the parent.
pub(crate) fn drop_in_runtime<T: Send + 'static>(birth: Birth, value: T) {
    if !birth.in_this_process() {
        std::mem::forget(value);
        return;
    }
    match runtime() {
        Ok(runtime) => {
            let _entered = runtime.enter();
            drop(value);
        }
        Err(_) => std::mem::forget(value),
    }
}
