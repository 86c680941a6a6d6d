use super::*;
use crate::testing::share;
use proptest::prelude::*;

const ID: &str = "abcdefghijk234mn";

fn term(part: TerminalPart) -> Result<PublicRoute<'static>, PathError> {
    Ok(PublicRoute::Terminal {
        id: SessionId::parse(ID).unwrap(),
        part,
    })
}

#[test]
fn the_public_routes_are_recognised() {
    assert_eq!(classify(b"/healthz"), Ok(PublicRoute::Health));
    assert_eq!(classify(b"/"), Ok(PublicRoute::Asset("")));
    assert_eq!(
        classify(b"/assets/app.js"),
        Ok(PublicRoute::Asset("app.js"))
    );
    assert_eq!(classify(b"/auth/session"), Ok(PublicRoute::AuthSession));
    assert_eq!(
        classify(b"/auth/callback"),
        Ok(PublicRoute::Oidc(OidcStep::Callback))
    );
    assert_eq!(
        classify(b"/auth/login"),
        Ok(PublicRoute::Oidc(OidcStep::Login))
    );
    assert_eq!(classify(b"/auth/callback/"), Err(PathError::NotFound));
    assert_eq!(
        classify(b"/cli-login"),
        Ok(PublicRoute::CliLogin(CliLoginStep::Page))
    );
    assert_eq!(
        classify(b"/auth/cli/code"),
        Ok(PublicRoute::CliLogin(CliLoginStep::Code))
    );
    assert_eq!(
        classify(b"/auth/cli/token"),
        Ok(PublicRoute::CliLogin(CliLoginStep::Token))
    );
    for near in ["/cli-login/", "/auth/cli", "/auth/cli/", "/auth/cli/code/x"] {
        assert_eq!(
            classify(near.as_bytes()),
            Err(PathError::NotFound),
            "{near}"
        );
    }
    assert_eq!(classify(b"/admin"), Ok(PublicRoute::Admin));
    assert_eq!(classify(b"/admin/"), Err(PathError::NotFound));
    assert_eq!(classify(b"/api/sessions"), Ok(PublicRoute::Api("sessions")));
    for internal in [
        "/api/routes",
        "/api/routes/abcdefghijk234mn",
        "/api/healthz",
        "/api/authz",
        "/api/authz/s/abcdefghijk234mn/ws",
        "/api/grant",
    ] {
        assert_eq!(
            classify(internal.as_bytes()),
            Err(PathError::NotFound),
            "{internal} is control-internal"
        );
    }
    assert_eq!(
        classify(format!("/api/sessions/{ID}/redraw").as_bytes()),
        Ok(PublicRoute::Api("sessions/abcdefghijk234mn/redraw"))
    );
    assert_eq!(
        classify(format!("/s/{ID}/").as_bytes()),
        term(TerminalPart::Page)
    );
    assert_eq!(
        classify(format!("/s/{ID}/token").as_bytes()),
        term(TerminalPart::Token)
    );
    assert_eq!(
        classify(format!("/s/{ID}/ws").as_bytes()),
        term(TerminalPart::Ws)
    );
}

#[test]
fn tricks_never_reach_a_terminal_route() {
    for p in [
        format!("/s/{ID}/ws/"),
        format!("/s/{ID}/wsx"),
        format!("/s/{ID}/w"),
        format!("/s/{ID}//ws"),
        format!("/s/{ID}/./ws"),
        format!("/s/{ID}/../x/ws"),
        format!("/s/{ID}"),
        format!("/S/{ID}/ws"),
        format!("/s/{}/ws", ID.to_uppercase()),
        format!("//s/{ID}/ws"),
        format!("/s/{ID}/token/.."),
        format!("/s/{ID}/ws;x"),
        "/s/../../etc/passwd".into(),
        "/s//ws".into(),
    ] {
        assert_eq!(classify(p.as_bytes()), Err(PathError::NotFound), "{p}");
    }
}

#[test]
fn encodings_nul_and_backslashes_are_bad_requests() {
    for p in [
        format!("/s/{ID}%2fws"),
        format!("/s/{ID}/%77s"),
        format!("/s/%2e%2e/{ID}/ws"),
        format!("/s/{ID}/ws%00"),
        format!("/s/{ID}\\ws"),
        "/api/sessions%2F..".into(),
    ] {
        assert!(
            matches!(classify(p.as_bytes()), Err(PathError::BadRequest(_))),
            "{p}"
        );
    }
    assert!(matches!(classify(b"/s/\0"), Err(PathError::BadRequest(_))));
    assert!(matches!(
        classify("/s/é".as_bytes()),
        Err(PathError::BadRequest(_))
    ));
    assert!(matches!(classify(b"s/x"), Err(PathError::BadRequest(_))));
    assert!(matches!(classify(b"/a b"), Err(PathError::BadRequest(_))));
}

#[test]
fn api_and_asset_paths_refuse_dot_and_empty_segments() {
    for p in [
        "/api/",
        "/api/sessions/",
        "/api//sessions",
        "/api/../v1/routes",
        "/api/./sessions",
        "/assets/",
        "/assets/../x",
        "/assets/.hidden",
        "/assets/a/b",
    ] {
        assert_eq!(classify(p.as_bytes()), Err(PathError::NotFound), "{p}");
    }
}

#[test]
fn share_links_parse_strictly_and_a_malformed_token_is_not_found() {
    let t = crate::share::ShareToken::from_random(SessionId::from_random([3; 10]), [5; 16]);
    let cases = [
        (format!("/v/{t}"), None),
        (format!("/v/{t}/"), Some(TerminalPart::Page)),
        (format!("/v/{t}/token"), Some(TerminalPart::Token)),
        (format!("/v/{t}/ws"), Some(TerminalPart::Ws)),
    ];
    for (path, part) in cases {
        assert_eq!(
            classify(path.as_bytes()),
            Ok(PublicRoute::Share { token: t, part }),
            "{path}"
        );
    }
    let bad = [
        format!("/v/{t}/ws/"),
        format!("/v/{t}/x"),
        format!("/v/{t}0"),
        format!("/v/{}", t.to_string().to_uppercase()),
        "/v/".to_owned(),
        "/v".to_owned(),
    ];
    for path in bad {
        assert_eq!(
            classify(path.as_bytes()),
            Err(PathError::NotFound),
            "{path}"
        );
    }
}

#[test]
fn recording_links_parse_strictly_and_a_malformed_token_is_not_found() {
    let t = RecordingToken::from_random([0xa7; 32]);
    assert_eq!(
        classify(format!("/r/{t}").as_bytes()),
        Ok(PublicRoute::Recording {
            token: t,
            cast: false
        })
    );
    assert_eq!(
        classify(format!("/r/{t}/cast").as_bytes()),
        Ok(PublicRoute::Recording {
            token: t,
            cast: true
        })
    );
    let upper = t.to_string().to_uppercase();
    for p in [
        format!("/r/{t}/"),
        format!("/r/{t}/cast/"),
        format!("/r/{t}/casts"),
        format!("/r/{t}//cast"),
        format!("/r/{t}/./cast"),
        format!("/r/{t}0"),
        format!("/r/{}", &t.to_string()[1..]),
        format!("/r/{upper}"),
        format!("/R/{t}"),
        format!("/r//{t}"),
        "/r/".into(),
        "/r".into(),
        "/r/../api/sessions".into(),
    ] {
        assert_eq!(classify(p.as_bytes()), Err(PathError::NotFound), "{p}");
    }
    assert!(matches!(
        classify(format!("/r/{t}%2fcast").as_bytes()),
        Err(PathError::BadRequest(_))
    ));
    assert_eq!(
        classify(format!("/api/recording-links/{t}").as_bytes()),
        Err(PathError::NotFound),
        "control-internal"
    );
}

#[test]
fn unknown_paths_are_not_found() {
    for p in [
        "/index.html",
        "/ws",
        "/token",
        "/v1/routes",
        "/healthz/",
        "/auth/session/",
        "/auth",
        "/metrics",
    ] {
        assert_eq!(classify(p.as_bytes()), Err(PathError::NotFound), "{p}");
    }
}

/// The canonical spelling, decided without `classify` or `SessionId`: `/s/`, 16
/// characters of `a-z2-7`, then exactly `/`, `/token` or `/ws`.
fn canonical_terminal(s: &str) -> Option<(&str, TerminalPart)> {
    let (id, part) = s.strip_prefix("/s/")?.split_at_checked(16)?;
    if !id
        .bytes()
        .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
    {
        return None;
    }
    let part = match part {
        "/" => TerminalPart::Page,
        "/token" => TerminalPart::Token,
        "/ws" => TerminalPart::Ws,
        _ => return None,
    };
    Some((id, part))
}

/// Bytes a typo or a trick puts into a terminal path: the id alphabet, its borders
/// (`1`, `8`, upper case), separators, dots, encodings and escapes.
const TRICK_BYTES: &[u8] = b"az27AZ0189/.%-_;?#~\\ ";

/// One edit to a valid terminal path.
#[derive(Debug, Clone)]
enum Mutation {
    Insert(prop::sample::Index, u8),
    Remove(prop::sample::Index),
    Replace(prop::sample::Index, u8),
    /// A `/` becomes `//`.
    DoubleSlash(prop::sample::Index),
    /// `./` or `../` after a `/`.
    DotSegment(prop::sample::Index, &'static str),
    /// A byte becomes its `%XX` encoding.
    PercentEncode(prop::sample::Index),
    UpperCase(prop::sample::Index),
    Append(&'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    use prop::sample::{select, Index};
    prop_oneof![
        (any::<Index>(), select(TRICK_BYTES)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<Index>().prop_map(Mutation::Remove),
        (any::<Index>(), select(TRICK_BYTES)).prop_map(|(i, b)| Mutation::Replace(i, b)),
        any::<Index>().prop_map(Mutation::DoubleSlash),
        (any::<Index>(), select(&["./", "../"][..])).prop_map(|(i, s)| Mutation::DotSegment(i, s)),
        any::<Index>().prop_map(Mutation::PercentEncode),
        any::<Index>().prop_map(Mutation::UpperCase),
        select(&["/", "//", "/.", "/..", "x", "/ws", "/token", "?x", ";x", "#", "%00"][..])
            .prop_map(Mutation::Append),
    ]
}

fn apply(path: String, mutations: Vec<Mutation>) -> String {
    let mut b = path.into_bytes();
    for m in mutations {
        let slashes: Vec<usize> = (0..b.len()).filter(|&i| b[i] == b'/').collect();
        match m {
            Mutation::Insert(i, c) => b.insert(i.index(b.len() + 1), c),
            Mutation::Remove(i) if !b.is_empty() => {
                b.remove(i.index(b.len()));
            }
            Mutation::Replace(i, c) if !b.is_empty() => {
                let at = i.index(b.len());
                b[at] = c;
            }
            Mutation::DoubleSlash(i) if !slashes.is_empty() => {
                b.insert(*i.get(&slashes), b'/');
            }
            Mutation::DotSegment(i, seg) if !slashes.is_empty() => {
                let at = *i.get(&slashes) + 1;
                b.splice(at..at, seg.bytes());
            }
            Mutation::PercentEncode(i) if !b.is_empty() => {
                let at = i.index(b.len());
                let encoded = format!("%{:02X}", b[at]);
                b.splice(at..=at, encoded.bytes());
            }
            Mutation::UpperCase(i) if !b.is_empty() => {
                let at = i.index(b.len());
                b[at].make_ascii_uppercase();
            }
            Mutation::Append(tail) => b.extend_from_slice(tail.as_bytes()),
            _ => {}
        }
    }
    String::from_utf8(b).unwrap()
}

/// Valid terminal paths, up to two edits of them, and (for breadth) arbitrary
/// short paths: arbitrary paths alone essentially never spell a 16-character id,
/// so they cannot show that a near miss is refused.
fn terminal_path_candidates() -> impl Strategy<Value = String> {
    // Compiled once: a `&str` strategy recompiles its regex for every value.
    let regex = |r: &str| proptest::string::string_regex(r).unwrap();
    let valid = (
        regex("[a-z2-7]{16}"),
        prop::sample::select(&["/", "/token", "/ws"][..]),
    )
        .prop_map(|(id, part)| format!("/s/{id}{part}"));
    prop_oneof![
        1 => regex("/[a-z0-9/._%-]{0,40}"),
        6 => (valid, proptest::collection::vec(mutation(), 0..=2))
            .prop_map(|(path, mutations)| apply(path, mutations)),
    ]
}

#[test]
fn the_path_generator_hits_both_terminal_routes_and_refusals() {
    let terminal = share(terminal_path_candidates(), 10_000, |s| {
        matches!(classify(s.as_bytes()), Ok(PublicRoute::Terminal { .. }))
    });
    eprintln!(
        "terminal path candidates: {:.1}% terminal routes, {:.1}% not",
        terminal * 100.0,
        (1.0 - terminal) * 100.0
    );
    assert!((0.1..=0.9).contains(&terminal), "{terminal}");
}

proptest! {
    #[test]
    fn classify_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = classify(&raw);
    }
}

proptest! {
    // Each kind of edit is a few percent of cases: enough cases that each shows up.
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_terminal_route_always_has_the_exact_canonical_form(s in terminal_path_candidates()) {
        let got = classify(s.as_bytes());
        if let Ok(PublicRoute::Terminal { id, part }) = got {
            let canonical = format!("/s/{id}{}", match part { TerminalPart::Page => "/", TerminalPart::Token => "/token", TerminalPart::Ws => "/ws" });
            prop_assert_eq!(&s, &canonical);
            // And canonical by the documented rule, not only by `SessionId`'s.
            prop_assert!(canonical_terminal(&s).is_some(), "{} is not canonical", s);
        }
        if let Some((id, part)) = canonical_terminal(&s) {
            let id = SessionId::parse(id).unwrap();
            prop_assert_eq!(got, Ok(PublicRoute::Terminal { id, part }), "{}", s);
        }
    }
}
