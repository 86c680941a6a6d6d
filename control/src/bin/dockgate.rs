//! `termgate-dockgate`: the fail-closed sockets in front of one Docker daemon, one a
//! role: `<dir>/<host>-attach.sock` for the host's ttyd pools and
//! `<dir>/<host>-control.sock` for control (README "dockgate").

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use clap::Parser;
use control::dockgate::{AuditSender, DeclaredSource, Gate};
use policy::dockgate::{is_plain_ref, Role};
use tokio::net::UnixListener;

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
    /// Control's API (`http://host:port`): refusals go to its audit trail too.
    #[arg(long, requires = "service_token_file")]
    control_url: Option<String>,
    /// The service token presented to control (`control.service_token_file`).
    #[arg(long, requires = "control_url")]
    service_token_file: Option<PathBuf>,
}

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
    let audit = match (&cli.control_url, &cli.service_token_file) {
        (Some(url), Some(file)) => {
            let token = std::fs::read_to_string(file)
                .with_context(|| format!("--service-token-file: cannot read {}", file.display()))?;
            if !url.starts_with("http://") {
                bail!("--control-url: {url:?} is not http://host:port");
            }
            Some(AuditSender::start(
                url,
                &token,
                &format!("dockgate-{}", cli.host),
            ))
        }
        _ => None,
    };
    let roles = [
        (Role::Attach, cli.attach_group.as_deref(), "--attach-group"),
        (
            Role::Control,
            cli.control_group.as_deref(),
            "--control-group",
        ),
    ];
    let mut paths = Vec::new();
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
        tokio::spawn(gate.serve(listener));
        paths.push(path);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch SIGTERM")?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot watch SIGHUP")?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hup.recv() => {
                if let Some(d) = &declared {
                    d.reload();
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
