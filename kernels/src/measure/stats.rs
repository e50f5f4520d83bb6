//! The one definition of the statistics every figure of the book reports. The PyTorch peers
//! hand their raw samples to `tools/bench`, which summarises them with this same code, so a
//! median means the same thing in every row of every CSV.

/// Median and spread of one set of samples, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    pub samples: usize,
}

impl Stats {
    /// The median (the mean of the two middle values when there is an even number of samples,
    /// as Python's `statistics.median`), and the 10th and 90th percentiles by nearest rank:
    /// the sample at index `round((n - 1) q)` of the sorted list. `None` for no samples.
    pub fn of(mut us: Vec<f64>) -> Option<Stats> {
        if us.is_empty() {
            return None;
        }
        us.sort_by(|a, b| a.total_cmp(b));
        let n = us.len();
        let at = |q: f64| us[((n - 1) as f64 * q).round() as usize];
        let median = if n % 2 == 1 {
            us[n / 2]
        } else {
            (us[n / 2 - 1] + us[n / 2]) / 2.0
        };
        Some(Stats {
            median_us: median,
            p10_us: at(0.1),
            p90_us: at(0.9),
            samples: n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_counts() {
        let s = Stats::of((1..=11).rev().map(|v| v as f64).collect()).unwrap();
        assert_eq!(
            (s.median_us, s.p10_us, s.p90_us, s.samples),
            (6.0, 2.0, 10.0, 11)
        );
        // Even: the mean of the two middle values (statistics.median([1, 2, 3, 10]) == 2.5).
        let s = Stats::of(vec![10.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median_us, 2.5);
        assert_eq!(Stats::of(vec![]), None);
    }
}
