//! `termgate-dockgate`: the fail-closed sockets in front of one Docker daemon, one a
//! role: `<dir>/<host>-attach.sock` for the host's ttyd pools and
//! `<dir>/<host>-control.sock` for control (docs/operators.md "dockgate"). On a host control
//! reaches over the network, also the Docker API on a TCP port with mutual TLS
//! (`--tls-listen`: the client's certificate chooses the role) and the fronts of the
//! host's ttyd pools for gateways (`--pool-listen`, `--viewer-listen`).

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use clap::Parser;
use config::pki::{self, Certificate};
use control::dockgate::{control_address, AuditSender, DeclaredSource, Front, Gate, TlsListener};
use policy::dockgate::{is_plain_ref, Role};
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, UnixListener};

#[derive(Parser)]
#[command(
    name = "termgate-dockgate",
    version,
    about = "termgate's fail-closed sockets in front of the Docker daemon"
)]
struct Cli {
    /// The deployment's configuration (`termgate.toml`): every create is compared with
    /// what it declares, and refused on any difference. Read again when it changes and
    /// on SIGHUP. Without it no create passes (a gate for ttyd pools only).
    #[arg(long, required_unless_present = "instance")]
    config: Option<PathBuf>,
    /// This deployment's `instance` (the `termgate.instance` label of its objects);
    /// with `--config`, must be the configuration's if given.
    #[arg(long)]
    instance: Option<String>,
    /// The Docker host's name (`docker.hosts[].name`; `local` for the implicit one).
    #[arg(long, default_value = "local")]
    host: String,
    /// Directory of the sockets.
    #[arg(long)]
    dir: PathBuf,
    /// The daemon: `unix:///path` (default: `$DOCKER_HOST`, else /var/run/docker.sock).
    #[arg(long)]
    daemon: Option<String>,
    /// Group (name or number) given the attach socket, mode 0660; without it 0600.
    #[arg(long)]
    attach_group: Option<String>,
    /// Group (name or number) given the control socket, mode 0660; without it 0600.
    #[arg(long)]
    control_group: Option<String>,
    /// Control's API (`https://host:port`, or `http://host:port`): refusals go to its
    /// audit trail too. Over `https://` control's certificate is checked against
    /// `--tls-ca` and for the URL's host, and `--tls-cert` is presented if control asks
    /// for one. `http://` off loopback would carry the service token in the clear:
    /// refused unless `--allow-plain-control`.
    #[arg(long, requires = "service_token_file")]
    control_url: Option<String>,
    /// Accept a `--control-url` off loopback, the service token in the clear: only on a
    /// private network of one machine you trust.
    #[arg(long, requires = "control_url")]
    allow_plain_control: bool,
    /// The service token presented to control (`control.service_token_file`).
    #[arg(long, requires = "control_url")]
    service_token_file: Option<PathBuf>,
    /// Also serve the Docker API on this `host:port` over mutual TLS: a `control`
    /// certificate gets the control policy, a `pool` certificate the attach policy,
    /// anything else is refused.
    #[arg(long, requires_all = ["tls_cert", "tls_key", "tls_ca"])]
    tls_listen: Option<String>,
    /// This dockgate's certificate (PEM, issued with `--san` its address), presented on
    /// every TLS listener and to an `https://` `--control-url` that asks for one; read
    /// again when it changes and on SIGHUP.
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, requires_all = ["tls_cert", "tls_ca"])]
    tls_key: Option<PathBuf>,
    /// The deployment's CA (`pki.ca_file`): clients of the TLS listeners must present a
    /// certificate it issued, and an `https://` `--control-url` must present one for
    /// its host.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Front the host's ttyd pool on this `host:port` over mutual TLS, for `gateway`
    /// certificates only.
    #[arg(long, requires_all = ["pool_socket", "tls_cert", "tls_key", "tls_ca"])]
    pool_listen: Option<String>,
    /// The ttyd pool's unix socket that `--pool-listen` fronts.
    #[arg(long, requires = "pool_listen")]
    pool_socket: Option<PathBuf>,
    /// Front the host's read-only pool (share-link viewers) on this `host:port`, as
    /// `--pool-listen` does.
    #[arg(long, requires_all = ["viewer_socket", "tls_cert", "tls_key", "tls_ca"])]
    viewer_listen: Option<String>,
    /// The read-only pool's unix socket that `--viewer-listen` fronts.
    #[arg(long, requires = "viewer_listen")]
    viewer_socket: Option<PathBuf>,
}

/// How often the TLS certificate's files are checked for a renewal.
const CERT_POLL: std::time::Duration = std::time::Duration::from_secs(2);

fn main() -> ExitCode {
    let cli = Cli::parse();
    config::telemetry::init_tracing();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("termgate-dockgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("termgate-dockgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if !is_plain_ref(&cli.host) {
        bail!("--host: {:?} is not a plain name", cli.host);
    }
    std::fs::create_dir_all(&cli.dir)
        .with_context(|| format!("--dir: cannot create {}", cli.dir.display()))?;
    let declared = cli
        .config
        .as_deref()
        .map(|path| {
            DeclaredSource::open(path, &cli.host, &cli.dir)
                .map(Arc::new)
                .with_context(|| format!("--config {}", path.display()))
        })
        .transpose()?;
    let instance = match (&declared, &cli.instance) {
        (Some(d), Some(i)) if d.instance() != *i => bail!(
            "--instance {i:?} is not the configuration's instance {:?}",
            d.instance()
        ),
        (Some(d), _) => d.instance(),
        (None, Some(i)) => i.clone(),
        (None, None) => bail!("--instance or --config is required"),
    };
    if !is_plain_ref(&instance) {
        bail!("--instance: {instance:?} is not a plain name");
    }
    let daemon = daemon_socket(cli.daemon.as_deref())?;
    // This dockgate's certificate and the CA: for its TLS listeners, and for control.
    let certificate = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Some(Certificate::load(cert, key, "--tls-cert", "--tls-key")?),
        _ => None,
    };
    let roots = cli
        .tls_ca
        .as_deref()
        .map(|ca| pki::load_roots(ca, "--tls-ca"))
        .transpose()?;
    let audit = audit_sender(&cli, certificate.as_ref(), roots.as_ref())?;
    let roles = [
        (Role::Attach, cli.attach_group.as_deref(), "--attach-group"),
        (
            Role::Control,
            cli.control_group.as_deref(),
            "--control-group",
        ),
    ];
    // The TCP ports are bound before the unix sockets: once those accept, so do these.
    let tls = tls_settings(&cli, certificate.as_ref(), roots)?;
    let mut tcp_listeners = Vec::new();
    if tls.is_some() {
        let addrs = [
            (cli.tls_listen.as_deref(), "--tls-listen"),
            (cli.pool_listen.as_deref(), "--pool-listen"),
            (cli.viewer_listen.as_deref(), "--viewer-listen"),
        ];
        for (addr, flag) in addrs {
            let listener = match addr {
                Some(addr) => Some(
                    TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("{flag}: cannot listen on {addr}"))?,
                ),
                None => None,
            };
            tcp_listeners.push(listener);
        }
    }
    let mut paths = Vec::new();
    let mut gates = Vec::new();
    for (role, group, flag) in roles {
        let gid = group
            .map(|g| group_id(g).with_context(|| format!("{flag}: {g}")))
            .transpose()?;
        let path = cli.dir.join(format!("{}-{role}.sock", cli.host));
        let listener = bind(&path, gid)?;
        tracing::info!(role = %role, socket = %path.display(), daemon = %daemon.display(), instance = %instance, declared = declared.is_some(), "dockgate listening");
        let mut gate = Gate::new(role, &instance, &cli.host, daemon.clone());
        if let Some(a) = &audit {
            gate = gate.with_audit(a.clone());
        }
        if let Some(d) = &declared {
            gate = gate.with_declared(d.clone());
        }
        let gate = Arc::new(gate);
        tokio::spawn(gate.clone().serve(listener));
        gates.push(gate);
        paths.push(path);
    }
    if let Some((certificate, server)) = tls {
        // In the order of `roles`.
        let (attach, control) = (gates[0].clone(), gates[1].clone());
        let fronts = [
            Front::Api { control, attach },
            pool_front("pool", cli.pool_socket.as_deref()),
            pool_front("viewer", cli.viewer_socket.as_deref()),
        ];
        for (tcp, front) in tcp_listeners.into_iter().zip(fronts) {
            let Some(tcp) = tcp else { continue };
            let address = tcp.local_addr().context("a TLS listener's address")?;
            tracing::info!(listener = front.name(), address = %address, certificate = %certificate.cert_file().display(), "dockgate listening (mutual TLS)");
            let mut listener = TlsListener::new(front, server.clone(), &cli.host);
            if let Some(a) = &audit {
                listener = listener.with_audit(a.clone());
            }
            tokio::spawn(Arc::new(listener).serve(tcp));
        }
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch SIGTERM")?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot watch SIGHUP")?;
    let mut cert_poll = tokio::time::interval(CERT_POLL);
    cert_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hup.recv() => {
                if let Some(d) = &declared {
                    d.reload();
                }
                if let Some(c) = &certificate {
                    renew(c, true);
                }
            }
            _ = cert_poll.tick(), if certificate.is_some() => {
                if let Some(c) = &certificate {
                    renew(c, false);
                }
            }
        }
    }
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    tracing::info!("dockgate stopped");
    Ok(())
}

/// The sender of refusals to control's audit trail, when `--control-url` is given:
/// checked here, so that a URL that cannot work stops dockgate at start.
fn audit_sender(
    cli: &Cli,
    certificate: Option<&Arc<Certificate>>,
    roots: Option<&Arc<RootCertStore>>,
) -> anyhow::Result<Option<AuditSender>> {
    let (Some(url), Some(file)) = (&cli.control_url, &cli.service_token_file) else {
        return Ok(None);
    };
    let Some((https, addr)) = control_address(url) else {
        bail!("--control-url: {url:?} is not https://host:port or http://host:port");
    };
    let tls = if https {
        let Some(roots) = roots else {
            bail!("--control-url: {url:?} is https:// but --tls-ca is not given (control's certificate is checked against the deployment's CA)");
        };
        let client = pki::client(roots.clone(), certificate.cloned())
            .context("--tls-ca: cannot build the TLS client settings")?;
        Some(Arc::new(client))
    } else {
        if !policy::feed::is_loopback(addr) {
            if !cli.allow_plain_control {
                bail!(
                    "--control-url: {url:?} would send the service token in the clear to a host off loopback; use https:// with --tls-ca, or add --allow-plain-control only on a private network of one machine you trust"
                );
            }
            tracing::warn!(control_url = %url, "--allow-plain-control: the service token goes to control in the clear");
        }
        None
    };
    let token = std::fs::read_to_string(file)
        .with_context(|| format!("--service-token-file: cannot read {}", file.display()))?;
    tracing::info!(control_url = %url, tls = https, "dockgate: refusals go to control's audit trail too");
    Ok(Some(AuditSender::start(
        url,
        &token,
        &format!("dockgate-{}", cli.host),
        tls,
    )))
}

/// The certificate and server settings of the TLS listeners, when any is asked for.
fn tls_settings(
    cli: &Cli,
    certificate: Option<&Arc<Certificate>>,
    roots: Option<Arc<RootCertStore>>,
) -> anyhow::Result<Option<(Arc<Certificate>, Arc<ServerConfig>)>> {
    let listens =
        cli.tls_listen.is_some() || cli.pool_listen.is_some() || cli.viewer_listen.is_some();
    let to_control = cli
        .control_url
        .as_deref()
        .and_then(control_address)
        .is_some_and(|(https, _)| https);
    if !listens {
        if certificate.is_some() && !to_control {
            bail!("--tls-cert: given, but nothing listens over TLS (--tls-listen, --pool-listen or --viewer-listen) nor is control's API https:// (--control-url)");
        }
        if roots.is_some() && !to_control {
            bail!("--tls-ca: given, but nothing listens over TLS (--tls-listen, --pool-listen or --viewer-listen) nor is control's API https:// (--control-url)");
        }
        return Ok(None);
    }
    // The listeners' flags require all three.
    let (Some(certificate), Some(roots)) = (certificate, roots) else {
        bail!("--tls-cert, --tls-key and --tls-ca are required with a TLS listener");
    };
    let mut server = pki::mutual_server(certificate.clone(), roots)
        .context("--tls-ca: cannot build the TLS server settings")?;
    // Every connection a full handshake: its client's certificate is checked now (a
    // resumed session would carry the one of an earlier handshake, expired or not).
    server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    server.send_tls13_tickets = 0;
    Ok(Some((certificate.clone(), Arc::new(server))))
}

/// A pool's front; its socket is given whenever its listener is (the flags require it).
fn pool_front(name: &'static str, socket: Option<&Path>) -> Front {
    Front::Pool {
        name,
        socket: socket.map(Path::to_owned).unwrap_or_default(),
    }
}

/// Picks up a renewed certificate (`force`: even if its files look unchanged); the one
/// in use stays when the new one cannot be loaded. Open connections keep theirs.
fn renew(certificate: &Certificate, force: bool) {
    match certificate.reload(force) {
        Ok(true) => {
            tracing::info!(certificate = %certificate.cert_file().display(), "a renewed TLS certificate is in use for new connections")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::error!(error = %e, "the renewed TLS certificate cannot be used; the one in use stays")
        }
    }
}

fn daemon_socket(flag: Option<&str>) -> anyhow::Result<PathBuf> {
    let from_env = std::env::var("DOCKER_HOST").ok().filter(|s| !s.is_empty());
    let (given, key) = match (flag, from_env.as_deref()) {
        (Some(f), _) => (f.to_owned(), "--daemon"),
        (None, Some(e)) => (e.to_owned(), "DOCKER_HOST"),
        (None, None) => return Ok(PathBuf::from("/var/run/docker.sock")),
    };
    match given.strip_prefix("unix://") {
        Some(p) if p.starts_with('/') => Ok(PathBuf::from(p)),
        _ => bail!("{key}: {given:?} is not unix:///path (dockgate runs beside its daemon)"),
    }
}

/// A group's id from its number or its line in /etc/group.
fn group_id(g: &str) -> anyhow::Result<u32> {
    if let Ok(n) = g.parse::<u32>() {
        return Ok(n);
    }
    let groups = std::fs::read_to_string("/etc/group").context("cannot read /etc/group")?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let gid = f.nth(1)?;
            (name == g).then(|| gid.parse().ok()).flatten()
        })
        .next()
        .with_context(|| "no such group".to_owned())
}

/// Binds `path` (replacing a stale socket, never another file) with mode 0600, or
/// 0660 and group `gid`.
fn bind(path: &Path, gid: Option<u32>) -> anyhow::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)
            .with_context(|| format!("cannot remove the old socket {}", path.display()))?,
        Ok(_) => bail!("{} exists and is not a socket", path.display()),
        Err(_) => {}
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot bind {}", path.display()))?;
    let mode = if gid.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))?;
    if let Some(gid) = gid {
        rustix::fs::chown(path, None, Some(rustix::fs::Gid::from_raw(gid)))
            .with_context(|| format!("cannot give {} to group {gid}", path.display()))?;
    }
    Ok(listener)
}
