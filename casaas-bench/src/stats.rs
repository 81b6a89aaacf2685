//! Percentiles and fairness.

/// A distribution summary in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

pub use casaas_core::provider::percentile;

/// p50, p99, max and mean of `samples`.
pub fn summarize(samples: &[f64]) -> Summary {
    if samples.is_empty() {
        return Summary {
            p50: f64::NAN,
            p99: f64::NAN,
            max: f64::NAN,
            ..Summary::default()
        };
    }
    Summary {
        n: samples.len(),
        p50: percentile(samples, 50.0),
        p99: percentile(samples, 99.0),
        max: samples.iter().copied().fold(f64::MIN, f64::max),
    }
}

/// Jain's fairness index of per-participant shares: 1 when all are equal,
/// 1/n when one participant gets everything.
pub fn jain(shares: &[f64]) -> f64 {
    let sum: f64 = shares.iter().sum();
    let squares: f64 = shares.iter().map(|x| x * x).sum();
    if squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (shares.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
    }

    #[test]
    fn jain_bounds() {
        assert!((jain(&[5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[9.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-12);
    }
}
