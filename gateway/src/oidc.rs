//! Sign-in through an OpenID Connect provider (`[auth.oidc]`, design §3).
//!
//! The gateway is the relying party. `/auth/login` redirects the browser to the
//! provider's authorization endpoint with a fresh `state`, `nonce` and PKCE (S256)
//! challenge, kept in a short-lived signed cookie (`policy::oidc::FlowSealer`).
//! `/auth/callback` checks the answer against that cookie, exchanges the code at the
//! token endpoint, verifies the ID token against the provider's JWKS (cached, fetched
//! again on an unknown `kid`, at most every [`KEYS_REFETCH`]) and then signs the
//! gateway's own session token for the user, set as the usual session cookie: from there
//! on every part of termgate (control's API, terminals, locks, expiry) sees an ordinary
//! termgate token. `/auth/logout` clears it and sends the browser to the provider's
//! `end_session_endpoint` when there is one.
//!
//! Every call to the provider is bounded by `auth.oidc.timeout_ms` and its answer by
//! [`MAX_PROVIDER_BODY`]; none holds a lock across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use policy::oidc::{
    check_callback, check_id_token, form_encode, Callback, Flow, FlowSealer, Grant,
    IdTokenExpectations, OidcError, SignInRules,
};
use policy::{Signer, TokenClaims, TokenError, Verifier};
use serde::Deserialize;

/// 128 random bits as hex (a sign-in token's `jti`); `None` when the kernel gives no
/// randomness, so that nothing is signed with a predictable id.
pub fn random_hex() -> Option<String> {
    let mut random = [0u8; 16];
    getrandom::getrandom(&mut random).ok()?;
    Some(random.iter().map(|b| format!("{b:02x}")).collect())
}

/// Longest answer read from the provider (discovery, token, keys).
pub const MAX_PROVIDER_BODY: usize = 1 << 20;

/// The provider's keys are fetched again for an unknown `kid` at most this often, so
/// tokens naming made-up keys cannot make the gateway hammer the provider.
pub const KEYS_REFETCH: Duration = Duration::from_secs(5);

/// The cookie holding a sign-in in progress (only sent to the callback).
pub const FLOW_COOKIE: &str = "termgate_oidc_flow";

/// The cookie holding the ID token for the provider's logout (only sent to `/auth/logout`).
pub const ID_TOKEN_COOKIE: &str = "termgate_oidc_id";

/// Most sign-ins remembered as used (replays refused) before the oldest are forgotten.
const MAX_USED: usize = 100_000;

/// What discovery says of the provider.
#[derive(Debug, Clone, Deserialize)]
struct ProviderMeta {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    end_session_endpoint: Option<String>,
}

/// The provider's keys, and when they were fetched.
struct Keys {
    verifier: Verifier,
    fetched: Instant,
}

/// The token endpoint's answer.
#[derive(Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
}

/// A successful sign-in: the gateway's own session token and what goes with it.
#[derive(Debug)]
pub struct SignedIn {
    /// The session token, signed by the gateway.
    pub token: String,
    /// Who, and until when.
    pub grant: Grant,
    /// The provider's ID token, kept for the logout's `id_token_hint`.
    pub id_token: String,
}

/// The relying party: configuration, provider metadata and keys, used sign-ins.
pub struct Oidc {
    config: config::OidcConfig,
    client_secret: Option<Vec<u8>>,
    signer: Signer,
    sealer: FlowSealer,
    rules: SignInRules,
    /// The `iss`, `aud` and admin role of termgate's own tokens (`[auth]`).
    token_issuer: Option<String>,
    token_audience: Option<String>,
    admin_role: String,
    leeway: u64,
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    provider: RwLock<Option<Arc<ProviderMeta>>>,
    keys: RwLock<Option<Arc<Keys>>>,
    /// Flow states whose callback was used, until the flow would expire.
    used: Mutex<HashMap<String, u64>>,
    /// The origin the gateway is reached at (from `redirect_url`), for the logout.
    origin: String,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .field("client_id", &self.config.client_id)
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> OidcError {
    OidcError::ProviderUnavailable(format!("{what}: {e}"))
}

impl Oidc {
    /// The relying party of a configuration with `[auth.oidc]`; `None` without it.
    pub fn from_config(c: &config::Config) -> anyhow::Result<Option<Arc<Oidc>>> {
        let Some(o) = c.auth.oidc.clone() else {
            return Ok(None);
        };
        // Validation refused a configuration with oidc and no signing key.
        let signer = c
            .signer()
            .ok_or_else(|| anyhow::anyhow!("auth.oidc: no key to sign sessions with"))?;
        let key = c
            .secrets()
            .signing
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("auth.oidc: no key to sign sessions with"))?;
        let sealer = FlowSealer::new(key.expose())?;
        if policy::oidc::is_mutable_claim(&o.sub_claim) {
            // Validation let it through only with auth.oidc.allow_mutable_sub_claim.
            tracing::warn!(
                sub_claim = %o.sub_claim,
                "auth.oidc.sub_claim is not the provider's \"sub\" (auth.oidc.allow_mutable_sub_claim = true): whoever can set this claim at the provider chooses which termgate user they are"
            );
        }
        let rules = SignInRules {
            sub_claim: o.sub_claim.clone(),
            admin_claim: o.admin_claim.clone(),
            admin_values: o.admin_values.clone(),
            allowed_email_domains: o.allowed_email_domains.clone(),
            allowed_groups: o.allowed_groups.clone(),
            groups_claim: o.groups_claim.clone(),
            session_max_secs: o.session_max_seconds,
        };
        let timeout = Duration::from_millis(o.timeout_ms);
        let origin = o
            .redirect_url
            .strip_suffix("/auth/callback")
            .unwrap_or(&o.redirect_url)
            .to_owned();
        Ok(Some(Arc::new(Oidc {
            client_secret: c
                .secrets()
                .oidc_client_secret
                .as_ref()
                .map(|s| s.expose().to_vec()),
            signer,
            sealer,
            rules,
            token_issuer: c.auth.issuer.clone(),
            token_audience: c.auth.audience.clone(),
            admin_role: c.auth.admin_role.clone(),
            leeway: c.auth.leeway_seconds,
            http: https_client(timeout, o.ca_file.as_ref().map(|f| c.resolve(f)).as_deref())?,
            timeout,
            provider: RwLock::new(None),
            keys: RwLock::new(None),
            used: Mutex::new(HashMap::new()),
            origin,
            config: o,
        })))
    }

    /// The name on the sign-in button.
    pub fn display_name(&self) -> String {
        if !self.config.display_name.is_empty() {
            return self.config.display_name.clone();
        }
        let rest = self.config.issuer.split_once("://").map_or("", |(_, r)| r);
        rest.split('/').next().unwrap_or_default().to_owned()
    }

    /// Whether cookies must be `Secure` (the gateway is reached over https).
    pub fn secure(&self) -> bool {
        self.origin.starts_with("https://")
    }

    /// Starts a sign-in: the provider's authorization URL and the flow cookie's value.
    pub async fn login(&self, now: u64) -> Result<(String, String), OidcError> {
        let provider = self.provider().await?;
        let mut random = [[0u8; 32]; 3];
        for r in &mut random {
            getrandom::getrandom(r).map_err(|e| unavailable("randomness", e))?;
        }
        let flow = Flow::new(random, now);
        let scope = self.config.scopes.join(" ");
        let challenge = flow.challenge();
        let query = form_encode(&[
            ("response_type", "code"),
            ("client_id", &self.config.client_id),
            ("redirect_uri", &self.config.redirect_url),
            ("scope", &scope),
            ("state", &flow.state),
            ("nonce", &flow.nonce),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ]);
        let sep = if provider.authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        let location = format!("{}{sep}{query}", provider.authorization_endpoint);
        Ok((location, self.sealer.seal(&flow)))
    }

    /// Finishes a sign-in: checks the callback's query against the flow cookie,
    /// exchanges the code, verifies the ID token and signs the gateway's session.
    pub async fn callback(
        &self,
        query: &str,
        flow_cookie: Option<&str>,
        now: u64,
    ) -> Result<SignedIn, OidcError> {
        let flow = self
            .sealer
            .open(flow_cookie.ok_or(OidcError::FlowMissing)?, now)?;
        let callback = Callback::parse(query)?;
        let code = check_callback(&callback, &flow, &self.config.issuer)?;
        self.mark_used(&flow, now)?;
        let provider = self.provider().await?;
        let id_token = self.exchange(&provider, code, &flow.verifier).await?;
        let claims = self.verify_signature(&provider, &id_token).await?;
        let exp = check_id_token(
            &claims,
            &IdTokenExpectations {
                issuer: &self.config.issuer,
                client_id: &self.config.client_id,
                nonce: &flow.nonce,
                now,
                leeway: self.leeway,
            },
        )?;
        let grant = self.rules.grant(&claims, exp, now)?;
        let jti = random_hex().ok_or_else(|| unavailable("randomness", "the kernel gave none"))?;
        let token = self
            .signer
            .sign(&TokenClaims {
                sub: grant.sub.as_str().to_owned(),
                exp: grant.exp,
                iat: now,
                iss: self.token_issuer.clone(),
                aud: self.token_audience.clone(),
                roles: if grant.admin {
                    vec![self.admin_role.clone()]
                } else {
                    Vec::new()
                },
                jti: Some(jti),
                sid: None,
            })
            .map_err(|e| unavailable("signing the session", e))?;
        Ok(SignedIn {
            token,
            grant,
            id_token,
        })
    }

    /// Where the browser goes after its session was cleared: the provider's end of
    /// session when it has one (and this browser signed in through it), else the page.
    pub async fn logout_location(&self, id_token: Option<&str>) -> String {
        let back = format!("{}/", self.origin);
        let Some(id_token) = id_token else {
            return "/".into();
        };
        let provider = match self.provider().await {
            Ok(p) => p,
            Err(e) => {
                tracing::info!(error = %e, "no provider logout: discovery failed");
                return "/".into();
            }
        };
        let Some(end) = provider.end_session_endpoint.as_deref() else {
            return "/".into();
        };
        let query = form_encode(&[
            ("id_token_hint", id_token),
            ("post_logout_redirect_uri", &back),
            ("client_id", &self.config.client_id),
        ]);
        let sep = if end.contains('?') { '&' } else { '?' };
        format!("{end}{sep}{query}")
    }

    /// Remembers a flow as used; a second callback of the same flow is a replay.
    fn mark_used(&self, flow: &Flow, now: u64) -> Result<(), OidcError> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if used.len() >= MAX_USED {
            used.retain(|_, exp| *exp > now);
        }
        if used.len() >= MAX_USED {
            // Still full of live flows: forget an arbitrary one rather than grow.
            if let Some(k) = used.keys().next().cloned() {
                used.remove(&k);
            }
        }
        match used.insert(flow.state.clone(), flow.exp) {
            Some(_) => Err(OidcError::Replayed),
            None => Ok(()),
        }
    }

    /// The provider's metadata, discovered once and kept; a failed discovery is tried
    /// again at the next sign-in.
    async fn provider(&self) -> Result<Arc<ProviderMeta>, OidcError> {
        if let Some(p) = self
            .provider
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Ok(p);
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let body = self.get(&url).await?;
        let meta: ProviderMeta =
            serde_json::from_slice(&body).map_err(|e| unavailable("discovery document", e))?;
        if meta.issuer != self.config.issuer {
            // OpenID Connect Discovery §4.3: a document for another issuer is not used.
            return Err(unavailable(
                "discovery",
                format!("the document names issuer {:?}", meta.issuer),
            ));
        }
        let meta = Arc::new(meta);
        *self.provider.write().unwrap_or_else(|p| p.into_inner()) = Some(meta.clone());
        Ok(meta)
    }

    /// Verifies the ID token's signature with the provider's keys, fetching them when
    /// none are known or the token names a key that is not (a rotation), at most every
    /// [`KEYS_REFETCH`].
    async fn verify_signature(
        &self,
        provider: &ProviderMeta,
        id_token: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>, OidcError> {
        let cached = self.keys.read().unwrap_or_else(|p| p.into_inner()).clone();
        let keys = match cached {
            Some(k) => k,
            None => self.fetch_keys(provider).await?,
        };
        let invalid = |e: TokenError| OidcError::InvalidIdToken(e.reason().into());
        match keys.verifier.verify_signature(id_token.as_bytes()) {
            // A token naming a key not (yet) known, or without `kid` and verified by
            // none of the known keys: the provider may have rotated its keys.
            Err(e @ (TokenError::UnknownKid(_) | TokenError::BadSignature))
                if keys.fetched.elapsed() >= KEYS_REFETCH =>
            {
                tracing::info!(reason = e.reason(), "the ID token is not verified by the known keys; fetching the provider's keys again");
                let keys = self.fetch_keys(provider).await?;
                keys.verifier
                    .verify_signature(id_token.as_bytes())
                    .map_err(invalid)
            }
            other => other.map_err(invalid),
        }
    }

    async fn fetch_keys(&self, provider: &ProviderMeta) -> Result<Arc<Keys>, OidcError> {
        let body = self.get(&provider.jwks_uri).await?;
        let verifier = Verifier::from_provider_jwks(&body)
            .map_err(|e| unavailable("the provider's keys", e))?;
        let keys = Arc::new(Keys {
            verifier,
            fetched: Instant::now(),
        });
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Some(keys.clone());
        Ok(keys)
    }

    /// Exchanges the code at the token endpoint; the ID token.
    async fn exchange(
        &self,
        provider: &ProviderMeta,
        code: &str,
        verifier: &str,
    ) -> Result<String, OidcError> {
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.config.redirect_url.as_str()),
            ("code_verifier", verifier),
        ];
        let secret = self
            .client_secret
            .as_deref()
            .map(|s| String::from_utf8_lossy(s).into_owned());
        let basic = self.config.token_endpoint_auth_method == "client_secret_basic";
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(&provider.token_endpoint)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json");
        match (&secret, basic) {
            (Some(secret), true) => {
                // RFC 6749 §2.3.1: both parts form-encoded before base64.
                let pair = format!(
                    "{}:{}",
                    form_encode(&[("", &self.config.client_id)]).trim_start_matches('='),
                    form_encode(&[("", secret)]).trim_start_matches('=')
                );
                req = req.header(AUTHORIZATION, format!("Basic {}", STANDARD.encode(pair)));
            }
            (Some(secret), false) => {
                form.push(("client_id", &self.config.client_id));
                form.push(("client_secret", secret));
            }
            (None, _) => form.push(("client_id", &self.config.client_id)),
        }
        let req = req
            .body(Full::new(Bytes::from(form_encode(&form))))
            .map_err(|e| unavailable("token request", e))?;
        let (status, body) = self.send(req).await?;
        if !status.is_success() {
            #[derive(Deserialize)]
            struct ErrorAnswer {
                error: String,
            }
            let why = serde_json::from_slice::<ErrorAnswer>(&body)
                .map(|e| e.error)
                .unwrap_or_else(|_| format!("status {status}"));
            return if status.is_client_error() {
                Err(OidcError::CodeRejected(why.chars().take(100).collect()))
            } else {
                Err(unavailable("token endpoint", why))
            };
        }
        let answer: TokenAnswer =
            serde_json::from_slice(&body).map_err(|e| unavailable("token answer", e))?;
        answer
            .id_token
            .ok_or_else(|| OidcError::InvalidIdToken("the token answer has no id_token".into()))
    }

    async fn get(&self, url: &str) -> Result<Bytes, OidcError> {
        let req = Request::builder()
            .method(Method::GET)
            .uri(url)
            .header(ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| unavailable(url, e))?;
        let (status, body) = self.send(req).await?;
        if !status.is_success() {
            return Err(unavailable(url, format!("status {status}")));
        }
        Ok(body)
    }

    /// One call, bounded in time and size.
    async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<(hyper::StatusCode, Bytes), OidcError> {
        let what = req.uri().to_string();
        let call = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| unavailable(&what, e))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_PROVIDER_BODY)
                .collect()
                .await
                .map_err(|e| unavailable(&what, e))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| unavailable(&what, "timed out"))?
    }
}

/// An HTTP client that speaks https with the system's roots and those of `ca_file`
/// (and plain http, which validation allows only to loopback providers).
fn https_client(
    timeout: Duration,
    ca_file: Option<&std::path::Path>,
) -> anyhow::Result<Client<HttpsConnector<HttpConnector>, Full<Bytes>>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // One unreadable system certificate does not stop the others.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| anyhow::anyhow!("auth.oidc.ca_file: {}: {e}", path.display()))?;
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("auth.oidc.ca_file: {}: {e}", path.display()))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(timeout));
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    // Sign-ins are rare: no pooled connection outlives its call.
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A relying party of a provider at 127.0.0.1:1 (never called by these tests).
    fn relying_party() -> Arc<Oidc> {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("hs");
        std::fs::write(&secret, [7u8; 40]).unwrap();
        let toml = format!(
            "[auth]\nissuer=\"t\"\naudience=\"t\"\nhs256_secret_file={:?}\n[auth.oidc]\nissuer=\"http://127.0.0.1:1\"\nclient_id=\"c\"\nredirect_url=\"http://127.0.0.1:8080/auth/callback\"\n[control]\nservice_token_file={:?}\n[profiles.p]\nimage=\"i\"\n",
            secret, secret
        );
        let c = config::load_from_str(&toml, dir.path(), Vec::new()).unwrap();
        Oidc::from_config(&c).unwrap().unwrap()
    }

    #[test]
    fn a_used_flow_is_refused_the_second_time() {
        let rp = relying_party();
        let flow = Flow::new([[1; 32], [2; 32], [3; 32]], 100);
        assert_eq!(rp.mark_used(&flow, 100), Ok(()));
        assert_eq!(rp.mark_used(&flow, 101), Err(OidcError::Replayed));
        assert_eq!(rp.display_name(), "127.0.0.1:1");
        assert!(!rp.secure());
    }

    const KEY_1: &[u8] = include_bytes!("../../policy/tests/fixtures/rsa.key");
    const KEY_2: &[u8] = include_bytes!("../../policy/tests/fixtures/rsa2.key");

    /// A provider's key set served over plain HTTP on a port of its own, counting how
    /// often it is fetched; the set can be replaced (a rotation).
    struct KeyServer {
        addr: std::net::SocketAddr,
        doc: Arc<Mutex<Vec<u8>>>,
        fetches: Arc<AtomicUsize>,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl KeyServer {
        fn serve(doc: Vec<u8>) -> KeyServer {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let doc = Arc::new(Mutex::new(doc));
            let (fetches, stop) = (
                Arc::new(AtomicUsize::new(0)),
                Arc::new(AtomicBool::new(false)),
            );
            let thread = {
                let (doc, fetches, stop) = (doc.clone(), fetches.clone(), stop.clone());
                std::thread::spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(mut conn) = conn else { continue };
                        let mut head = Vec::new();
                        let mut byte = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n")
                            && conn.read(&mut byte).is_ok_and(|n| n == 1)
                        {
                            head.push(byte[0]);
                        }
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let body = doc.lock().unwrap().clone();
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = conn.write_all(&body);
                    }
                })
            };
            KeyServer {
                addr,
                doc,
                fetches,
                stop,
                thread: Some(thread),
            }
        }

        fn url(&self) -> String {
            format!("http://{}/jwks", self.addr)
        }

        fn fetches(&self) -> usize {
            self.fetches.load(Ordering::SeqCst)
        }

        fn rotate(&self, doc: Vec<u8>) {
            *self.doc.lock().unwrap() = doc;
        }
    }

    impl Drop for KeyServer {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            // Wakes the listener so it sees the flag.
            let _ = std::net::TcpStream::connect(self.addr);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// The key set publishing the public half of `pem` as `kid`.
    fn key_set(pem: &[u8], kid: &str) -> Vec<u8> {
        use jsonwebtoken::jwk::{Jwk, JwkSet};
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem).unwrap();
        let mut jwk = Jwk::from_encoding_key(&key, jsonwebtoken::Algorithm::RS256).unwrap();
        jwk.common.key_id = Some(kid.into());
        serde_json::to_vec(&JwkSet { keys: vec![jwk] }).unwrap()
    }

    /// An ID token signed with `pem`, naming `kid` (only its signature is checked here).
    fn id_token(pem: &[u8], kid: &str) -> String {
        Signer::from_private_pem(pem, Some(kid.into()))
            .unwrap()
            .sign_claims(&serde_json::json!({"sub": "u-alice"}))
            .unwrap()
    }

    /// Moves the time the cached keys were fetched `by` into the past, as the clock
    /// moving on would.
    fn age_keys(rp: &Oidc, by: Duration) {
        let mut keys = rp.keys.write().unwrap();
        let keys = Arc::get_mut(keys.as_mut().expect("keys fetched")).expect("no other holder");
        keys.fetched -= by;
    }

    #[tokio::test]
    async fn a_rotated_key_is_fetched_again_at_most_every_five_seconds() {
        let server = KeyServer::serve(key_set(KEY_1, "k1"));
        let rp = relying_party();
        let provider = ProviderMeta {
            issuer: "http://127.0.0.1:1".into(),
            authorization_endpoint: String::new(),
            token_endpoint: String::new(),
            jwks_uri: server.url(),
            end_session_endpoint: None,
        };
        let unknown_kid = Err(OidcError::InvalidIdToken("unknown_kid".into()));
        let (old, new) = (id_token(KEY_1, "k1"), id_token(KEY_2, "k2"));
        assert!(rp.verify_signature(&provider, &old).await.is_ok());
        assert_eq!(
            server.fetches(),
            1,
            "the keys are fetched at the first sign-in"
        );

        // The provider rotates: a token of its new key is refused until the keys were
        // fetched 5 s ago (the documented figure), without asking the provider again.
        let promised = Duration::from_secs(5);
        server.rotate(key_set(KEY_2, "k2"));
        assert_eq!(
            rp.verify_signature(&provider, &new).await.map(drop),
            unknown_kid
        );
        age_keys(&rp, promised - Duration::from_secs(1));
        assert_eq!(
            rp.verify_signature(&provider, &new).await.map(drop),
            unknown_kid
        );
        assert_eq!(server.fetches(), 1, "not fetched again within {promised:?}");

        // 5 s after the last fetch: fetched again, and the new key verifies.
        age_keys(&rp, Duration::from_secs(1));
        assert!(rp.verify_signature(&provider, &new).await.is_ok());
        assert_eq!(server.fetches(), 2);
        // A key the new set lacks is refused, again without a fetch: the keys are fresh.
        assert_eq!(
            rp.verify_signature(&provider, &old).await.map(drop),
            unknown_kid
        );
        assert_eq!(server.fetches(), 2);
    }
}
