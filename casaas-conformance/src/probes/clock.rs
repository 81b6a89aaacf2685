//! Server clock skew, from the HTTP `Date` header of responses.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::model::{Outcome, StepError, StepExt};
use crate::probe::ProbeContext;

/// Skews beyond this many seconds fail the (informational) probe.
const LARGE_SKEW_S: f64 = 5.0;

fn unix(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

pub(super) async fn clock_skew(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let Some(clock) = cx.clock() else {
        return Ok(Outcome::unsupported(
            "this backend does not expose the server's Date header",
        ));
    };
    let store = cx.store();
    let samples = if cx.settings().quick { 5 } else { 15 };
    let mut skews = Vec::with_capacity(samples);
    for i in 0..samples {
        let before = SystemTime::now();
        store
            .get("clock")
            .await
            .step("read to sample the Date header")?;
        let after = SystemTime::now();
        let Some(date) = clock.last_server_date() else {
            return Ok(Outcome::unsupported(
                "the server's responses carried no Date header",
            ));
        };
        let local_mid = (unix(before) + unix(after)) / 2.0;
        // Date has one-second resolution: the server's time lay in [date, date + 1).
        skews.push(unix(date) + 0.5 - local_mid);
        if i + 1 < samples {
            tokio::time::sleep(Duration::from_millis(230)).await;
        }
    }
    skews.sort_by(f64::total_cmp);
    let median = skews[skews.len() / 2];
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let outcome = Outcome::check(
        median.abs() <= LARGE_SKEW_S,
        format!(
            "the server's clock is {:+.1} s from ours (±0.5 s, the Date header's resolution)",
            median
        ),
        format!(
            "the server's clock is {:+.1} s from ours: do not use the wall-clock expiry rule with a maximum skew below that",
            median
        ),
    );
    Ok(outcome
        .with("samples", samples)
        .with("median_skew_s", round(median))
        .with("min_skew_s", round(skews[0]))
        .with("max_skew_s", round(skews[skews.len() - 1]))
        .with("resolution_s", 1))
}
