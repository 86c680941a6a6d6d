//! Semantic checks after deserialisation; every problem names its key.

use std::net::SocketAddr;
use std::path::Path;

use policy::sandbox::{self, ContainerSpec, MountKind, MountSpec, Namespace};
use policy::{KeyMaterial, Origin, PemKey, Signer, Verifier, VerifierSettings};

use crate::error::ConfigError;
use crate::model::{Config, Profile};
use crate::secret::{Secret, Secrets};

/// Smallest accepted service token, bytes.
const MIN_SERVICE_TOKEN_BYTES: usize = 16;

pub(crate) fn validate(c: &mut Config, errors: &mut Vec<ConfigError>) {
    let mut err = |key: &str, msg: String| errors.push(ConfigError::new(key, msg));

    if !is_name(&c.instance, 32) {
        err(
            "instance",
            "must be 1-32 characters of a-z, 0-9 and -, starting with a letter or digit".into(),
        );
    }

    // [auth]
    let a = &c.auth;
    if a.leeway_seconds > 300 {
        err("auth.leeway_seconds", "must be at most 300".into());
    }
    if a.admin_role.is_empty() {
        err("auth.admin_role", "must not be empty".into());
    }
    if a.cookie_name.is_empty()
        || !a
            .cookie_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        err(
            "auth.cookie_name",
            "must be 1 or more characters of A-Z a-z 0-9 _ -".into(),
        );
    }
    if a.token_ttl_seconds == 0 {
        err("auth.token_ttl_seconds", "must be positive".into());
    }
    let sources = [
        a.hs256_secret_file.is_some(),
        !a.public_keys.is_empty(),
        a.jwks_file.is_some(),
    ];
    let verification = match sources.iter().filter(|s| **s).count() {
        0 => {
            err(
                "auth",
                "set exactly one of hs256_secret_file, public_keys or jwks_file".into(),
            );
            None
        }
        1 => read_key_material(c, &mut err),
        _ => {
            err(
                "auth",
                "hs256_secret_file, public_keys and jwks_file are exclusive; set exactly one"
                    .into(),
            );
            None
        }
    };
    match (&c.auth.audience, c.auth.allow_any_audience) {
        (Some(_), false) | (None, true) => {}
        (None, false) => err(
            "auth.audience",
            "required: tokens minted for other services would open terminals here (set auth.allow_any_audience = true to accept that)".into(),
        ),
        (Some(_), true) => err(
            "auth.allow_any_audience",
            "contradicts auth.audience; set one of them".into(),
        ),
    }
    if c.auth.max_token_lifetime_seconds == 0 {
        err("auth.max_token_lifetime_seconds", "must be positive".into());
    }
    if c.auth.token_ttl_seconds > c.auth.max_token_lifetime_seconds {
        err(
            "auth.token_ttl_seconds",
            format!(
                "{} exceeds auth.max_token_lifetime_seconds ({}): such tokens would be refused",
                c.auth.token_ttl_seconds, c.auth.max_token_lifetime_seconds
            ),
        );
    }
    if let Some(material) = &verification {
        let key = match material {
            KeyMaterial::Hs256Secret(_) => "auth.hs256_secret_file",
            KeyMaterial::PemPublicKeys(_) => "auth.public_keys",
            KeyMaterial::Jwks(_) => "auth.jwks_file",
        };
        if let Err(e) = Verifier::new(material, verifier_settings(c)) {
            err(key, e.to_string());
        }
    }
    let signing = match (&verification, &c.auth.signing_key_file) {
        (_, Some(file)) => {
            read_secret(c, file, "auth.signing_key_file", &mut err).and_then(|pem| {
                match Signer::from_private_pem(pem.expose(), c.auth.signing_key_id.clone()) {
                    Ok(_) => Some(pem),
                    Err(e) => {
                        err("auth.signing_key_file", e.to_string());
                        None
                    }
                }
            })
        }
        (Some(KeyMaterial::Hs256Secret(s)), None) => Some(Secret::new(s.clone())),
        _ => None,
    };

    let oidc_client_secret = validate_oidc(c, signing.is_some(), &mut err);

    // [gateway]
    let g = &c.gateway;
    check_addr("gateway.listen", &g.listen, &mut err);
    check_addr("gateway.admin_listen", &g.admin_listen, &mut err);
    match (&g.tls_cert_file, &g.tls_key_file) {
        (Some(cert), Some(key)) => {
            check_readable(c, cert, "gateway.tls_cert_file", &mut err);
            check_readable(c, key, "gateway.tls_key_file", &mut err);
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
    match g.control_url.strip_prefix("http://") {
        Some(hostport) if !hostport.is_empty() && !hostport.contains('/') => {}
        _ => err(
            "gateway.control_url",
            "must be http://host:port with no path".into(),
        ),
    }
    for (i, u) in g.ttyd_upstreams.iter().enumerate() {
        check_addr(&format!("gateway.ttyd_upstreams[{i}]"), u, &mut err);
    }
    for (i, u) in g.viewer_upstreams.iter().enumerate() {
        check_addr(&format!("gateway.viewer_upstreams[{i}]"), u, &mut err);
    }
    positive("gateway.control_timeout_ms", g.control_timeout_ms, &mut err);
    positive(
        "gateway.max_terminals_per_user",
        g.max_terminals_per_user.into(),
        &mut err,
    );
    positive(
        "gateway.max_terminals_per_session",
        g.max_terminals_per_session.into(),
        &mut err,
    );
    within(
        "gateway.max_request_header_bytes",
        g.max_request_header_bytes,
        1024,
        1 << 20,
        &mut err,
    );
    within(
        "gateway.max_body_bytes",
        g.max_body_bytes,
        1024,
        16 << 20,
        &mut err,
    );
    within(
        "gateway.header_timeout_ms",
        g.header_timeout_ms as usize,
        100,
        600_000,
        &mut err,
    );
    within(
        "gateway.activity_report_ms",
        g.activity_report_ms as usize,
        100,
        60_000,
        &mut err,
    );
    within(
        "gateway.terminal_report_ms",
        g.terminal_report_ms as usize,
        50,
        60_000,
        &mut err,
    );
    within(
        "gateway.max_ws_frame_bytes",
        g.max_ws_frame_bytes as usize,
        4096,
        64 << 20,
        &mut err,
    );
    within(
        "gateway.recording_queue",
        g.recording_queue,
        4,
        65_536,
        &mut err,
    );
    positive(
        "gateway.auth_failures_per_minute",
        g.auth_failures_per_minute.into(),
        &mut err,
    );

    // [control]
    let k = &c.control;
    check_addr("control.listen", &k.listen, &mut err);
    check_addr("control.admin_listen", &k.admin_listen, &mut err);
    if let Some(h) = &k.docker_host {
        if !(h.starts_with("unix://") || h.starts_with("tcp://") || h.starts_with("http://")) {
            err(
                "control.docker_host",
                "must start with unix://, tcp:// or http://".into(),
            );
        }
    }
    positive(
        "control.docker_timeout_seconds",
        k.docker_timeout_seconds,
        &mut err,
    );
    within(
        "control.max_body_bytes",
        k.max_body_bytes,
        1024,
        16 << 20,
        &mut err,
    );
    if k.max_recording_bytes < 4096 {
        err(
            "control.max_recording_bytes",
            format!("must be at least 4096, got {}", k.max_recording_bytes),
        );
    }
    positive(
        "control.reconcile_interval_seconds",
        k.reconcile_interval_seconds,
        &mut err,
    );
    positive(
        "control.history_per_user",
        k.history_per_user as u64,
        &mut err,
    );
    let service_token = k.service_token_file.as_ref().and_then(|f| {
        let t = read_secret(c, f, "control.service_token_file", &mut err)?;
        if t.expose().len() < MIN_SERVICE_TOKEN_BYTES {
            err(
                "control.service_token_file",
                format!("token must be at least {MIN_SERVICE_TOKEN_BYTES} bytes"),
            );
            return None;
        }
        Some(t)
    });

    validate_hosts(c, &mut err);

    // [store], [quota]
    if c.store.path.as_os_str().is_empty() {
        err("store.path", "must not be empty".into());
    }
    within(
        "store.change_log_len",
        c.store.change_log_len,
        16,
        1 << 20,
        &mut err,
    );
    positive("quota.per_user", c.quota.per_user.into(), &mut err);
    positive("quota.global", c.quota.global.into(), &mut err);

    // [[targets]]
    let mut names = std::collections::HashSet::new();
    for (i, t) in c.targets.iter().enumerate() {
        let credential = match c.target_credential(t) {
            Ok(credential) => credential,
            Err(message) => {
                err(&format!("targets[{i}].credential"), message.into());
                None
            }
        };
        let definition = policy::target::TargetDefinition {
            name: &t.name,
            upstream: &t.upstream,
            users: &t.users,
            roles: &t.roles,
            credential: credential.as_ref(),
        };
        for p in definition.check().1 {
            err(&format!("targets[{i}].{}", p.field), p.message);
        }
        if !names.insert(t.name.as_str()) {
            err(
                &format!("targets[{i}].name"),
                format!("{:?} is used twice", t.name),
            );
        }
        if let Some(policy::feed::TargetCredential::BasicFile { path }) = &credential {
            check_readable(
                c,
                Path::new(path),
                &format!("targets[{i}].credential.basic_file"),
                &mut err,
            );
        }
    }

    // [profiles]
    if c.profiles.is_empty() && c.docker.enabled {
        err("profiles", "at least one profile is required".into());
    }
    let host_names: Vec<String> = c.docker_hosts().into_iter().map(|h| h.name).collect();
    for (name, p) in &c.profiles {
        validate_profile(name, p, &mut err);
        for (i, h) in p.hosts.iter().enumerate() {
            if !host_names.contains(h) {
                err(
                    &format!("profiles.{name}.hosts[{i}]"),
                    format!(
                        "{h:?} is not a Docker host of this configuration (known: {host_names:?})"
                    ),
                );
            }
        }
        if c.control.service_networks.contains(&p.network) {
            err(
                &format!("profiles.{name}.network"),
                format!(
                    "profile {name:?} breaks rule `isolated_network`: {:?} is one of control.service_networks, where termgate's own services listen",
                    p.network
                ),
            );
        }
    }

    if let Some(verification) = verification {
        c.secrets = Some(Secrets {
            verification,
            signing,
            service_token,
            oidc_client_secret,
        });
    }
}

/// `[auth.oidc]`: a provider URL and a callback that can work, a way for the gateway to
/// sign its own sessions, rules that can be met; the client secret, when set.
fn validate_oidc(c: &Config, can_sign: bool, err: &mut impl FnMut(&str, String)) -> Option<Secret> {
    let o = c.auth.oidc.as_ref()?;
    if !can_sign {
        err(
            "auth.oidc",
            "the gateway signs the sessions of people who sign in with the provider: set auth.hs256_secret_file, or auth.signing_key_file next to public keys".into(),
        );
    }
    check_oidc_url("auth.oidc.issuer", &o.issuer, err);
    if let Some(rest) = check_oidc_url("auth.oidc.redirect_url", &o.redirect_url, err) {
        let path = rest.find('/').map_or("", |i| &rest[i..]);
        if path != "/auth/callback" {
            err(
                "auth.oidc.redirect_url",
                format!("must be the gateway's public origin followed by /auth/callback (got path {path:?})"),
            );
        }
    }
    if o.client_id.is_empty() {
        err("auth.oidc.client_id", "must not be empty".into());
    }
    if !["client_secret_basic", "client_secret_post"]
        .contains(&o.token_endpoint_auth_method.as_str())
    {
        err(
            "auth.oidc.token_endpoint_auth_method",
            "must be client_secret_basic or client_secret_post".into(),
        );
    }
    if !o.scopes.iter().any(|s| s == "openid") {
        err("auth.oidc.scopes", "must include \"openid\"".into());
    }
    if let Some(bad) = o.scopes.iter().find(|s| {
        s.is_empty()
            || s.bytes()
                .any(|b| !b.is_ascii_graphic() || b == b'"' || b == b'\\')
    }) {
        err("auth.oidc.scopes", format!("{bad:?} is not a scope token"));
    }
    if o.sub_claim.is_empty() {
        err("auth.oidc.sub_claim", "must not be empty".into());
    }
    match (&o.admin_claim, o.admin_values.is_empty()) {
        (Some(_), true) => err(
            "auth.oidc.admin_values",
            "required with auth.oidc.admin_claim: the values that grant admin".into(),
        ),
        (None, false) => err(
            "auth.oidc.admin_claim",
            "required with auth.oidc.admin_values: the claim they are read from".into(),
        ),
        _ => {}
    }
    if let Some(d) = o
        .allowed_email_domains
        .iter()
        .find(|d| d.is_empty() || d.contains('@'))
    {
        err(
            "auth.oidc.allowed_email_domains",
            format!("{d:?} is not a domain (write example.com, without @)"),
        );
    }
    if o.session_max_seconds == 0 || o.session_max_seconds > c.auth.max_token_lifetime_seconds {
        err(
            "auth.oidc.session_max_seconds",
            format!(
                "must be 1 to auth.max_token_lifetime_seconds ({}): longer sessions would be refused",
                c.auth.max_token_lifetime_seconds
            ),
        );
    }
    if !(100..=60_000).contains(&o.timeout_ms) {
        err("auth.oidc.timeout_ms", "must be 100 to 60000".into());
    }
    if let Some(ca) = &o.ca_file {
        let path = c.resolve(ca);
        match std::fs::read_to_string(&path) {
            Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => {}
            Ok(_) => err(
                "auth.oidc.ca_file",
                format!("{} holds no PEM certificate", path.display()),
            ),
            Err(e) => err(
                "auth.oidc.ca_file",
                format!("cannot read {}: {e}", path.display()),
            ),
        }
    }
    o.client_secret_file
        .as_ref()
        .and_then(|f| read_secret(c, f, "auth.oidc.client_secret_file", err))
}

/// An `https://` URL, or `http://` to a loopback host (tests, a provider on the same
/// machine); the part after the scheme.
fn check_oidc_url<'a>(
    key: &str,
    url: &'a str,
    err: &mut impl FnMut(&str, String),
) -> Option<&'a str> {
    let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => {
            err(key, format!("{url:?} must start with https://"));
            return None;
        }
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let loopback = matches!(name, "localhost" | "127.0.0.1" | "[::1]");
    if host.is_empty() || url.contains(['?', '#', ' ']) {
        err(
            key,
            format!("{url:?} is not a plain URL (no query or fragment)"),
        );
        return None;
    }
    if !https && !loopback {
        err(
            key,
            format!("{url:?} must use https:// (plain http only to a loopback host)"),
        );
        return None;
    }
    Some(rest)
}

/// `[[docker.hosts]]`: names unique and plain, endpoints unix or tcp, TLS files all
/// or none (and only over tcp), pools of valid addresses, capacities positive.
fn validate_hosts(c: &Config, err: &mut impl FnMut(&str, String)) {
    if !c.docker.enabled && !c.docker.hosts.is_empty() {
        err(
            "docker.enabled",
            "false, yet docker.hosts lists hosts: remove them, or enable Docker".into(),
        );
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

/// The verifier settings `[auth]` describes.
pub(crate) fn verifier_settings(c: &Config) -> VerifierSettings {
    VerifierSettings {
        issuer: c.auth.issuer.clone(),
        audience: c.auth.audience.clone(),
        leeway_secs: c.auth.leeway_seconds,
        admin_role: c.auth.admin_role.clone(),
        max_lifetime_secs: Some(c.auth.max_token_lifetime_seconds),
    }
}

fn validate_profile(name: &str, p: &Profile, err: &mut impl FnMut(&str, String)) {
    let key = format!("profiles.{name}");
    if !is_name(name, 32) {
        err(
            &key,
            "profile names are 1-32 characters of a-z, 0-9 and -".into(),
        );
    }
    if p.image.trim().is_empty() {
        err(&format!("{key}.image"), "must not be empty".into());
    }
    if p.memory_mb < 6 {
        err(
            &format!("{key}.memory_mb"),
            "must be at least 6 (Docker's minimum)".into(),
        );
    }
    if !(p.cpus > 0.0 && p.cpus <= 256.0) {
        err(&format!("{key}.cpus"), "must be between 0 and 256".into());
    }
    if p.tmp_size_mb == 0 {
        err(&format!("{key}.tmp_size_mb"), "must be positive".into());
    }
    if p.record_input && !p.record {
        err(
            &format!("{key}.record_input"),
            "records input only with record = true".into(),
        );
    }
    if policy::share::ShareMode::parse(&p.shares).is_none() {
        err(
            &format!("{key}.shares"),
            format!(
                "must be \"anyone\", \"signed-in\" or \"off\", got {:?}",
                p.shares
            ),
        );
    }
    for (k, v) in [
        ("idle_timeout_seconds", p.idle_timeout_seconds),
        ("max_lifetime_seconds", p.max_lifetime_seconds),
    ] {
        if let Some(v) = v {
            if !(1..=MAX_LIFETIME_LIMIT).contains(&v) {
                err(
                    &format!("{key}.{k}"),
                    format!("must be between 1 and {MAX_LIFETIME_LIMIT} seconds (leave it out for no limit), got {v}"),
                );
            }
        }
    }
    if p.stop_grace_seconds > MAX_STOP_GRACE {
        err(
            &format!("{key}.stop_grace_seconds"),
            format!(
                "must be between 0 and {MAX_STOP_GRACE} seconds, got {}",
                p.stop_grace_seconds
            ),
        );
    }
    for env in p.env.keys() {
        if !is_env_name(env) {
            err(
                &format!("{key}.env.{env}"),
                "not a valid environment variable name".into(),
            );
        }
    }
    if let Some(home) = &p.home {
        if !home.starts_with('/') {
            err(&format!("{key}.home"), "must be an absolute path".into());
        }
    }
    for (i, m) in p.mounts.iter().enumerate() {
        if m.kind != "bind" && m.kind != "volume" {
            err(
                &format!("{key}.mounts[{i}].kind"),
                format!("must be bind or volume, got {:?}", m.kind),
            );
        }
        if m.kind == "volume" && m.host_source.is_some() {
            err(
                &format!("{key}.mounts[{i}].host_source"),
                "only bind mounts have a host path".into(),
            );
        }
    }
    let mut option_envs = Vec::new();
    for (opt, o) in &p.options {
        let okey = format!("{key}.options.{opt}");
        if !is_name(opt, 32) {
            err(
                &okey,
                "option names are 1-32 characters of a-z, 0-9 and -".into(),
            );
        }
        if !is_env_name(&o.env) {
            err(
                &format!("{okey}.env"),
                "not a valid environment variable name".into(),
            );
        }
        if p.env.contains_key(&o.env) || option_envs.contains(&&o.env) {
            err(
                &format!("{okey}.env"),
                format!("{} is already set by this profile", o.env),
            );
        }
        option_envs.push(&o.env);
        if o.values.is_empty() {
            err(
                &format!("{okey}.values"),
                "must list at least one value".into(),
            );
        }
        for v in &o.values {
            let ok = !v.is_empty()
                && v.len() <= 64
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !ok {
                err(
                    &format!("{okey}.values"),
                    format!("{v:?}: values are 1-64 characters of A-Z a-z 0-9 . _ -"),
                );
            }
        }
        if !o.values.contains(&o.default) {
            err(
                &format!("{okey}.default"),
                format!("{:?} is not one of values", o.default),
            );
        }
    }
    // The red lines, on the spec as dockerd would see it and on the paths control checks.
    let mut specs = vec![p.sandbox_spec(p.home.as_ref().map(|_| "termgate-home-check"))];
    if p.mounts.iter().any(|m| m.host_source.is_some()) {
        let mut control_view = specs[0].clone();
        for (m, spec_m) in p.mounts.iter().zip(control_view.mounts.iter_mut()) {
            spec_m.source = m.source.clone();
        }
        specs.push(control_view);
    }
    let mut seen = Vec::new();
    for spec in &specs {
        for v in sandbox::check(spec) {
            let line = format!(
                "profile {name:?} breaks red line `{}`: {}",
                v.rule, v.detail
            );
            if !seen.contains(&line) {
                err(&key, line.clone());
                seen.push(line);
            }
        }
    }
}

/// The longest idle timeout or lifetime a profile may set: ten years, seconds.
const MAX_LIFETIME_LIMIT: u64 = 10 * 366 * 86_400;

/// The longest a profile may let its sessions' programs run after their hang-up,
/// seconds: the end is already decided and its terminals closed, so anything longer
/// only keeps a container (and its user's quota) for nobody.
const MAX_STOP_GRACE: u64 = 300;

impl Profile {
    /// Who may open this profile's sessions' share links (validated at load; an
    /// unknown spelling, impossible after validation, reads as `off`).
    pub fn share_mode(&self) -> policy::share::ShareMode {
        policy::share::ShareMode::parse(&self.shares).unwrap_or(policy::share::ShareMode::Off)
    }

    /// When this profile's sessions end by themselves.
    pub fn lifetime_limits(&self) -> policy::LifetimeLimits {
        policy::LifetimeLimits {
            idle_timeout: self.idle_timeout_seconds,
            max_lifetime: self.max_lifetime_seconds,
        }
    }

    /// How long an ended session's programs get after their hang-up before the
    /// container is removed by force.
    pub fn stop_grace(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.stop_grace_seconds)
    }

    /// The container this profile describes, as the sandbox rules see it. `home_volume`
    /// is the user's home volume name when the profile has `home`.
    pub fn sandbox_spec(&self, home_volume: Option<&str>) -> ContainerSpec {
        let mut security_opt = vec!["no-new-privileges:true".to_owned()];
        security_opt.extend(self.security_opt.iter().cloned());
        let namespace_modes = [
            (Namespace::Pid, self.pid_mode),
            (Namespace::Ipc, self.ipc_mode),
            (Namespace::Userns, self.userns_mode),
            (Namespace::Uts, self.uts_mode),
        ]
        .into_iter()
        .filter_map(|(kind, mode)| mode.map(|m| (kind, m)))
        .collect();
        let mut mounts: Vec<MountSpec> = self
            .mounts
            .iter()
            .map(|m| MountSpec {
                kind: if m.kind == "volume" {
                    MountKind::Volume
                } else {
                    MountKind::Bind
                },
                source: m.host_source.clone().unwrap_or_else(|| m.source.clone()),
                target: m.target.clone(),
                read_only: m.read_only,
            })
            .collect();
        if let (Some(target), Some(volume)) = (&self.home, home_volume) {
            mounts.push(MountSpec {
                kind: MountKind::Volume,
                source: volume.to_owned(),
                target: target.clone(),
                read_only: false,
            });
        }
        let memory = i64::try_from(self.memory_mb.saturating_mul(1 << 20)).unwrap_or(i64::MAX);
        ContainerSpec {
            user: Some(self.user.clone()),
            privileged: self.privileged,
            cap_add: self.cap_add.clone(),
            cap_drop: vec!["ALL".into()],
            security_opt,
            network_mode: self.network.clone(),
            namespace_modes,
            mounts,
            devices: self.devices.clone(),
            readonly_rootfs: self.readonly_rootfs,
            pids_limit: Some(self.pids_limit),
            memory_bytes: Some(memory),
            memory_swap_bytes: Some(memory),
            nano_cpus: Some((self.cpus * 1e9) as i64),
            tty: true,
            open_stdin: true,
            init: true,
        }
    }
}

impl Config {
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

    /// The verifier `[auth]` describes.
    pub fn verifier(&self) -> Result<Verifier, policy::KeyError> {
        Verifier::new(&self.secrets().verification, verifier_settings(self))
    }

    /// The signer for `termgate-control token`, when the configuration has a private key.
    pub fn signer(&self) -> Option<Signer> {
        let s = self.secrets().signing.as_ref()?;
        match (&self.auth.signing_key_file, &self.secrets().verification) {
            (Some(_), _) => {
                Signer::from_private_pem(s.expose(), self.auth.signing_key_id.clone()).ok()
            }
            (None, KeyMaterial::Hs256Secret(_)) => Signer::hs256(s.expose()).ok(),
            _ => None,
        }
    }

    /// Bind mounts whose source (as control sees it) does not exist, as errors naming
    /// the key. Control calls this at start; Docker would fail the create anyway.
    pub fn missing_bind_sources(&self) -> Vec<crate::ConfigError> {
        let mut out = Vec::new();
        for (name, p) in &self.profiles {
            for (i, m) in p.mounts.iter().enumerate() {
                if m.kind == "bind" && !Path::new(&m.source).exists() {
                    out.push(ConfigError::new(
                        format!("profiles.{name}.mounts[{i}].source"),
                        format!("{} does not exist", m.source),
                    ));
                }
            }
        }
        out
    }
}

fn read_key_material(c: &Config, err: &mut impl FnMut(&str, String)) -> Option<KeyMaterial> {
    let a = &c.auth;
    if let Some(f) = &a.hs256_secret_file {
        return read_secret(c, f, "auth.hs256_secret_file", err)
            .map(|s| KeyMaterial::Hs256Secret(s.expose().to_vec()));
    }
    if let Some(f) = &a.jwks_file {
        return read_secret(c, f, "auth.jwks_file", err)
            .map(|s| KeyMaterial::Jwks(s.expose().to_vec()));
    }
    let mut keys = Vec::new();
    for (i, k) in a.public_keys.iter().enumerate() {
        let pem = read_secret(c, &k.file, &format!("auth.public_keys[{i}].file"), err)?;
        keys.push(PemKey {
            kid: k.kid.clone(),
            pem: pem.expose().to_vec(),
        });
    }
    Some(KeyMaterial::PemPublicKeys(keys))
}

/// Reads a secret file; trailing whitespace (the newline editors add) is dropped.
fn read_secret(
    c: &Config,
    file: &Path,
    key: &str,
    err: &mut impl FnMut(&str, String),
) -> Option<Secret> {
    let path = c.resolve(file);
    match std::fs::read(&path) {
        Ok(mut bytes) => {
            while bytes.last().is_some_and(|b| b.is_ascii_whitespace()) {
                bytes.pop();
            }
            if bytes.is_empty() {
                err(key, format!("{} is empty", path.display()));
                return None;
            }
            Some(Secret::new(bytes))
        }
        Err(e) => {
            err(key, format!("cannot read {}: {e}", path.display()));
            None
        }
    }
}

fn check_readable(c: &Config, file: &Path, key: &str, err: &mut impl FnMut(&str, String)) {
    let path = c.resolve(file);
    if let Err(e) = std::fs::File::open(&path) {
        err(key, format!("cannot read {}: {e}", path.display()));
    }
}

fn check_addr(key: &str, v: &str, err: &mut impl FnMut(&str, String)) {
    if v.parse::<SocketAddr>().is_err() {
        err(
            key,
            format!("{v:?} is not an address such as 127.0.0.1:8080"),
        );
    }
}

fn positive(key: &str, v: u64, err: &mut impl FnMut(&str, String)) {
    if v == 0 {
        err(key, "must be positive".into());
    }
}

fn within(key: &str, v: usize, min: usize, max: usize, err: &mut impl FnMut(&str, String)) {
    if v < min || v > max {
        err(key, format!("must be between {min} and {max}, got {v}"));
    }
}

fn is_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}
