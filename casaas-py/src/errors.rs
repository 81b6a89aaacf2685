//! Rust errors as the Python exceptions of `casaas._errors` (one hierarchy
//! under `casaas.Error`), each with the message the Rust error gives.

use casaas::{CasError, ErrorKind, LeaseError};
use pyo3::prelude::*;

/// An attribute set on a raised exception (`LockHeld.owner`, ...).
pub(crate) enum Attr {
    U64(u64),
    F64(f64),
    Str(String),
}

/// Why a call failed, turned into a Python exception once the GIL is held.
pub(crate) enum Fail {
    /// A protocol error.
    Lease(LeaseError),
    /// A store error outside a protocol (opening a store).
    Cas(CasError),
    /// An exception of `casaas._errors` by class name, its message and
    /// attributes.
    Named(&'static str, String, Vec<(&'static str, Attr)>),
    /// An exception raised by Python code (a signal handler, a callback).
    Python(PyErr),
}

impl From<LeaseError> for Fail {
    fn from(e: LeaseError) -> Self {
        Fail::Lease(e)
    }
}

impl From<CasError> for Fail {
    fn from(e: CasError) -> Self {
        Fail::Cas(e)
    }
}

impl From<PyErr> for Fail {
    fn from(e: PyErr) -> Self {
        Fail::Python(e)
    }
}

impl From<Fail> for PyErr {
    fn from(fail: Fail) -> Self {
        Python::attach(|py| fail.into_pyerr(py))
    }
}

/// A failure of the bindings themselves (the runtime, a fork).
pub(crate) fn runtime_error(message: String) -> Fail {
    Fail::Named("RuntimeFailure", message, Vec::new())
}

/// An argument Python passed that casaas cannot use.
pub(crate) fn invalid_argument(message: String) -> Fail {
    Fail::Named("InvalidConfig", message, Vec::new())
}

fn store_class(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Ambiguous => "MayHaveTakenEffect",
        ErrorKind::UnsafeStore => "UnsafeStore",
        ErrorKind::Unauthorized => "Unauthorized",
        ErrorKind::Unsupported => "Unsupported",
        ErrorKind::Misconfigured | ErrorKind::InvalidInput => "InvalidConfig",
        _ => "StoreError",
    }
}

/// An exception of `casaas._errors`: class name, message, attributes.
type Parts = (&'static str, String, Vec<(&'static str, Attr)>);

impl Fail {
    /// The class name, message and attributes of the exception to raise.
    fn parts(self) -> Result<Parts, PyErr> {
        Ok(match self {
            Fail::Python(err) => return Err(err),
            Fail::Named(class, message, attrs) => (class, message, attrs),
            Fail::Cas(e) => {
                let attrs = vec![("kind", Attr::Str(e.kind().as_str().to_string()))];
                (store_class(e.kind()), e.to_string(), attrs)
            }
            Fail::Lease(e) => {
                let message = e.to_string();
                match e {
                    LeaseError::Store(inner) | LeaseError::UnsafeStore(inner) => {
                        let attrs = vec![("kind", Attr::Str(inner.kind().as_str().to_string()))];
                        (store_class(inner.kind()), message, attrs)
                    }
                    LeaseError::Lost(reason) => (
                        "LeaseLost",
                        message,
                        vec![("reason", Attr::Str(reason.to_string()))],
                    ),
                    LeaseError::InsufficientValidity {
                        remaining,
                        required,
                    } => (
                        "InsufficientValidity",
                        message,
                        vec![
                            ("remaining", Attr::F64(remaining.as_secs_f64())),
                            ("required", Attr::F64(required.as_secs_f64())),
                        ],
                    ),
                    LeaseError::FencedOut {
                        presented,
                        recorded,
                    } => (
                        "FencedOut",
                        message,
                        vec![
                            ("presented", Attr::U64(presented)),
                            ("recorded", Attr::U64(recorded)),
                        ],
                    ),
                    LeaseError::InvalidConfig(_) => ("InvalidConfig", message, Vec::new()),
                    LeaseError::Cancelled => ("Cancelled", message, Vec::new()),
                    LeaseError::DeadlineExceeded(_) => ("Timeout", message, Vec::new()),
                    LeaseError::ForeignObject { .. } => ("ForeignObject", message, Vec::new()),
                    LeaseError::UnsupportedSchema { .. } => {
                        ("UnsupportedSchema", message, Vec::new())
                    }
                    LeaseError::Contended { .. } => ("Contended", message, Vec::new()),
                    LeaseError::Exhausted { .. } => ("Exhausted", message, Vec::new()),
                    _ => ("Error", message, Vec::new()),
                }
            }
        })
    }

    /// The Python exception.
    pub(crate) fn into_pyerr(self, py: Python<'_>) -> PyErr {
        let (class, message, attrs) = match self.parts() {
            Ok(parts) => parts,
            Err(err) => return err,
        };
        let build = || -> PyResult<PyErr> {
            let cls = py.import("casaas._errors")?.getattr(class)?;
            let exc = cls.call1((message.clone(),))?;
            for (name, attr) in attrs {
                match attr {
                    Attr::U64(v) => exc.setattr(name, v)?,
                    Attr::F64(v) => exc.setattr(name, v)?,
                    Attr::Str(v) => exc.setattr(name, v)?,
                }
            }
            Ok(PyErr::from_value(exc))
        };
        match build() {
            Ok(err) => err,
            Err(err) => err,
        }
    }
}
