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

/// Milliseconds as a number, for ratios and tables.
pub fn msf(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of `v` (the upper one of an even count); zero when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// A count from the environment variable `name`, else `default`.
pub fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
