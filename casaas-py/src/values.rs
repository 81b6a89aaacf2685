//! Fenced resources, fenced logs (with group commit) and create-once. Values
//! cross as JSON text: the Python package encodes and decodes them.

use std::sync::Arc;

use casaas::lease::{CreateOnce, Created, GroupCommitConfig, GroupLog};
use casaas::{FencedLog, FencedResource, LeaseError, LogEntry};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::Value;

use crate::Store;
use crate::errors::{Fail, invalid_argument};
use crate::runtime::{Birth, call_python, wait};

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
        self.birth.check("fenced resource")?;
        let resource = self.resource.clone();
        wait(py, None, async move {
            Ok(resource
                .read()
                .await?
                .map(|f| (f.value.to_string(), f.token)))
        })
    }

    /// Writes `json` under `token`; returns the `(json, token)` stored.
    fn write(&self, py: Python<'_>, token: u64, json: &str) -> Result<(String, u64), Fail> {
        self.birth.check("fenced resource")?;
        let value = parse(json)?;
        let resource = self.resource.clone();
        wait(py, None, async move {
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
        self.birth.check("fenced log")?;
        let value = parse(json)?;
        let log = self.log.clone();
        wait(py, None, async move {
            Ok(entry(log.append(token, value).await?))
        })
    }

    /// Appends one record through group commit: concurrent callers (threads)
    /// share one conditional write.
    fn append_grouped(&self, py: Python<'_>, token: u64, json: &str) -> Result<Entry, Fail> {
        self.birth.check("fenced log")?;
        let value = parse(json)?;
        let group = self.group.clone();
        wait(py, None, async move {
            Ok(entry(group.append(token, value).await?))
        })
    }

    /// The entry `seq`'s records.
    fn read(&self, py: Python<'_>, seq: u64) -> Result<Vec<Entry>, Fail> {
        self.birth.check("fenced log")?;
        let log = self.log.clone();
        wait(py, None, async move {
            Ok(log.read(seq).await?.into_iter().map(entry).collect())
        })
    }

    /// Every record from entry `start` on.
    fn entries(&self, py: Python<'_>, start: u64) -> Result<Vec<Entry>, Fail> {
        self.birth.check("fenced log")?;
        let log = self.log.clone();
        wait(py, None, async move {
            Ok(log.entries(start).await?.into_iter().map(entry).collect())
        })
    }

    /// The latest entry's sequence number, or `None` when empty.
    fn latest_seq(&self, py: Python<'_>) -> Result<Option<u64>, Fail> {
        self.birth.check("fenced log")?;
        let log = self.log.clone();
        wait(py, None, async move { Ok(log.latest_seq().await?) })
    }
}

/// Creates `key` with the body `make_body(nonce)` exactly once; returns
/// whether ours is the body stored. `nonce_in(body)` finds the nonce in a
/// stored body (`None` when it carries none).
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
    let created = wait(py, None, async move {
        let body = |nonce: &str| -> Result<bytes::Bytes, LeaseError> {
            call_python(|py| {
                let out = make_body.call1(py, (nonce,))?;
                let bytes: Vec<u8> = out.extract(py)?;
                Ok::<_, PyErr>(bytes::Bytes::from(bytes))
            })
            .map_err(|e| LeaseError::Codec {
                key: String::new(),
                message: format!("make_body raised: {e}"),
            })
        };
        let find = |stored: &[u8]| -> Option<String> {
            call_python(|py| {
                nonce_in
                    .call1(py, (PyBytes::new(py, stored),))
                    .and_then(|n| n.extract::<Option<String>>(py))
                    .ok()
                    .flatten()
            })
        };
        Ok(creator.create(&key, body, find).await?)
    })?;
    Ok(matches!(created, Created::Ours(_)))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFencedResource>()?;
    m.add_class::<PyFencedLog>()?;
    m.add_function(wrap_pyfunction!(create_once, m)?)?;
    Ok(())
}
