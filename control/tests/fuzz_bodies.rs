//! Property-based fuzzing of control's JSON bodies: deserialising `CreateRequest`,
//! `RedrawRequest` and `TargetRequest` never panics on any input, and an object with
//! a field the type does not know is always refused. The case counts are set here and
//! printed (docs/reliability.md sums them).

use control::api::wire::{CreateRequest, RedrawRequest, TargetRequest};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};

/// Arbitrary bytes per type.
const BYTES_CASES: u32 = 5_000;
/// Arbitrary JSON values per type.
const VALUE_CASES: u32 = 5_000;
/// Well-formed bodies plus one unknown field, per type.
const UNKNOWN_FIELD_CASES: u32 = 2_000;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("profile".to_owned()),
                    Just("name".to_owned()),
                    Just("options".to_owned()),
                    Just("cols".to_owned()),
                    Just("rows".to_owned()),
                    Just("upstream".to_owned()),
                    Just("users".to_owned()),
                    Just("roles".to_owned()),
                    Just("credential".to_owned()),
                    ".{0,12}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Runs the three properties for one body type; returns the cases run.
fn fuzz<T: serde::de::DeserializeOwned>(valid: Value, known: &'static [&'static str]) -> u32 {
    TestRunner::new(Config::with_cases(BYTES_CASES))
        .run(&proptest::collection::vec(any::<u8>(), 0..512), |raw| {
            let _ = serde_json::from_slice::<T>(&raw);
            Ok(())
        })
        .unwrap();
    TestRunner::new(Config::with_cases(VALUE_CASES))
        .run(&json_value(), |v| {
            let _ = serde_json::from_slice::<T>(v.to_string().as_bytes());
            Ok(())
        })
        .unwrap();
    let valid_for_unknown = valid.clone();
    TestRunner::new(Config::with_cases(UNKNOWN_FIELD_CASES))
        .run(
            &("[a-zA-Z_][a-zA-Z0-9_]{0,15}", json_value()),
            move |(key, value)| {
                prop_assume!(!known.contains(&key.as_str()));
                let mut body: Map<String, Value> = valid_for_unknown.as_object().unwrap().clone();
                body.insert(key.clone(), value);
                let parsed =
                    serde_json::from_slice::<T>(Value::Object(body).to_string().as_bytes());
                prop_assert!(parsed.is_err(), "unknown field {:?} accepted", key);
                Ok(())
            },
        )
        .unwrap();
    assert!(
        serde_json::from_value::<T>(valid).is_ok(),
        "the valid body parses"
    );
    BYTES_CASES + VALUE_CASES + UNKNOWN_FIELD_CASES
}

#[test]
fn create_bodies_never_panic_and_refuse_unknown_fields() {
    let n = fuzz::<CreateRequest>(
        json!({"profile": "default", "name": "n", "options": {}}),
        &["profile", "name", "options"],
    );
    println!("CreateRequest: {n} cases");
}

#[test]
fn redraw_bodies_never_panic_and_refuse_unknown_fields() {
    let n = fuzz::<RedrawRequest>(json!({"cols": 80, "rows": 24}), &["cols", "rows"]);
    println!("RedrawRequest: {n} cases");
}

#[test]
fn target_bodies_never_panic_and_refuse_unknown_fields() {
    let n = fuzz::<TargetRequest>(
        json!({"name": "t", "upstream": "http://127.0.0.1:7681", "users": ["alice"], "roles": []}),
        &["name", "upstream", "users", "roles", "credential"],
    );
    println!("TargetRequest: {n} cases");
}
