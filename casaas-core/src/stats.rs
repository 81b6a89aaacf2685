//! The one percentile every figure of casaas is computed with, so that the
//! benchmarks, the conformance probes and the examples agree on the same
//! samples.

/// The `p`-th percentile (0 to 100) of `samples` by nearest rank: the
/// smallest sample at or below which at least `p`% of the samples lie.
/// NaN for no samples. The samples need not be sorted.
///
/// ```
/// use casaas_core::provider::percentile;
/// let samples: Vec<f64> = (1..=100).map(f64::from).collect();
/// assert_eq!(percentile(&samples, 50.0), 50.0);
/// assert_eq!(percentile(&samples, 99.0), 99.0);
/// assert_eq!(percentile(&samples, 100.0), 100.0);
/// assert_eq!(percentile(&[3.0], 99.0), 3.0);
/// assert!(percentile(&[], 50.0).is_nan());
/// ```
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
