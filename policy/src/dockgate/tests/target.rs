//! [`normalize`]: one reading of the target, or a refusal.

use proptest::prelude::*;

use super::*;

#[test]
fn a_target_is_split_into_version_segments_and_query() {
    let a = asked("GET", "/v1.41/containers/abc/json?size=1");
    assert_eq!(a.method, Method::Get);
    assert_eq!(a.version.map(ApiVersion::minor), Some(41));
    assert_eq!(a.segments, ["containers", "abc", "json"]);
    assert_eq!(a.query, [("size".to_owned(), "1".to_owned())]);
    assert_eq!(a.path(), "/v1.41/containers/abc/json");
    let a = asked("HEAD", "/_ping");
    assert_eq!(
        (a.version, a.segments.as_slice()),
        (None, &["_ping".to_owned()][..])
    );
}

#[test]
fn versions_from_1_24_to_1_52_are_kept_and_others_refused() {
    for v in ["v1.24", "v1.41", "v1.51", "v1.52"] {
        let a = asked("GET", &format!("/{v}/version"));
        assert_eq!(a.version.map(|v| format!("v{v}")).as_deref(), Some(v));
    }
    for v in [
        "v1.23", "v1.53", "v1.9", "v1.041", "v2.0", "v1.4.1", "v1", "v1.", "v.41", "v141",
    ] {
        assert_eq!(
            bad_target("GET", format!("/{v}/version").as_bytes()),
            "unsupported_version",
            "{v}"
        );
    }
    assert_eq!(bad_target("GET", b"/v1.41"), "bad_target");
    // Not Docker's version pattern: an ordinary segment, judged by decide.
    assert_eq!(asked("GET", "/v1.4x/version").segments[0], "v1.4x");
}

#[test]
fn path_tricks_are_refused_before_any_decision() {
    for t in [
        &b"/containers/../images/json"[..],
        b"/containers/./x/json",
        b"/containers/%2e%2e/x/json",
        b"/containers/%2E/x/json",
        b"/containers/a%2Fb/json",
        b"/containers/a%2fb/json",
        b"//containers/json",
        b"/containers//json",
        b"/containers/json/",
        b"/",
        b"/containers/a%00/json",
        b"/containers/a%0a/json",
        b"/containers/a\x01/json",
        b"/containers/a b/json",
        b"/containers/\xc3\xa9/json",
        b"/containers/a%zz/json",
        b"/containers/a%2/json",
        b"/containers/a%ff/json",
        b"/_ping#x",
        b"http://docker/_ping",
        b"*",
        b"",
        b"_ping",
    ] {
        assert_eq!(
            bad_target("GET", t),
            "bad_target",
            "{}",
            String::from_utf8_lossy(t)
        );
    }
    let long = format!("/_ping?x={}", "a".repeat(MAX_TARGET_LEN));
    assert_eq!(bad_target("GET", long.as_bytes()), "bad_target");
}

#[test]
fn percent_encodings_are_decoded_exactly_once() {
    assert_eq!(asked("GET", "/containers/%61bc/json").segments[1], "abc");
    assert_eq!(asked("GET", "/containers/%2561/json").segments[1], "%61");
    // A path's + is a plus; a query's is a space.
    let a = asked("GET", "/containers/a+b/json?x=a+b%2Cc");
    assert_eq!(a.segments[1], "a+b");
    assert_eq!(a.query_value("x"), Some("a b,c"));
}

#[test]
fn ambiguous_queries_are_refused() {
    for t in [
        "/_ping?a=1&a=2",
        "/_ping?a=1;b=2",
        "/_ping?=1",
        "/_ping?a=%zz",
        "/_ping?a=%00",
    ] {
        assert_eq!(bad_target("GET", t.as_bytes()), "bad_query", "{t}");
    }
    let a = asked("GET", "/_ping?&a&&b=");
    assert_eq!(
        a.query,
        [
            ("a".to_owned(), String::new()),
            ("b".to_owned(), String::new())
        ]
    );
}

#[test]
fn only_docker_methods_in_their_exact_spelling_are_read() {
    for m in ["get", "Get", "PATCH", "OPTIONS", "CONNECT", "TRACE", ""] {
        assert_eq!(bad_target(m, b"/_ping"), "method_not_allowed", "{m}");
    }
}

proptest! {
    #[test]
    fn normalize_and_decide_never_panic(method in "(GET|POST|DELETE|HEAD|PUT)", target in proptest::collection::vec(any::<u8>(), 0..80), body in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(a) = normalize(&method, &target) {
            for role in [Role::Attach, Role::Control] {
                let _ = decide(role, &a, BodyInfo::length(body.len() as u64).with_bytes(&body));
                let _ = decide(role, &a, BodyInfo::none());
            }
        }
    }

    #[test]
    fn accepted_segments_are_never_empty_dotted_or_slashed(target in "/[a-z0-9%./]{0,30}(\\?[a-z=&%]{0,10})?") {
        if let Ok(a) = normalize("GET", target.as_bytes()) {
            for s in &a.segments {
                prop_assert!(!s.is_empty() && s != "." && s != ".." && !s.contains('/'), "{:?} from {}", s, target);
            }
        }
    }
}
