//! termgate's terminals mounted in a Pingora proxy of your own.
//!
//! [`Module`] is termgate's admission and terminal tunnel without the rest of the
//! gateway (no sign-in, API, sessions page or admin listener). It is built from
//! termgate's configuration — the file `termgate-gateway` reads — into the parts the
//! gateway itself runs on: the token verifier, the route cache fed by control's route
//! feed, the registry of open terminals and the enforcement that closes them. The
//! `termgate-gateway` binary is built the same way ([`Module::into_proxy`]).
//!
//! Three calls, from your `ProxyHttp::request_filter`, with your mount prefix removed
//! from the path (`/terminals/s/<id>/ws` → `/s/<id>/ws`):
//!
//! 1. [`Module::new`] once, then add [`Module::take_services`] to your `Server`: the
//!    route feed (which closes the terminals of ended sessions, locked users and revoked
//!    sign-ins), the token-expiry sweeper, the reporters to control, and ttyd's health
//!    check when `gateway.ttyd_upstreams` is set.
//! 2. [`Module::admit`] decides a request head: [`Admission::Admitted`], or
//!    [`Admission::Refused`] with termgate's status and JSON body (401 without a
//!    credential, 403 for a cross-site Origin, 404 — the same body — for an unknown id
//!    or another user's session). Nothing has reached ttyd yet.
//! 3. [`Module::serve`] runs an admitted request: a websocket leaves Pingora for
//!    termgate's own tunnel ([`Served::Answered`]); the page `/s/<id>/` and
//!    `/s/<id>/token` come back as [`Served::Proxy`], the request head already rewritten
//!    into the one ttyd gets (ttyd's path, the verified user; no `Cookie`,
//!    `Authorization`, `X-Termgate-*` nor any `arg` of the client's), for your
//!    `upstream_peer` to return.
//!
//! ```no_run
//! use async_trait::async_trait;
//! use gateway::module::{Admission, Module, Served};
//! use pingora::prelude::HttpPeer;
//! use pingora::proxy::{ProxyHttp, Session};
//!
//! struct Team {
//!     terminals: Module,
//! }
//!
//! #[async_trait]
//! impl ProxyHttp for Team {
//!     /// The ttyd that serves an admitted page or token.
//!     type CTX = Option<Box<HttpPeer>>;
//!
//!     fn new_ctx(&self) -> Self::CTX {
//!         None
//!     }
//!
//!     async fn request_filter(
//!         &self,
//!         session: &mut Session,
//!         ttyd: &mut Self::CTX,
//!     ) -> pingora::Result<bool> {
//!         let path = session.req_header().uri.path().to_owned();
//!         let Some(rest) = path.strip_prefix("/terminals") else {
//!             return Ok(false); // the team's own routes
//!         };
//!         match self.terminals.admit(session, rest).await {
//!             Admission::Refused(refused) => {
//!                 refused.answer(session).await?;
//!                 Ok(true)
//!             }
//!             Admission::Admitted(admitted) => {
//!                 match self.terminals.serve(session, admitted).await? {
//!                     Served::Answered => Ok(true),
//!                     Served::Proxy(peer) => {
//!                         *ttyd = Some(peer);
//!                         Ok(false)
//!                     }
//!                 }
//!             }
//!         }
//!     }
//!
//!     async fn upstream_peer(
//!         &self,
//!         _session: &mut Session,
//!         ttyd: &mut Self::CTX,
//!     ) -> pingora::Result<Box<HttpPeer>> {
//!         ttyd.clone().ok_or_else(|| pingora::Error::new_str("no upstream"))
//!     }
//! }
//!
//! fn main() -> anyhow::Result<()> {
//!     let config = config::load(std::path::Path::new("termgate.toml"))?;
//!     let mut terminals = Module::new(config)?;
//!     let mut server = pingora::server::Server::new(None)?;
//!     server.bootstrap();
//!     server.add_services(terminals.take_services());
//!     let team = Team { terminals };
//!     let mut proxy = pingora::proxy::http_proxy_service(&server.configuration, team);
//!     proxy.add_tcp("127.0.0.1:8000");
//!     server.add_service(proxy);
//!     server.run_forever();
//! }
//! ```
//!
//! `gateway/examples/own_proxy.rs` is that proxy, complete. What the module keeps of
//! termgate's gateway: the `Origin` allow-list is `gateway.allowed_origins` (list your
//! proxy's origin there); the credential is termgate's bearer token or its cookie
//! (`auth.cookie_name`); the terminal limits, recordings and audit lines are the
//! gateway's. A websocket's tunnel needs an HTTP/1 connection, plain or TLS.

use std::sync::Arc;
use std::time::Duration;

use config::Config;
use pingora::lb::health_check::TcpHealthCheck;
use pingora::lb::LoadBalancer;
use pingora::prelude::HttpPeer;
use pingora::proxy::Session;
use pingora::services::background::background_service;
use pingora::services::ServiceWithDependents;
use policy::{Refusal, SessionId, TerminalPart};

use crate::certificate::{Renewable, Renewals};
use crate::proxy::{mounted, Proxy, TestHooks, TtydUpstream};
use crate::services::feed::{ExpirySweeper, FeedFollower};
use crate::services::reporter::ActivityReporter;
use crate::services::uploader::Uploader;
use crate::state::Gateway;

/// termgate's admission and terminal tunnel, for a Pingora proxy of your own.
pub struct Module {
    proxy: Proxy,
    services: Vec<Box<dyn ServiceWithDependents>>,
}

/// What [`Module::admit`] decided.
pub enum Admission {
    /// Allowed: hand it to [`Module::serve`].
    Admitted(Admitted),
    /// Refused: answer it with [`Refused::answer`] (or its status and body).
    Refused(Refused),
}

/// An admitted terminal request: the verified user, the session's route and, for a
/// websocket, its slot among the open terminals (given back if this is dropped
/// unserved).
pub struct Admitted(Box<mounted::Admitted>);

/// A refused terminal request, already logged as the gateway logs its refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(Refusal);

/// What [`Module::serve`] did.
#[derive(Debug)]
pub enum Served {
    /// Answered: the websocket's tunnel runs on its own, or why it could not open was
    /// answered. `request_filter` returns `Ok(true)`.
    Answered,
    /// The page or the token: proxy the request, whose head is now the one ttyd gets,
    /// to this peer (return it from `upstream_peer`; `request_filter` returns
    /// `Ok(false)`).
    Proxy(Box<HttpPeer>),
}

impl Module {
    /// Builds termgate's terminal path from its configuration (a [`Config`], or one
    /// shared as an `Arc`). Needs `control.service_token_file` (the route feed),
    /// `gateway.control_url` (`http://` on loopback, or `https://` with `pki.ca_file`)
    /// and ttyd's address (`ttyd.socket` or `gateway.ttyd_upstreams`); nothing runs
    /// until the services are added to a server.
    pub fn new(config: impl Into<Arc<Config>>) -> anyhow::Result<Module> {
        let config = config.into();
        let g = &config.gateway;
        let state = Gateway::new(Arc::clone(&config))?;
        let control_addr = state.control_endpoint.clone();
        let (ttyd, health) = if g.ttyd_upstreams.is_empty() {
            let socket = config
                .resolve(&config.ttyd.socket)
                .to_string_lossy()
                .into_owned();
            (TtydUpstream::Unix(socket), None)
        } else {
            let mut lb = LoadBalancer::try_from_iter(g.ttyd_upstreams.iter().map(String::as_str))
                .map_err(|e| anyhow::anyhow!("gateway.ttyd_upstreams: {e}"))?;
            lb.set_health_check(TcpHealthCheck::new());
            lb.health_check_frequency = Some(Duration::from_secs(1));
            let bg = background_service("ttyd health check", lb);
            let task = bg.task();
            (TtydUpstream::Tcp(task), Some(bg))
        };
        let mut services: Vec<Box<dyn ServiceWithDependents>> = vec![
            Box::new(background_service(
                "route feed",
                FeedFollower(Arc::clone(&state)),
            )),
            Box::new(background_service(
                "input reports",
                ActivityReporter {
                    activity: Arc::clone(&state.activity),
                    terminals: Arc::clone(&state.terminals),
                    control: state.control.clone(),
                    metrics: Arc::clone(&state.metrics),
                    listen: g.listen.clone(),
                    activity_report_ms: g.activity_report_ms,
                    terminal_report_ms: g.terminal_report_ms,
                },
            )),
            Box::new(background_service(
                "recording uploads",
                Uploader {
                    recordings: Arc::clone(&state.recordings),
                    control: state.control.clone(),
                    max_recording_bytes: config.control.max_recording_bytes,
                },
            )),
            Box::new(background_service(
                "token expiry",
                ExpirySweeper(Arc::clone(&state)),
            )),
        ];
        if let Some(h) = health {
            services.push(Box::new(h));
        }
        if let Some(tls) = &state.pool_tls {
            services.push(Box::new(background_service(
                "pool certificate renewals",
                Renewals(vec![Renewable {
                    what: "certificate for the pools (gateway.client_cert_file)",
                    certificate: Arc::clone(tls.certificate()),
                }]),
            )));
        }
        Ok(Module {
            proxy: Proxy {
                g: state,
                ttyd,
                control_addr,
                hooks: TestHooks::default(),
            },
            services,
        })
    }

    /// The background services the terminal path needs, for the server the module runs
    /// in (`Server::add_services`): the route feed and its enforcement, the token-expiry
    /// sweeper, the reporters of input, open terminals and audit lines to control, the
    /// recording uploader, ttyd's health check when `gateway.ttyd_upstreams` is set, and
    /// the renewals of `gateway.client_cert_file` when it is set.
    /// Handed out once; later calls return none.
    pub fn take_services(&mut self) -> Vec<Box<dyn ServiceWithDependents>> {
        std::mem::take(&mut self.services)
    }

    /// The shared state: configuration, route cache, open terminals, metrics.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.proxy.g
    }

    /// The whole gateway on the same parts: `termgate-gateway`'s `ProxyHttp`, with
    /// `hooks` (take the services first).
    pub fn into_proxy(self, hooks: TestHooks) -> Proxy {
        Proxy {
            hooks,
            ..self.proxy
        }
    }

    /// Admits the request at `path` — the request's path with your mount prefix
    /// removed: `/s/<id>/`, `/s/<id>/token` or `/s/<id>/ws` (a query is ignored; any
    /// other path is termgate's 404 `not_found`) — from its head: the credential
    /// (bearer header or cookie), the websocket handshake and `Origin`, the session's
    /// route and the access decision, as the gateway admits it.
    pub async fn admit(&self, session: &mut Session, path: &str) -> Admission {
        match self.proxy.admit_mounted(session, path.as_bytes()).await {
            Ok(admitted) => Admission::Admitted(Admitted(Box::new(admitted))),
            Err(refusal) => Admission::Refused(Refused(refusal)),
        }
    }

    /// Serves an admitted request: a websocket through termgate's own tunnel (the
    /// connection leaves Pingora, and is closed by enforcement when access ends), the
    /// page and the token back to your proxy as [`Served::Proxy`]. An error is a failure
    /// to answer at all (the connection is gone).
    pub async fn serve(
        &self,
        session: &mut Session,
        admitted: Admitted,
    ) -> pingora::Result<Served> {
        Ok(
            match self.proxy.serve_mounted(session, *admitted.0).await? {
                None => Served::Answered,
                Some(peer) => Served::Proxy(peer),
            },
        )
    }
}

impl Admitted {
    /// The session.
    pub fn session(&self) -> SessionId {
        self.0.session
    }

    /// Page, token or websocket.
    pub fn part(&self) -> TerminalPart {
        self.0.part
    }

    /// The verified user.
    pub fn sub(&self) -> Option<&str> {
        self.0.sub()
    }
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("session", &self.0.session)
            .field("part", &self.0.part)
            .field("sub", &self.0.sub())
            .finish_non_exhaustive()
    }
}

impl Refused {
    /// The refusal: status, stable code and message.
    pub fn refusal(&self) -> &Refusal {
        &self.0
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.0.status
    }

    /// The JSON body: `{"error":{"code":…,"message":…}}`.
    pub fn body(&self) -> Vec<u8> {
        self.0.body()
    }

    /// Answers it as the gateway does: JSON (an HTML page saying the same to a browser
    /// navigating), never cached; a refused websocket handshake ends its connection.
    pub async fn answer(&self, session: &mut Session) -> pingora::Result<()> {
        crate::proxy::refuse(session, &self.0).await
    }
}
