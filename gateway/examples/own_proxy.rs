//! A team's own Pingora proxy with termgate's terminals mounted under `/terminals/`
//! ([`gateway::module`]).
//!
//! ```text
//! cargo run -p gateway --example own_proxy -- --config termgate.toml --listen 127.0.0.1:8000
//! ```
//!
//! - `GET /hello`: the team's own route, answered here.
//! - `/terminals/s/<id>/`, `/terminals/s/<id>/token`, `/terminals/s/<id>/ws`: termgate's
//!   terminals, admitted by termgate (its token as a bearer header or its cookie; the
//!   proxy's origin listed in `gateway.allowed_origins`), the websocket carried by
//!   termgate's own tunnel, the page and token proxied here to the ttyd termgate chose.
//! - Anything else: the team's 404.
//!
//! The configuration is termgate's (`termgate-gateway` reads the same file, with the
//! same `TERMGATE__…` overrides); its `gateway.listen` and admin listener are not used.

use std::path::PathBuf;
use std::process::ExitCode;

use async_trait::async_trait;
use bytes::Bytes;
use clap::Parser;
use gateway::module::{Admission, Module, Served};
use pingora::http::ResponseHeader;
use pingora::prelude::HttpPeer;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::Server;

/// Where termgate's terminals are mounted.
const MOUNT: &str = "/terminals";

#[derive(Parser)]
#[command(
    name = "own_proxy",
    about = "a Pingora proxy with termgate's terminals mounted"
)]
struct Cli {
    /// termgate's configuration file.
    #[arg(long, default_value = "termgate.toml")]
    config: PathBuf,
    /// Address this proxy listens on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: String,
}

/// The team's proxy.
struct TeamProxy {
    terminals: Module,
}

/// Per request: the ttyd that serves an admitted terminal page or token.
#[derive(Default)]
struct Ctx {
    ttyd: Option<Box<HttpPeer>>,
}

/// Writes a short plain-text answer.
async fn text(session: &mut Session, status: u16, body: &'static str) -> pingora::Result<()> {
    let mut head = ResponseHeader::build(status, Some(2))?;
    head.insert_header("Content-Type", "text/plain; charset=utf-8")?;
    head.insert_header("Content-Length", body.len().to_string())?;
    session.write_response_header(Box::new(head), false).await?;
    session
        .write_response_body(Some(Bytes::from_static(body.as_bytes())), true)
        .await
}

#[async_trait]
impl ProxyHttp for TeamProxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> pingora::Result<bool> {
        let path = session.req_header().uri.path().to_owned();
        if path == "/hello" {
            text(session, 200, "hello from the team\n").await?;
            return Ok(true);
        }
        let Some(rest) = path.strip_prefix(MOUNT).filter(|r| r.starts_with('/')) else {
            text(session, 404, "not one of the team's pages\n").await?;
            return Ok(true);
        };
        match self.terminals.admit(session, rest).await {
            Admission::Refused(refused) => {
                refused.answer(session).await?;
                Ok(true)
            }
            Admission::Admitted(admitted) => match self.terminals.serve(session, admitted).await? {
                Served::Answered => Ok(true),
                Served::Proxy(peer) => {
                    ctx.ttyd = Some(peer);
                    Ok(false)
                }
            },
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Ctx,
    ) -> pingora::Result<Box<HttpPeer>> {
        // Only an admitted terminal page or token goes on to an upstream.
        ctx.ttyd
            .clone()
            .ok_or_else(|| pingora::Error::new_str("no upstream for this request"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config =
        match config::telemetry::load_or_refuse("own_proxy", &cli.config, config::Part::Gateway) {
            Ok(c) => c,
            Err(status) => return status,
        };
    // termgate's audit lines (terminal access, terminals closed) also go to control's
    // trail, sent by the module's reporter.
    config::telemetry::init_tracing_with(gateway::audit::layer());
    match run(config, &cli.listen) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("own_proxy: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: config::Config, listen: &str) -> anyhow::Result<()> {
    let mut terminals = Module::new(config)?;
    let mut server = Server::new(None)?;
    server.bootstrap();
    server.add_services(terminals.take_services());
    let mut proxy =
        pingora::proxy::http_proxy_service(&server.configuration, TeamProxy { terminals });
    proxy.add_tcp(listen);
    server.add_service(proxy);
    tracing::info!(listen, mount = MOUNT, "the team's proxy is serving");
    server.run_forever();
}
