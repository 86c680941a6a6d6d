//! The rules for `[gateway]`: listeners, TLS files, origins, upstreams and limits;
//! also the origins the section allows.

use std::net::SocketAddr;
use std::path::Path;

use policy::Origin;

use super::common::{check_addr, check_readable, positive, within};
use crate::model::{Config, Part};

/// `gateway.target_credentials_dir`: a directory where credentials may be, and (for the
/// part that reads it) one that exists, as it resolves.
fn check_credentials_dir(c: &Config, dir: &Path, err: &mut impl FnMut(&str, String)) {
    const KEY: &str = "gateway.target_credentials_dir";
    let shown = dir.display();
    match dir.to_str().map(policy::target::credentials_dir_ok) {
        None => return err(KEY, format!("{shown} is not UTF-8")),
        Some(Err(why)) => return err(KEY, format!("{shown}: {why}")),
        Some(Ok(())) => {}
    }
    if !c.part.reads(KEY) {
        return;
    }
    match std::fs::canonicalize(dir) {
        Ok(resolved) if resolved.is_dir() => {
            if let Some(Err(why)) = resolved.to_str().map(policy::target::credentials_dir_ok) {
                err(
                    KEY,
                    format!("{shown} resolves to {}: {why}", resolved.display()),
                );
            }
        }
        Ok(_) => err(KEY, format!("{shown} is not a directory")),
        Err(e) => err(KEY, format!("cannot resolve {shown}: {e}")),
    }
}

/// `gateway.control_url`: `http://` or `https://` and `host:port`. For the part that
/// dials it (the gateway), the service token it carries never crosses a network in the
/// clear unless `gateway.allow_plain_control` accepts it, and `https://` needs the CA
/// control's certificate is checked against.
fn check_control_url(c: &Config, err: &mut impl FnMut(&str, String)) {
    const KEY: &str = "gateway.control_url";
    let g = &c.gateway;
    let Some((tls, addr)) = c.control_api() else {
        return err(
            KEY,
            format!(
                "{:?}: must be http://host:port or https://host:port, with no path",
                g.control_url
            ),
        );
    };
    if !matches!(c.part, Part::All | Part::Gateway) {
        return;
    }
    if tls && c.pki.ca_file.is_none() {
        err(
            "pki.ca_file",
            format!(
                "required with an https:// gateway.control_url ({:?}): control's certificate is checked against it",
                g.control_url
            ),
        );
    }
    if !tls && !g.allow_plain_control && !policy::feed::is_loopback(addr) {
        err(
            KEY,
            format!(
                "{:?} would send the service token in the clear to a host off loopback: use https://{addr} (control.tls_listen, pki.ca_file), or set gateway.allow_plain_control = true on a private network of one machine you trust",
                g.control_url
            ),
        );
    }
}

/// Checks `[gateway]`.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) {
    let g = &c.gateway;
    check_addr("gateway.listen", &g.listen, err);
    check_addr("gateway.admin_listen", &g.admin_listen, err);
    match (&g.tls_cert_file, &g.tls_key_file) {
        (Some(cert), Some(key)) => {
            check_readable(c, cert, "gateway.tls_cert_file", err);
            check_readable(c, key, "gateway.tls_key_file", err);
        }
        (None, None) => {}
        (Some(_), None) => err(
            "gateway.tls_key_file",
            "required when tls_cert_file is set".into(),
        ),
        (None, Some(_)) => err(
            "gateway.tls_cert_file",
            "required when tls_key_file is set".into(),
        ),
    }
    if let Some(dir) = &g.player_dir {
        for file in ["asciinema-player.js", "asciinema-player.css"] {
            check_readable(c, &dir.join(file), "gateway.player_dir", err);
        }
    }
    if let Some(dir) = c.target_credentials_dir() {
        check_credentials_dir(c, &dir, err);
    }
    for (i, o) in g.allowed_origins.iter().enumerate() {
        if let Err(e) = Origin::parse(o) {
            err(
                &format!("gateway.allowed_origins[{i}]"),
                format!("{o:?}: {e}"),
            );
        }
    }
    if let Err((i, why)) = policy::TrustedProxies::parse(&g.trusted_proxies) {
        err(&format!("gateway.trusted_proxies[{i}]"), why);
    }
    check_control_url(c, err);
    for (i, u) in g.ttyd_upstreams.iter().enumerate() {
        check_addr(&format!("gateway.ttyd_upstreams[{i}]"), u, err);
    }
    for (i, u) in g.viewer_upstreams.iter().enumerate() {
        check_addr(&format!("gateway.viewer_upstreams[{i}]"), u, err);
    }
    positive("gateway.control_timeout_ms", g.control_timeout_ms, err);
    positive(
        "gateway.max_terminals_per_user",
        g.max_terminals_per_user.into(),
        err,
    );
    positive(
        "gateway.max_terminals_per_session",
        g.max_terminals_per_session.into(),
        err,
    );
    within(
        "gateway.max_request_header_bytes",
        g.max_request_header_bytes,
        1024,
        1 << 20,
        err,
    );
    within(
        "gateway.max_body_bytes",
        g.max_body_bytes,
        1024,
        16 << 20,
        err,
    );
    within(
        "gateway.header_timeout_ms",
        g.header_timeout_ms as usize,
        100,
        600_000,
        err,
    );
    within(
        "gateway.activity_report_ms",
        g.activity_report_ms as usize,
        100,
        60_000,
        err,
    );
    within(
        "gateway.terminal_report_ms",
        g.terminal_report_ms as usize,
        50,
        60_000,
        err,
    );
    within(
        "gateway.max_ws_frame_bytes",
        g.max_ws_frame_bytes as usize,
        4096,
        64 << 20,
        err,
    );
    within("gateway.recording_queue", g.recording_queue, 4, 65_536, err);
    if g.recordings_spool_max_bytes < c.control.max_recording_bytes {
        err(
            "gateway.recordings_spool_max_bytes",
            "must hold at least one recording (control.max_recording_bytes)".into(),
        );
    }
    positive(
        "gateway.auth_failures_per_minute",
        g.auth_failures_per_minute.into(),
        err,
    );
}

impl Config {
    /// `gateway.control_url` as whether it is `https://`, and its `host:port`; `None`
    /// when it is neither scheme followed by a host and a port (no path, no user).
    pub fn control_api(&self) -> Option<(bool, &str)> {
        let url = &self.gateway.control_url;
        let (tls, addr) = match url.strip_prefix("https://") {
            Some(addr) => (true, addr),
            None => (false, url.strip_prefix("http://")?),
        };
        let (host, port) = addr.rsplit_once(':')?;
        let bracketed = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
        let host_ok = !host.is_empty()
            && (bracketed || !host.contains(':'))
            && !host.contains(['/', '?', '#', '@', ' ']);
        let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
        (host_ok && port_ok).then_some((tls, addr))
    }

    /// Origins allowed to open terminals: the configured list, or the listener's own.
    pub fn gateway_origins(&self) -> Vec<Origin> {
        if !self.gateway.allowed_origins.is_empty() {
            return self
                .gateway
                .allowed_origins
                .iter()
                .filter_map(|o| Origin::parse(o).ok())
                .collect();
        }
        let scheme = if self.gateway.tls_cert_file.is_some() {
            "https"
        } else {
            "http"
        };
        let Ok(addr) = self.gateway.listen.parse::<SocketAddr>() else {
            return Vec::new();
        };
        let mut hosts = vec![match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        }];
        if addr.ip().is_loopback() {
            hosts.push("localhost".into());
        }
        hosts
            .iter()
            .filter_map(|h| Origin::parse(&format!("{scheme}://{h}:{}", addr.port())).ok())
            .collect()
    }
}
