//! `termgate-gateway`: the single ingress.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use gateway::certificate::{Certificate, Renewals};
use gateway::head_deadline::HeadDeadlineApp;
use gateway::proxy::{Proxy, TestHooks, TtydUpstream};
use gateway::services::admin::Admin;
use gateway::services::feed::{ExpirySweeper, FeedFollower};
use gateway::state::Gateway;
use pingora::lb::health_check::TcpHealthCheck;
use pingora::lb::LoadBalancer;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

#[derive(Parser)]
#[command(name = "termgate-gateway", version, about = "termgate gateway")]
struct Cli {
    /// Configuration file.
    #[arg(long, default_value = "termgate.toml")]
    config: PathBuf,
    /// Take the listeners over from a running gateway (zero-downtime upgrade); then send
    /// SIGQUIT to the old process.
    #[arg(long)]
    upgrade: bool,
    /// Validate the configuration and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match config::telemetry::load_or_refuse("termgate-gateway", &cli.config) {
        Ok(c) => c,
        Err(status) => return status,
    };
    if cli.check {
        println!("configuration {} is valid", cli.config.display());
        return ExitCode::SUCCESS;
    }
    config::telemetry::init_tracing_with(gateway::audit::layer());
    match run(config, cli.upgrade) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("termgate-gateway: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: config::Config, upgrade: bool) -> anyhow::Result<()> {
    let config = Arc::new(config);
    let g = &config.gateway;
    let control_addr = g
        .control_url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("gateway.control_url: must start with http://"))?
        .to_owned();
    let state = Gateway::new(Arc::clone(&config))?;

    let conf = ServerConf {
        grace_period_seconds: Some(g.drain_seconds),
        graceful_shutdown_timeout_seconds: Some(1),
        upgrade_sock: config
            .resolve(&g.upgrade_socket)
            .to_string_lossy()
            .into_owned(),
        pid_file: config.resolve(&g.pid_file).to_string_lossy().into_owned(),
        threads: 2,
        ..ServerConf::default()
    };
    let opt = Opt {
        upgrade,
        ..Opt::default()
    };
    let mut server = Server::new_with_opt_and_conf(opt, conf);
    server.bootstrap();

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

    let mut http = pingora::proxy::HttpProxy::new(
        Proxy {
            g: Arc::clone(&state),
            ttyd,
            control_addr,
            hooks: TestHooks::from_env(),
        },
        Arc::clone(&server.configuration),
    );
    http.handle_init_modules();
    // Every connection's request heads are bounded as a whole (slow-header clients).
    let mut proxy = Service::new(
        "termgate proxy".into(),
        HeadDeadlineApp::new(http, Duration::from_millis(g.header_timeout_ms)),
    );
    let renewals = match (&g.tls_cert_file, &g.tls_key_file) {
        (Some(cert), Some(key)) => {
            let certificate = Certificate::load(&config.resolve(cert), &config.resolve(key))?;
            // The certificate is asked for at each handshake (renewals without a restart).
            let mut tls = TlsSettings::intermediate("", "")
                .map_err(|e| anyhow::anyhow!("gateway.tls_cert_file: {e}"))?;
            tls.set_cert_resolver(Arc::clone(&certificate) as _);
            // No buffer under TLS: rustls reads whole records itself, and a terminal's
            // tunnel keeps its connection for hours.
            proxy.add_listener(
                ListenerConfig::tcp(g.listen.as_str())
                    .tls(tls)
                    .l4_buffer(L4BufferSettings::unbuffered()),
            );
            Some(Renewals(certificate))
        }
        _ => {
            proxy.add_tcp(&g.listen);
            None
        }
    };
    let mut admin = Service::new("termgate admin".into(), Admin(Arc::clone(&state)));
    admin.add_tcp(&g.admin_listen);

    server.add_service(proxy);
    server.add_service(admin);
    server.add_service(background_service(
        "route feed",
        FeedFollower(Arc::clone(&state)),
    ));
    server.add_service(background_service(
        "input reports",
        gateway::services::reporter::ActivityReporter(Arc::clone(&state)),
    ));
    server.add_service(background_service(
        "recording uploads",
        gateway::services::uploader::Uploader(Arc::clone(&state)),
    ));
    server.add_service(background_service(
        "token expiry",
        ExpirySweeper(Arc::clone(&state)),
    ));
    if let Some(r) = renewals {
        server.add_service(background_service("certificate renewals", r));
    }
    if let Some(h) = health {
        server.add_service(h);
    }
    tracing::info!(listen = %g.listen, admin = %g.admin_listen, "gateway is serving");
    server.run_forever();
}
