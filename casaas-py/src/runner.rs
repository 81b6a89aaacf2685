//! `casaas.ElectionRunner`: campaign, lead while elected, step down when
//! lost and campaign again, with Python callbacks, on core's
//! `ElectionRunner` (which keeps its ordering guarantees: the leader's work
//! has finished before the lease is released and `on_stopped_leading` runs).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use casaas::lease::WaitOptions;
use casaas::{ElectionRunner as CoreRunner, HealthCheck, Leader, LostReason};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::errors::Fail;
use crate::runtime::{Birth, Task, call_python, start};
use crate::{Lease, locked, seconds};

/// How often a term's `wait` looks for the stop while the GIL is released.
const TERM_POLL: Duration = Duration::from_millis(20);

/// How long a finished run waits for `on_new_leader` calls still queued.
const NOTIFY_DRAIN: Duration = Duration::from_secs(5);

/// Stops a runner's `run` from another thread (or a signal handler).
#[pyclass(module = "casaas._casaas", frozen)]
pub struct RunnerStop {
    cancel: CancellationToken,
}

#[pymethods]
impl RunnerStop {
    /// A switch not yet turned.
    #[new]
    fn new() -> Self {
        RunnerStop {
            cancel: CancellationToken::new(),
        }
    }

    /// Stops the run: its leader's work is told to stop, awaited, and the
    /// term resigned before `run` returns.
    fn stop(&self) {
        self.cancel.cancel();
    }

    /// Whether `stop` was called.
    #[getter]
    fn stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// A term as the leader's work sees it: its token and whether to stop.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct RunnerTerm {
    token: u64,
    cancel: CancellationToken,
}

#[pymethods]
impl RunnerTerm {
    /// The term's fencing token.
    #[getter]
    fn token(&self) -> u64 {
        self.token
    }

    /// True once the work must stop (the term is lost, or the runner
    /// stops).
    #[getter]
    fn stopping(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Waits, the GIL released, until the work must stop (`True`) or
    /// `timeout` seconds have passed (`False`; `None` waits for ever).
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> Result<bool, Fail> {
        let limit = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let started = std::time::Instant::now();
        loop {
            if self.cancel.is_cancelled() {
                return Ok(true);
            }
            if limit.is_some_and(|l| started.elapsed() >= l) {
                return Ok(false);
            }
            py.detach(|| std::thread::sleep(TERM_POLL));
            py.check_signals()?;
        }
    }
}

/// A runner over one election's key.
#[pyclass(module = "casaas._casaas", frozen)]
pub struct ElectionRunner {
    election: casaas::Election,
    /// The health check of the run going on (or the last one).
    health: Mutex<Option<HealthCheck>>,
    birth: Birth,
}

/// The first exception a callback raised; it ends the run.
type Raised = Arc<Mutex<Option<PyErr>>>;

fn keep(raised: &Raised, err: PyErr, stop: &CancellationToken) {
    let mut slot = locked(raised);
    if slot.is_none() {
        *slot = Some(err);
    }
    stop.cancel();
}

/// The Python callbacks of one run.
struct Callbacks {
    started: Option<Arc<Py<PyAny>>>,
    stopped: Option<Arc<Py<PyAny>>>,
    new_leader: Option<Arc<Py<PyAny>>>,
}

#[pymethods]
impl ElectionRunner {
    /// A runner campaigning with `lease` (its key, owner, TTL and value).
    #[new]
    fn new(lease: &Lease) -> Result<Self, Fail> {
        lease.birth.check("lease")?;
        Ok(ElectionRunner {
            election: casaas::Election::new(lease.lease.clone()),
            health: Mutex::new(None),
            birth: Birth::now(),
        })
    }

    /// `None` when healthy (not leading, or leading with renewals alive
    /// and on time, `tolerance` seconds late at most), else what is wrong.
    #[pyo3(signature = (tolerance=0.0))]
    fn check_health(&self, tolerance: f64) -> Result<Option<String>, Fail> {
        let tolerance = seconds(tolerance, "tolerance")?;
        Ok(locked(&self.health)
            .as_ref()
            .and_then(|h| h.clone().with_tolerance(tolerance).check().err()))
    }

    /// Campaigns, leads and campaigns again until `stop` is turned,
    /// `timeout` seconds have passed, the work returns, or a term ends in
    /// a loss with `recampaign` false. `on_started_leading(term)` is the
    /// leader's work (run on a thread of its own); `on_stopped_leading(reason)`
    /// runs once that work has returned and the term has ended;
    /// `on_new_leader(leader)` at each change of leader. The first
    /// exception a callback raises stops the run and is raised here.
    #[pyo3(signature = (stop, on_started_leading=None, on_stopped_leading=None, on_new_leader=None, recampaign=true, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        stop: &RunnerStop,
        on_started_leading: Option<Py<PyAny>>,
        on_stopped_leading: Option<Py<PyAny>>,
        on_new_leader: Option<Py<PyAny>>,
        recampaign: bool,
        timeout: Option<f64>,
    ) -> Result<(), Fail> {
        self.birth.check("election runner")?;
        let limit = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let callbacks = Callbacks {
            started: on_started_leading.map(Arc::new),
            stopped: on_stopped_leading.map(Arc::new),
            new_leader: on_new_leader.map(Arc::new),
        };
        let cancel = stop.cancel.child_token();
        let runner = self.runner(recampaign);
        crate::runtime::wait(
            py,
            Some(cancel.clone()),
            run(runner, callbacks, limit, cancel),
        )
    }

    /// `run` for asyncio; cancelling the task stops the run.
    #[pyo3(signature = (stop, on_started_leading=None, on_stopped_leading=None, on_new_leader=None, recampaign=true, timeout=None))]
    fn run_start(
        &self,
        stop: &RunnerStop,
        on_started_leading: Option<Py<PyAny>>,
        on_stopped_leading: Option<Py<PyAny>>,
        on_new_leader: Option<Py<PyAny>>,
        recampaign: bool,
        timeout: Option<f64>,
    ) -> Result<Task, Fail> {
        self.birth.check("election runner")?;
        let limit = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let callbacks = Callbacks {
            started: on_started_leading.map(Arc::new),
            stopped: on_stopped_leading.map(Arc::new),
            new_leader: on_new_leader.map(Arc::new),
        };
        let cancel = stop.cancel.child_token();
        let runner = self.runner(recampaign);
        start(Some(cancel.clone()), run(runner, callbacks, limit, cancel))
    }
}

impl ElectionRunner {
    /// The core's runner for one run, its health check kept for
    /// `check_health`.
    fn runner(&self, recampaign: bool) -> CoreRunner {
        let runner = self.election.clone().runner().with_recampaign(recampaign);
        *locked(&self.health) = Some(runner.health_check());
        runner
    }
}

/// One run of the core's runner with Python callbacks. Each callback runs
/// through `call_python`, never on a renewal's worker with the GIL held;
/// the work and `on_new_leader` on blocking threads of their own (the
/// latter fed by a queue, so that no lock of the election's watch is held
/// while Python runs).
async fn run(
    mut runner: CoreRunner,
    callbacks: Callbacks,
    limit: Option<Duration>,
    cancel: CancellationToken,
) -> Result<(), Fail> {
    let raised: Raised = Arc::default();
    if let Some(work) = callbacks.started {
        let (raised, stop) = (raised.clone(), cancel.clone());
        runner = runner.on_started_leading(move |token, term_cancel| {
            let (work, raised, stop) = (work.clone(), raised.clone(), stop.clone());
            async move {
                let term = RunnerTerm {
                    token,
                    cancel: term_cancel,
                };
                let ran = tokio::task::spawn_blocking(move || {
                    call_python(|py| -> PyResult<()> {
                        let term = Py::new(py, term)?;
                        work.call1(py, (term,))?;
                        Ok(())
                    })
                })
                .await;
                match ran {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => keep(&raised, err, &stop),
                    Err(err) => keep(
                        &raised,
                        PyRuntimeError::new_err(format!("the leader's work did not finish: {err}")),
                        &stop,
                    ),
                }
            }
        });
    }
    if let Some(stopped) = callbacks.stopped {
        let (raised, stop) = (raised.clone(), cancel.clone());
        runner = runner.on_stopped_leading(move |reason: LostReason| {
            let reason = reason.to_string();
            if let Err(err) = call_python(|py| stopped.call1(py, (reason,)).map(drop)) {
                keep(&raised, err, &stop);
            }
        });
    }
    let mut notifier = None;
    if let Some(notify) = callbacks.new_leader {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<Leader>>();
        let (raised, stop) = (raised.clone(), cancel.clone());
        notifier = Some(tokio::task::spawn_blocking(move || {
            while let Some(leader) = rx.blocking_recv() {
                let leader = leader.map(|l| (l.owner, l.token, l.value));
                if let Err(err) = call_python(|py| notify.call1(py, (leader,)).map(drop)) {
                    keep(&raised, err, &stop);
                }
            }
        }));
        runner = runner.on_new_leader(move |leader| {
            // The consumer is gone only once the run has ended.
            let _ = tx.send(leader);
        });
    }
    let mut options = WaitOptions::default().with_cancel(cancel);
    options.deadline = limit;
    let ran = runner.run(options).await;
    if let Some(notifier) = notifier {
        // The sender goes with the runner's observer task, just after the
        // run; a callback still running past the bound is left to finish.
        let _ = tokio::time::timeout(NOTIFY_DRAIN, notifier).await;
    }
    if let Some(err) = locked(&raised).take() {
        return Err(Fail::Python(err));
    }
    ran.map_err(Fail::from)
}
