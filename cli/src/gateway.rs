//! One gateway as the client sees it: its URL, the TLS it is trusted with, and its HTTP
//! API — the same `/auth/session` and `/api/…` the sessions page calls.
//!
//! The sign-in's token travels as a bearer header, never as a cookie: the gateway asks
//! a cookie for an allowed `Origin` (a defence against other sites, which a program at
//! the user's terminal is not) and takes a bearer header as a program's credential, for
//! the API and the terminal alike, with every other check unchanged.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::failure::Failure;

/// How long one API call may take: a create waits on Docker behind the gateway.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long reaching the gateway may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// What the gateway's records of sign-ins name this client as.
pub const USER_AGENT: &str = concat!("termgate-cli/", env!("CARGO_PKG_VERSION"));

/// A gateway's URL, checked: `http(s)://host[:port][/base]`, kept without a trailing
/// slash (the key of its sign-in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayUrl {
    text: String,
    tls: bool,
    host: String,
    port: u16,
    base: String,
}

impl GatewayUrl {
    /// Reads a URL as the user typed it.
    pub fn parse(text: &str) -> Result<GatewayUrl, Failure> {
        let bad = |why: &str| {
            Failure::error(format!(
                "not a gateway URL: {text:?} ({why}; expected http(s)://host[:port])"
            ))
        };
        let uri: Uri = text.trim().parse().map_err(|_| bad("unreadable"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            Some(_) => return Err(bad("the scheme must be http or https")),
            None => return Err(bad("no scheme")),
        };
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("a URL holding a user name or password"));
        }
        if uri.query().is_some() {
            return Err(bad("a query"));
        }
        let host = authority.host();
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let base = uri.path().trim_end_matches('/').to_owned();
        Ok(GatewayUrl {
            text: format!(
                "{}://{}{base}",
                if tls { "https" } else { "http" },
                authority
            ),
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            base,
        })
    }

    /// The URL as kept and shown.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it speaks TLS.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// Host name or address (without IPv6 brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The websocket URL of `path` (which starts with `/`).
    pub fn websocket(&self, path: &str) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        let rest = self.text.split_once("://").map_or("", |(_, r)| r);
        format!("{scheme}://{rest}{path}")
    }

    fn http(&self, path: &str) -> String {
        format!("{}{path}", self.text)
    }
}

/// A gateway, its TLS, and the sign-in presented to it (none while signing in).
pub struct Gateway {
    /// Where it is.
    pub url: GatewayUrl,
    /// The TLS client configuration, for the terminal's websocket too.
    pub tls: Arc<rustls::ClientConfig>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    token: Option<String>,
}

/// An answer: status and body.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The body's bytes.
    pub body: Vec<u8>,
    /// Its `Set-Cookie` headers.
    pub set_cookies: Vec<String>,
}

impl Reply {
    /// The body as JSON (`Null` when it is none).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The message of the gateway's error body; else an HTML page's title (a proxy's
    /// own error page), the body's first line, or the status's name.
    pub fn message(&self) -> String {
        if let Ok(e) = serde_json::from_slice::<policy::ErrorBody>(&self.body) {
            return e.error.message;
        }
        let text = String::from_utf8_lossy(&self.body);
        let title = text
            .split_once("<title>")
            .and_then(|(_, rest)| rest.split_once("</title>"))
            .map(|(title, _)| title);
        let line = title
            .or_else(|| text.lines().next())
            .unwrap_or_default()
            .trim();
        if line.is_empty() {
            let status = hyper::StatusCode::from_u16(self.status).ok();
            return status
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no message")
                .to_owned();
        }
        line.chars().take(200).collect()
    }

    /// Whether the body is termgate's error body (`{"error":{"code","message"}}`).
    pub fn is_termgate_error(&self) -> bool {
        serde_json::from_slice::<policy::ErrorBody>(&self.body).is_ok()
    }

    /// The URL has no such endpoint: a 404 or 405 without termgate's error body, as a
    /// front proxy that passes only terminals (`deploy/nginx/termgate-authz.conf`)
    /// answers everything else itself. termgate's own 404s and 405s always carry its
    /// error body.
    pub fn not_there(&self) -> bool {
        matches!(self.status, 404 | 405) && !self.is_termgate_error()
    }

    /// Not the gateway's API answering: [`Reply::not_there`], or a body that is not
    /// JSON at all (a proxy's own page, or Caddy's empty 502 when nothing serves its
    /// other paths). Every answer of the API is JSON.
    pub fn not_the_api(&self) -> bool {
        self.not_there() || serde_json::from_slice::<Value>(&self.body).is_err()
    }
}

/// An answer whose body is read piece by piece ([`Gateway::stream`]).
pub struct Streamed {
    /// HTTP status.
    pub status: u16,
    body: hyper::body::Incoming,
}

impl Streamed {
    /// The body's next piece; `None` at its end. A body that stalls for as long as a
    /// call may take is broken off.
    pub async fn next(&mut self) -> Result<Option<Bytes>, Failure> {
        loop {
            let frame = tokio::time::timeout(CALL_TIMEOUT, self.body.frame())
                .await
                .map_err(|_| Failure::error(format!("the answer stalled for {CALL_TIMEOUT:?}")))?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(Failure::error(format!("the answer broke off: {e}"))),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    /// The rest of the body as a [`Reply`] (a refusal's JSON), its first 64 KiB.
    pub async fn reply(mut self) -> Result<Reply, Failure> {
        let mut body = Vec::new();
        while let Some(piece) = self.next().await? {
            body.extend_from_slice(&piece);
            if body.len() > 64 << 10 {
                break;
            }
        }
        Ok(Reply {
            status: self.status,
            body,
            set_cookies: Vec::new(),
        })
    }
}

impl Gateway {
    /// A client of `url`, trusting the system's roots and those in `ca_file`, presenting
    /// `token` when given.
    pub fn new(
        url: GatewayUrl,
        ca_file: Option<&Path>,
        token: Option<String>,
    ) -> Result<Gateway, Failure> {
        let tls = Arc::new(tls_config(ca_file)?);
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Gateway {
            url,
            tls,
            client,
            token,
        })
    }

    /// The sign-in's token, if one is presented.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Calls `method path` with the sign-in as a bearer header and `body` as JSON.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, Failure> {
        self.send(method, path, self.token.as_deref(), body).await
    }

    /// Calls `method path` presenting `bearer`.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Reply, Failure> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(self.url.http(path))
            .header("user-agent", USER_AGENT)
            .header("accept", "application/json");
        if let Some(token) = bearer {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let bytes = match body {
            Some(v) => {
                req = req.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(bytes))
            .map_err(|e| Failure::error(format!("{method} {path}: {e}")))?;
        let unreachable = |e: &dyn std::fmt::Display| self.unreachable(&e.to_string());
        let call = async {
            let resp = self.client.request(req).await.map_err(|e| {
                // The connector's error says little on its own; its source says what.
                let why =
                    std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
                unreachable(&why)
            })?;
            let status = resp.status().as_u16();
            let set_cookies = resp
                .headers()
                .get_all("set-cookie")
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_owned))
                .collect();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(&e))?
                .to_bytes()
                .to_vec();
            Ok(Reply {
                status,
                body,
                set_cookies,
            })
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| unreachable(&format!("no answer within {CALL_TIMEOUT:?}")))?
    }

    /// `GET path` with the sign-in, its body left to read as it comes: a recording may
    /// be larger than is worth holding whole.
    pub async fn stream(&self, path: &str) -> Result<Streamed, Failure> {
        let mut req = hyper::Request::get(self.url.http(path)).header("user-agent", USER_AGENT);
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| Failure::error(format!("GET {path}: {e}")))?;
        let resp = tokio::time::timeout(CALL_TIMEOUT, self.client.request(req))
            .await
            .map_err(|_| self.unreachable(&format!("no answer within {CALL_TIMEOUT:?}")))?
            .map_err(|e| {
                let why =
                    std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
                self.unreachable(&why)
            })?;
        Ok(Streamed {
            status: resp.status().as_u16(),
            body: resp.into_body(),
        })
    }

    /// The gateway could not be reached, or not trusted, and why.
    pub fn unreachable(&self, why: &str) -> Failure {
        let hint = if why.contains("certificate") {
            " (a private CA? sign in with termgate login URL --ca-file CA.pem)"
        } else {
            ""
        };
        Failure::error(format!(
            "cannot reach the gateway at {}: {why}{hint}",
            self.url.as_str()
        ))
    }

    /// What a refusal of `doing` means to the user: sign in again for a 401, else the
    /// gateway's own message.
    pub fn refused(&self, reply: &Reply, doing: &str) -> Failure {
        if reply.status == 401 {
            return Failure::sign_in(
                self.url.as_str(),
                "the gateway no longer accepts this sign-in",
            );
        }
        if reply.not_there() {
            return Failure::error(format!(
                "{doing}: {} has no termgate API ({}: {}); behind a front proxy that passes \
                 only terminals, termgate attach <id> is what works",
                self.url.as_str(),
                reply.status,
                reply.message()
            ));
        }
        Failure::error(format!("{doing}: {} ({})", reply.message(), reply.status))
    }
}

/// TLS as a browser would check the gateway: the system's roots, and `ca_file`'s.
fn tls_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, Failure> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // One unreadable system certificate does not stop the others.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let bad = |e: &dyn std::fmt::Display| {
            Failure::error(format!("--ca-file {}: {e}", path.display()))
        };
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(&e))?;
        if certs.is_empty() {
            return Err(bad(&"no PEM certificate in it"));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(&e))?;
        }
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .map_err(|e| Failure::error(format!("TLS: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_kept_without_a_trailing_slash_and_their_parts_read() {
        let u = GatewayUrl::parse("https://gw.example/").unwrap();
        assert_eq!(u.as_str(), "https://gw.example");
        assert_eq!((u.host(), u.port(), u.tls()), ("gw.example", 443, true));
        let u = GatewayUrl::parse("http://127.0.0.1:8080/term/").unwrap();
        assert_eq!(u.as_str(), "http://127.0.0.1:8080/term");
        assert_eq!(u.websocket("/s/x/ws"), "ws://127.0.0.1:8080/term/s/x/ws");
        let u = GatewayUrl::parse("https://[::1]:9443").unwrap();
        assert_eq!((u.host(), u.port()), ("::1", 9443));
    }

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            status,
            body: body.as_bytes().to_vec(),
            set_cookies: Vec::new(),
        }
    }

    #[test]
    fn a_front_proxys_own_answers_are_told_from_the_apis() {
        // What nginx with deploy/nginx/termgate-authz.conf answers for `/api/…` and
        // `/auth/…`, and Caddy's empty 502 when nothing serves its other paths.
        let page = |code: &str| {
            format!(
                "<html>\r\n<head><title>{code}</title></head>\r\n<body>\r\n\
                 <center><h1>{code}</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n\
                 </body>\r\n</html>\r\n"
            )
        };
        let nginx_404 = reply(404, &page("404 Not Found"));
        let nginx_405 = reply(405, &page("405 Not Allowed"));
        let caddy_502 = reply(502, "");
        for r in [&nginx_404, &nginx_405] {
            assert!(r.not_there() && r.not_the_api(), "{r:?}");
        }
        assert!(!caddy_502.not_there() && caddy_502.not_the_api());
        assert_eq!(nginx_404.message(), "404 Not Found");
        assert_eq!(caddy_502.message(), "Bad Gateway");

        // termgate's own answers, refusals included, are the API's.
        let not_found = r#"{"error":{"code":"session_not_found","message":"no such session"}}"#;
        for r in [
            reply(404, not_found),
            reply(
                405,
                r#"{"error":{"code":"method_not_allowed","message":"no"}}"#,
            ),
            reply(
                401,
                r#"{"error":{"code":"unauthenticated","message":"sign in"}}"#,
            ),
            reply(200, r#"{"sessions":[]}"#),
        ] {
            assert!(!r.not_there() && !r.not_the_api(), "{r:?}");
        }
        assert_eq!(reply(404, not_found).message(), "no such session");
    }

    #[test]
    fn what_is_not_a_gateway_url_is_refused_in_words() {
        for bad in [
            "",
            "gw.example",
            "ftp://gw.example",
            "https://",
            "https://u:p@gw.example",
            "https://gw.example/?a=b",
            "http://gw example",
        ] {
            let e = GatewayUrl::parse(bad).unwrap_err();
            assert!(e.message.starts_with("not a gateway URL"), "{bad}: {e}");
        }
    }
}
