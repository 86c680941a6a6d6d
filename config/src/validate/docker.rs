//! The rules for `[docker]` and its `[[docker.hosts]]`: the daemons control drives and
//! the ttyd pools that attach to them.

use super::common::{check_readable, is_name, positive};
use crate::model::Config;

/// `[[docker.hosts]]`: names unique and plain, endpoints unix or tcp, TLS files all
/// or none (and only over tcp), pools of valid addresses, capacities positive.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) {
    if !c.docker.enabled && !c.docker.hosts.is_empty() {
        err(
            "docker.enabled",
            "false, yet docker.hosts lists hosts: remove them, or enable Docker".into(),
        );
    }
    if c.docker.dockgate_dir.is_some() {
        check_dockgate(c, err);
    }
    for (i, v) in c.docker.shared_volumes.iter().enumerate() {
        let termgate_made = v.starts_with("termgate-");
        if !policy::sandbox::is_plain_name(v) || termgate_made {
            err(
                &format!("docker.shared_volumes[{i}]"),
                format!("{v:?}: a volume's plain name, not one termgate makes (termgate-…)"),
            );
        }
    }
    if let Some(dir) = &c.docker.secrets_dir {
        if !dir.is_absolute() {
            err(
                "docker.secrets_dir",
                format!(
                    "{}: must be an absolute path on the Docker hosts",
                    dir.display()
                ),
            );
        }
    }
    if c.docker.hosts.is_empty() {
        return;
    }
    if c.control.docker_host.is_some() {
        err(
            "control.docker_host",
            "not used when docker.hosts is set: give each daemon's endpoint in docker.hosts".into(),
        );
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, h) in c.docker.hosts.iter().enumerate() {
        let key = format!("docker.hosts[{i}]");
        if !is_name(&h.name, 32) {
            err(
                &format!("{key}.name"),
                format!(
                    "{:?}: host names are 1-32 characters of a-z, 0-9 and -, not starting with -",
                    h.name
                ),
            );
        } else if names.contains(&h.name.as_str()) {
            err(
                &format!("{key}.name"),
                format!(
                    "{:?} names another host already; names must be unique",
                    h.name
                ),
            );
        }
        names.push(&h.name);
        let scheme = endpoint_scheme(&h.endpoint);
        match scheme {
            Some(Scheme::Unix) => {
                if !h.endpoint["unix://".len()..].starts_with('/') {
                    err(
                        &format!("{key}.endpoint"),
                        "a unix endpoint is unix:///absolute/path".into(),
                    );
                }
            }
            Some(Scheme::Tcp | Scheme::Tls) => {
                let addr = h.endpoint.split_once("://").map_or("", |(_, a)| a);
                if !matches!(
                    policy::feed::parse_addr(addr),
                    Ok(policy::feed::TtydAddr::Tcp(_))
                ) {
                    err(
                        &format!("{key}.endpoint"),
                        format!(
                            "{:?}: must be tcp://host:port or tls://host:port",
                            h.endpoint
                        ),
                    );
                }
            }
            None => err(
                &format!("{key}.endpoint"),
                format!(
                    "{:?}: must start with tls:// (the host's dockgate), unix:// or tcp://",
                    h.endpoint
                ),
            ),
        }
        let tcp = scheme == Some(Scheme::Tcp);
        // Control dials the host: its certificate and the CA are control's to have.
        if scheme == Some(Scheme::Tls) && c.part.reads("control.tls_cert_file") {
            check_remote_dockgate(c, h, &key, err);
        }
        if tcp && h.dockgate && c.docker.dockgate_dir.is_some() {
            err(
                &format!("{key}.endpoint"),
                format!(
                    "{:?}: dockgate fronts this host (docker.dockgate_dir is set); reach it \
                     over tls:// through the host's dockgate, or set dockgate = false to dial \
                     the daemon's own port",
                    h.endpoint
                ),
            );
        }
        let tls = [
            ("tls_ca_file", &h.tls_ca_file),
            ("tls_cert_file", &h.tls_cert_file),
            ("tls_key_file", &h.tls_key_file),
        ];
        let given = tls.iter().filter(|(_, f)| f.is_some()).count();
        if given > 0 && !tcp {
            err(
                &format!("{key}.endpoint"),
                "tls_ca_file, tls_cert_file and tls_key_file are the daemon's own TLS, only \
                 used with a tcp:// endpoint (a tls:// host's dockgate is checked against \
                 pki.ca_file)"
                    .into(),
            );
        }
        if tcp && given == 0 && !h.allow_plain_tcp {
            err(
                &format!("{key}.endpoint"),
                "a tcp:// endpoint needs tls_ca_file, tls_cert_file and tls_key_file: the \
                 daemon's API in the clear is root on that host to anyone on the path \
                 (allow_plain_tcp = true accepts it on a network you trust)"
                    .into(),
            );
        }
        if h.allow_plain_tcp && !tcp {
            err(
                &format!("{key}.allow_plain_tcp"),
                "only means something with a tcp:// endpoint".into(),
            );
        }
        if !h.dockgate && scheme == Some(Scheme::Tls) {
            err(
                &format!("{key}.dockgate"),
                "false, yet the endpoint is tls://, which is the host's dockgate".into(),
            );
        }
        for (field, file) in tls {
            match file {
                Some(f) => check_readable(c, f, &format!("{key}.{field}"), err),
                None if given > 0 => err(
                    &format!("{key}.{field}"),
                    "required when any of tls_ca_file, tls_cert_file, tls_key_file is set".into(),
                ),
                None => {}
            }
        }
        if h.ttyd_pool.is_empty() {
            err(
                &format!("{key}.ttyd_pool"),
                "must list at least one address of the ttyd pool that attaches to this host".into(),
            );
        }
        for (field, pool) in [("ttyd_pool", &h.ttyd_pool), ("viewer_pool", &h.viewer_pool)] {
            for (j, a) in pool.iter().enumerate() {
                check_pool_addr(c, a, &format!("{key}.{field}[{j}]"), err);
            }
        }
        positive(&format!("{key}.capacity"), h.capacity.into(), err);
    }
}

/// `docker.dockgate_dir`: dockgate runs beside each local daemon and fronts its unix
/// socket (hosts elsewhere are reached through their own dockgate, `tls://`).
fn check_dockgate(c: &Config, err: &mut impl FnMut(&str, String)) {
    let why = "dockgate fronts a daemon's unix socket on this machine (docker.dockgate_dir is set)";
    if let Some(h) = &c.control.docker_host {
        if !h.starts_with("unix:///") {
            err("control.docker_host", format!("{h:?}: {why}"));
        }
    }
}

/// How control reaches a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    /// A daemon's socket on this machine.
    Unix,
    /// A daemon's own TCP port.
    Tcp,
    /// The host's dockgate, over mutual TLS.
    Tls,
}

fn endpoint_scheme(endpoint: &str) -> Option<Scheme> {
    [
        ("unix://", Scheme::Unix),
        ("tcp://", Scheme::Tcp),
        ("tls://", Scheme::Tls),
    ]
    .into_iter()
    .find_map(|(p, s)| endpoint.starts_with(p).then_some(s))
}

/// A `tls://` host: control presents its certificate and checks the dockgate's
/// against the deployment's CA, so all three must be given.
fn check_remote_dockgate(
    c: &Config,
    h: &crate::model::DockerHostConfig,
    key: &str,
    err: &mut impl FnMut(&str, String),
) {
    let why = format!(
        "required: {key}.endpoint {:?} is a dockgate reached over mutual TLS",
        h.endpoint
    );
    for (k, file) in [
        ("pki.ca_file", &c.pki.ca_file),
        ("control.tls_cert_file", &c.control.tls_cert_file),
        ("control.tls_key_file", &c.control.tls_key_file),
    ] {
        if file.is_none() {
            err(k, why.clone());
        }
    }
}

/// One address of a host's pool: a unix socket, a `tls://` front on another host (the
/// gateway's certificate and the CA then required), or plain TCP on loopback only —
/// anything else would carry terminals, and let anyone on the path open one, in the
/// clear.
fn check_pool_addr(c: &Config, a: &str, key: &str, err: &mut impl FnMut(&str, String)) {
    match policy::feed::parse_addr(a) {
        Err(e) => err(key, format!("{a:?}: {e}")),
        // Gateways dial the pool: their certificate and the CA are theirs to have.
        Ok(policy::feed::TtydAddr::Tls(_)) if c.part.reads("gateway.client_cert_file") => {
            for (k, file) in [
                ("pki.ca_file", &c.pki.ca_file),
                ("gateway.client_cert_file", &c.gateway.client_cert_file),
                ("gateway.client_key_file", &c.gateway.client_key_file),
            ] {
                if file.is_none() {
                    err(
                        k,
                        format!("required: {key} {a:?} is a pool reached over mutual TLS"),
                    );
                }
            }
        }
        Ok(policy::feed::TtydAddr::Unix(_) | policy::feed::TtydAddr::Tls(_)) => {}
        Ok(policy::feed::TtydAddr::Tcp(addr)) => {
            if !policy::feed::is_loopback(addr) {
                err(
                    key,
                    format!(
                        "{a:?}: a pool on another machine is reached over mutual TLS \
                         (tls://{addr}, deploy/host-up); plain TCP only on loopback"
                    ),
                );
            }
        }
    }
}
