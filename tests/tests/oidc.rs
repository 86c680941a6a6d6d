//! Sign-in through a real OpenID Connect provider (`oidc-provider-mock`, installed by
//! `deploy/lib/prereqs.sh::ensure_oidc_provider`), started by each test on a port of
//! its own, in front of the real gateway, control, ttyd and session containers.
//!
//! The provider is reached as `localhost` and the gateway as `127.0.0.1`: two sites, so
//! the provider's redirect back is a cross-site navigation, as in production.
//!
//! Where the provider cannot be made to misbehave, the test changes what the browser
//! would carry (the `state` of the callback, the `nonce` or `client_id` of the
//! authorization request) and the provider issues real codes and tokens for that.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::browser::Browser;
use e2e::stack::{free_port, http, wait_for, GatewayStack};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(20);

/// The provider's command: `$TERMGATE_OIDC_PROVIDER`, else the one prereqs.sh installs.
fn provider_command() -> PathBuf {
    std::env::var_os("TERMGATE_OIDC_PROVIDER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.tools/oidc-provider/bin/oidc-provider-mock")
        })
}

/// A running `oidc-provider-mock`.
struct Provider {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    log: tempfile::NamedTempFile,
}

impl Provider {
    /// Starts the provider with the users the tests sign in as, plus `args`.
    fn start(args: &[&str]) -> Provider {
        let mut p = Provider {
            child: None,
            port: free_port(),
            args: args.iter().map(|a| a.to_string()).collect(),
            log: tempfile::NamedTempFile::new().expect("provider log"),
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let cmd = provider_command();
        assert!(
            cmd.exists(),
            "{} is missing: run deploy/test (ensure_oidc_provider installs it)",
            cmd.display()
        );
        let users = [
            json!({"sub": "u-alice", "preferred_username": "alice", "email": "alice@example.com", "groups": ["ops", "dev"]}),
            json!({"sub": "u-bob", "preferred_username": "bob", "email": "bob@example.com", "groups": ["dev"]}),
        ];
        let mut c = Command::new(&cmd);
        c.args(["--host", "127.0.0.1", "--port", &self.port.to_string()]);
        for u in users {
            c.arg("--user-claims").arg(u.to_string());
        }
        c.args(&self.args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(self.log.reopen().expect("log"))
            .stderr(self.log.reopen().expect("log"));
        self.child = Some(c.spawn().expect("start oidc-provider-mock"));
        let discovery = format!("{}/.well-known/openid-configuration", self.issuer());
        wait_for("the provider's discovery document", T, || {
            http("GET", &discovery, None, None)
                .ok()
                .filter(|a| a.status == 200)
        });
    }

    /// The issuer, as the provider names itself when reached at `localhost`.
    fn issuer(&self) -> String {
        format!("http://localhost:{}", self.port)
    }

    /// The key ids the provider publishes.
    fn kids(&self) -> Vec<String> {
        let keys = http("GET", &format!("{}/jwks", self.issuer()), None, None).expect("jwks");
        keys.body["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .filter_map(|k| k["kid"].as_str().map(str::to_owned))
            .collect()
    }

    /// Stops the provider and starts it again on the same port: it makes a new key.
    fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
            eprintln!("--- oidc-provider-mock log ---\n{log}");
        }
    }
}

/// `[auth.oidc]` for `provider`, the user named by its `preferred_username` (the test
/// provider lets nobody change it; a real one may: hence the opt-in); each gateway gets
/// its own `redirect_url`.
fn oidc_config(provider: &Provider) -> String {
    oidc_config_naming(
        provider,
        "sub_claim = \"preferred_username\"\nallow_mutable_sub_claim = true",
    )
}

/// `[auth.oidc]` for `provider` with `naming` (the user-name keys; empty: the defaults).
fn oidc_config_naming(provider: &Provider, naming: &str) -> String {
    format!(
        r#"
[auth.oidc]
issuer = "{}"
client_id = "termgate"
client_secret_file = "secrets/service.token"
redirect_url = "http://127.0.0.1:1/auth/callback"
{naming}
admin_claim = "groups"
admin_values = ["ops"]
display_name = "Test IdP"
timeout_ms = 5000
"#,
        provider.issuer()
    )
}

/// Sets the claims of the provider's user `sub`, as a user editing their own profile, or
/// signing up with any address, would at a provider that lets them.
fn set_claims(provider: &Provider, sub: &str, claims: Value) {
    let r = reply(
        agent()
            .put(&format!("{}/users/{sub}", provider.issuer()))
            .header("Content-Type", "application/json")
            .send(claims.to_string()),
    );
    assert_eq!(r.status, 204, "set the claims of {sub}: {}", r.body);
}

/// Starts a gateway whose `redirect_url` is its own callback (and `env` on top); its
/// index.
fn oidc_gateway(stack: &mut GatewayStack, env: &[(&str, &str)]) -> usize {
    let (port, admin) = (free_port(), free_port());
    let redirect = format!("http://127.0.0.1:{port}/auth/callback");
    let mut all = vec![("TERMGATE__AUTH__OIDC__REDIRECT_URL", redirect.as_str())];
    all.extend_from_slice(env);
    stack.spawn_gateway_on(port, admin, &[], &all, true)
}

/// An answer, redirects not followed.
struct Reply {
    status: u16,
    location: Option<String>,
    /// `name=value` of every `Set-Cookie`, and the whole header lines.
    cookies: Vec<(String, String)>,
    body: String,
}

impl Reply {
    /// The value this answer sets for cookie `name`.
    fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(pair, _)| pair.split_once('=').is_some_and(|(n, _)| n == name))
            .map(|(pair, _)| pair.split_once('=').map_or("", |(_, v)| v))
    }

    /// The whole `Set-Cookie` line for cookie `name`.
    fn cookie_line(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(pair, _)| pair.split_once('=').is_some_and(|(n, _)| n == name))
            .map(|(_, line)| line.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

fn reply(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Reply {
    let mut r = r.expect("http");
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let location = header("location");
    let cookies = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|line| {
            let pair = line.split(';').next().unwrap_or_default().trim().to_owned();
            (pair, line.to_owned())
        })
        .collect();
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string().unwrap_or_default();
    Reply {
        status,
        location,
        cookies,
        body,
    }
}

fn get(url: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = agent().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    reply(req.call())
}

/// A bodiless POST with `headers` (a form's or the page's, with its cookie and Origin).
fn post(url: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = agent().post(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    reply(req.send_empty())
}

/// A sign-in begun at a gateway: where the browser is sent, and its flow cookie.
struct Begun {
    authorize: String,
    flow: String,
}

fn begin(stack: &GatewayStack, n: usize) -> Begun {
    let r = get(&stack.url(n, "/auth/login"), &[]);
    assert_eq!(r.status, 303, "login: {}", r.body);
    let flow = r
        .cookie("termgate_oidc_flow")
        .expect("flow cookie")
        .to_owned();
    let line = r.cookie_line("termgate_oidc_flow").unwrap();
    assert!(
        line.contains("HttpOnly")
            && line.contains("SameSite=Lax")
            && line.contains("Path=/auth/callback"),
        "{line}"
    );
    Begun {
        authorize: r.location.expect("location"),
        flow: format!("termgate_oidc_flow={flow}"),
    }
}

/// The provider's answer to `authorize` for `sub`: the callback URL it redirects to.
fn authorize(authorize: &str, sub: &str) -> String {
    let r = reply(agent().post(authorize).send_form([("sub", sub)]));
    assert_eq!(r.status, 302, "authorize: {}", r.body);
    r.location.expect("callback location")
}

/// `url` with query parameter `name` set to `value` (form-encoded by the caller).
fn with_param(url: &str, name: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').expect("a query");
    let query: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k == name => format!("{k}={value}"),
            _ => p.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

fn param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}

/// A whole sign-in as `sub` at gateway `n` over plain HTTP; the callback's answer and
/// what was sent to it.
fn sign_in(stack: &GatewayStack, n: usize, sub: &str) -> (Reply, String, String) {
    let b = begin(stack, n);
    let callback = authorize(&b.authorize, sub);
    let r = get(&callback, &[("Cookie", &b.flow)]);
    (r, callback, b.flow)
}

fn whoami(stack: &GatewayStack, n: usize, cookie: &str) -> Value {
    let r = get(&stack.url(n, "/auth/session"), &[("Cookie", cookie)]);
    assert_eq!(r.status, 200, "whoami: {}", r.body);
    r.json()
}

#[test]
fn each_forged_or_replayed_answer_is_refused_with_its_own_code_and_a_rotated_key_is_fetched() {
    let mut provider = Provider::start(&[]);
    let expired = Provider::start(&["--token-max-age", "-120"]);
    let mut stack = GatewayStack::start(&oidc_config(&provider));
    let n = oidc_gateway(&mut stack, &[]);

    // The good path: a session cookie for the claim's user, admin from the group.
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let before = unix_now();
    let (ok, callback, flow) = sign_in(&stack, n, "u-alice");
    assert_eq!(ok.status, 303, "callback: {}", ok.body);
    assert_eq!(ok.location.as_deref(), Some("/"));
    let session = ok.cookie("termgate_session").expect("session cookie");
    let line = ok.cookie_line("termgate_session").unwrap();
    assert!(
        line.contains("HttpOnly") && line.contains("SameSite=Strict") && line.contains("Path=/"),
        "{line}"
    );
    let cookie = format!("termgate_session={session}");
    let me = whoami(&stack, n, &cookie);
    assert_eq!(
        (me["sub"].clone(), me["admin"].clone()),
        (json!("alice"), json!(true))
    );
    // The ID token (the provider's default: an hour) was issued during the sign-in.
    let exp = me["expires_at"].as_u64().unwrap();
    let now = unix_now();
    assert!(
        (before + 3600 - 5..=now + 3600 + 5).contains(&exp),
        "the session ends with the ID token (1 h after the sign-in, between {before} and {now}): {exp}"
    );
    let keys_fetched = Instant::now();
    let (bob, _, _) = sign_in(&stack, n, "u-bob");
    let bob = format!(
        "termgate_session={}",
        bob.cookie("termgate_session").unwrap()
    );
    assert_eq!(whoami(&stack, n, &bob)["admin"], json!(false));

    // The same answer again: a replayed code.
    let replay = get(&callback, &[("Cookie", &flow)]);
    assert_eq!(
        (replay.status, replay.code()),
        (400, "oidc_replayed".into()),
        "{}",
        replay.body
    );
    assert!(replay.cookie("termgate_session").is_none());

    // A tampered state, shown to a browser as a page with the code.
    let b = begin(&stack, n);
    let callback = authorize(&b.authorize, "u-alice");
    let state = param(&callback, "state").unwrap();
    let tampered = with_param(&callback, "state", &format!("{state}x"));
    let r = get(&tampered, &[("Cookie", &b.flow), ("Accept", "text/html")]);
    assert_eq!(r.status, 400);
    assert!(
        r.body
            .contains("<meta name=\"termgate-error\" content=\"oidc_state_mismatch\">"),
        "{}",
        r.body
    );
    assert!(r.cookie("termgate_session").is_none());
    // The untampered answer still signs this browser in: the refusal used nothing up.
    assert_eq!(get(&callback, &[("Cookie", &b.flow)]).status, 303);

    // An answer without this browser's flow cookie (login CSRF), or a forged cookie.
    let b = begin(&stack, n);
    let callback = authorize(&b.authorize, "u-alice");
    let r = get(&callback, &[]);
    assert_eq!(r.code(), "oidc_flow_missing", "{}", r.body);
    let forged = format!("{}x", b.flow);
    assert_eq!(
        get(&callback, &[("Cookie", &forged)]).code(),
        "oidc_flow_missing"
    );

    // The provider asked with another nonce: its real ID token carries that nonce.
    let b = begin(&stack, n);
    let callback = authorize(
        &with_param(&b.authorize, "nonce", "not-this-browsers"),
        "u-alice",
    );
    let r = get(&callback, &[("Cookie", &b.flow)]);
    assert_eq!(
        (r.status, r.code()),
        (400, "oidc_nonce_mismatch".into()),
        "{}",
        r.body
    );

    // A code the provider issued to another client: the provider does not exchange it
    // for this one, and nothing is signed in.
    let b = begin(&stack, n);
    let callback = authorize(
        &with_param(&b.authorize, "client_id", "another-client"),
        "u-alice",
    );
    let r = get(&callback, &[("Cookie", &b.flow)]);
    assert_eq!(
        (r.status, r.code()),
        (400, "oidc_code_rejected".into()),
        "{}",
        r.body
    );

    // A user the provider knows without the configured claim.
    let (r, _, _) = sign_in(&stack, n, "someone-else");
    assert_eq!(
        (r.status, r.code()),
        (403, "oidc_bad_subject".into()),
        "{}",
        r.body
    );

    // An answer naming another issuer (RFC 9207 mix-up defence).
    let b = begin(&stack, n);
    let callback = authorize(&b.authorize, "u-alice");
    let mixed = format!("{callback}&iss=http%3A%2F%2Fevil.example");
    let r = get(&mixed, &[("Cookie", &b.flow)]);
    assert_eq!(r.code(), "oidc_wrong_issuer", "{}", r.body);

    // A provider whose ID tokens are already expired.
    let issuer = expired.issuer();
    let m = oidc_gateway(&mut stack, &[("TERMGATE__AUTH__OIDC__ISSUER", &issuer)]);
    let (r, _, _) = sign_in(&stack, m, "u-alice");
    assert_eq!(
        (r.status, r.code()),
        (400, "oidc_id_token_expired".into()),
        "{}",
        r.body
    );

    // Another site cannot sign a user out (and close their terminals): her sign-in
    // keeps working, at the gateway and at control, and her open terminal stays open.
    let alice_session = stack.control.create(&stack.control.token("alice", false))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let terminal = stack
        .open_as(n, &alice_session, &cookie)
        .expect("alice's terminal opens with the provider's sign-in");
    let logout = stack.url(n, "/auth/logout");
    for (origin, code) in [
        (Some("http://evil.example"), "origin_not_allowed"),
        (Some("null"), "origin_null"),
        (None, "origin_missing"),
    ] {
        let mut headers = vec![("Cookie", cookie.as_str())];
        headers.extend(origin.map(|o| ("Origin", o)));
        let r = post(&logout, &headers);
        assert_eq!(
            (r.status, r.code()),
            (403, code.into()),
            "{origin:?}: {}",
            r.body
        );
        assert!(r.cookie("termgate_session").is_none(), "nothing cleared");
    }
    // A GET — a link, an image, a redirect from any page of the site — signs nobody
    // out: it shows a form that posts.
    let asked = get(&logout, &[("Cookie", &cookie), ("Accept", "text/html")]);
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(
        asked
            .body
            .contains("<form id=\"sign-out-form\" method=\"post\" action=\"/auth/logout\">"),
        "{}",
        asked.body
    );
    assert!(
        asked.cookies.is_empty(),
        "nothing cleared: {:?}",
        asked.cookies
    );
    // Bob signs out for real at the same gateway (a form's POST, from its page), which
    // learns of it from control's feed, in order: once it refuses his cookie, a
    // revocation of alice's sign-in made before would have reached it too.
    let origin = stack.origin(n);
    let bob_asked = get(&logout, &[("Cookie", &bob)]);
    assert_eq!(bob_asked.status, 200, "{}", bob_asked.body);
    let out = post(
        &logout,
        &[
            ("Cookie", &bob),
            ("Origin", &origin),
            ("Accept", "text/html"),
        ],
    );
    assert_eq!(out.status, 303, "bob's sign-out: {}", out.body);
    assert!(
        out.cookie_line("termgate_session")
            .is_some_and(|l| l.contains("Max-Age=0")),
        "the cookie is cleared: {:?}",
        out.cookies
    );
    wait_for("the gateway to refuse bob's signed-out cookie", T, || {
        let r = get(&stack.url(n, "/auth/session"), &[("Cookie", &bob)]);
        (r.status == 401).then_some(())
    });
    assert_eq!(whoami(&stack, n, &cookie)["sub"], json!("alice"));
    let listed = get(&stack.url(n, "/api/sessions"), &[("Cookie", &cookie)]);
    assert_eq!(
        listed.status, 200,
        "control still takes her sign-in: {}",
        listed.body
    );
    terminal
        .send_input(b"echo still-open-$((40+2))\r")
        .expect("her terminal is still open");
    terminal
        .read_until("still-open-42", T)
        .expect("her terminal still echoes");
    assert!(!terminal.is_closed());
    drop(terminal);

    // Refused answers count against the address like failed sign-ins: past
    // `auth_failures_per_minute` the provider is not asked any more.
    let limited = oidc_gateway(
        &mut stack,
        &[("TERMGATE__GATEWAY__AUTH_FAILURES_PER_MINUTE", "2")],
    );
    let b = begin(&stack, limited);
    let callback = authorize(&b.authorize, "u-alice");
    for _ in 0..2 {
        assert_eq!(get(&callback, &[]).code(), "oidc_flow_missing");
    }
    let asked = Instant::now();
    let r = get(&callback, &[("Cookie", &b.flow)]);
    let took = asked.elapsed();
    assert_eq!(
        (r.status, r.code()),
        (429, "too_many_failures".into()),
        "{}",
        r.body
    );
    assert!(
        took >= Duration::from_millis(100),
        "the 429 came back after {took:?}, without the 100 ms pause"
    );

    // Bearer tokens keep working next to the sign-in.
    let bearer = stack.control.token("carol", false);
    let a = http("GET", &stack.url(n, "/api/sessions"), Some(&bearer), None).unwrap();
    assert_eq!(a.status, 200, "{}", a.text);

    // The provider's key rotated: its tokens are signed by a key the gateway has not
    // seen, which it fetches (rate-limited: at most every 5 s).
    let before = provider.kids();
    provider.restart();
    let after = provider.kids();
    assert!(
        !after.is_empty() && after.iter().all(|k| !before.contains(k)),
        "a new key: {before:?} → {after:?}"
    );
    let wait = Duration::from_secs(6).saturating_sub(keys_fetched.elapsed());
    std::thread::sleep(wait);
    let (r, _, _) = sign_in(&stack, n, "u-alice");
    assert_eq!(r.status, 303, "after the rotation: {}", r.body);
    let cookie = format!("termgate_session={}", r.cookie("termgate_session").unwrap());
    assert_eq!(whoami(&stack, n, &cookie)["sub"], json!("alice"));
    assert!(
        stack.gateways[n]
            .log_text()
            .contains("fetching the provider's keys again"),
        "the gateway fetched the new keys"
    );
}

#[test]
fn the_user_is_the_providers_sub_and_a_chosen_name_or_unverified_email_is_nobody_else() {
    let provider = Provider::start(&[]);
    // At the provider, mallory names herself alice: her readable claims are hers to set.
    set_claims(
        &provider,
        "u-mallory",
        json!({"preferred_username": "alice", "email": "alice@example.com"}),
    );
    set_claims(
        &provider,
        "u-carol",
        json!({"email": "carol@example.com", "email_verified": true}),
    );
    let mut stack = GatewayStack::start(&oidc_config_naming(&provider, ""));
    let n = oidc_gateway(&mut stack, &[]);
    let signed_in_as = |stack: &GatewayStack, n: usize, sub: &str| {
        let (r, _, _) = sign_in(stack, n, sub);
        assert_eq!(r.status, 303, "{sub}'s sign-in: {}", r.body);
        let cookie = format!("termgate_session={}", r.cookie("termgate_session").unwrap());
        whoami(stack, n, &cookie)["sub"].clone()
    };

    // By default the user is the provider's `sub`, whatever the other claims say.
    assert_eq!(signed_in_as(&stack, n, "u-mallory"), json!("u-mallory"));
    assert_eq!(signed_in_as(&stack, n, "u-alice"), json!("u-alice"));
    assert!(
        !stack.gateways[n]
            .log_text()
            .contains("allow_mutable_sub_claim"),
        "no warning without the opt-in"
    );

    // The e-mail address as the user name, opted in: the gateway warns at start, and an
    // address the provider did not verify names nobody.
    let m = oidc_gateway(
        &mut stack,
        &[
            ("TERMGATE__AUTH__OIDC__SUB_CLAIM", "email"),
            ("TERMGATE__AUTH__OIDC__ALLOW_MUTABLE_SUB_CLAIM", "true"),
        ],
    );
    let log = stack.gateways[m].log_text();
    assert!(
        log.contains("WARN") && log.contains("allow_mutable_sub_claim"),
        "the opt-in is warned about at start: {log}"
    );
    for unverified in ["u-mallory", "bob@example.com"] {
        // `bob@example.com` is a new account at the provider, which takes the address
        // typed as its `email`, unverified.
        let (r, _, _) = sign_in(&stack, m, unverified);
        assert_eq!(
            (r.status, r.code()),
            (403, "oidc_email_unverified".into()),
            "{unverified}: {}",
            r.body
        );
        assert!(r.cookie("termgate_session").is_none());
    }
    assert_eq!(
        signed_in_as(&stack, m, "u-carol"),
        json!("carol@example.com")
    );
}

fn launch() -> Browser {
    Browser::launch().unwrap_or_else(|e| panic!("cannot start the browser: {e:#}"))
}

fn ok<V>(step: &str, r: anyhow::Result<V>) -> V {
    r.unwrap_or_else(|e| panic!("{step}: {e:#}"))
}

/// `artifacts/browser/<name>` under the checkout root (gitignored).
fn artifact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../artifacts/browser");
    std::fs::create_dir_all(&dir).expect("artifacts/browser");
    dir.join(name)
}

/// The cookies the browser holds for `url`, by name.
fn browser_cookie(b: &mut Browser, url: &str, name: &str) -> Option<String> {
    let r = ok(
        "the browser's cookies",
        b.page("Network.getCookies", json!({"urls": [url]})),
    );
    r["cookies"].as_array()?.iter().find_map(|c| {
        (c["name"] == name).then(|| c["value"].as_str().unwrap_or_default().to_owned())
    })
}

#[test]
fn a_person_signs_in_with_the_provider_in_a_browser_opens_a_terminal_and_signs_out() {
    let provider = Provider::start(&[]);
    let mut stack = GatewayStack::start(&oidc_config(&provider));
    let n = oidc_gateway(&mut stack, &[]);
    let home = stack.url(n, "/");
    let mut b = launch();

    ok("open the sessions page", b.navigate(&home));
    ok(
        "the provider's button",
        b.wait_js(
            "!document.getElementById('oidc-sign-in').hidden \
             && document.getElementById('oidc-link').textContent === 'Sign in with Test IdP'",
            T,
            "Sign in with Test IdP",
        ),
    );
    ok("screenshot", b.screenshot(&artifact("oidc-sign-in.png")));

    // An answer this browser did not ask for lands on a page that says so.
    ok(
        "a stray callback",
        b.navigate(&stack.url(n, "/auth/callback?code=stolen&state=forged")),
    );
    let code = ok(
        "the refusal page",
        b.eval("document.querySelector('meta[name=termgate-error]').content"),
    );
    assert_eq!(code, json!("oidc_flow_missing"));
    ok("screenshot", b.screenshot(&artifact("oidc-refused.png")));
    ok("back to the page", b.navigate(&home));
    ok(
        "the provider's button again",
        b.wait_js(
            "!document.getElementById('oidc-sign-in').hidden",
            T,
            "the button",
        ),
    );
    ok(
        "click the button",
        b.eval("document.getElementById('oidc-link').click()"),
    );
    let at_provider = format!("location.host === 'localhost:{}'", provider.port);
    ok(
        "the provider's form",
        b.wait_js(
            &format!("{at_provider} && !!document.querySelector('input[name=sub]')"),
            T,
            "the provider's sign-in form",
        ),
    );
    ok(
        "sign in at the provider",
        b.eval(
            "const f = document.querySelector('input[name=sub]'); f.value = 'u-alice'; f.form.submit()",
        ),
    );
    ok(
        "back on the sessions page, signed in",
        b.wait_js(
            &format!(
                "location.href === {} && !document.getElementById('sessions').hidden \
                 && document.getElementById('who-name').textContent.split(' (')[0] === 'alice' \
                 && !document.getElementById('admin-link').hidden",
                json!(home)
            ),
            T,
            "alice's sessions",
        ),
    );
    ok("screenshot", b.screenshot(&artifact("oidc-signed-in.png")));
    let session = browser_cookie(&mut b, &home, "termgate_session").expect("the session cookie");
    assert!(browser_cookie(
        &mut b,
        &stack.url(n, "/auth/callback"),
        "termgate_oidc_flow"
    )
    .is_none());

    // The cookie works everywhere a signed-in browser goes: a session, its terminal.
    let cookie = format!("termgate_session={session}");
    let origin = stack.origin(n);
    let created = reply(
        agent()
            .post(&stack.url(n, "/api/sessions"))
            .header("Cookie", &cookie)
            .header("Origin", &origin)
            .header("Content-Type", "application/json")
            .send(r#"{"profile":"default","name":"idp"}"#),
    );
    assert_eq!(created.status, 201, "create: {}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(created.json()["owner"], json!("alice"));
    let t = stack
        .open_as(n, &id, &cookie)
        .expect("alice opens her terminal");
    t.send_input(b"echo signed-in-$((40+2))\r").unwrap();
    t.read_until("signed-in-42", T).unwrap();

    // Sign out: the cookie goes, the terminal closes, the provider ends its session.
    ok(
        "click Sign out",
        b.eval("document.getElementById('sign-out').click()"),
    );
    ok(
        "the provider's end of session",
        b.wait_js(
            &format!("{at_provider} && location.pathname === '/oauth2/end_session'"),
            T,
            "the provider's end_session page",
        ),
    );
    let end = ok("the address", b.eval("location.href"));
    let end = end.as_str().unwrap();
    assert!(
        param(end, "id_token_hint").is_some_and(|h| h.split('.').count() == 3),
        "{end}"
    );
    assert_eq!(
        param(end, "post_logout_redirect_uri").as_deref(),
        Some(format!("http%3A%2F%2F127.0.0.1%3A{}%2F", stack.gateways[n].port).as_str())
    );
    assert!(browser_cookie(&mut b, &home, "termgate_session").is_none());
    t.wait_closed(T).expect("signing out closes the terminal");
    // The sign-in was revoked at control, not only forgotten by this browser: a copy
    // of the cookie is refused.
    let copied = reply(
        agent()
            .get(&stack.url(n, "/api/sessions"))
            .header("Cookie", &cookie)
            .call(),
    );
    assert_eq!(
        copied.status, 401,
        "a copied cookie after sign-out: {}",
        copied.body
    );
    ok(
        "end the provider's session",
        b.eval("document.querySelector('form button[type=submit]').click()"),
    );
    ok(
        "back on the sign-in page",
        b.wait_js(
            &format!(
                "location.href === {} && !document.getElementById('sign-in').hidden",
                json!(home)
            ),
            T,
            "the sign-in page",
        ),
    );

    // Signed in again, a visit to /auth/logout (a link, a redirect) only asks; its
    // form signs out and goes on to the provider.
    ok(
        "click the button again",
        b.eval("document.getElementById('oidc-link').click()"),
    );
    ok(
        "the provider's form again",
        b.wait_js(
            &format!("{at_provider} && !!document.querySelector('input[name=sub]')"),
            T,
            "the provider's sign-in form",
        ),
    );
    ok(
        "sign in at the provider again",
        b.eval(
            "const f = document.querySelector('input[name=sub]'); f.value = 'u-alice'; f.form.submit()",
        ),
    );
    ok(
        "signed in again",
        b.wait_js(
            "!document.getElementById('sessions').hidden",
            T,
            "alice's sessions",
        ),
    );
    let again = browser_cookie(&mut b, &home, "termgate_session").expect("signed in again");
    ok(
        "visit /auth/logout",
        b.navigate(&stack.url(n, "/auth/logout")),
    );
    ok(
        "the page that asks",
        b.wait_js(
            "!!document.getElementById('sign-out-confirm')",
            T,
            "the sign-out form",
        ),
    );
    ok(
        "screenshot",
        b.screenshot(&artifact("oidc-sign-out-asks.png")),
    );
    assert_eq!(
        browser_cookie(&mut b, &home, "termgate_session").as_deref(),
        Some(again.as_str()),
        "visiting the page signs nobody out"
    );
    let still = format!("termgate_session={again}");
    assert_eq!(whoami(&stack, n, &still)["sub"], json!("alice"));
    ok(
        "confirm",
        b.eval("document.getElementById('sign-out-confirm').click()"),
    );
    ok(
        "the provider's end of session, from the form",
        b.wait_js(
            &format!("{at_provider} && location.pathname === '/oauth2/end_session'"),
            T,
            "the provider's end_session page",
        ),
    );
    assert!(browser_cookie(&mut b, &home, "termgate_session").is_none());
    let copied = get(&stack.url(n, "/auth/session"), &[("Cookie", &still)]);
    assert_eq!(copied.status, 401, "signed out: {}", copied.body);

    let gone = http(
        "DELETE",
        &stack.url(n, &format!("/api/sessions/{id}")),
        Some(&stack.control.token("alice", false)),
        None,
    )
    .unwrap();
    assert_eq!(gone.status, 204, "{}", gone.text);
}

/// Runs `cmd` with `args`; its stdout (panics naming the command when it fails).
fn run(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The same provider served over https by uvicorn, with a certificate for `localhost`
/// issued by a CA of the test's own.
struct TlsProvider {
    child: Child,
    port: u16,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsProvider {
    fn start() -> TlsProvider {
        let dir = tempfile::tempdir().expect("temp dir");
        let p = |f: &str| dir.path().join(f).to_str().unwrap().to_owned();
        let days = ["-days", "1"];
        run(
            "openssl",
            &[
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-subj",
                    "/CN=termgate test CA",
                ][..],
                &days,
                &["-keyout", &p("ca.key"), "-out", &p("ca.crt")],
            ]
            .concat(),
        );
        run(
            "openssl",
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                &p("srv.key"),
                "-out",
                &p("srv.csr"),
            ],
        );
        std::fs::write(
            dir.path().join("srv.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        run(
            "openssl",
            &[
                &[
                    "x509",
                    "-req",
                    "-in",
                    &p("srv.csr"),
                    "-CA",
                    &p("ca.crt"),
                    "-CAkey",
                    &p("ca.key"),
                    "-CAcreateserial",
                ][..],
                &days,
                &["-extfile", &p("srv.ext"), "-out", &p("srv.crt")],
            ]
            .concat(),
        );
        let python = provider_command().with_file_name("python");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("provider.log")).unwrap();
        let child = Command::new(python)
            .args([
                "-m",
                "uvicorn",
                "--factory",
                "oidc_provider_mock:app",
                "--interface",
                "wsgi",
            ])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--ssl-keyfile",
                &p("srv.key"),
                "--ssl-certfile",
                &p("srv.crt"),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("uvicorn");
        let s = TlsProvider {
            child,
            port,
            ca: dir.path().join("ca.crt"),
            _dir: dir,
        };
        let discovery = format!("{}/.well-known/openid-configuration", s.issuer());
        wait_for("the https provider", T, || {
            let o = Command::new("curl")
                .args([
                    "-sf",
                    "--max-time",
                    "2",
                    "--cacert",
                    s.ca.to_str().unwrap(),
                    &discovery,
                ])
                .output()
                .ok()?;
            o.status.success().then_some(())
        });
        s
    }

    fn issuer(&self) -> String {
        format!("https://localhost:{}", self.port)
    }
}

impl Drop for TlsProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_https_provider_is_trusted_through_the_configured_ca_and_not_without_it() {
    let tls = TlsProvider::start();
    let plain = Provider::start(&[]);
    let mut stack = GatewayStack::start(&oidc_config(&plain));
    let issuer = tls.issuer();
    let ca = tls.ca.to_str().unwrap().to_owned();
    let env = [
        ("TERMGATE__AUTH__OIDC__ISSUER", issuer.as_str()),
        ("TERMGATE__AUTH__OIDC__SUB_CLAIM", "sub"),
    ];
    let trusting = oidc_gateway(
        &mut stack,
        &[&env[..], &[("TERMGATE__AUTH__OIDC__CA_FILE", &ca)]].concat(),
    );
    let b = begin(&stack, trusting);
    assert!(
        b.authorize.starts_with(&format!("{issuer}/")),
        "{}",
        b.authorize
    );
    // The browser's part at the provider, over https.
    let callback = run(
        "curl",
        &[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{redirect_url}",
            "--cacert",
            &ca,
            "-d",
            "sub=u-tls",
            &b.authorize,
        ],
    );
    assert!(
        callback.starts_with(&stack.url(trusting, "/auth/callback?")),
        "{callback}"
    );
    let r = get(&callback, &[("Cookie", &b.flow)]);
    assert_eq!(
        r.status, 303,
        "discovery, token and keys over https: {}",
        r.body
    );
    let cookie = format!("termgate_session={}", r.cookie("termgate_session").unwrap());
    assert_eq!(whoami(&stack, trusting, &cookie)["sub"], json!("u-tls"));

    // Without the CA the provider's certificate is not trusted: nothing is sent to it.
    let doubting = oidc_gateway(&mut stack, &env);
    let r = get(&stack.url(doubting, "/auth/login"), &[]);
    assert_eq!(
        (r.status, r.code()),
        (502, "oidc_provider_unavailable".into()),
        "{}",
        r.body
    );
    assert!(r.cookie("termgate_oidc_flow").is_none());
}
