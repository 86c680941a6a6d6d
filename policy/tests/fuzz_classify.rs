//! Property-based fuzzing of the request path classifier, `policy::classify`: it never
//! panics, and whatever it accepts as a terminal route is a well-formed one. The case
//! counts are set here and printed (docs/reliability.md sums them).

use policy::{classify, PublicRoute};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Arbitrary bytes: 40,000 cases.
const RANDOM_CASES: u32 = 40_000;
/// Paths assembled from the pieces that matter to the classifier: 20,000 cases.
const PIECE_CASES: u32 = 20_000;

#[test]
fn classify_never_panics_on_arbitrary_bytes() {
    let mut runner = TestRunner::new(Config::with_cases(RANDOM_CASES));
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..1200), |raw| {
            let _ = classify(&raw);
            Ok(())
        })
        .unwrap();
    println!("classify, arbitrary bytes: {RANDOM_CASES} cases");
}

#[test]
fn classify_accepts_only_well_formed_terminal_routes_from_tricky_pieces() {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just("//".to_owned()),
        Just("s".to_owned()),
        Just("S".to_owned()),
        Just("ws".to_owned()),
        Just("token".to_owned()),
        Just("api".to_owned()),
        Just("routes".to_owned()),
        Just("assets".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%2e".to_owned()),
        Just("%2f".to_owned()),
        Just("\\".to_owned()),
        Just(";".to_owned()),
        Just("?".to_owned()),
        Just("#".to_owned()),
        Just("\u{0}".to_owned()),
        Just("é".to_owned()),
        "[a-z0-9]{20}",
        "[a-zA-Z0-9]{1,24}",
    ];
    let mut runner = TestRunner::new(Config::with_cases(PIECE_CASES));
    runner
        .run(&proptest::collection::vec(piece, 0..10), |pieces| {
            let path = pieces.concat();
            if let Ok(PublicRoute::Terminal { id, .. }) = classify(path.as_bytes()) {
                // Exactly /s/<id>/, /s/<id>/token or /s/<id>/ws: no dots, no doubled
                // slashes, no escapes.
                prop_assert!(
                    path == format!("/s/{id}/")
                        || path == format!("/s/{id}/token")
                        || path == format!("/s/{id}/ws"),
                    "{:?} accepted as a terminal route",
                    path
                );
            }
            Ok(())
        })
        .unwrap();
    println!("classify, tricky pieces: {PIECE_CASES} cases");
}
