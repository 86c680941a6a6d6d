//! Where an allowed request goes and what of it arrives there: the upstream (control, or a
//! ttyd of the pool) and the rewritten request head, which carries no identity the
//! client claimed — only the one the gateway verified.

use std::sync::Arc;
use std::time::Duration;

use pingora::http::RequestHeader;
use pingora::lb::{selection::RoundRobin, LoadBalancer};
use pingora::prelude::HttpPeer;
use pingora::{Error, ErrorType, Result};
use std::net::ToSocketAddrs;

use policy::feed::{TtydAddr, TtydAddress};
use policy::{Principal, TerminalPart};

use crate::certificate::{no_client_certificate, ControlEndpoint, PoolTls};

/// Where ttyd is.
pub enum TtydUpstream {
    /// A unix socket (single host).
    Unix(String),
    /// Internal addresses, balanced with health checks.
    Tcp(Arc<LoadBalancer<RoundRobin>>),
}

/// Where an allowed request goes.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// control, at this path and query, bounded.
    Control(ControlCall),
    /// A ttyd: the route's, or the gateway's own pool.
    Ttyd(TtydRequest),
}

/// A call proxied to control.
#[derive(Debug, Clone)]
pub struct ControlCall {
    /// control's path and query.
    pub path: String,
    /// Bound on connecting and on each write (`gateway.control_timeout_ms`).
    pub timeout: Duration,
    /// Bound on each read of control's answer: `timeout`, plus control's own bound on
    /// what the call waits for in Docker, so that a slow Docker is not cut short while
    /// a hung control still answers 504.
    pub answer_within: Duration,
    /// For a recording link's play: the viewer the gateway verified, sent as
    /// `X-Termgate-Viewer` (the call carries the service token).
    pub viewer: Option<String>,
}

/// What goes to a terminal's ttyd.
#[derive(Debug, Clone)]
pub struct TtydRequest {
    /// Page, token or websocket.
    pub part: TerminalPart,
    /// ttyd's `arg` (a Docker session's container); never set for a target.
    pub arg: Option<String>,
    /// Where that ttyd listens; `None`: the gateway's own pool.
    pub address: Option<TtydAddress>,
    /// A header the target's ttyd expects (name, value), set after the client's copy
    /// is dropped.
    pub credential: Option<(String, String)>,
    /// For a `ttyd -c` target's websocket: the token its first message must carry.
    pub auth_token: Option<String>,
    /// What of the terminal is recorded (the route's `record`).
    pub record: policy::feed::Recording,
}

impl Upstream {
    /// The upstream to connect to (Pingora's `HttpPeer`); `key` spreads requests over
    /// the ttyd pool. Control over `https://` is reached over TLS checked against
    /// `pki.ca_file`. A `tls://` pool's front is reached over TLS presenting `pools`'
    /// certificate (without one, an error that names `gateway.client_cert_file`).
    pub(super) fn peer(
        &self,
        control: &ControlEndpoint,
        ttyd: &TtydUpstream,
        pools: Option<&PoolTls>,
        key: u64,
    ) -> Result<HttpPeer> {
        Ok(match self {
            Upstream::Control(call) => {
                // A control that takes the connection but never answers (hung, or
                // stopped) holds no caller past these.
                let mut p = control.peer()?;
                p.options.connection_timeout = Some(call.timeout);
                p.options.write_timeout = Some(call.timeout);
                p.options.read_timeout = Some(call.answer_within);
                p
            }
            Upstream::Ttyd(TtydRequest {
                address: Some(address),
                ..
            }) => match address.pick(key) {
                Some(TtydAddr::Unix(path)) => HttpPeer::new_uds(path, false, String::new())?,
                Some(TtydAddr::Tcp(addr)) => HttpPeer::new(resolve(addr)?, false, String::new()),
                Some(TtydAddr::Tls(addr)) => {
                    let pools = pools.ok_or_else(no_client_certificate)?;
                    pools.peer(addr, resolve(addr)?)
                }
                None => {
                    return Err(Error::explain(
                        ErrorType::ConnectNoRoute,
                        "the route names no ttyd address",
                    ))
                }
            },
            Upstream::Ttyd(_) => match ttyd {
                TtydUpstream::Unix(path) => HttpPeer::new_uds(path, false, String::new())?,
                TtydUpstream::Tcp(lb) => {
                    let backend = lb.select(&key.to_le_bytes(), 256).ok_or_else(|| {
                        Error::explain(ErrorType::ConnectNoRoute, "no healthy ttyd upstream")
                    })?;
                    HttpPeer::new(backend, false, String::new())
                }
            },
        })
    }

    /// Rewrites the request head for this upstream: ttyd's own path for the terminal
    /// part (the container as the websocket's `arg`) and the verified user; control's
    /// path and the verified token.
    pub(super) fn rewrite(
        &self,
        up: &mut RequestHeader,
        principal: Option<&Principal>,
        token: Option<&str>,
    ) -> Result<()> {
        match self {
            Upstream::Ttyd(t) => {
                let base = t.address.as_ref().map_or("", |a| a.base_path.as_str());
                let path = t.part.upstream_path();
                let target = match (t.part, &t.arg) {
                    (TerminalPart::Ws, Some(arg)) => format!("{base}{path}?arg={arg}"),
                    _ => format!("{base}{path}"),
                };
                set_uri(up, &target)?;
                if t.part != TerminalPart::Ws {
                    up.remove_header("upgrade");
                    up.remove_header("connection");
                }
                if let Some(p) = principal {
                    up.insert_header("X-Termgate-User", p.sub.as_str())?;
                }
                if t.auth_token.is_some() || t.arg.is_some() || !t.record.is_off() {
                    // The first message is rewritten on its way up, a Docker session's
                    // input clock reads each message's first byte (typing, not a resize,
                    // keeps it alive), and a recording reads ttyd's messages both ways:
                    // they must be plain frames, so no compression is negotiated for
                    // this websocket.
                    up.remove_header("sec-websocket-extensions");
                }
                if let Some((name, value)) = &t.credential {
                    up.remove_header(name.as_str());
                    up.insert_header(name.clone(), value.as_str())?;
                }
            }
            Upstream::Control(call) => {
                set_uri(up, &call.path)?;
                up.remove_header("upgrade");
                up.remove_header("connection");
                if let Some(t) = token {
                    up.insert_header("Authorization", format!("Bearer {t}"))?;
                }
                if let Some(v) = &call.viewer {
                    up.insert_header("X-Termgate-Viewer", v.as_str())?;
                }
            }
        }
        Ok(())
    }
}

/// The headers through which proxies in front of a web terminal commonly name the user
/// (ttyd's `-H`, `auth_request`, oauth2-proxy): a client's copy is never passed on.
const CLAIMED_USER_HEADERS: [&str; 8] = [
    "proxy-authorization",
    "remote-user",
    "x-remote-user",
    "x-forwarded-user",
    "x-forwarded-email",
    "x-auth-request-user",
    "x-auth-request-email",
    "x-webauth-user",
];

/// Makes `up` the head an upstream gets: no identity of the client's
/// ([`strip_identity`]), then the upstream's own rewrite (path, `arg`, the verified
/// user, a target's credential). The one place both paths to an upstream — Pingora's
/// and a terminal's own tunnel — prepare a request.
pub(super) fn prepare(
    up: &mut RequestHeader,
    upstream: &Upstream,
    principal: Option<&Principal>,
    token: Option<&str>,
) -> Result<()> {
    strip_identity(up);
    upstream.rewrite(up, principal, token)
}

/// Removes every header through which a client could claim an identity: nothing the
/// client says about who it is reaches an upstream. (A target's own credential header,
/// whatever its name, is replaced in [`Upstream::rewrite`].)
pub(super) fn strip_identity(up: &mut RequestHeader) {
    let claimed: Vec<_> = up
        .headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k == "cookie"
                || k == "authorization"
                || k.starts_with("x-termgate-")
                || CLAIMED_USER_HEADERS.contains(&k)
        })
        .cloned()
        .collect();
    for k in claimed {
        up.remove_header(&k);
    }
}

/// The first address `host:port` resolves to.
fn resolve(addr: &str) -> Result<std::net::SocketAddr> {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            Error::explain(
                ErrorType::ConnectNoRoute,
                "the ttyd address does not resolve",
            )
        })
}

fn set_uri(up: &mut RequestHeader, target: &str) -> Result<()> {
    let uri = target
        .parse()
        .map_err(|e| Error::because(ErrorType::InternalError, "bad upstream uri", e))?;
    up.set_uri(uri);
    Ok(())
}

/// The error of a phase that needs the upstream before one was chosen.
pub(super) fn no_upstream() -> Box<Error> {
    Error::explain(ErrorType::InternalError, "no upstream chosen")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_identities_are_stripped_the_verified_one_set_and_read_frames_left_uncompressed() {
        let mut up = RequestHeader::build("GET", b"/s/x/ws", None).unwrap();
        for (k, v) in [
            ("Cookie", "termgate_session=t"),
            ("Authorization", "Bearer t"),
            ("X-Termgate-User", "root"),
            ("X-Remote-User", "root"),
            ("Remote-User", "root"),
            ("Proxy-Authorization", "Basic cm9vdDo="),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Extensions", "permessage-deflate"),
        ] {
            up.append_header(k, v).unwrap();
        }
        let target = up.clone();
        strip_identity(&mut up);
        let principal = Principal {
            sub: policy::Sub::parse("alice").unwrap(),
            admin: false,
            roles: Vec::new(),
            expires_at: 0,
            issued_at: 0,
            jti: None,
        };
        let ws = Upstream::Ttyd(TtydRequest {
            part: TerminalPart::Ws,
            arg: Some("c1".into()),
            address: None,
            credential: None,
            auth_token: None,
            record: Default::default(),
        });
        ws.rewrite(&mut up, Some(&principal), Some("t")).unwrap();
        assert_eq!(up.uri, "/ws?arg=c1");
        assert_eq!(up.headers.get("x-termgate-user").unwrap(), "alice");
        assert_eq!(up.headers.get("upgrade").unwrap(), "websocket");
        for claimed in [
            "cookie",
            "authorization",
            "x-remote-user",
            "remote-user",
            "proxy-authorization",
        ] {
            assert!(up.headers.get(claimed).is_none(), "{claimed} was passed on");
        }
        // A Docker session's messages are read for its input clock: no compression.
        assert!(up.headers.get("sec-websocket-extensions").is_none());
        // A target's terminal, read for nothing, keeps what the browser offered.
        let mut up = target;
        let external = Upstream::Ttyd(TtydRequest {
            part: TerminalPart::Ws,
            arg: None,
            address: None,
            credential: None,
            auth_token: None,
            record: Default::default(),
        });
        external.rewrite(&mut up, Some(&principal), None).unwrap();
        assert_eq!(
            up.headers.get("sec-websocket-extensions").unwrap(),
            "permessage-deflate"
        );
    }
}
