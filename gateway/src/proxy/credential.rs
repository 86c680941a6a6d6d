//! Who is asking: the credential a request presents (a bearer header or the session
//! cookie, never the query), its verification, and the client address that failed
//! verifications count against.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use pingora::http::RequestHeader;
use pingora::proxy::Session;
use policy::{CredentialSource, Principal, Refusal, TrustedProxies};

use super::headers::header;
use super::outcome::Denied;
use crate::clock::now;
use crate::metrics::Metrics;
use crate::state::Gateway;

/// How long a refusal past a limit (failed authentications past
/// `auth_failures_per_minute`, terminals past the per-user or per-session limit) waits
/// for its 429.
pub(super) const REFUSAL_PAUSE: Duration = Duration::from_millis(100);

/// A token as presented, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Credential {
    /// The token's bytes, unverified.
    pub token: Vec<u8>,
    /// Bearer header or cookie: decides whether Origin must be checked.
    pub source: CredentialSource,
}

/// The credential of a request: a bearer header wins over the cookie. Never the query.
pub(super) fn credential(req: &RequestHeader, cookie_name: &str) -> Option<Credential> {
    if let Some(token) = header(req, "authorization").and_then(policy::identity::bearer) {
        return Some(Credential {
            token: token.to_vec(),
            source: CredentialSource::Bearer,
        });
    }
    let token = req
        .headers
        .get_all("cookie")
        .into_iter()
        .find_map(|value| policy::identity::cookie(value.as_bytes(), cookie_name))?;
    Some(Credential {
        token: token.to_vec(),
        source: CredentialSource::Cookie,
    })
}

/// The client's address, the key of the failed-authentication limit: the peer, or
/// behind a configured trusted proxy the address it forwards (unix-socket clients share
/// one key).
pub(super) fn client_ip(session: &Session, trusted: &TrustedProxies) -> IpAddr {
    let peer = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    if trusted.is_empty() {
        return peer;
    }
    let forwarded = session
        .req_header()
        .headers
        .get_all("x-forwarded-for")
        .into_iter()
        .map(|v| v.as_bytes());
    trusted.client(peer, forwarded)
}

/// A verified credential: who, where the token came from, and the token itself for the
/// upstream.
pub(super) struct Verified {
    pub principal: Principal,
    pub source: CredentialSource,
    pub token: Option<String>,
}

/// The caller of a request that must be signed in: its credential, verified by
/// [`authenticate`].
pub(super) async fn caller(g: &Gateway, session: &mut Session) -> Result<Verified, Denied> {
    let presented = credential(session.req_header(), &g.config.auth.cookie_name);
    authenticate(g, session, presented).await
}

/// Verifies the presented credential (`None`: nothing presented). Only failures count
/// against the client's address: past `auth_failures_per_minute` a failure is refused
/// 429 instead of 401, and a valid token is never refused by that limit (one address
/// may be many users behind a proxy).
pub(super) async fn authenticate(
    g: &Gateway,
    session: &mut Session,
    presented: Option<Credential>,
) -> Result<Verified, Denied> {
    let Some(Credential { token, source }) = presented else {
        Metrics::inc(&g.metrics.auth_failures, "missing");
        return Err(Refusal::UNAUTHENTICATED.into());
    };
    let e = match g.verifier.verify(&token, now()) {
        // A signed-out sign-in, or a token an admin revoked, is refused like any token
        // that does not verify (design §2 "Sign-ins and revocation").
        Ok(principal) => match g.routes.revoked(&token, &principal) {
            Some(why) => policy::TokenError::from(why),
            None => {
                return Ok(Verified {
                    principal,
                    source,
                    token: String::from_utf8(token).ok(),
                });
            }
        },
        Err(e) => e,
    };
    Metrics::inc(&g.metrics.auth_failures, e.reason());
    let ip = client_ip(session, &g.trusted_proxies);
    let failures = g.auth_failures.observe(&ip, 1);
    let limit = isize::try_from(g.config.gateway.auth_failures_per_minute).unwrap_or(isize::MAX);
    tracing::info!(target: "audit", decision = "deny", reason = e.reason(), client = %ip, "token refused");
    if failures > limit {
        // A short pause before the refusal throttles each guessing connection to a few
        // attempts a second without costing CPU, so a flood cannot slow everyone else
        // down.
        tokio::time::sleep(REFUSAL_PAUSE).await;
        return Err(Refusal::TOO_MANY_FAILURES.into());
    }
    // The logs and metrics keep the precise reason the token was refused.
    Err(Denied {
        reason: e.reason(),
        ..Refusal::from(&e).into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> RequestHeader {
        let mut r = RequestHeader::build("GET", b"/s/x/ws", None).unwrap();
        for (k, v) in headers {
            r.append_header(k.to_string(), *v).unwrap();
        }
        r
    }

    fn presented(token: &str, source: CredentialSource) -> Option<Credential> {
        Some(Credential {
            token: token.as_bytes().to_vec(),
            source,
        })
    }

    #[test]
    fn bearer_wins_over_cookie_and_the_cookie_is_found_among_others() {
        let r = req(&[
            ("Cookie", "a=1; termgate_session=tok; b=2"),
            ("Authorization", "Bearer bt"),
        ]);
        assert_eq!(
            credential(&r, "termgate_session"),
            presented("bt", CredentialSource::Bearer)
        );
        let r = req(&[("Cookie", "a=1; termgate_session=tok; b=2")]);
        assert_eq!(
            credential(&r, "termgate_session"),
            presented("tok", CredentialSource::Cookie)
        );
    }

    #[test]
    fn the_cookie_is_found_in_a_later_cookie_header() {
        let r = req(&[("Cookie", "a=1"), ("Cookie", "termgate_session=tok")]);
        assert_eq!(
            credential(&r, "termgate_session"),
            presented("tok", CredentialSource::Cookie)
        );
    }

    #[test]
    fn similarly_named_cookies_and_other_schemes_are_not_credentials() {
        let r = req(&[
            ("Cookie", "termgate_session2=x; xtermgate_session=y"),
            ("Authorization", "Basic abc"),
        ]);
        assert_eq!(credential(&r, "termgate_session"), None);
    }

    #[test]
    fn an_empty_bearer_falls_back_to_the_cookie() {
        let r = req(&[
            ("Cookie", "termgate_session=tok"),
            ("Authorization", "Bearer "),
        ]);
        assert_eq!(
            credential(&r, "termgate_session"),
            presented("tok", CredentialSource::Cookie)
        );
    }

    /// Arbitrary header-value bytes, then cookie headers assembled from tricky pieces.
    const RANDOM_CASES: u32 = 10_000;
    const PIECE_CASES: u32 = 10_000;

    fn header_req(cookie: &[u8], authorization: &[u8]) -> Option<RequestHeader> {
        let mut r = RequestHeader::build("GET", b"/s/x/ws", None).ok()?;
        for (name, value) in [("cookie", cookie), ("authorization", authorization)] {
            if !value.is_empty() {
                let v = http::HeaderValue::from_bytes(value).ok()?;
                r.append_header(name, v).ok()?;
            }
        }
        Some(r)
    }

    /// What any credential found must satisfy: a bearer comes from a `Bearer` header
    /// with a non-empty trimmed token; a cookie from one pair named exactly.
    fn check(r: &RequestHeader, cookie: &[u8], found: Option<Credential>) -> Result<(), String> {
        match found {
            None => Ok(()),
            Some(Credential {
                token,
                source: CredentialSource::Bearer,
            }) => {
                let auth = header(r, "authorization").ok_or("bearer without a header")?;
                let auth = auth.trim_ascii();
                let ok = auth.len() > 7
                    && auth[..7].eq_ignore_ascii_case(b"bearer ")
                    && !token.is_empty()
                    && token == token.trim_ascii()
                    && auth.ends_with(&token);
                ok.then_some(())
                    .ok_or_else(|| format!("bearer {token:?} from {auth:?}"))
            }
            Some(Credential {
                token,
                source: CredentialSource::Cookie,
            }) => {
                let mut pair = b"termgate_session=".to_vec();
                pair.extend_from_slice(&token);
                cookie
                    .split(|b| *b == b';')
                    .any(|p| p.trim_ascii() == pair.as_slice())
                    .then_some(())
                    .ok_or_else(|| format!("cookie {token:?} from {cookie:?}"))
            }
        }
    }

    #[test]
    fn credentials_from_arbitrary_headers_never_panic_and_come_from_exact_names() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        use std::cell::Cell;
        // Only bytes a header value may hold (tab, visible ASCII and space, and
        // 0x80-0xff), so that every case reaches the parser rather than being refused
        // by `HeaderValue::from_bytes`; a few are ASCII letters of the names sought.
        let value_byte = prop_oneof![
            Just(b'\t'),
            0x20u8..=0x7e,
            0x80u8..=0xff,
            prop::sample::select(b"termgate_session=; Bearer".to_vec()),
        ];
        let bytes = || proptest::collection::vec(value_byte.clone(), 0..200);
        // Cases that reached `credential`, counted for the printed total.
        let parsed = Cell::new(0u32);
        TestRunner::new(Config::with_cases(RANDOM_CASES))
            .run(&(bytes(), bytes()), |(cookie, auth)| {
                let r = header_req(&cookie, &auth)
                    .ok_or_else(|| TestCaseError::fail("a header-value byte was refused"))?;
                let found = credential(&r, "termgate_session");
                parsed.set(parsed.get() + 1);
                check(&r, &cookie, found).map_err(TestCaseError::fail)?;
                Ok(())
            })
            .unwrap();
        let piece = prop_oneof![
            Just(b"termgate_session".to_vec()),
            Just(b"termgate_session2".to_vec()),
            Just(b"xtermgate_session".to_vec()),
            Just(b"TERMGATE_SESSION".to_vec()),
            Just(b"=".to_vec()),
            Just(b";".to_vec()),
            Just(b" ".to_vec()),
            Just(b"\t".to_vec()),
            Just(b"\"".to_vec()),
            Just(b",".to_vec()),
            Just(b"Bearer ".to_vec()),
            Just(b"a.b.c".to_vec()),
            Just(vec![0xc3, 0xa4]),
            proptest::collection::vec(b'a'..=b'z', 1..8),
        ];
        let assembled = || proptest::collection::vec(piece.clone(), 0..12).prop_map(|p| p.concat());
        TestRunner::new(Config::with_cases(PIECE_CASES))
            .run(&(assembled(), assembled()), |(cookie, auth)| {
                let r = header_req(&cookie, &auth)
                    .ok_or_else(|| TestCaseError::fail("a header-value byte was refused"))?;
                let found = credential(&r, "termgate_session");
                parsed.set(parsed.get() + 1);
                check(&r, &cookie, found).map_err(TestCaseError::fail)?;
                Ok(())
            })
            .unwrap();
        // Proptest runs each passing case once (shrinking only follows a failure).
        assert_eq!(parsed.get(), RANDOM_CASES + PIECE_CASES);
        println!(
            "credential parser: {} cases, every one parsed",
            parsed.get()
        );
    }
}
