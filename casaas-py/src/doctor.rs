//! `casaas.doctor` and `casaas.conformance`: the checks of the
//! `casaas doctor` and `casaas conformance` commands, run on the module's
//! runtime with the GIL released, answered as the commands' JSON.

use std::collections::HashMap;
use std::time::Duration;

use casaas::ErrorKind;
use casaas_conformance::ConformanceError;
use casaas_conformance::check::{self, CheckedStore};
use pyo3::prelude::*;

use crate::errors::{Fail, invalid_argument};
use crate::runtime::wait;

/// A run that could not reach a verdict, as the exception of its cause.
fn failed(e: ConformanceError) -> Fail {
    let message = casaas_conformance::redact_text(&e.to_string());
    let class = match e.store_kind() {
        Some(ErrorKind::Misconfigured | ErrorKind::InvalidInput) => "InvalidUrl",
        Some(ErrorKind::Unauthorized) => "Unauthorized",
        Some(ErrorKind::Unsupported) => "Unsupported",
        Some(ErrorKind::Ambiguous) => "MayHaveTakenEffect",
        Some(_) => "StoreError",
        None => "InvalidConfig",
    };
    Fail::Named(class, message, Vec::new())
}

fn checked_store(url: String, options: HashMap<String, String>) -> CheckedStore {
    let mut options: Vec<(String, String)> = options.into_iter().collect();
    // A stable order, so that errors name options the same way every run.
    options.sort();
    CheckedStore::new(url, options)
}

/// Runs `casaas doctor` on `url` (with `options` beside it): the store
/// guard, then the quick probes. Returns the verdict (`safe`, `not_safe`,
/// `inconclusive`) and the JSON `casaas doctor --format json` prints. An
/// interrupt (Ctrl-C) abandons the run where it is.
#[pyfunction]
#[pyo3(signature = (url, options, guard_deadline=None))]
fn doctor(
    py: Python<'_>,
    url: String,
    options: HashMap<String, String>,
    guard_deadline: Option<f64>,
) -> Result<(String, String), Fail> {
    let deadline = match guard_deadline {
        Some(s) => Duration::try_from_secs_f64(s).map_err(|_| {
            invalid_argument(format!(
                "guard_deadline must be a finite, non-negative number of seconds (got {s})"
            ))
        })?,
        None => casaas::guard::DEFAULT_GUARD_DEADLINE,
    };
    let store = checked_store(url, options);
    wait(py, None, async move {
        let report = check::doctor(&store, deadline).await.map_err(failed)?;
        Ok((report.verdict.as_str().to_string(), report.to_json()))
    })
}

/// Runs `casaas conformance` on `url` (with `options` beside it), the quick
/// settings unless `quick` is false, only the probes `only` names when it
/// is not empty. Returns the verdict and the JSON report
/// (`casaas conformance --format json`).
#[pyfunction]
#[pyo3(signature = (url, options, quick=true, only=Vec::new()))]
fn conformance(
    py: Python<'_>,
    url: String,
    options: HashMap<String, String>,
    quick: bool,
    only: Vec<String>,
) -> Result<(String, String), Fail> {
    let settings = if quick {
        casaas_conformance::Settings::quick()
    } else {
        casaas_conformance::Settings::thorough()
    };
    let store = checked_store(url, options);
    wait(py, None, async move {
        let report = check::conformance(&store, &settings, &only)
            .await
            .map_err(failed)?;
        Ok((report.verdict.as_str().to_string(), report.to_json()))
    })
}

/// Adds the checks to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(doctor, m)?)?;
    m.add_function(wrap_pyfunction!(conformance, m)?)?;
    Ok(())
}
