//! Group commit for fenced resources (`casaas.GroupResource`): updates of
//! many threads queued and written together, one conditional write per
//! batch, by the core's `GroupResource`. Values cross as JSON text; the
//! update function is the caller's Python callable, called by the
//! committer once per attempt of its batch's write.

use std::sync::{Arc, Mutex};

use casaas::lease::{Applied, Cancelled, GroupCommitConfig, GroupResource, Ticket};
use casaas::{CasError, ErrorKind, LeaseError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::Value;

use crate::errors::{Fail, invalid_argument};
use crate::locked;
use crate::runtime::{Birth, call_python, wait};
use crate::values::PyFencedResource;

/// `(json, token, offset, batch_len)`: the value right after this update,
/// the batch's token, this update's place in its batch and the batch's
/// length.
type Answer = (String, u64, usize, usize);

/// What the calls of one update's function did (a batch calls each of its
/// functions once per attempt of its write).
#[derive(Default)]
struct Calls {
    /// Calls made.
    made: usize,
    /// The exception of the latest call that raised, and how many raised.
    raised: Option<PyErr>,
    raised_count: usize,
}

/// One update's function as the core calls it: Python's callable on the
/// value as JSON text. A call that raises leaves the value as it was (the
/// rest of the batch still applies) and is remembered, so that the caller
/// learns whether its update took effect.
fn update_fn(
    callable: Py<PyAny>,
    calls: Arc<Mutex<Calls>>,
) -> impl FnMut(Option<&Value>) -> Value + Send + 'static {
    move |old: Option<&Value>| {
        let old_json = old.map(Value::to_string);
        let got = call_python(|py| -> PyResult<Value> {
            let out = callable.call1(py, (old_json,))?;
            let text: String = out.extract(py)?;
            serde_json::from_str(&text).map_err(|e| {
                PyValueError::new_err(format!("the update function returned no JSON: {e}"))
            })
        });
        let mut calls = locked(&calls);
        calls.made += 1;
        match got {
            Ok(value) => value,
            Err(err) => {
                calls.raised = Some(err);
                calls.raised_count += 1;
                old.cloned().unwrap_or(Value::Null)
            }
        }
    }
}

/// The caller's answer once its batch was written or failed. A function
/// that raised in every call left the value as it was, so the update was
/// not applied whatever the batch did: its exception is raised as it is.
/// One that raised in some calls only cannot tell which call's result
/// landed: `MayHaveTakenEffect`.
fn settle(
    applied: Result<Applied<Value>, LeaseError>,
    calls: &Mutex<Calls>,
) -> Result<Answer, Fail> {
    let mut calls = locked(calls);
    if let Some(err) = calls.raised.take() {
        if calls.raised_count == calls.made {
            return Err(Fail::Python(err));
        }
        if applied.is_ok() {
            return Err(Fail::Lease(LeaseError::Store(CasError::new(
                ErrorKind::Ambiguous,
                format!(
                    "the update function raised in {} of its {} calls ({err}); the batch \
                     landed, and this update may or may not be in it: read the resource",
                    calls.raised_count, calls.made
                ),
            ))));
        }
    }
    let applied = applied?;
    Ok((
        applied.value.to_string(),
        applied.token,
        applied.offset,
        applied.batch_len,
    ))
}

/// Group commit for a fenced resource (see `casaas.GroupResource`).
#[pyclass(module = "casaas._casaas", name = "GroupResource", frozen)]
pub struct PyGroupResource {
    group: GroupResource<Value>,
    birth: Birth,
}

#[pymethods]
impl PyGroupResource {
    /// Group commit for `resource`: at most `max_queued` updates wait for a
    /// batch, at most `max_batch_records` go in one write (defaults 4096
    /// and 1024).
    #[new]
    #[pyo3(signature = (resource, max_queued=None, max_batch_records=None))]
    fn new(
        resource: &PyFencedResource,
        max_queued: Option<usize>,
        max_batch_records: Option<usize>,
    ) -> Result<Self, Fail> {
        resource.birth.check("fenced resource")?;
        let mut config = GroupCommitConfig::default();
        if let Some(n) = max_queued {
            config = config.with_max_queued(n);
        }
        if let Some(n) = max_batch_records {
            config = config.with_max_batch_records(n);
        }
        Ok(PyGroupResource {
            group: GroupResource::new(resource.resource.clone(), config),
            birth: Birth::now(),
        })
    }

    /// Applies `f` (JSON text or `None` → JSON text) in the next batch
    /// fenced by `token`; returns once that batch's write landed.
    fn update(&self, py: Python<'_>, token: u64, f: Py<PyAny>) -> Result<Answer, Fail> {
        self.birth.check("group resource")?;
        let calls = Arc::new(Mutex::new(Calls::default()));
        let f = update_fn(f, calls.clone());
        let group = self.group.clone();
        wait(py, None, async move {
            let applied = group.update(token, f).await;
            settle(applied, &calls)
        })
    }

    /// Queues `f` (waiting while the queue is full) and returns its ticket.
    fn submit(&self, py: Python<'_>, token: u64, f: Py<PyAny>) -> Result<GroupTicket, Fail> {
        self.birth.check("group resource")?;
        let calls = Arc::new(Mutex::new(Calls::default()));
        let f = update_fn(f, calls.clone());
        let group = self.group.clone();
        let ticket = wait(py, None, async move { Ok(group.submit(token, f).await?) })?;
        Ok(GroupTicket {
            ticket: Mutex::new(Some(ticket)),
            calls,
            birth: Birth::now(),
        })
    }
}

/// A queued update of a group resource (see `GroupResource.submit`).
#[pyclass(module = "casaas._casaas", frozen)]
pub struct GroupTicket {
    ticket: Mutex<Option<Ticket<Applied<Value>>>>,
    calls: Arc<Mutex<Calls>>,
    birth: Birth,
}

impl GroupTicket {
    fn take(&self) -> Result<Ticket<Applied<Value>>, Fail> {
        self.birth.check("group ticket")?;
        locked(&self.ticket).take().ok_or_else(|| {
            invalid_argument("this ticket was already waited on or cancelled".to_string())
        })
    }
}

#[pymethods]
impl GroupTicket {
    /// Waits until the write carrying the update landed, and answers as
    /// `GroupResource.update`.
    fn wait(&self, py: Python<'_>) -> Result<Answer, Fail> {
        let ticket = self.take()?;
        let calls = self.calls.clone();
        wait(py, None, async move {
            let applied = ticket.wait().await;
            settle(applied, &calls)
        })
    }

    /// Removes the update if it is still queued (`True`: it is never
    /// written); `False` when its batch was already sealed (it may be
    /// applied: `wait()` to learn).
    fn cancel(&self) -> Result<bool, Fail> {
        let ticket = self.take()?;
        match ticket.cancel() {
            Cancelled::Removed => Ok(true),
            Cancelled::MayHaveApplied(ticket) => {
                *locked(&self.ticket) = Some(ticket);
                Ok(false)
            }
        }
    }
}

/// Registers the classes.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGroupResource>()?;
    m.add_class::<GroupTicket>()?;
    Ok(())
}
