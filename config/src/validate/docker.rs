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
        let tcp = if let Some(path) = h.endpoint.strip_prefix("unix://") {
            if !path.starts_with('/') {
                err(
                    &format!("{key}.endpoint"),
                    "a unix endpoint is unix:///absolute/path".into(),
                );
            }
            false
        } else if let Some(addr) = h.endpoint.strip_prefix("tcp://") {
            if !matches!(
                policy::feed::parse_addr(addr),
                Ok(policy::feed::TtydAddr::Tcp(_))
            ) {
                err(
                    &format!("{key}.endpoint"),
                    format!("{:?}: a tcp endpoint is tcp://host:port", h.endpoint),
                );
            }
            true
        } else {
            err(
                &format!("{key}.endpoint"),
                format!("{:?}: must start with unix:// or tcp://", h.endpoint),
            );
            false
        };
        let tls = [
            ("tls_ca_file", &h.tls_ca_file),
            ("tls_cert_file", &h.tls_cert_file),
            ("tls_key_file", &h.tls_key_file),
        ];
        let given = tls.iter().filter(|(_, f)| f.is_some()).count();
        if given > 0 && !tcp {
            err(
                &format!("{key}.endpoint"),
                "TLS files are only used with a tcp:// endpoint".into(),
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
        for (j, a) in h.ttyd_pool.iter().enumerate() {
            if let Err(e) = policy::feed::parse_addr(a) {
                err(&format!("{key}.ttyd_pool[{j}]"), format!("{a:?}: {e}"));
            }
        }
        for (j, a) in h.viewer_pool.iter().enumerate() {
            if let Err(e) = policy::feed::parse_addr(a) {
                err(&format!("{key}.viewer_pool[{j}]"), format!("{a:?}: {e}"));
            }
        }
        positive(&format!("{key}.capacity"), h.capacity.into(), err);
    }
}

/// `docker.dockgate_dir`: dockgate runs beside each daemon and fronts its unix socket.
fn check_dockgate(c: &Config, err: &mut impl FnMut(&str, String)) {
    let why = "dockgate fronts a daemon's unix socket on this machine (docker.dockgate_dir is set)";
    if let Some(h) = &c.control.docker_host {
        if !h.starts_with("unix:///") {
            err("control.docker_host", format!("{h:?}: {why}"));
        }
    }
    for (i, h) in c.docker.hosts.iter().enumerate() {
        if !h.endpoint.starts_with("unix:///") {
            err(
                &format!("docker.hosts[{i}].endpoint"),
                format!("{:?}: {why}", h.endpoint),
            );
        }
    }
}
