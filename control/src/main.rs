//! `termgate-control`: the control service, `token` for dev sign-in, `check`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use config::pki::Certificate;
use control::api::{self, Listener};
use control::docker::Docker;
use control::hosts::{Host, Hosts};
use control::reconcile::Reconciler;
use control::service::{now, Control, SignIns};
use control::store::Store;
use tokio_rustls::TlsAcceptor;

#[derive(Parser)]
#[command(name = "termgate-control", version, about = "termgate control service")]
struct Cli {
    /// Configuration file.
    #[arg(long, global = true, default_value = "termgate.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print a signed JWT (dev sign-in and tests); needs a secret or private key.
    Token {
        /// Subject of the token.
        #[arg(long)]
        sub: String,
        /// Grant the configured admin role.
        #[arg(long)]
        admin: bool,
        /// Lifetime in seconds (default: auth.token_ttl_seconds).
        #[arg(long)]
        ttl: Option<u64>,
    },
    /// Load and validate the configuration, then exit.
    Check,
    /// Print the Docker hosts, one a line: name, the daemon's endpoint (`-`: the
    /// default; what a host's dockgate fronts when `docker.dockgate_dir` is set),
    /// ttyd pool addresses comma-separated (`-`: the gateway's own pool), `tls`
    /// when the endpoint speaks TLS (`-` otherwise), and the read-only pool's addresses
    /// (`-`: none, or the gateway's own for the implicit host), separated by tabs.
    /// `deploy/up` starts the pools of each host from it.
    Hosts,
    /// Print how a Docker host elsewhere reaches control's API, one line:
    /// `gateway.control_url` (the address the deployment's other machines dial), `plain`
    /// when `gateway.allow_plain_control` (`-` otherwise), and
    /// `control.service_token_file` resolved against the configuration's directory
    /// (`-`: none), separated by tabs. `deploy/host-up` gives them to the host's dockgate.
    ControlApi,
    /// The deployment's CA and its parts' certificates (no configuration is read).
    #[command(subcommand)]
    Certs(Certs),
}

#[derive(Subcommand)]
enum Certs {
    /// Make a CA in `--dir` (`ca.pem`, `ca-key.pem`, the key 0600); refuses to replace one.
    Init {
        /// The directory of the CA and the certificates it issues.
        #[arg(long)]
        dir: PathBuf,
        /// Lifetime, days.
        #[arg(long, default_value_t = control::certs::CA_DAYS)]
        days: u32,
    },
    /// Issue (or renew) one part's certificate with the CA in `--dir`:
    /// `<role>-<name>.pem` and `<role>-<name>-key.pem`, identity
    /// `spiffe://termgate/<role>/<name>`.
    Issue {
        /// The directory of the CA.
        #[arg(long)]
        dir: PathBuf,
        /// control, gateway, pool or dockgate.
        #[arg(long, value_parser = parse_role)]
        role: config::pki::PeerRole,
        /// The part's name, also a DNS name or IP address in the certificate.
        #[arg(long)]
        name: String,
        /// Another DNS name or IP address the part is reached at (repeatable).
        #[arg(long)]
        san: Vec<String>,
        /// Lifetime, days (renew by issuing again; running parts pick it up).
        #[arg(long, default_value_t = control::certs::LEAF_DAYS)]
        days: u32,
    },
}

fn parse_role(s: &str) -> Result<config::pki::PeerRole, String> {
    config::pki::PeerRole::parse(s).ok_or_else(|| {
        let all: Vec<&str> = config::pki::PeerRole::ALL
            .iter()
            .map(|r| r.as_str())
            .collect();
        format!("one of {}", all.join(", "))
    })
}

/// `termgate-control certs …`.
fn certs(cmd: Certs) -> ExitCode {
    let done = match cmd {
        Certs::Init { dir, days } => {
            control::certs::init(&dir, days).map(|p| println!("CA certificate: {}", p.display()))
        }
        Certs::Issue {
            dir,
            role,
            name,
            san,
            days,
        } => control::certs::issue(
            &dir,
            &control::certs::Leaf {
                role,
                name,
                sans: san,
                days,
            },
        )
        .map(|(c, k)| println!("certificate: {}\nkey: {}", c.display(), k.display())),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("termgate-control certs: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Cli {
        config: path,
        command,
    } = cli;
    let command = match command {
        Some(Command::Certs(cmd)) => return certs(cmd),
        other => other,
    };
    let cli = Cli {
        config: path,
        command,
    };
    let config = match config::telemetry::load_or_refuse(
        "termgate-control",
        &cli.config,
        // `hosts` and `control-api` read no file of the configuration's: a Docker host
        // elsewhere (deploy/host-up) has the configuration, not control's secrets.
        if matches!(cli.command, Some(Command::Hosts | Command::ControlApi)) {
            config::Part::Dockgate
        } else {
            config::Part::Control
        },
    ) {
        Ok(c) => c,
        Err(status) => return status,
    };
    match cli.command {
        Some(Command::Token { sub, admin, ttl }) => match token(&config, &sub, admin, ttl) {
            Ok(t) => {
                println!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("termgate-control token: {e}");
                ExitCode::from(2)
            }
        },
        Some(Command::Check) => {
            println!("configuration {} is valid", cli.config.display());
            ExitCode::SUCCESS
        }
        // Answered before the configuration is read; kept whole here.
        Some(Command::Certs(cmd)) => certs(cmd),
        Some(Command::ControlApi) => {
            let plain = if config.gateway.allow_plain_control {
                "plain"
            } else {
                "-"
            };
            let token = config.control.service_token_file.as_deref().map_or_else(
                || "-".to_owned(),
                |f| config.resolve(f).display().to_string(),
            );
            println!("{}\t{plain}\t{token}", config.gateway.control_url);
            ExitCode::SUCCESS
        }
        Some(Command::Hosts) => {
            for h in config.docker_hosts() {
                let pool = if h.ttyd_pool.is_empty() {
                    "-".to_owned()
                } else {
                    h.ttyd_pool.join(",")
                };
                let tls = if h.tls.is_some() { "tls" } else { "-" };
                let viewers = if h.viewer_pool.is_empty() {
                    "-".to_owned()
                } else {
                    h.viewer_pool.join(",")
                };
                println!(
                    "{}\t{}\t{pool}\t{tls}\t{viewers}",
                    h.name,
                    h.daemon.as_deref().unwrap_or("-")
                );
            }
            ExitCode::SUCCESS
        }
        None => {
            config::telemetry::init_tracing_with(control::audit::layer());
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("termgate-control: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    eprintln!("termgate-control: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(config: config::Config) -> anyhow::Result<()> {
    let config = Arc::new(config);
    if let Some(t) = config.control.stop_timeout_seconds {
        tracing::warn!(
            stop_timeout_seconds = t,
            "control.stop_timeout_seconds is retired and has no effect: an end answers once it is decided, and a session's programs get its profile's stop_grace_seconds after their hang-up"
        );
    }
    if config.secrets().service_token.is_none() {
        anyhow::bail!("control.service_token_file: required to serve the route feed");
    }
    let missing = config.missing_bind_sources();
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|e| e.to_string()).collect();
        anyhow::bail!(
            "bind mount sources are missing:\n  - {}",
            list.join("\n  - ")
        );
    }
    let verifier = config.verifier().context("auth")?;
    let store_path = config.resolve(&config.store.path);
    let mut store = Store::open(&store_path, config.store.change_log_len)
        .with_context(|| format!("store.path: cannot open {}", store_path.display()))?;
    let timeout = Duration::from_secs(config.control.docker_timeout_seconds);
    let direct = config
        .docker
        .hosts
        .iter()
        .filter(|h| config.docker.enabled && !h.dockgate);
    for h in direct {
        tracing::warn!(host = %h.name, "control speaks to docker host {}'s daemon directly; nothing compares its calls with the configuration", h.name);
    }
    let mut specs = config.docker_hosts();
    let (hosts, seccomp) = match specs.pop() {
        // No [[docker.hosts]]: the one daemon, which must answer at start as it always had to.
        Some(local) if local.implicit => {
            let docker = Docker::connect(local.endpoint.as_deref(), timeout)
                .await
                .context("control.docker_host: cannot reach Docker")?;
            let seccomp = seccomp_at_start(
                docker.seccomp_supported().await.map_err(|e| e.to_string()),
                config.control.allow_no_seccomp,
            )?;
            let runtimes = docker
                .runtimes()
                .await
                .context("control.docker_host: cannot read the daemon's runtimes")?;
            let host = Host::new(local, Some(docker), timeout, true, true);
            host.set_runtimes(runtimes);
            (Hosts::new(vec![Arc::new(host)]), seccomp)
        }
        last => {
            specs.extend(last);
            // Each host's seccomp support is judged when it first answers; one that
            // lacks it is never used unless allowed.
            let hosts = Hosts::connect(specs, timeout, config.control.allow_no_seccomp).await?;
            (hosts, !config.control.allow_no_seccomp)
        }
    };
    if !config.docker.enabled {
        tracing::info!("docker.enabled = false: no Docker host; serving targets only");
    }
    let problems = hosts.runtime_problems(&config.profiles);
    if !problems.is_empty() {
        anyhow::bail!("{}", problems.join("\n"));
    }
    store.set_pools(hosts.pools());
    store.set_viewer_pools(hosts.viewer_pools());
    let names: Vec<&str> = hosts.iter().map(|h| h.name()).collect();
    let strays = store
        .list_active(None)
        .map(|a| {
            a.into_iter()
                .filter(|s| !names.contains(&s.host.as_str()))
                .count()
        })
        .unwrap_or(0);
    if strays > 0 {
        tracing::warn!(
            strays,
            "active sessions are recorded on Docker hosts this configuration does not have; they stay as they are until such a host is configured again"
        );
    }
    let api_listener = tokio::net::TcpListener::bind(&config.control.listen)
        .await
        .with_context(|| format!("control.listen: cannot listen on {}", config.control.listen))?;
    let tls_api = match &config.control.tls_listen {
        Some(addr) => Some(tls_listener(&config, addr).await?),
        None => None,
    };
    let admin_listener = tokio::net::TcpListener::bind(&config.control.admin_listen)
        .await
        .with_context(|| {
            format!(
                "control.admin_listen: cannot listen on {}",
                config.control.admin_listen
            )
        })?;

    let control = Arc::new(Control::new(Arc::clone(&config), store, hosts, verifier));
    control.metrics().seccomp_enforced.set(i64::from(seccomp));
    let revoked = control
        .sign_ins
        .load_revocations()
        .context("reading the revocations in force from the store")?;
    tracing::info!(revoked, "revocations in force loaded");
    control::audit::start(Arc::clone(&control)).context("starting the audit writer")?;
    let targets = control
        .targets
        .apply_config_targets()
        .map_err(|e| anyhow::anyhow!("targets: {}", e.message))?;
    if targets > 0 {
        tracing::info!(targets, "configured targets applied");
    }
    let reconciler = Reconciler::new(control.sessions.clone(), control.workspaces.clone());
    match reconciler.rebuild_from_labels().await {
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not check Docker for sessions to rebuild"),
    }
    control.workspaces.recover_copies().await;
    let first = reconciler.pass().await;
    tracing::info!(
        ?first,
        rev = control.rev(),
        at = now(),
        "first reconcile pass done"
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let reconciler = tokio::spawn(reconciler.run(stop_rx.clone()));
    tokio::spawn(prune_sign_ins(control.sign_ins.clone()));
    let grace = Duration::from_secs(2);
    let api = tokio::spawn(api::serve(
        Arc::clone(&control),
        api_listener,
        Listener::Api,
        None,
        stop_rx.clone(),
        grace,
    ));
    // The same API over TLS, for gateways on other machines.
    let tls_api = tls_api.map(|(listener, acceptor, certificate)| {
        tokio::spawn(renew_certificate(certificate));
        tokio::spawn(api::serve(
            Arc::clone(&control),
            listener,
            Listener::Api,
            Some(acceptor),
            stop_rx.clone(),
            grace,
        ))
    });
    let admin = tokio::spawn(api::serve(
        Arc::clone(&control),
        admin_listener,
        Listener::Admin,
        None,
        stop_rx,
        grace,
    ));
    tracing::info!(listen = %config.control.listen, tls_listen = config.control.tls_listen.as_deref().unwrap_or("-"), admin = %config.control.admin_listen, instance = %config.instance, "control is serving");

    shutdown_signal().await;
    tracing::info!("shutting down");
    // Fails only when every receiver is gone, that is when every task already ended.
    let _ = stop_tx.send(true);
    let stopped = tokio::time::timeout(Duration::from_secs(3), async {
        let tasks = [
            ("api", Some(api)),
            ("tls api", tls_api),
            ("admin", Some(admin)),
            ("reconciler", Some(reconciler)),
        ];
        for (task, handle) in tasks {
            let Some(handle) = handle else { continue };
            if let Err(e) = handle.await {
                tracing::error!(task, error = %e, "task ended abnormally");
            }
        }
    })
    .await;
    if stopped.is_err() {
        tracing::warn!("tasks did not stop within 3 s; flushing the store anyway");
    }
    // Container stops still running in the background end with the runtime: their
    // records stay `stopping`, and the first pass of the next start resumes them.
    control.flush().context("flushing the store")?;
    tracing::info!("stopped; store flushed");
    Ok(())
}

/// How often control's certificate files are looked at for a renewal.
const CERT_POLL: Duration = Duration::from_secs(2);

/// `control.tls_listen`: its listener, and the TLS settings that present control's
/// certificate (`control.tls_cert_file`), asked for at each handshake.
async fn tls_listener(
    config: &config::Config,
    addr: &str,
) -> anyhow::Result<(tokio::net::TcpListener, TlsAcceptor, Arc<Certificate>)> {
    let (Some(cert), Some(key)) = (&config.control.tls_cert_file, &config.control.tls_key_file)
    else {
        anyhow::bail!("control.tls_listen: needs control.tls_cert_file and control.tls_key_file");
    };
    let certificate = Certificate::load(
        &config.resolve(cert),
        &config.resolve(key),
        "control.tls_cert_file",
        "control.tls_key_file",
    )?;
    let mut server =
        config::pki::plain_server(Arc::clone(&certificate)).context("control.tls_cert_file")?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("control.tls_listen: cannot listen on {addr}"))?;
    Ok((listener, TlsAcceptor::from(Arc::new(server)), certificate))
}

/// Looks at control's certificate files every [`CERT_POLL`]: a renewal is presented on
/// `control.tls_listen` from the next handshake on, while open connections stay.
async fn renew_certificate(certificate: Arc<Certificate>) {
    let mut tick = tokio::time::interval(CERT_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let cert = certificate.cert_file().display();
        match certificate.reload(false) {
            Ok(true) => {
                tracing::info!(%cert, "a renewed TLS certificate is in use for new connections to control.tls_listen")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "the renewed TLS certificate could not be loaded; the previous one stays in use on control.tls_listen")
            }
        }
    }
}

/// Waits for SIGTERM or Ctrl-C. A signal that cannot be listened for is logged and the
/// other one still stops the service.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C; stopping on SIGTERM only");
            std::future::pending::<()>().await;
        }
    };
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = ctrl_c => {}
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM; stopping on Ctrl-C only");
            ctrl_c.await;
        }
    }
}

fn token(
    config: &config::Config,
    sub: &str,
    admin: bool,
    ttl: Option<u64>,
) -> Result<String, String> {
    if policy::Sub::parse(sub).is_none() {
        return Err(format!(
            "--sub {sub:?}: must be 1-128 characters of A-Z a-z 0-9 . _ @ -"
        ));
    }
    let signer = config.signer().ok_or(
        "no signing key: configure auth.hs256_secret_file, or auth.signing_key_file next to public keys",
    )?;
    let ttl = ttl.unwrap_or(config.auth.token_ttl_seconds);
    if ttl > config.auth.max_token_lifetime_seconds {
        return Err(format!(
            "--ttl {ttl}: longer than auth.max_token_lifetime_seconds ({}); such a token would be refused",
            config.auth.max_token_lifetime_seconds
        ));
    }
    let issued = now();
    let claims = policy::TokenClaims {
        sub: sub.to_owned(),
        exp: issued + ttl,
        iat: issued,
        iss: config.auth.issuer.clone(),
        aud: config.auth.audience.clone(),
        roles: if admin {
            vec![config.auth.admin_role.clone()]
        } else {
            Vec::new()
        },
        // Its own id, by which an admin can revoke this one token.
        jti: Some(random_hex()?),
        sid: None,
    };
    signer.sign(&claims).map_err(|e| e.to_string())
}

/// Whether session containers will run under seccomp; a daemon without it (or one that
/// cannot say) is refused unless `control.allow_no_seccomp` accepts running without.
fn seccomp_at_start(supported: Result<bool, String>, allow_without: bool) -> anyhow::Result<bool> {
    match (supported, allow_without) {
        (Ok(true), _) => Ok(true),
        (Ok(false), true) => {
            tracing::warn!("the Docker daemon has no seccomp support: session containers run without a seccomp filter (control.allow_no_seccomp = true)");
            Ok(false)
        }
        (Err(e), true) => {
            tracing::warn!(error = %e, "cannot read the daemon's security options; going on without seccomp (control.allow_no_seccomp = true)");
            Ok(false)
        }
        (Ok(false), false) => anyhow::bail!(
            "control.allow_no_seccomp: the Docker daemon has no seccomp support, so sessions would run without a syscall filter; refusing to start (set it to true to accept that)"
        ),
        (Err(e), false) => anyhow::bail!(
            "control.allow_no_seccomp: cannot tell whether the Docker daemon enforces seccomp ({e}); refusing to start (set it to true to accept running without)"
        ),
    }
}

/// 128 random bits as hex: a printed token's `jti`.
fn random_hex() -> Result<String, String> {
    let mut random = [0u8; 16];
    getrandom::getrandom(&mut random).map_err(|e| format!("randomness: {e}"))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

/// Once a minute, forgets sign-ins and revocations whose tokens can no longer verify,
/// so that neither the store nor the feed grows with every sign-in ever made.
async fn prune_sign_ins(sign_ins: SignIns) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match sign_ins.prune_sign_ins() {
            Ok(0) => {}
            Ok(n) => tracing::info!(forgotten = n, "expired sign-ins and revocations forgotten"),
            Err(e) => tracing::warn!(error = %e, "could not prune sign-ins"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::seccomp_at_start;

    #[test]
    fn a_daemon_without_seccomp_is_refused_unless_allowed_naming_the_key() {
        assert!(seccomp_at_start(Ok(true), false).unwrap());
        assert!(!seccomp_at_start(Ok(false), true).unwrap());
        assert!(!seccomp_at_start(Err("timeout".into()), true).unwrap());
        for refused in [
            seccomp_at_start(Ok(false), false),
            seccomp_at_start(Err("timeout".into()), false),
        ] {
            let e = refused.unwrap_err().to_string();
            assert!(e.starts_with("control.allow_no_seccomp:"), "{e}");
        }
    }
}
