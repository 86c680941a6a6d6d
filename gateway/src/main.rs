//! `termgate-gateway`: the single ingress.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use gateway::certificate::{Certificate, Renewable, Renewals};
use gateway::head_deadline::HeadDeadlineApp;
use gateway::module::Module;
use gateway::proxy::TestHooks;
use gateway::services::admin::Admin;
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
    let config = match config::telemetry::load_or_refuse(
        "termgate-gateway",
        &cli.config,
        config::Part::Gateway,
    ) {
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
    // The gateway is termgate's module (admission, tunnel, route feed, reporters) with
    // the rest of its routes and its own listeners around it.
    let mut module = Module::new(Arc::clone(&config))?;
    let services = module.take_services();
    let state = Arc::clone(module.gateway());

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

    let mut http = pingora::proxy::HttpProxy::new(
        module.into_proxy(TestHooks::from_env()),
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
            let certificate = Certificate::load(
                &config.resolve(cert),
                &config.resolve(key),
                "gateway.tls_cert_file",
                "gateway.tls_key_file",
            )?;
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
            Some(Renewals(vec![Renewable {
                what: "TLS certificate",
                certificate,
            }]))
        }
        _ => {
            proxy.add_tcp(&g.listen);
            None
        }
    };
    let mut admin = Service::new("termgate admin".into(), Admin(Arc::clone(&state)));
    admin.add_tcp(&g.admin_listen);

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    heap_trim::start(Arc::clone(&state));
    server.add_service(proxy);
    server.add_service(admin);
    server.add_services(services);
    if let Some(r) = renewals {
        server.add_service(background_service("certificate renewals", r));
    }
    tracing::info!(listen = %g.listen, admin = %g.admin_listen, "gateway is serving");
    server.run_forever();
}

/// Gives glibc's free heap pages back to the system after terminals opened or closed.
///
/// Opening a terminal allocates far more than the terminal keeps (Pingora's request and
/// its buffers, the ttyd's answer, the handshake): freed, that memory stays resident
/// between the allocations that live on, and glibc returns only the free top of each
/// arena by itself. A gateway that opened and closed thousands of terminals so kept
/// megabytes it no longer used (5,000 upgrade-and-close cycles: 9 MiB), and the idle
/// terminals opened after them landed in those holes rather than in fresh pages.
/// `malloc_trim` releases every free page of every arena; it runs on this thread at most
/// once per `EVERY` (10 s), and only when terminals opened or closed since the
/// last one.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod heap_trim {
    use std::sync::Arc;
    use std::time::Duration;

    use gateway::metrics::Label;
    use gateway::state::Gateway;

    /// How often terminals' comings and goings are looked at.
    pub(super) const EVERY: Duration = Duration::from_secs(10);

    /// Terminals open now, and terminal requests allowed so far (counted at their access
    /// lines: a tunnelled terminal's when it ends).
    fn activity(g: &Gateway) -> (usize, u64) {
        let ended = g
            .metrics
            .upgrades
            .get_or_create(&Label { kind: "allow" })
            .get();
        (g.terminals.open(), ended)
    }

    pub(super) fn start(g: Arc<Gateway>) {
        let spawned = std::thread::Builder::new()
            .name("heap trim".into())
            .spawn(move || {
                let mut trimmed_at = activity(&g);
                loop {
                    std::thread::sleep(EVERY);
                    let now = activity(&g);
                    if now != trimmed_at {
                        // SAFETY: malloc_trim only walks and releases glibc's own free
                        // chunks, under each arena's lock.
                        unsafe {
                            libc::malloc_trim(0);
                        }
                        trimmed_at = now;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no heap trim thread: freed heap pages stay resident");
        }
    }
}
