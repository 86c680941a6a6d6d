//! Small summaries for the benchmarks' reports.

use std::time::Duration;

/// The `p` quantile (0.0-1.0) of `samples` (sorted in place); zero when empty.
pub fn pct(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i.min(samples.len() - 1)]
}

/// Milliseconds with two decimals, as the reports print them.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
