//! Helpers shared by this crate's property tests.

use proptest::strategy::{Strategy, ValueTree};

/// The share of `cases` values drawn from `strategy`, with a fixed seed, for which
/// `side` holds: shows that a generator reaches both sides of the property it feeds.
pub(crate) fn share<S: Strategy>(
    strategy: S,
    cases: usize,
    side: impl Fn(&S::Value) -> bool,
) -> f64 {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let hits = (0..cases)
        .filter(|_| side(&strategy.new_tree(&mut runner).unwrap().current()))
        .count();
    hits as f64 / cases as f64
}
