use super::*;
use crate::testing::share;
use proptest::prelude::*;
use CredentialSource::{Bearer, Cookie};

fn policy() -> OriginPolicy {
    OriginPolicy::new(vec![
        Origin::parse("https://term.example.com").unwrap(),
        Origin::parse("http://127.0.0.1:8080").unwrap(),
    ])
}

#[test]
fn exact_origins_are_allowed_for_both_sources() {
    for src in [Cookie, Bearer] {
        assert_eq!(
            policy().check(Some(b"https://term.example.com"), src),
            Ok(())
        );
        assert_eq!(policy().check(Some(b"http://127.0.0.1:8080"), src), Ok(()));
    }
}

#[test]
fn default_port_and_case_are_normalised() {
    assert_eq!(
        policy().check(Some(b"https://term.example.com:443"), Cookie),
        Ok(())
    );
    assert_eq!(
        policy().check(Some(b"HTTPS://Term.Example.COM"), Cookie),
        Ok(())
    );
}

#[test]
fn missing_origin_is_refused_for_cookie_and_accepted_for_bearer() {
    assert_eq!(policy().check(None, Cookie), Err(OriginDenied::Missing));
    assert_eq!(policy().check(None, Bearer), Ok(()));
}

#[test]
fn null_origin_is_refused_for_both_sources() {
    for src in [Cookie, Bearer] {
        assert_eq!(policy().check(Some(b"null"), src), Err(OriginDenied::Null));
    }
}

#[test]
fn lookalikes_are_not_allowed() {
    for o in [
        "https://term.example.com.evil.com",
        "https://evilterm.example.com",
        "https://example.com",
        "http://term.example.com",
        "https://term.example.com:8443",
        "http://127.0.0.1:8081",
        "http://127.0.0.1",
        "http://localhost:8080",
    ] {
        assert_eq!(
            policy().check(Some(o.as_bytes()), Cookie),
            Err(OriginDenied::NotAllowed),
            "{o}"
        );
    }
}

#[test]
fn malformed_origins_are_refused() {
    for o in [
        "",
        "term.example.com",
        "https://term.example.com/",
        "https://term.example.com/path",
        "https://user@term.example.com",
        "https://term.example.com.",
        "https://term.example.com:",
        "https://term.example.com:0",
        "https://term.example.com:65536",
        "https://term.example.com:+443",
        "https://term.example.com, https://evil.com",
        "https://term.example.com https://evil.com",
        "ftp://term.example.com",
        "https://tèrm.example.com",
        "https://[::1",
    ] {
        assert_eq!(
            policy().check(Some(o.as_bytes()), Bearer),
            Err(OriginDenied::Malformed),
            "{o}"
        );
    }
    assert_eq!(
        policy().check(Some(&[0xff, 0xfe]), Cookie),
        Err(OriginDenied::Malformed)
    );
}

#[test]
fn ipv6_origins_parse() {
    let p = OriginPolicy::new(vec![Origin::parse("http://[::1]:8080").unwrap()]);
    assert_eq!(p.check(Some(b"http://[::1]:8080"), Cookie), Ok(()));
    assert_eq!(
        p.check(Some(b"http://[::2]:8080"), Cookie),
        Err(OriginDenied::NotAllowed)
    );
}

/// Whether `s` spells one of [`policy`]'s origins, decided without `Origin::parse`:
/// the module compares scheme and host case-insensitively and makes the default
/// port explicit, and a port is at most five digits, so leading zeros still name
/// the same port. Nothing else (slashes, dots, user info, other ports) is the same.
fn is_allowed_spelling(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    [
        ("https://term.example.com", 443, true),
        ("http://127.0.0.1", 8080, false),
    ]
    .iter()
    .any(|&(prefix, port, default)| {
        let Some(rest) = lower.strip_prefix(prefix) else {
            return false;
        };
        if rest.is_empty() {
            return default;
        }
        rest.strip_prefix(':').is_some_and(|p| {
            (1..=5).contains(&p.len())
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.trim_start_matches('0') == port.to_string()
        })
    })
}

/// Characters an edit inserts or substitutes: host characters, separators, the
/// brackets and `@` of other syntaxes, and non-ASCII.
const EDIT_CHARS: &[char] = &[
    'a', 'm', 'T', '0', '9', '.', '-', ':', '/', '@', '[', ']', ' ', 'é',
];

/// One edit to an allowed origin.
#[derive(Debug, Clone)]
enum Mutation {
    /// The text before `://` becomes this.
    Scheme(&'static str),
    /// The port (or its absence) becomes this.
    Port(&'static str),
    Insert(prop::sample::Index, char),
    Remove(prop::sample::Index),
    Replace(prop::sample::Index, char),
    /// Flip the case of one character.
    FlipCase(prop::sample::Index),
    UpperCase,
    Append(&'static str),
    /// Insert user info after `://`.
    UserInfo(&'static str),
    /// The whole value becomes this opaque origin.
    Opaque(&'static str),
}

/// Weighted so that each kind of near miss (scheme, port, a character more or less,
/// case, trailing slash, user info, `null`) turns up in a few percent of cases.
fn mutation() -> impl Strategy<Value = Mutation> {
    use prop::sample::{select, Index};
    prop_oneof![
        2 => select(&["http", "https", "HTTPS", "ws", "ftp", ""][..]).prop_map(Mutation::Scheme),
        3 => select(
            &[
                ":443", ":80", ":8080", ":8081", ":8443", ":0443", ":08080", ":", ":0",
                ":65536", ""
            ][..]
        )
        .prop_map(Mutation::Port),
        2 => (any::<Index>(), select(EDIT_CHARS)).prop_map(|(i, c)| Mutation::Insert(i, c)),
        2 => any::<Index>().prop_map(Mutation::Remove),
        2 => (any::<Index>(), select(EDIT_CHARS)).prop_map(|(i, c)| Mutation::Replace(i, c)),
        2 => any::<Index>().prop_map(Mutation::FlipCase),
        1 => Just(Mutation::UpperCase),
        2 => Just(Mutation::Append("/")),
        2 => select(&[".", "/path", ":", " ", ", https://evil.com", ".evil.com"][..])
            .prop_map(Mutation::Append),
        1 => select(&["user@", "user:pw@", "@"][..]).prop_map(Mutation::UserInfo),
        1 => select(&["null", "NULL"][..]).prop_map(Mutation::Opaque),
    ]
}

fn apply(origin: &str, mutations: Vec<Mutation>) -> String {
    let mut s = origin.to_owned();
    for m in mutations {
        let after_scheme = s.find("://").map(|i| i + 3);
        match m {
            Mutation::Scheme(scheme) => {
                if let Some(at) = after_scheme {
                    s.replace_range(..at - 3, scheme);
                }
            }
            Mutation::Port(port) => {
                let host_start = after_scheme.unwrap_or(0);
                let host_end = s[host_start..]
                    .find(':')
                    .map_or(s.len(), |i| host_start + i);
                s.replace_range(host_end.., port);
            }
            Mutation::Insert(i, c) => {
                let mut chars: Vec<char> = s.chars().collect();
                chars.insert(i.index(chars.len() + 1), c);
                s = chars.into_iter().collect();
            }
            Mutation::Remove(i) if !s.is_empty() => {
                let mut chars: Vec<char> = s.chars().collect();
                chars.remove(i.index(chars.len()));
                s = chars.into_iter().collect();
            }
            Mutation::Replace(i, c) if !s.is_empty() => {
                let mut chars: Vec<char> = s.chars().collect();
                let at = i.index(chars.len());
                chars[at] = c;
                s = chars.into_iter().collect();
            }
            Mutation::FlipCase(i) if !s.is_empty() => {
                let mut chars: Vec<char> = s.chars().collect();
                let at = i.index(chars.len());
                chars[at] = if chars[at].is_ascii_lowercase() {
                    chars[at].to_ascii_uppercase()
                } else {
                    chars[at].to_ascii_lowercase()
                };
                s = chars.into_iter().collect();
            }
            Mutation::UpperCase => s.make_ascii_uppercase(),
            Mutation::Append(tail) => s.push_str(tail),
            Mutation::UserInfo(info) => {
                if let Some(at) = after_scheme {
                    s.insert_str(at, info);
                }
            }
            Mutation::Opaque(value) => s = value.to_owned(),
            _ => {}
        }
    }
    s
}

/// The allowed origins and up to two edits of them. Arbitrary strings essentially
/// never spell an allowed origin, so they cannot show that a near miss is refused
/// while the real one (in any case, with its default port written out) passes.
fn origin_candidates() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["https://term.example.com", "http://127.0.0.1:8080"][..]),
        proptest::collection::vec(mutation(), 0..=2),
    )
        .prop_map(|(origin, mutations)| apply(origin, mutations))
}

#[test]
fn the_origin_generator_hits_both_passing_and_refused_origins() {
    let passed = share(origin_candidates(), 10_000, |s| {
        policy().check(Some(s.as_bytes()), Cookie).is_ok()
    });
    eprintln!(
        "origin candidates: {:.1}% pass a cookie check, {:.1}% refused",
        passed * 100.0,
        (1.0 - passed) * 100.0
    );
    assert!((0.1..=0.9).contains(&passed), "{passed}");
}

proptest! {
    #[test]
    fn check_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..80), cookie in any::<bool>()) {
        let src = if cookie { Cookie } else { Bearer };
        let _ = policy().check(Some(&raw), src);
    }

    #[test]
    fn suffixes_never_match(suffix in "[a-z0-9.-]{1,20}") {
        let s = format!("https://term.example.com{suffix}");
        prop_assert!(policy().check(Some(s.as_bytes()), Cookie).is_err());
    }
}

proptest! {
    // Each near miss is a few percent of cases: enough cases that each shows up.
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_cookie_check_passes_exactly_the_spellings_of_an_allowed_origin(s in origin_candidates()) {
        let verdict = policy().check(Some(s.as_bytes()), Cookie);
        prop_assert_eq!(verdict.is_ok(), is_allowed_spelling(&s), "{:?} -> {:?}", s, verdict);
        // With the header present, a bearer credential is held to the same rule.
        prop_assert_eq!(policy().check(Some(s.as_bytes()), Bearer), verdict);
    }
}
