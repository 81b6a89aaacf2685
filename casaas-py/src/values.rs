//! Fenced resources, fenced logs (with group commit) and create-once. Values
//! cross as JSON text: the Python package encodes and decodes them.

use std::future::Future;
use std::sync::Arc;

use casaas::lease::{CreateOnce, Created, GroupCommitConfig, GroupLog};
use casaas::{FencedLog, FencedResource, LeaseError, LogEntry};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::Value;

use crate::Store;
use crate::errors::{Fail, invalid_argument};
use crate::runtime::{Birth, Task, call_python, start, wait};

fn parse(json: &str) -> Result<Value, Fail> {
    serde_json::from_str(json).map_err(|e| invalid_argument(format!("the value is not JSON: {e}")))
}

/// `(seq, offset, token, json)` of a log entry.
type Entry = (u64, usize, u64, String);

fn entry(e: LogEntry<Value>) -> Entry {
    (e.seq, e.offset, e.token, e.value.to_string())
}

/// A JSON value whose every update is refused from a token lower than the
/// highest one recorded.
#[pyclass(module = "casaas._casaas", name = "FencedResource", frozen)]
pub struct PyFencedResource {
    pub(crate) resource: FencedResource<Value>,
    pub(crate) birth: Birth,
}

#[pymethods]
impl PyFencedResource {
    #[new]
    fn new(store: &Store, key: String) -> Result<Self, Fail> {
        Ok(PyFencedResource {
            resource: FencedResource::new(store.get()?, key)?,
            birth: Birth::now(),
        })
    }

    /// `(json, token)`, or `None` when never written.
    fn read(&self, py: Python<'_>) -> Result<Option<(String, u64)>, Fail> {
        wait(py, None, self.read_op()?)
    }

    /// `read` for asyncio.
    fn read_start(&self) -> Result<Task, Fail> {
        start(None, self.read_op()?)
    }

    /// Writes `json` under `token`; returns the `(json, token)` stored.
    fn write(&self, py: Python<'_>, token: u64, json: &str) -> Result<(String, u64), Fail> {
        wait(py, None, self.write_op(token, json)?)
    }

    /// `write` for asyncio.
    fn write_start(&self, token: u64, json: &str) -> Result<Task, Fail> {
        start(None, self.write_op(token, json)?)
    }
}

impl PyFencedResource {
    fn read_op(
        &self,
    ) -> Result<impl Future<Output = Result<Option<(String, u64)>, Fail>> + Send + 'static, Fail>
    {
        self.birth.check("fenced resource")?;
        let resource = self.resource.clone();
        Ok(async move {
            Ok(resource
                .read()
                .await?
                .map(|f| (f.value.to_string(), f.token)))
        })
    }

    fn write_op(
        &self,
        token: u64,
        json: &str,
    ) -> Result<impl Future<Output = Result<(String, u64), Fail>> + Send + 'static, Fail> {
        self.birth.check("fenced resource")?;
        let value = parse(json)?;
        let resource = self.resource.clone();
        Ok(async move {
            let stored = resource.update(token, |_| value.clone()).await?;
            Ok((stored.value.to_string(), stored.token))
        })
    }
}

/// An append-only log of JSON records, fenced by token.
#[pyclass(module = "casaas._casaas", name = "FencedLog", frozen)]
pub struct PyFencedLog {
    log: FencedLog<Value>,
    group: GroupLog<Value>,
    birth: Birth,
}

#[pymethods]
impl PyFencedLog {
    #[new]
    fn new(store: &Store, prefix: String) -> Result<Self, Fail> {
        let log = FencedLog::new(store.get()?, prefix)?;
        // The batcher starts its task on first use, inside the runtime.
        let group = GroupLog::new(log.clone(), GroupCommitConfig::default());
        Ok(PyFencedLog {
            log,
            group,
            birth: Birth::now(),
        })
    }

    /// Appends one record as the next entry.
    fn append(&self, py: Python<'_>, token: u64, json: &str) -> Result<Entry, Fail> {
        wait(py, None, self.append_op(token, json, false)?)
    }

    /// `append` for asyncio.
    fn append_start(&self, token: u64, json: &str) -> Result<Task, Fail> {
        start(None, self.append_op(token, json, false)?)
    }

    /// Appends one record through group commit: concurrent callers (threads)
    /// share one conditional write.
    fn append_grouped(&self, py: Python<'_>, token: u64, json: &str) -> Result<Entry, Fail> {
        wait(py, None, self.append_op(token, json, true)?)
    }

    /// `append_grouped` for asyncio.
    fn append_grouped_start(&self, token: u64, json: &str) -> Result<Task, Fail> {
        start(None, self.append_op(token, json, true)?)
    }

    /// The entry `seq`'s records.
    fn read(&self, py: Python<'_>, seq: u64) -> Result<Vec<Entry>, Fail> {
        wait(py, None, self.read_op(Some(seq), None)?)
    }

    /// `read` for asyncio.
    fn read_start(&self, seq: u64) -> Result<Task, Fail> {
        start(None, self.read_op(Some(seq), None)?)
    }

    /// Every record from entry `start` on.
    fn entries(&self, py: Python<'_>, start: u64) -> Result<Vec<Entry>, Fail> {
        wait(py, None, self.read_op(None, Some(start))?)
    }

    /// `entries` for asyncio.
    fn entries_start(&self, from_seq: u64) -> Result<Task, Fail> {
        start(None, self.read_op(None, Some(from_seq))?)
    }

    /// The latest entry's sequence number, or `None` when empty.
    fn latest_seq(&self, py: Python<'_>) -> Result<Option<u64>, Fail> {
        wait(py, None, self.latest_op()?)
    }

    /// `latest_seq` for asyncio.
    fn latest_seq_start(&self) -> Result<Task, Fail> {
        start(None, self.latest_op()?)
    }
}

impl PyFencedLog {
    fn append_op(
        &self,
        token: u64,
        json: &str,
        grouped: bool,
    ) -> Result<impl Future<Output = Result<Entry, Fail>> + Send + 'static, Fail> {
        self.birth.check("fenced log")?;
        let value = parse(json)?;
        let (log, group) = (self.log.clone(), self.group.clone());
        Ok(async move {
            let appended = if grouped {
                group.append(token, value).await?
            } else {
                log.append(token, value).await?
            };
            Ok(entry(appended))
        })
    }

    /// Entry `seq`'s records, or every record from entry `from` on.
    fn read_op(
        &self,
        seq: Option<u64>,
        from: Option<u64>,
    ) -> Result<impl Future<Output = Result<Vec<Entry>, Fail>> + Send + 'static, Fail> {
        self.birth.check("fenced log")?;
        let log = self.log.clone();
        Ok(async move {
            let records = match (seq, from) {
                (Some(seq), _) => log.read(seq).await?,
                (None, from) => log.entries(from.unwrap_or(1)).await?,
            };
            Ok(records.into_iter().map(entry).collect())
        })
    }

    fn latest_op(
        &self,
    ) -> Result<impl Future<Output = Result<Option<u64>, Fail>> + Send + 'static, Fail> {
        self.birth.check("fenced log")?;
        let log = self.log.clone();
        Ok(async move { Ok(log.latest_seq().await?) })
    }
}

/// Why a create failed: the protocol, or `make_body`'s own exception
/// (raised unchanged when nothing of the create can land).
enum BodyFail {
    Lease(LeaseError),
    Python(PyErr),
}

impl From<LeaseError> for BodyFail {
    fn from(e: LeaseError) -> Self {
        BodyFail::Lease(e)
    }
}

impl std::fmt::Display for BodyFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyFail::Lease(e) => e.fmt(f),
            BodyFail::Python(e) => write!(f, "make_body raised: {e}"),
        }
    }
}

/// Creates `key` with the body `make_body(nonce)` exactly once; returns
/// whether ours is the body stored. `nonce_in(body)` finds the nonce in a
/// stored body (`None` when it carries none). An exception of `make_body`
/// is raised as it is when nothing of the create can land; one of
/// `nonce_in` leaves the outcome unknown: `MayHaveTakenEffect`, caused by it.
#[pyfunction]
pub fn create_once(
    py: Python<'_>,
    store: &Store,
    key: String,
    make_body: Py<PyAny>,
    nonce_in: Py<PyAny>,
) -> Result<bool, Fail> {
    let creator = CreateOnce::new(store.get()?);
    let make_body = Arc::new(make_body);
    let nonce_in = Arc::new(nonce_in);
    // `nonce_in` answers the core with a nonce or none; an exception is
    // neither, so it is kept here and decides the answer afterwards.
    let find_failed: Arc<std::sync::Mutex<Option<PyErr>>> = Arc::default();
    let slot = find_failed.clone();
    let created = wait(py, None, async move {
        let body = |nonce: &str| -> Result<bytes::Bytes, BodyFail> {
            call_python(|py| {
                let out = make_body.call1(py, (nonce,))?;
                let bytes: Vec<u8> = out.extract(py)?;
                Ok::<_, PyErr>(bytes::Bytes::from(bytes))
            })
            .map_err(BodyFail::Python)
        };
        let find = |stored: &[u8]| -> Option<String> {
            call_python(|py| {
                match nonce_in
                    .call1(py, (PyBytes::new(py, stored),))
                    .and_then(|n| n.extract::<Option<String>>(py))
                {
                    Ok(nonce) => nonce,
                    Err(err) => {
                        crate::locked(&slot).get_or_insert(err);
                        None
                    }
                }
            })
        };
        match creator.create(&key, body, find).await {
            Ok(created) => Ok(Ok(created)),
            Err(BodyFail::Lease(e)) => Err(Fail::Lease(e)),
            Err(BodyFail::Python(e)) => Ok(Err(e)),
        }
    });
    if let Some(cause) = crate::locked(&find_failed).take() {
        let err = Fail::Named(
            "MayHaveTakenEffect",
            "nonce_in raised while a create of ours may have landed: whether our body \
             holds the key is unknown (the exception is this one's __cause__)"
                .to_string(),
            vec![("kind", crate::errors::Attr::Str("ambiguous".to_string()))],
        )
        .into_pyerr(py);
        err.set_cause(py, Some(cause));
        return Err(Fail::Python(err));
    }
    match created? {
        Ok(created) => Ok(matches!(created, Created::Ours(_))),
        Err(raised) => Err(Fail::Python(raised)),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFencedResource>()?;
    m.add_class::<PyFencedLog>()?;
    m.add_function(wrap_pyfunction!(create_once, m)?)?;
    Ok(())
}
