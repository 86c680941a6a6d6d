//! The route feed's records: what control publishes and gateways cache.
//!
//! Plain data shared by both sides of the feed; control writes it, gateways apply it.

use serde::{Deserialize, Serialize};

use crate::session_id::SessionId;

/// What a gateway needs to authorize and connect a terminal: who may open it, where its
/// ttyd listens and what to send that ttyd (design §7).
///
/// Two kinds of terminal have routes. A **Docker session** has an `owner` and a
/// `container` (ttyd's `arg`), and lives on a `host` whose pool is `upstream`. A
/// **target** (an existing ttyd that termgate fronts but does not run) has `target`:
/// the users and roles it allows and the credential its ttyd expects; no `arg` is ever
/// sent to it. Fields added after the first layout default, so older records read as
/// Docker sessions of the gateway's own pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Session (or target) id.
    pub session: SessionId,
    /// Owner `sub` of a Docker session; empty for a target (see [`Route::target`]).
    pub owner: String,
    /// Container the terminal attaches to (ttyd's `arg`); empty for a target.
    #[serde(default)]
    pub container: String,
    /// Where its ttyd listens; `None`: the gateway's own configured pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<TtydAddress>,
    /// The Docker host that runs the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The host does not answer: terminals are refused with `host_unavailable` rather
    /// than left to time out.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unreachable: bool,
    /// Set for a target: who may open it and how its ttyd is signed in to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetAccess>,
    /// Whether the gateway records its terminals (the profile's `record`).
    #[serde(default, skip_serializing_if = "Recording::is_off")]
    pub record: Recording,
    /// The read-only share links of a Docker session (see the `share` module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareGrant>,
    /// Where the read-only ttyd pool (started without `-W`) of its host listens;
    /// `None`: the gateway's own read-only pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewer_upstream: Option<TtydAddress>,
    /// The users invited to co-drive a Docker session (see the `peer` module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerGrant>,
}

/// What of a terminal the gateway records as asciicast v2 (profiles' `record` and
/// `record_input`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recording {
    /// Nothing.
    #[default]
    Off,
    /// Output and resizes.
    Output,
    /// Output, resizes and what users type.
    OutputAndInput,
}

impl Recording {
    /// From a profile's two keys.
    pub fn of(record: bool, record_input: bool) -> Self {
        match (record, record_input) {
            (false, _) => Recording::Off,
            (true, false) => Recording::Output,
            (true, true) => Recording::OutputAndInput,
        }
    }

    /// Whether nothing is recorded.
    pub fn is_off(&self) -> bool {
        *self == Recording::Off
    }
}

/// One live read-only share link of a session, as gateways need it to admit a viewer:
/// never the link's secret, only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareGrant {
    /// The share's public id (names it in the API; the first 16 hex digits of `hash`).
    pub id: String,
    /// SHA-256 of the link's token, lowercase hex.
    pub hash: String,
    /// When it stops admitting and its viewers are closed, seconds since the epoch.
    pub expires_at: u64,
    /// Most viewers at once on one gateway; `None`: no bound but the gateway's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_viewers: Option<u32>,
    /// Viewers must be signed in (the profile's `shares = "signed-in"`).
    #[serde(default)]
    pub signed_in: bool,
}

/// One user invited to co-drive a Docker session: they may open its writable terminal
/// until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerGrant {
    /// The peer's `sub`.
    pub sub: String,
    /// When the invitation lapses and the peer's terminals close, seconds since the
    /// epoch.
    pub expires_at: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Route {
    /// The route of a Docker session in the gateway's own pool.
    pub fn container(
        session: SessionId,
        owner: impl Into<String>,
        container: impl Into<String>,
    ) -> Self {
        Route {
            session,
            owner: owner.into(),
            container: container.into(),
            upstream: None,
            host: None,
            unreachable: false,
            target: None,
            record: Recording::Off,
            shares: Vec::new(),
            viewer_upstream: None,
            peers: Vec::new(),
        }
    }

    /// ttyd's `arg`: the container of a Docker session, never anything for a target.
    pub fn arg(&self) -> Option<&str> {
        (self.target.is_none() && !self.container.is_empty()).then_some(self.container.as_str())
    }

    /// Whether a terminal open on the route `self` was may stay open on `next`: the
    /// same ttyd and arg, and (for a Docker session) the same owner. A target whose
    /// allowed users or roles changed is judged per terminal by its caller.
    pub fn same_terminal(&self, next: &Route) -> bool {
        self.session == next.session
            && self.owner == next.owner
            && self.container == next.container
            && self.upstream == next.upstream
            && self.target.is_some() == next.target.is_some()
    }

    /// The shares of `self` that `next` no longer has (revoked, or dropped once expired):
    /// their viewers are closed.
    pub fn shares_gone(&self, next: &Route) -> Vec<String> {
        self.shares
            .iter()
            .filter(|g| !next.shares.iter().any(|n| n.id == g.id))
            .map(|g| g.id.clone())
            .collect()
    }
}

/// Where a ttyd listens: one or more addresses of the same pool (spread by request),
/// and the base path it was started with (`ttyd -b`), empty for none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtydAddress {
    /// `unix:/path` or `host:port`, at least one.
    pub addrs: Vec<String>,
    /// The path prefix ttyd serves under (`/base`), or empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_path: String,
}

/// One address of a ttyd, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtydAddr<'a> {
    /// A unix socket path.
    Unix(&'a str),
    /// `host:port`.
    Tcp(&'a str),
    /// `host:port` of a pool's front on another host, spoken to over mutual TLS
    /// (`tls://host:port`).
    Tls(&'a str),
}

/// Why an upstream address or URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AddressError(pub &'static str);

impl TtydAddress {
    /// Parses a target's upstream as configured: `http://host:port[/base-path]` or
    /// `unix:/absolute/path`. No userinfo, query or fragment; the base path is plain
    /// segments.
    pub fn parse_url(url: &str) -> Result<TtydAddress, AddressError> {
        if url.starts_with("unix:") {
            parse_addr(url)?;
            return Ok(TtydAddress {
                addrs: vec![url.to_owned()],
                base_path: String::new(),
            });
        }
        let rest = url
            .strip_prefix("http://")
            .ok_or(AddressError("must start with http:// or unix:"))?;
        let (authority, base) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        parse_addr(authority)?;
        let base = base.trim_end_matches('/');
        let plain = |seg: &str| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
        };
        if !base.is_empty() && !base[1..].split('/').all(plain) {
            return Err(AddressError(
                "the base path must be plain segments of A-Z a-z 0-9 - _ . ~",
            ));
        }
        Ok(TtydAddress {
            addrs: vec![authority.to_owned()],
            base_path: base.to_owned(),
        })
    }

    /// The address for request `key` (spread over the pool), parsed.
    pub fn pick(&self, key: u64) -> Option<TtydAddr<'_>> {
        if self.addrs.is_empty() {
            return None;
        }
        let i = usize::try_from(key % self.addrs.len() as u64).unwrap_or(0);
        parse_addr(&self.addrs[i]).ok()
    }
}

/// Parses one address: `unix:/absolute/path` or `host:port` (host a name or an IP
/// address, IPv6 in brackets; port 1–65535).
pub fn parse_addr(s: &str) -> Result<TtydAddr<'_>, AddressError> {
    if let Some(rest) = s.strip_prefix("tls://") {
        return match parse_addr(rest)? {
            TtydAddr::Tcp(a) => Ok(TtydAddr::Tls(a)),
            _ => Err(AddressError("tls:// is followed by host:port")),
        };
    }
    if let Some(path) = s.strip_prefix("unix:") {
        if !path.starts_with('/') || path.contains('\0') || path.len() > 107 {
            return Err(AddressError(
                "a unix socket must be an absolute path of at most 107 bytes",
            ));
        }
        return Ok(TtydAddr::Unix(path));
    }
    let (host, port) = s
        .rsplit_once(':')
        .ok_or(AddressError("must be host:port or unix:/path"))?;
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'))
    };
    if !(port_ok && host_ok) {
        return Err(AddressError(
            "must be host:port (port 1-65535) or unix:/path",
        ));
    }
    Ok(TtydAddr::Tcp(s))
}

/// Whether a parsed `host:port` is on this machine's loopback: `localhost`, 127.0.0.0/8
/// or `[::1]`.
pub fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Who may open a target, and the credential its ttyd expects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetAccess {
    /// `sub`s allowed.
    #[serde(default)]
    pub users: Vec<String>,
    /// Token roles allowed.
    #[serde(default)]
    pub roles: Vec<String>,
    /// What the gateway adds for the target's ttyd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<TargetCredential>,
}

impl TargetAccess {
    /// Whether `sub` with `roles` is on the list (admins are decided by the caller).
    pub fn allows(&self, sub: &str, roles: &[String]) -> bool {
        self.users.iter().any(|u| u == sub) || self.roles.iter().any(|r| roles.contains(r))
    }
}

impl TargetCredential {
    /// Refuses a header name that is not an HTTP token, or one that carries identity or
    /// framing the gateway itself controls (`Authorization`, `Cookie`, `Host`,
    /// hop-by-hop and websocket headers, `X-Termgate-*`).
    pub fn check(&self) -> Result<(), AddressError> {
        let TargetCredential::Header { name } = self else {
            return Ok(());
        };
        let token = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if !token {
            return Err(AddressError(
                "a header name is 1-64 characters of A-Z a-z 0-9 - _",
            ));
        }
        let lower = name.to_ascii_lowercase();
        let reserved = [
            "authorization",
            "cookie",
            "host",
            "connection",
            "upgrade",
            "content-length",
            "transfer-encoding",
            "origin",
            "te",
            "trailer",
            "proxy-authorization",
        ];
        if reserved.contains(&lower.as_str())
            || lower.starts_with("x-termgate-")
            || lower.starts_with("sec-websocket-")
        {
            return Err(AddressError(
                "that header is the gateway's own; choose another name",
            ));
        }
        Ok(())
    }
}

/// The credential a target's ttyd expects, injected by the gateway after dropping any
/// client copy; never a secret in the route itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TargetCredential {
    /// `ttyd -c user:pass`: basic auth read from this file (`user:pass`).
    BasicFile {
        /// The file, readable by the gateway.
        path: String,
    },
    /// `ttyd -H NAME`: the gateway sets header NAME to the user's `sub`.
    Header {
        /// The header's name.
        name: String,
    },
}

/// Control's answer to a one-off route lookup (`GET /v1/routes/<id>`): the route,
/// its owner's lock and the revision both are true at, read as one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteLookup {
    /// The running session's route.
    pub route: Route,
    /// Whether its owner is locked.
    #[serde(default)]
    pub owner_locked: bool,
    /// The store's revision at the time of the answer.
    pub rev: u64,
    /// The feed epoch that revision counts in (see [`FeedPage::epoch`]).
    #[serde(default)]
    pub epoch: String,
}

/// One entry of the route feed.
// Most entries are upserts: boxing the route would add an allocation to nearly every
// change for the sake of the rare lock entries.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Change {
    /// A session is running at this route (new, or changed).
    Upsert {
        /// Revision of this change.
        rev: u64,
        /// The route.
        route: Route,
    },
    /// A session no longer has a route: close its terminals.
    Remove {
        /// Revision of this change.
        rev: u64,
        /// The session.
        session: SessionId,
    },
    /// A user was locked: close their terminals, refuse them.
    Lock {
        /// Revision of this change.
        rev: u64,
        /// The user.
        sub: String,
    },
    /// A user was unlocked.
    Unlock {
        /// Revision of this change.
        rev: u64,
        /// The user.
        sub: String,
    },
    /// A credential was revoked (a sign-out, an admin's revocation): refuse it, close
    /// what it opened.
    Revoke {
        /// Revision of this change.
        rev: u64,
        /// What is revoked.
        revocation: crate::revocation::Revocation,
    },
}

impl Change {
    /// The change's revision.
    pub fn rev(&self) -> u64 {
        match self {
            Change::Upsert { rev, .. }
            | Change::Remove { rev, .. }
            | Change::Lock { rev, .. }
            | Change::Unlock { rev, .. }
            | Change::Revoke { rev, .. } => *rev,
        }
    }
}

/// The answer to a feed poll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedPage {
    /// Which life of the store the revisions count in: random each time control opens
    /// its store. A poller that names another epoch gets a reset, so a restored or
    /// rebuilt store, whose revisions tell another history, is never applied as
    /// increments.
    #[serde(default)]
    pub epoch: String,
    /// The store's revision at the time of the answer.
    pub rev: u64,
    /// True: `routes` and `locked` are the whole state, replace everything.
    pub reset: bool,
    /// Changes after the poller's revision (when not a reset).
    #[serde(default)]
    pub changes: Vec<Change>,
    /// Every route (reset only).
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Every locked user (reset only).
    #[serde(default)]
    pub locked: Vec<String>,
    /// Every revocation in force (reset only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revoked: Vec<crate::revocation::Revocation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_follows_the_profile_and_old_routes_record_nothing() {
        assert_eq!(Recording::of(false, true), Recording::Off);
        assert_eq!(Recording::of(true, false), Recording::Output);
        assert_eq!(Recording::of(true, true), Recording::OutputAndInput);
        let id = SessionId::from_random([1; 10]);
        let mut r = Route::container(id, "alice", "c1");
        let plain = serde_json::to_string(&r).unwrap();
        assert!(!plain.contains("record"), "{plain}");
        assert_eq!(
            serde_json::from_str::<Route>(&plain).unwrap().record,
            Recording::Off
        );
        r.record = Recording::OutputAndInput;
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""record":"output_and_input""#), "{text}");
        assert_eq!(serde_json::from_str::<Route>(&text).unwrap(), r);
    }

    #[test]
    fn target_urls_parse_into_an_address_and_a_base_path() {
        let a = TtydAddress::parse_url("http://127.0.0.1:7681").unwrap();
        assert_eq!(
            (a.addrs, a.base_path),
            (vec!["127.0.0.1:7681".to_owned()], String::new())
        );
        let a = TtydAddress::parse_url("http://ttyd.internal:80/team/shell/").unwrap();
        assert_eq!(a.addrs, vec!["ttyd.internal:80".to_owned()]);
        assert_eq!(a.base_path, "/team/shell");
        let a = TtydAddress::parse_url("unix:/run/ttyd/t.sock").unwrap();
        assert_eq!(a.pick(3), Some(TtydAddr::Unix("/run/ttyd/t.sock")));
        assert_eq!(
            parse_addr("tls://10.0.0.5:7681"),
            Ok(TtydAddr::Tls("10.0.0.5:7681"))
        );
        assert!(parse_addr("tls://unix:/x.sock").is_err());
        assert!(parse_addr("tls://").is_err());
        for (addr, local) in [
            ("127.0.0.1:1", true),
            ("127.9.9.9:1", true),
            ("localhost:1", true),
            ("[::1]:1", true),
            ("10.0.0.5:1", false),
            ("[::2]:1", false),
            ("localhost.example:1", false),
            ("128.0.0.1:1", false),
        ] {
            assert_eq!(is_loopback(addr), local, "{addr}");
        }
        let a = TtydAddress::parse_url("http://[::1]:7681").unwrap();
        assert_eq!(a.pick(0), Some(TtydAddr::Tcp("[::1]:7681")));
    }

    #[test]
    fn malformed_target_urls_are_refused() {
        for bad in [
            "",
            "ttyd:7681",
            "https://h:1",
            "http://h",
            "http://h:0",
            "http://h:70000",
            "http://user:pw@h:1",
            "http://h:1/a/../b",
            "http://h:1/a?x=1",
            "http://h:1/a#f",
            "http://h:1/a b",
            "http://:1",
            "http://[zz]:1",
            "unix:relative.sock",
            "unix:",
        ] {
            assert!(TtydAddress::parse_url(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pick_spreads_over_every_address() {
        let a = TtydAddress {
            addrs: vec!["a:1".into(), "b:2".into()],
            base_path: String::new(),
        };
        assert_eq!(a.pick(0), Some(TtydAddr::Tcp("a:1")));
        assert_eq!(a.pick(1), Some(TtydAddr::Tcp("b:2")));
        let none = TtydAddress {
            addrs: vec![],
            base_path: String::new(),
        };
        assert_eq!(none.pick(1), None);
    }

    #[test]
    fn header_credentials_never_name_the_gateways_own_headers() {
        let h = |n: &str| TargetCredential::Header { name: n.into() }.check();
        assert!(h("X-Remote-User").is_ok());
        for bad in [
            "",
            "Authorization",
            "cookie",
            "X-Termgate-User",
            "Sec-WebSocket-Key",
            "Host",
            "a b",
            "x:y",
        ] {
            assert!(h(bad).is_err(), "{bad:?}");
        }
        assert!(TargetCredential::BasicFile {
            path: "/etc/x".into()
        }
        .check()
        .is_ok());
    }

    #[test]
    fn records_of_the_first_layout_read_as_sessions_of_the_own_pool() {
        let id = SessionId::from_random([0; 10]);
        let first_layout = format!(r#"{{"session":"{id}","owner":"alice","container":"c1"}}"#);
        let r: Route = serde_json::from_str(&first_layout).unwrap();
        assert_eq!(r.owner, "alice");
        assert_eq!(r.arg(), Some("c1"));
        assert!(r.upstream.is_none() && r.target.is_none() && !r.unreachable);
        let json = serde_json::to_string(&Route::container(r.session, "alice", "c1")).unwrap();
        assert!(
            !json.contains("upstream") && !json.contains("target"),
            "{json}"
        );
    }

    #[test]
    fn a_target_never_gets_an_arg() {
        let mut r = Route::container(crate::SessionId::from_random([1; 10]), "", "c1");
        r.target = Some(TargetAccess {
            users: vec![],
            roles: vec![],
            credential: None,
        });
        assert_eq!(r.arg(), None);
    }
}
