//! The bad-input corpus: table-driven hostile requests against the live gateway and
//! control, over raw TCP (so requests an HTTP client refuses to send can be sent),
//! each with the status and error code it must get.
//!
//! Around the table: only the owner's legitimate requests reach ttyd (counted at the
//! connection-counting proxy in front of it), no 5xx but the documented 502/503, and
//! both processes alive and without a panic at the end.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use e2e::raw::{exchange, upgrade_head, RawAnswer};
use e2e::stack::{http, GatewayStack};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a case is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum To {
    Gateway,
    Control,
}

/// One request and what it must get.
struct Case {
    name: String,
    to: To,
    raw: Vec<u8>,
    status: u16,
    /// The JSON `error.code`; `None` when the answer has none (a parser's bare 400,
    /// a closed connection, a success).
    code: Option<&'static str>,
    /// The owner's legitimate terminal request: the one kind that reaches ttyd.
    reaches_ttyd: bool,
}

fn case(
    name: impl Into<String>,
    to: To,
    raw: impl Into<Vec<u8>>,
    status: u16,
    code: Option<&'static str>,
) -> Case {
    Case {
        name: name.into(),
        to,
        raw: raw.into(),
        status,
        code,
        reaches_ttyd: false,
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A JWT with any header and claims, HMAC-SHA256-signed with `secret`.
fn jwt(secret: &[u8], header: Value, claims: Value) -> String {
    let signing_input = format!(
        "{}.{}",
        B64.encode(header.to_string()),
        B64.encode(claims.to_string())
    );
    let key = jsonwebtoken::EncodingKey::from_secret(secret).expect("an HMAC key");
    let sig = jsonwebtoken::crypto::sign(
        signing_input.as_bytes(),
        &key,
        jsonwebtoken::Algorithm::HS256,
    )
    .expect("sign");
    format!("{signing_input}.{sig}")
}

fn hs256() -> Value {
    json!({"alg": "HS256", "typ": "JWT"})
}

fn claims(sub: &str) -> Value {
    json!({"sub": sub, "exp": now() + 3600, "iat": now(), "iss": "termgate", "aud": "termgate"})
}

fn with(mut v: Value, key: &str, value: Value) -> Value {
    if value.is_null() {
        v.as_object_mut().unwrap().remove(key);
    } else {
        v[key] = value;
    }
    v
}

/// The hostile tokens: (name, token). Each must be refused 401 `unauthenticated`.
fn hostile_tokens(secret: &[u8]) -> Vec<(&'static str, String)> {
    let valid = jwt(secret, hs256(), claims("alice"));
    let (head, rest) = valid.split_once('.').unwrap();
    let (body, sig) = rest.split_once('.').unwrap();
    let unsigned = |h: Value, c: Value| {
        format!(
            "{}.{}.",
            B64.encode(h.to_string()),
            B64.encode(c.to_string())
        )
    };
    let mut flipped = sig.to_owned().into_bytes();
    flipped[3] = if flipped[3] == b'A' { b'B' } else { b'A' };
    vec![
        ("three garbage parts", "a.b.c".into()),
        ("no dots", "notajwt".into()),
        ("two parts", format!("{head}.{body}")),
        ("four parts", format!("{valid}.x")),
        (
            "alg none, unsigned",
            unsigned(json!({"alg": "none"}), claims("alice")),
        ),
        (
            "alg None, unsigned",
            unsigned(json!({"alg": "None", "typ": "JWT"}), claims("alice")),
        ),
        ("signature stripped", format!("{head}.{body}.")),
        (
            "signed with another secret",
            jwt(
                b"another-secret-another-secret-0123456789",
                hs256(),
                claims("alice"),
            ),
        ),
        (
            "one signature character changed",
            format!("{head}.{body}.{}", String::from_utf8(flipped).unwrap()),
        ),
        (
            "expired",
            jwt(
                secret,
                hs256(),
                with(
                    with(claims("alice"), "exp", json!(now() - 3600)),
                    "iat",
                    json!(now() - 7200),
                ),
            ),
        ),
        (
            "not yet valid (nbf in an hour)",
            jwt(
                secret,
                hs256(),
                with(claims("alice"), "nbf", json!(now() + 3600)),
            ),
        ),
        (
            "wrong issuer",
            jwt(secret, hs256(), with(claims("alice"), "iss", json!("evil"))),
        ),
        (
            "wrong audience",
            jwt(
                secret,
                hs256(),
                with(claims("alice"), "aud", json!("other-service")),
            ),
        ),
        (
            "no exp",
            jwt(secret, hs256(), with(claims("alice"), "exp", Value::Null)),
        ),
        (
            "no sub",
            jwt(secret, hs256(), with(claims("alice"), "sub", Value::Null)),
        ),
        ("sub with a space", jwt(secret, hs256(), claims("al ice"))),
        (
            "sub with a path",
            jwt(secret, hs256(), claims("../../etc/passwd")),
        ),
        (
            "sub of 200 characters",
            jwt(secret, hs256(), claims(&"a".repeat(200))),
        ),
        ("empty sub", jwt(secret, hs256(), claims(""))),
        (
            "sub as a number",
            jwt(secret, hs256(), with(claims("alice"), "sub", json!(123))),
        ),
        (
            "lifetime of two days",
            jwt(
                secret,
                hs256(),
                with(claims("alice"), "exp", json!(now() + 2 * 86400)),
            ),
        ),
        (
            "exp as a string",
            jwt(
                secret,
                hs256(),
                with(claims("alice"), "exp", json!("9999999999")),
            ),
        ),
        (
            "alg RS256 over an HMAC signature",
            jwt(
                secret,
                json!({"alg": "RS256", "typ": "JWT"}),
                claims("alice"),
            ),
        ),
        (
            "alg HS512 claimed",
            jwt(secret, json!({"alg": "HS512"}), claims("alice")),
        ),
        (
            "payload not JSON",
            format!("{head}.{}.{sig}", B64.encode("hello")),
        ),
        (
            "header not JSON",
            format!("{}.{body}.{sig}", B64.encode("{\"alg\":")),
        ),
        (
            "8 KiB of base64",
            format!(
                "{}.{}.{}",
                "A".repeat(4000),
                "B".repeat(4000),
                "C".repeat(200)
            ),
        ),
        ("non-ASCII", "ä.ö.ü".into()),
        (
            "standard base64 with padding",
            format!("{head}==.{body}==.{sig}=="),
        ),
        ("a valid token twice, joined", format!("{valid}{valid}")),
    ]
}

#[test]
fn the_bad_input_corpus_gets_its_documented_answers_and_nothing_reaches_ttyd() {
    let mut stack = GatewayStack::start("");
    // The corpus is many failed authentications from one address: lift that limit so
    // each case gets its own answer rather than the 429 of the limit.
    let n = stack.spawn_gateway(&[
        ("TERMGATE__GATEWAY__AUTH_FAILURES_PER_MINUTE", "100000"),
        ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "16"),
        ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "16"),
    ]);
    let gw = stack.gateways[n].port;
    let control_port: u16 = stack
        .control
        .api
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let origin = stack.origin(n);
    let alice = stack.control.token("alice", false);
    let bob = stack.control.token("bob", false);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let secret = std::fs::read(stack.control.dir.dir.path().join("secrets/hs256.key")).unwrap();
    let hand_made = jwt(&secret, hs256(), claims("alice"));
    // The hand-made tokens are made right: a good one is accepted.
    let a = http(
        "GET",
        &stack.url(n, "/auth/session"),
        Some(&hand_made),
        None,
    )
    .unwrap();
    assert_eq!(a.status, 200, "a hand-made valid token: {}", a.text);

    let ws = format!("/s/{id}/ws");
    let bearer = |t: &str| format!("Bearer {t}");
    let cookie = |t: &str| format!("termgate_session={t}");
    let g = To::Gateway;
    let c = To::Control;
    let mut cases: Vec<Case> = Vec::new();

    // -- Legitimate controls: the owner's websocket, by header and by cookie.
    let legit = |name: &str, raw: String| {
        let mut k = case(name, g, raw, 101, None);
        k.reaches_ttyd = true;
        k
    };
    cases.push(legit(
        "the owner's upgrade, bearer",
        upgrade_head(gw, &ws, &[("Authorization", &bearer(&alice))]),
    ));
    cases.push(legit(
        "the owner's upgrade, cookie and Origin",
        upgrade_head(gw, &ws, &[("Cookie", &cookie(&alice)), ("Origin", &origin)]),
    ));
    cases.push(legit(
        "the owner's upgrade, hand-made token",
        upgrade_head(gw, &ws, &[("Authorization", &bearer(&hand_made))]),
    ));
    cases.push(legit(
        "the owner's upgrade, mixed-case Upgrade and bearer",
        upgrade_head(gw, &ws, &[("Authorization", &format!("bEaReR {alice}"))])
            .replace("Upgrade: websocket", "Upgrade: WebSocket"),
    ));
    cases.push(legit(
        "the owner's upgrade, a client arg (replaced)",
        upgrade_head(
            gw,
            &format!("{ws}?arg=../../x"),
            &[("Authorization", &bearer(&alice))],
        ),
    ));
    cases.push(legit(
        "the owner's cookie among others",
        upgrade_head(
            gw,
            &ws,
            &[
                ("Cookie", &format!("a=1; {}; b=2", cookie(&alice))),
                ("Origin", &origin),
            ],
        ),
    ));
    cases.push(legit(
        "the owner's cookie in a second Cookie header",
        upgrade_head(
            gw,
            &ws,
            &[
                ("Cookie", "a=1"),
                ("Cookie", &cookie(&alice)),
                ("Origin", &origin),
            ],
        ),
    ));

    // -- Hostile tokens, through the header and through the cookie.
    for (name, token) in hostile_tokens(&secret) {
        cases.push(case(
            format!("token by header: {name}"),
            g,
            upgrade_head(gw, &ws, &[("Authorization", &bearer(&token))]),
            401,
            Some("unauthenticated"),
        ));
        cases.push(case(
            format!("token by cookie: {name}"),
            g,
            upgrade_head(gw, &ws, &[("Cookie", &cookie(&token)), ("Origin", &origin)]),
            401,
            Some("unauthenticated"),
        ));
    }
    for (name, value) in [
        ("empty bearer", "Bearer "),
        ("Basic credentials", "Basic YWxpY2U6c2VjcmV0"),
        ("a scheme alone", "Bearer"),
        ("the token without a scheme", alice.as_str()),
    ] {
        cases.push(case(
            format!("Authorization: {name}"),
            g,
            upgrade_head(gw, &ws, &[("Authorization", value)]),
            401,
            Some("unauthenticated"),
        ));
    }

    // -- Cookie parser tricks around a valid token.
    for (name, value) in [
        ("a longer cookie name", format!("termgate_session2={alice}")),
        (
            "a prefixed cookie name",
            format!("xtermgate_session={alice}"),
        ),
        ("a space before =", format!("termgate_session ={alice}")),
        ("a quoted value", format!("termgate_session=\"{alice}\"")),
        ("an empty value", "termgate_session=".to_owned()),
    ] {
        cases.push(case(
            format!("cookie: {name}"),
            g,
            upgrade_head(gw, &ws, &[("Cookie", &value), ("Origin", &origin)]),
            401,
            Some("unauthenticated"),
        ));
    }
    cases.push(case(
        "cookie: another user's valid token",
        g,
        upgrade_head(gw, &ws, &[("Cookie", &cookie(&bob)), ("Origin", &origin)]),
        404,
        Some("session_not_found"),
    ));
    cases.push(case(
        "bearer: another user's valid token",
        g,
        upgrade_head(gw, &ws, &[("Authorization", &bearer(&bob))]),
        404,
        Some("session_not_found"),
    ));
    cases.push(case(
        "cookie without Origin",
        g,
        upgrade_head(gw, &ws, &[("Cookie", &cookie(&alice))]),
        403,
        Some("origin_missing"),
    ));
    cases.push(case(
        "cookie with a foreign Origin",
        g,
        upgrade_head(
            gw,
            &ws,
            &[
                ("Cookie", &cookie(&alice)),
                ("Origin", "http://evil.example"),
            ],
        ),
        403,
        Some("origin_not_allowed"),
    ));
    cases.push(case(
        "cookie with Origin null",
        g,
        upgrade_head(gw, &ws, &[("Cookie", &cookie(&alice)), ("Origin", "null")]),
        403,
        Some("origin_null"),
    ));
    cases.push(case(
        "cookie with a lookalike Origin",
        g,
        upgrade_head(
            gw,
            &ws,
            &[
                ("Cookie", &cookie(&alice)),
                (
                    "Origin",
                    &origin.replace("127.0.0.1", "127.0.0.1.evil.example"),
                ),
            ],
        ),
        403,
        Some("origin_not_allowed"),
    ));
    cases.push(case(
        "cookie with an Origin whose port is a host",
        g,
        upgrade_head(
            gw,
            &ws,
            &[
                ("Cookie", &cookie(&alice)),
                ("Origin", &format!("{origin}.evil.example")),
            ],
        ),
        403,
        Some("origin_malformed"),
    ));

    // -- Paths and encodings, as the owner.
    let get = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\nConnection: close\r\n\r\n")
    };
    for (path, status, code) in [
        (format!("/s/{id}/ws/"), 404, "not_found"),
        (format!("/s/{id}//ws"), 404, "not_found"),
        (format!("/s/{id}/./ws"), 404, "not_found"),
        (format!("/s/{id}/../{id}/ws"), 404, "not_found"),
        (format!("/s/{id}%2fws"), 400, "bad_path"),
        (format!("/s/{id}/%77s"), 400, "bad_path"),
        (format!("/s/%2e%2e/{id}/ws"), 400, "bad_path"),
        (format!("/s/{id}/ws%00"), 400, "bad_path"),
        (format!("/S/{id}/ws"), 404, "not_found"),
        (format!("/s/{}/ws", id.to_uppercase()), 404, "not_found"),
        (format!("/s/{id}/wsx"), 404, "not_found"),
        (format!("/s/{id}"), 404, "not_found"),
        (format!("/s/{id}\\ws"), 400, "bad_path"),
        (format!("//s/{id}/ws"), 404, "not_found"),
        (format!("/s/{id};/ws"), 404, "not_found"),
        (format!("/s/{id}/ws;x"), 404, "not_found"),
        ("/ws".to_owned(), 404, "not_found"),
        ("/token".to_owned(), 404, "not_found"),
        ("/api/routes".to_owned(), 404, "not_found"),
        ("/api/routes/x".to_owned(), 404, "not_found"),
        ("/api/healthz".to_owned(), 404, "not_found"),
        ("/api/%2e%2e/routes".to_owned(), 400, "bad_path"),
        ("/assets/../../etc/passwd".to_owned(), 404, "not_found"),
        ("/assets/.env".to_owned(), 404, "not_found"),
        (format!("/{}", "a".repeat(2000)), 400, "bad_path"),
        ("/s/aaaaaaaaaaaaaaaaaaaa/ws".to_owned(), 404, "not_found"),
    ] {
        cases.push(case(
            format!("path {}", &path[..path.len().min(60)]),
            g,
            get(&path),
            status,
            Some(code),
        ));
    }
    cases.push(case(
        "path with a raw non-ASCII byte",
        g,
        [
            b"GET /s/".as_slice(),
            id.as_bytes(),
            b"/w\xc3\xa9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ]
        .concat(),
        400,
        Some("bad_path"),
    ));
    cases.push(case(
        "path without a leading slash",
        g,
        get(&format!("s/{id}/ws")),
        400,
        Some("bad_path"),
    ));
    cases.push(case(
        "absolute-form URI to another host",
        g,
        get(&format!("http://evil.example/s/{id}/token")),
        400,
        None,
    ));
    cases.push(case("asterisk-form", g, get("*"), 400, Some("bad_path")));

    // -- Header abuse.
    let healthz = |extra: &str| {
        format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n")
    };
    cases.push(case(
        "a 20 KiB header",
        g,
        healthz(&format!("X-Big: {}\r\n", "a".repeat(20 * 1024))),
        431,
        Some("headers_too_large"),
    ));
    cases.push(case(
        "300 headers",
        g,
        healthz(
            &(0..300)
                .map(|i| format!("X-H{i}: v\r\n"))
                .collect::<String>(),
        ),
        400,
        None,
    ));
    cases.push(case(
        "Host twice",
        g,
        "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
        400,
        None,
    ));
    cases.push(case(
        "Host twice on the upgrade",
        g,
        upgrade_head(
            gw,
            &ws,
            &[("Host", "evil.example"), ("Authorization", &bearer(&alice))],
        ),
        400,
        None,
    ));
    cases.push(case(
        "Authorization twice (two users)",
        g,
        upgrade_head(
            gw,
            &ws,
            &[
                ("Authorization", &bearer(&alice)),
                ("Authorization", &bearer(&bob)),
            ],
        ),
        400,
        Some("bad_headers"),
    ));
    cases.push(case(
        "Authorization twice (same)",
        g,
        upgrade_head(
            gw,
            &ws,
            &[
                ("Authorization", &bearer(&alice)),
                ("Authorization", &bearer(&alice)),
            ],
        ),
        400,
        Some("bad_headers"),
    ));
    // Two different session cookies are the same ambiguity as two Authorization
    // headers (a proxy in front may read the other one); the same one twice is not.
    let api_get = |cookies: &[String]| {
        let lines: String = cookies.iter().map(|c| format!("Cookie: {c}\r\n")).collect();
        format!("GET /api/sessions HTTP/1.1\r\nHost: x\r\n{lines}Origin: {origin}\r\nConnection: close\r\n\r\n")
    };
    let one_header = |a: &str, b: &str| vec![format!("{}; {}", cookie(a), cookie(b))];
    let two_headers = |a: &str, b: &str| vec![cookie(a), cookie(b)];
    for (name, cookies) in [
        ("two users in one Cookie header", one_header(&alice, &bob)),
        (
            "two users in one Cookie header, the owner last",
            one_header(&bob, &alice),
        ),
        ("two users in two Cookie headers", two_headers(&alice, &bob)),
        ("the owner and an empty value", one_header(&alice, "")),
    ] {
        let mut extra: Vec<(&str, &str)> = cookies.iter().map(|c| ("Cookie", c.as_str())).collect();
        extra.push(("Origin", &origin));
        cases.push(case(
            format!("session cookie twice on the upgrade: {name}"),
            g,
            upgrade_head(gw, &ws, &extra),
            400,
            Some("bad_headers"),
        ));
        cases.push(case(
            format!("session cookie twice on /api/sessions: {name}"),
            g,
            api_get(&cookies),
            400,
            Some("bad_headers"),
        ));
    }
    for (name, cookies) in [
        ("in one Cookie header", one_header(&alice, &alice)),
        ("in two Cookie headers", two_headers(&alice, &alice)),
    ] {
        let mut extra: Vec<(&str, &str)> = cookies.iter().map(|c| ("Cookie", c.as_str())).collect();
        extra.push(("Origin", &origin));
        cases.push(legit(
            &format!("the owner's session cookie twice, the same value, {name}"),
            upgrade_head(gw, &ws, &extra),
        ));
        cases.push(case(
            format!("the owner's session cookie twice on /api/sessions, the same value, {name}"),
            g,
            api_get(&cookies),
            200,
            None,
        ));
    }
    let sign_in = |extra: &str, body: &str| {
        format!("POST /auth/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n{extra}\r\n{body}")
    };
    let token_body = r#"{"token":"a.b.c"}"#;
    cases.push(case(
        "conflicting Content-Length",
        g,
        sign_in(
            &format!(
                "Content-Length: {}\r\nContent-Length: 5\r\n",
                token_body.len()
            ),
            token_body,
        ),
        400,
        None,
    ));
    cases.push(case(
        "Content-Length and Transfer-Encoding",
        g,
        sign_in(
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            &format!("{:x}\r\n{token_body}\r\n0\r\n\r\n", token_body.len()),
        ),
        401,
        Some("unauthenticated"),
    ));
    cases.push(case(
        "a malformed chunk size",
        g,
        sign_in("Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n"),
        400,
        Some("bad_body"),
    ));
    cases.push(case(
        "Content-Length: -1",
        g,
        sign_in("Content-Length: -1\r\n", token_body),
        400,
        None,
    ));
    cases.push(case(
        "Content-Length of 20 digits",
        g,
        sign_in("Content-Length: 99999999999999999999\r\n", token_body),
        400,
        None,
    ));
    cases.push(case(
        "obsolete line folding",
        g,
        healthz("X-Folded: a\r\n b\r\n"),
        400,
        None,
    ));
    cases.push(case(
        "NUL in a header value",
        g,
        healthz("X-Nul: a\0b\r\n"),
        400,
        None,
    ));
    cases.push(case(
        "bare CR in a header value",
        g,
        healthz("X-Cr: a\rb\r\n"),
        400,
        None,
    ));
    cases.push(case(
        "a space in a header name",
        g,
        healthz("X Bad: v\r\n"),
        400,
        None,
    ));
    cases.push(case(
        "a colon-less header line",
        g,
        healthz("NoColon\r\n"),
        400,
        None,
    ));
    cases.push(case(
        "NUL in the request line",
        g,
        "GET /hea\0lthz HTTP/1.1\r\nHost: x\r\n\r\n",
        400,
        Some("bad_path"),
    ));
    cases.push(case(
        "HTTP/2.0 in an HTTP/1 request line",
        g,
        "GET /healthz HTTP/2.0\r\nHost: x\r\nConnection: close\r\n\r\n",
        400,
        None,
    ));
    cases.push(case(
        "a TLS ClientHello on the plain port",
        g,
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03".to_vec(),
        400,
        None,
    ));
    cases.push(case("terminal request with a body", g, format!("GET {ws} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"), 400, Some("body_not_allowed")));

    // -- Websocket handshakes, as the owner.
    let up = |drop: &str, add: &[(&str, &str)]| {
        let mut extra = vec![("Authorization", bearer(&alice))];
        extra.extend(add.iter().map(|(k, v)| (*k, v.to_string())));
        let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        upgrade_head(gw, &ws, &extra)
            .lines()
            .filter(|l| drop.is_empty() || !l.starts_with(drop))
            .collect::<Vec<_>>()
            .join("\r\n")
            + "\r\n"
    };
    for (name, raw) in [
        ("no Sec-WebSocket-Key", up("Sec-WebSocket-Key", &[])),
        ("no Sec-WebSocket-Version", up("Sec-WebSocket-Version", &[])),
        ("no tty subprotocol", up("Sec-WebSocket-Protocol", &[])),
        ("no Upgrade header", up("Upgrade:", &[])),
        ("no Connection: upgrade", up("Connection:", &[])),
        (
            "version 8",
            up("Sec-WebSocket-Version", &[("Sec-WebSocket-Version", "8")]),
        ),
        (
            "a short key",
            up("Sec-WebSocket-Key", &[("Sec-WebSocket-Key", "c2hvcnQ=")]),
        ),
        (
            "a key that is not base64",
            up(
                "Sec-WebSocket-Key",
                &[("Sec-WebSocket-Key", "!!!!!!!!!!!!!!!!!!!!!!==")],
            ),
        ),
        (
            "two keys",
            up("", &[("Sec-WebSocket-Key", "AAAAAAAAAAAAAAAAAAAAAA==")]),
        ),
        (
            "another subprotocol",
            up(
                "Sec-WebSocket-Protocol",
                &[("Sec-WebSocket-Protocol", "chat")],
            ),
        ),
        (
            "Upgrade: h2c on the terminal",
            up("Upgrade:", &[("Upgrade", "h2c")]),
        ),
    ] {
        cases.push(case(
            format!("handshake: {name}"),
            g,
            raw,
            400,
            Some("bad_upgrade"),
        ));
    }
    cases.push(case(
        "handshake: POST",
        g,
        format!("POST {ws} HTTP/1.1\r\n{}", up("GET", &[])),
        405,
        Some("method_not_allowed"),
    ));
    let upgrade_on = |path: &str| upgrade_head(gw, path, &[("Authorization", &bearer(&alice))]);
    for path in [
        format!("/s/{id}/"),
        format!("/s/{id}/token"),
        "/api/sessions".into(),
        "/healthz".into(),
        "/auth/session".into(),
    ] {
        cases.push(case(
            format!("websocket upgrade on {path}"),
            g,
            upgrade_on(&path),
            400,
            Some("bad_upgrade"),
        ));
    }
    cases.push(case("h2c upgrade", g, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", 400, Some("bad_upgrade")));
    cases.push(case(
        "HTTP/2 prior-knowledge preface",
        g,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00".to_vec(),
        400,
        None,
    ));

    // -- JSON bodies, through the gateway (/api) and at control (/v1).
    let post = |to: To, path: &str, token: &str, body: &[u8]| -> Vec<u8> {
        let prefix = if to == To::Gateway { "/api" } else { "/v1" };
        [
            format!("POST {prefix}{path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes(),
            body.to_vec(),
        ]
        .concat()
    };
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let bodies: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("truncated JSON", b"{".to_vec(), 400, "invalid_json"),
        ("an empty body", Vec::new(), 400, "invalid_json"),
        ("an array", b"[]".to_vec(), 400, "invalid_json"),
        ("null", b"null".to_vec(), 400, "invalid_json"),
        ("a string", b"\"default\"".to_vec(), 400, "invalid_json"),
        (
            "profile as a number",
            br#"{"profile":1}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "an unknown field",
            br#"{"profile":"default","privileged":true}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "a duplicated field",
            br#"{"profile":"default","profile":"x"}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "10,000 nested arrays",
            deep.into_bytes(),
            400,
            "invalid_json",
        ),
        (
            "invalid UTF-8 in a string",
            b"{\"profile\":\"def\xffault\"}".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "an unknown profile",
            br#"{"profile":"../../etc"}"#.to_vec(),
            400,
            "unknown_profile",
        ),
        (
            "an unknown option",
            br#"{"profile":"default","options":{"x":"y"}}"#.to_vec(),
            400,
            "invalid_option",
        ),
        (
            "a name of 65 characters",
            json!({"profile":"default","name":"n".repeat(65)})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name of 10,000 characters",
            json!({"profile":"default","name":"n".repeat(10_000)})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name with NUL",
            json!({"profile":"default","name":"a\u{0}b"})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name with a newline",
            json!({"profile":"default","name":"a\nb"})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name with an escape sequence",
            json!({"profile":"default","name":"\u{1b}[31mred"})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name with a right-to-left override",
            json!({"profile":"default","name":"abc\u{202e}gpj.exe"})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name with a zero-width space",
            json!({"profile":"default","name":"ad\u{200b}min"})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name with a byte-order mark",
            json!({"profile":"default","name":"\u{feff}x"})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a name with a line separator",
            json!({"profile":"default","name":"a\u{2028}b"})
                .to_string()
                .into_bytes(),
            400,
            "invalid_name",
        ),
        (
            "a body of 70,000 bytes",
            json!({"profile":"default","name":"n".repeat(70_000)})
                .to_string()
                .into_bytes(),
            413,
            "body_too_large",
        ),
    ];
    for to in [g, c] {
        for (name, body, status, code) in &bodies {
            cases.push(case(
                format!("{to:?} create: {name}"),
                to,
                post(to, "/sessions", &alice, body),
                *status,
                Some(code),
            ));
        }
        let redraw = format!("/sessions/{id}/redraw");
        for (name, body, status, code) in [
            ("zero size", r#"{"cols":0,"rows":0}"#, 400, "invalid_size"),
            (
                "cols past u16",
                r#"{"cols":70000,"rows":1}"#,
                400,
                "invalid_json",
            ),
            (
                "negative cols",
                r#"{"cols":-1,"rows":24}"#,
                400,
                "invalid_json",
            ),
            (
                "cols as a string",
                r#"{"cols":"80","rows":24}"#,
                400,
                "invalid_json",
            ),
            (
                "an unknown field",
                r#"{"cols":80,"rows":24,"shell":"sh"}"#,
                400,
                "invalid_json",
            ),
            ("rows missing", r#"{"cols":80}"#, 400, "invalid_json"),
        ] {
            cases.push(case(
                format!("{to:?} redraw: {name}"),
                to,
                post(to, &redraw, &alice, body.as_bytes()),
                status,
                Some(code),
            ));
        }
        cases.push(case(
            format!("{to:?} redraw of another user's session"),
            to,
            post(to, &redraw, &bob, br#"{"cols":80,"rows":24}"#),
            404,
            Some("session_not_found"),
        ));
        cases.push(case(
            format!("{to:?} target registration by a non-admin"),
            to,
            post(
                to,
                "/targets",
                &alice,
                br#"{"name":"t","upstream":"http://127.0.0.1:1"}"#,
            ),
            403,
            Some("admin_required"),
        ));
    }
    for (name, body, status, code) in [
        ("token as a number", r#"{"token":123}"#, 400, "invalid_json"),
        ("no token", r#"{}"#, 400, "invalid_json"),
        (
            "an unknown field",
            r#"{"token":"a.b.c","admin":true}"#,
            400,
            "invalid_json",
        ),
        ("not JSON", "token=a.b.c", 400, "invalid_json"),
    ] {
        cases.push(case(
            format!("sign-in: {name}"),
            g,
            sign_in(&format!("Content-Length: {}\r\n", body.len()), body),
            status,
            Some(code),
        ));
    }

    // -- Control's own HTTP parser and internal paths.
    let control_get = |path: &str, extra: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n")
    };
    cases.push(case(
        "control: route feed without the service token",
        c,
        control_get("/v1/routes", &format!("Authorization: Bearer {alice}\r\n")),
        401,
        Some("unauthenticated"),
    ));
    cases.push(case(
        "control: dot-dot to the feed",
        c,
        control_get(
            "/v1/sessions/../routes",
            &format!("Authorization: Bearer {alice}\r\n"),
        ),
        404,
        Some("not_found"),
    ));
    cases.push(case(
        "control: a malformed session id",
        c,
        control_get(
            "/v1/sessions/NOT-AN-ID",
            &format!("Authorization: Bearer {alice}\r\n"),
        ),
        404,
        Some("session_not_found"),
    ));
    cases.push(case("control: conflicting Content-Length", c, format!("POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{{}}"), 400, None));
    cases.push(case(
        "control: obsolete line folding",
        c,
        control_get("/v1/healthz", "X-Folded: a\r\n b\r\n"),
        400,
        None,
    ));
    cases.push(case(
        "control: NUL in a header",
        c,
        control_get("/v1/healthz", "X-Nul: a\0b\r\n"),
        400,
        None,
    ));
    cases.push(case(
        "control: a hostile token",
        c,
        control_get("/v1/sessions", "Authorization: Bearer a.b.c\r\n"),
        401,
        Some("unauthenticated"),
    ));

    // -- Run the table.
    let before = stack.counter.connections();
    let mut wrong = Vec::new();
    let mut fivexx = Vec::new();
    for k in &cases {
        let port = if k.to == To::Gateway {
            gw
        } else {
            control_port
        };
        let a: RawAnswer = exchange(port, &k.raw, Duration::from_secs(5));
        let code = a.code();
        if a.status >= 500 && a.status != 502 && a.status != 503 {
            fivexx.push(format!("{}: {}", k.name, a.status));
        }
        if a.status != k.status || code.as_deref() != k.code {
            wrong.push(format!(
                "{}: got {} {:?}, want {} {:?}\n    {}",
                k.name,
                a.status,
                code,
                k.status,
                k.code,
                a.text.lines().next().unwrap_or("")
            ));
        }
    }
    let legit = cases.iter().filter(|k| k.reaches_ttyd).count();
    let reached = stack.counter.connections() - before;
    println!(
        "bad-input corpus: {} cases ({} at the gateway, {} at control), {} legitimate; {} connections reached ttyd",
        cases.len(),
        cases.iter().filter(|k| k.to == To::Gateway).count(),
        cases.iter().filter(|k| k.to == To::Control).count(),
        legit,
        reached
    );
    assert!(cases.len() >= 100, "the corpus has at least 100 cases");
    assert!(
        wrong.is_empty(),
        "{} cases answered otherwise:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(fivexx.is_empty(), "undocumented 5xx: {fivexx:?}");
    assert_eq!(
        reached, legit,
        "only the owner's legitimate requests reach ttyd"
    );

    // Both processes still serve, and neither panicked.
    assert_eq!(
        http("GET", &stack.url(n, "/healthz"), None, None)
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        stack.control.call("GET", "/v1/healthz", None, None).status,
        200
    );
    for log in [stack.gateways[n].log_text(), stack.control.log_text()] {
        assert!(!log.contains("panicked"), "a process panicked:\n{log}");
    }
}
