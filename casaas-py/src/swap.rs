//! Replace-if-unchanged, exactly once (`SwapOnce`): the pointer swap of the
//! Iceberg catalog (`casaas.iceberg`). The protocol runs in Rust; Python
//! supplies the body for a nonce, finds the nonce in a stored body, and
//! says whether a stored body descends from the write that carried a
//! nonce. Bodies cross as bytes; versions as opaque `PointerVersion`s.

use std::sync::Arc;

use casaas::lease::{SwapOnce, Swapped};
use casaas::{CasStore, LeaseError, Version};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::Store;
use crate::errors::Fail;
use crate::runtime::{Birth, call_python, wait};

/// The version of a pointer as read: pass it back to `swap` as `expected`.
#[pyclass(module = "casaas._casaas", frozen, eq)]
#[derive(PartialEq, Eq)]
pub struct PointerVersion {
    version: Version,
}

#[pymethods]
impl PointerVersion {
    fn __repr__(&self) -> String {
        format!("<casaas.PointerVersion {}>", self.version)
    }
}

/// `(body, version)` of a stored pointer.
type Read = (Py<PyBytes>, Py<PointerVersion>);

/// `(outcome, body, version, replaced)`: what a swap settled.
type Answer = (
    &'static str,
    Option<Py<PyBytes>>,
    Option<Py<PointerVersion>>,
    bool,
);

fn read_out(py: Python<'_>, object: casaas::StoredObject) -> PyResult<Read> {
    Ok((
        PyBytes::new(py, &object.body).unbind(),
        Py::new(
            py,
            PointerVersion {
                version: object.version,
            },
        )?,
    ))
}

/// The swap's error: the protocol's, or a Python callback's exception.
/// `SwapOnce` returns a callback's error as it is when no write of the
/// swap may still land (then it is raised in Python unchanged), and as an
/// ambiguous protocol error naming it otherwise.
enum SwapFail {
    Lease(LeaseError),
    Callback(&'static str, PyErr),
}

impl From<LeaseError> for SwapFail {
    fn from(e: LeaseError) -> Self {
        SwapFail::Lease(e)
    }
}

impl std::fmt::Display for SwapFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SwapFail::Lease(e) => e.fmt(f),
            SwapFail::Callback(what, e) => write!(f, "{what} raised: {e}"),
        }
    }
}

impl From<SwapFail> for Fail {
    fn from(e: SwapFail) -> Self {
        match e {
            SwapFail::Lease(e) => Fail::Lease(e),
            SwapFail::Callback(_, e) => Fail::Python(e),
        }
    }
}

/// What a swap settled, as Python sees it.
enum Outcome {
    Ours { version: Version, replaced: bool },
    Conflict(Option<casaas::StoredObject>),
}

/// Swaps objects of the caller's format exactly once (see the Rust
/// `SwapOnce`).
#[pyclass(module = "casaas._casaas", name = "SwapOnce", frozen)]
pub struct PySwapOnce {
    swap: SwapOnce,
    store: Arc<dyn CasStore>,
    birth: Birth,
}

#[pymethods]
impl PySwapOnce {
    /// A writer on `store`, in the layout chosen for it.
    #[new]
    fn new(store: &Store) -> Result<Self, Fail> {
        let store = store.get()?;
        Ok(PySwapOnce {
            swap: SwapOnce::new(store.clone()),
            store,
            birth: Birth::now(),
        })
    }

    /// `"record"` or `"epochs"`.
    #[getter]
    fn layout(&self) -> &'static str {
        self.swap.layout().as_str()
    }

    /// `(body, version)` of the object at `key`, or `None` when absent.
    fn read(&self, py: Python<'_>, key: String) -> Result<Option<Read>, Fail> {
        self.birth.check("swap writer")?;
        let swap = self.swap.clone();
        let found = wait(py, None, async move { Ok(swap.read(&key).await?) })?;
        Ok(found.map(|o| read_out(py, o)).transpose()?)
    }

    /// The keys of the objects under `prefix`, sorted (an object of the
    /// create-only layout is its key alone, not its epochs).
    fn list(&self, py: Python<'_>, prefix: String) -> Result<Vec<String>, Fail> {
        self.birth.check("swap writer")?;
        let store = self.store.clone();
        let listed = wait(py, None, async move { Ok(store.list(&prefix).await?) })?;
        let mut keys: Vec<String> = listed
            .into_iter()
            .map(|e| e.key)
            .filter(|k| !k.contains(".epochs/") && !k.contains(".collected/"))
            .collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Replaces the object at `key` with `body(nonce)` if it is still at
    /// `expected` (`None`: creates it), exactly once. `nonce_in(stored)`
    /// returns the nonce a stored body carries; `descends(stored, nonce)`
    /// says whether it was written on top of the write that carried
    /// `nonce` (raise if it cannot tell). Returns `("ours", None, version,
    /// replaced)` or `("conflict", body, version, False)` with the current
    /// object (`body` and `version` `None` when absent). Raises
    /// `MayHaveTakenEffect` while a write may still land (a callback that
    /// raises then is named in its message); an exception `body` raises
    /// when nothing of this swap can land is raised as it is.
    #[pyo3(signature = (key, expected, body, nonce_in, descends))]
    fn swap(
        &self,
        py: Python<'_>,
        key: String,
        expected: Option<Py<PointerVersion>>,
        body: Py<PyAny>,
        nonce_in: Py<PyAny>,
        descends: Py<PyAny>,
    ) -> Result<Answer, Fail> {
        self.birth.check("swap writer")?;
        let swap = self.swap.clone();
        let expected = expected.map(|v| v.get().version.clone());
        let (body, nonce_in, descends) = (Arc::new(body), Arc::new(nonce_in), Arc::new(descends));
        let outcome = wait(py, None, async move {
            let make = |nonce: &str| -> Result<bytes::Bytes, SwapFail> {
                call_python(|py| {
                    let out = body.call1(py, (nonce,))?;
                    let bytes: Vec<u8> = out.extract(py)?;
                    Ok(bytes::Bytes::from(bytes))
                })
                .map_err(|e| SwapFail::Callback("body", e))
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
            let lineage = |stored: &[u8], nonce: &str| -> Result<bool, SwapFail> {
                call_python(|py| {
                    descends
                        .call1(py, (PyBytes::new(py, stored), nonce))
                        .and_then(|d| d.extract::<bool>(py))
                })
                .map_err(|e| SwapFail::Callback("descends", e))
            };
            let swapped = swap
                .swap(&key, expected.as_ref(), make, find, lineage)
                .await
                .map_err(Fail::from)?;
            Ok::<_, Fail>(match swapped {
                Swapped::Ours { version, replaced } => Outcome::Ours { version, replaced },
                Swapped::Conflict(current) => Outcome::Conflict(current),
            })
        })?;
        Ok(match outcome {
            Outcome::Ours { version, replaced } => (
                "ours",
                None,
                Some(Py::new(py, PointerVersion { version })?),
                replaced,
            ),
            Outcome::Conflict(None) => ("conflict", None, None, false),
            Outcome::Conflict(Some(object)) => {
                let (body, version) = read_out(py, object)?;
                ("conflict", Some(body), Some(version), false)
            }
        })
    }
}

/// Registers the classes.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PointerVersion>()?;
    m.add_class::<PySwapOnce>()?;
    Ok(())
}
