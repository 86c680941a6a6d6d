//! What every request shares: configuration, verifier, route cache, live terminals.

use std::sync::Arc;
use std::time::Duration;

use config::Config;
use pingora_limits::rate::Rate;
use policy::{OriginPolicy, SessionId};

use crate::control_client::ControlClient;
use crate::metrics::Metrics;
use crate::routes::{Revocations, RouteCache};
use crate::target_credentials::TargetCredentials;
use crate::terminals::{CloseReason, Terminals};

/// The gateway's shared state.
pub struct Gateway {
    /// Configuration.
    pub config: Arc<Config>,
    /// Token verifier, with the tokens it accepted.
    pub verifier: crate::verified::VerifiedTokens,
    /// Allowed origins.
    pub origins: OriginPolicy,
    /// Routes and locks.
    pub routes: RouteCache,
    /// Open terminals.
    pub terminals: Arc<Terminals>,
    /// When each session was last typed into here.
    pub activity: Arc<crate::activity::Activity>,
    /// Control's internal API.
    pub control: ControlClient,
    /// Where control is and how its certificate is checked (`gateway.control_url`),
    /// for the `/api` calls proxied to it.
    pub control_endpoint: crate::certificate::ControlEndpoint,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Failed authentications per client address, per minute.
    pub auth_failures: Rate,
    /// Route lookups at control per user, per minute.
    pub lookups: Rate,
    /// The session cookie is marked `Secure` (TLS listener).
    pub secure_cookie: bool,
    /// Proxies whose `X-Forwarded-For` names the client address.
    pub trusted_proxies: policy::TrustedProxies,
    /// Credentials of targets' ttyds, read from files.
    pub target_credentials: TargetCredentials,
    /// Signs each sign-in's own cookie token, when the configuration holds a signing
    /// key (without one the cookie carries the token that was presented).
    pub signer: Option<policy::Signer>,
    /// Seals the codes that sign the command-line client in through the browser, with
    /// a key derived from the signing key (none without one: no such sign-in).
    pub cli_codes: Option<policy::cli_login::CodeSealer>,
    /// Sign-in through an OpenID Connect provider, when `[auth.oidc]` is set.
    pub oidc: Option<Arc<crate::oidc::Oidc>>,
    /// Where recorded terminals are written (profiles' `record`).
    pub recordings: Arc<crate::recording::Spool>,
    /// The gateway's own read-only ttyd pool (no `-W`), where share-link viewers of
    /// sessions without a host pool of their own go.
    pub viewer_pool: policy::feed::TtydAddress,
    /// The recordings player, read once at start when `gateway.player_dir` is set.
    pub player: Option<crate::ui::Player>,
    /// The certificate and CA of the `tls://` pools of other hosts, when
    /// `gateway.client_cert_file` is set.
    pub pool_tls: Option<Arc<crate::certificate::PoolTls>>,
}

/// The gateway's own read-only pool: `gateway.viewer_upstreams`, else the unix socket
/// `ttyd.viewer_socket`.
fn viewer_pool(config: &Config) -> policy::feed::TtydAddress {
    let addrs = if config.gateway.viewer_upstreams.is_empty() {
        let socket = config.resolve(&config.ttyd.viewer_socket);
        vec![format!("unix:{}", socket.to_string_lossy())]
    } else {
        config.gateway.viewer_upstreams.clone()
    };
    policy::feed::TtydAddress {
        addrs,
        base_path: String::new(),
    }
}

impl Gateway {
    /// Builds the shared state from a loaded configuration.
    pub fn new(config: Arc<Config>) -> anyhow::Result<Arc<Self>> {
        let verifier = config.verifier()?;
        let token = config.secrets().service_token.as_ref().ok_or_else(|| {
            anyhow::anyhow!("control.service_token_file: required to read the route feed")
        })?;
        let g = &config.gateway;
        let control_endpoint = crate::certificate::ControlEndpoint::from_config(&config)?;
        let control = ControlClient::new(
            &g.control_url,
            token.expose(),
            Duration::from_millis(g.control_timeout_ms),
            control_endpoint.client_tls().cloned(),
        );
        Ok(Arc::new(Gateway {
            verifier: crate::verified::VerifiedTokens::new(verifier),
            origins: OriginPolicy::new(config.gateway_origins()),
            routes: RouteCache::new(Duration::from_millis(g.negative_cache_ms)),
            terminals: Terminals::new(g.max_terminals_per_user, g.max_terminals_per_session),
            control,
            control_endpoint,
            activity: Default::default(),
            metrics: Arc::new(Metrics::default()),
            auth_failures: Rate::new(Duration::from_secs(60)),
            lookups: Rate::new(Duration::from_secs(60)),
            secure_cookie: g.tls_cert_file.is_some(),
            viewer_pool: viewer_pool(&config),
            player: g
                .player_dir
                .as_ref()
                .map(|dir| crate::ui::Player::load(&config.resolve(dir)))
                .transpose()?,
            target_credentials: TargetCredentials::from_config(&config),
            oidc: crate::oidc::Oidc::from_config(&config)?,
            signer: config.signer(),
            cli_codes: match &config.secrets().signing {
                Some(key) => Some(policy::cli_login::CodeSealer::new(key.expose())?),
                None => None,
            },
            pool_tls: crate::certificate::PoolTls::from_config(&config)?,
            recordings: Arc::new(
                crate::recording::Spool::new(config.resolve(&g.recordings_dir), g.recording_queue)
                    .with_limits(crate::recording::Limits {
                        recording: config.control.max_recording_bytes,
                        spool: g.recordings_spool_max_bytes,
                    }),
            ),
            trusted_proxies: policy::TrustedProxies::parse(&g.trusted_proxies)
                .map_err(|(i, why)| anyhow::anyhow!("gateway.trusted_proxies[{i}]: {why}"))?,
            config,
        }))
    }

    /// Closes the live terminals a feed update revoked.
    pub fn enforce(&self, revoked: &Revocations) {
        let t = &self.terminals;
        for id in &revoked.sessions {
            let n = t.close_session(id);
            self.said_closed(
                n,
                CloseReason::RouteRemoved,
                "route_removed",
                ClosedFor::Session(id),
            );
        }
        for (id, access) in &revoked.narrowed {
            let n = t.close_disallowed(id, access);
            self.said_closed(
                n,
                CloseReason::AccessRemoved,
                "access_removed",
                ClosedFor::Session(id),
            );
        }
        for (id, share) in &revoked.shares {
            let n = t.close_share(id, share);
            self.said_closed(
                n,
                CloseReason::ShareEnded,
                "share_revoked",
                ClosedFor::Share(id, share),
            );
        }
        for (id, peers) in &revoked.peers {
            let n = t.sync_peers(id, peers, crate::clock::now());
            self.said_closed(
                n,
                CloseReason::PeerRemoved,
                "peer_removed",
                ClosedFor::Session(id),
            );
        }
        for r in &revoked.credentials {
            let reason = CloseReason::from(r.why());
            let n = t.close_revoked(r);
            self.said_closed(n, reason, reason.as_str(), ClosedFor::Revocation(&r.key()));
        }
        for sub in &revoked.users {
            let n = t.close_user(sub);
            self.said_closed(
                n,
                CloseReason::UserLocked,
                "user_locked",
                ClosedFor::User(sub),
            );
        }
    }

    /// Says and counts what one enforcement closed, the one shape every enforcement
    /// ends in: an audit line naming what decided it and `why`, and the `closed` metric
    /// by `reason`. Nothing when it closed nothing.
    pub fn said_closed(&self, n: usize, reason: CloseReason, why: &str, what: ClosedFor<'_>) {
        if n == 0 {
            return;
        }
        const LINE: &str = "live terminals closed";
        match what {
            ClosedFor::Session(id) => {
                tracing::info!(target: "audit", session = %id, closed = n, reason = why, "{LINE}")
            }
            ClosedFor::Share(id, share) => {
                tracing::info!(target: "audit", session = %id, share = %share, closed = n, reason = why, "{LINE}")
            }
            ClosedFor::Revocation(key) => {
                tracing::info!(target: "audit", revocation = %key, closed = n, reason = why, "{LINE}")
            }
            ClosedFor::User(sub) => {
                tracing::info!(target: "audit", sub = %sub, closed = n, reason = why, "{LINE}")
            }
            ClosedFor::Anything => {
                tracing::info!(target: "audit", closed = n, reason = why, "{LINE}")
            }
        }
        self.count_closed(reason, n);
    }

    /// A token's fingerprint: tells terminals opened with it apart without keeping it,
    /// and names its sign-in in revocations.
    pub fn credential_key(&self, token: &[u8]) -> policy::revocation::Fingerprint {
        policy::revocation::Fingerprint::of(token)
    }

    /// Counts live terminals closed by enforcement.
    fn count_closed(&self, reason: CloseReason, n: usize) {
        let label = crate::metrics::Label {
            kind: reason.as_str(),
        };
        self.metrics.closed.get_or_create(&label).inc_by(n as u64);
    }
}

/// What an enforcement closed terminals for, as its audit line names it.
pub enum ClosedFor<'a> {
    /// One session's terminals.
    Session(&'a SessionId),
    /// One share link's viewers.
    Share(&'a SessionId, &'a str),
    /// A revocation, by its key.
    Revocation(&'a str),
    /// One user's terminals.
    User(&'a str),
    /// Whatever the reason holds for (an expiry, one credential's sign-out).
    Anything,
}
