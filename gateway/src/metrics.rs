//! Prometheus metrics of the gateway, served on the admin listener.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A single-label set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    /// The label's value.
    pub kind: &'static str,
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: Registry,
    /// Terminal requests by decision (`allow` or the denial reason).
    pub upgrades: Family<Label, Counter>,
    /// Open terminal websockets.
    pub open_terminals: Gauge,
    /// Terminal bytes by direction (`up`: browser → ttyd, `down`: ttyd → browser).
    pub bytes: Family<Label, Counter>,
    /// Failed authentications by reason.
    pub auth_failures: Family<Label, Counter>,
    /// Live terminals closed by enforcement, by reason.
    pub closed: Family<Label, Counter>,
    /// The route cache's feed revision.
    pub feed_revision: Gauge,
    /// Seconds since the feed last answered (0 while it answers).
    pub feed_lag_seconds: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("termgate_gateway");
        let m = Metrics {
            upgrades: Family::default(),
            open_terminals: Gauge::default(),
            bytes: Family::default(),
            auth_failures: Family::default(),
            closed: Family::default(),
            feed_revision: Gauge::default(),
            feed_lag_seconds: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "terminal_requests",
            "Terminal requests by decision",
            m.upgrades.clone(),
        );
        registry.register(
            "open_terminals",
            "Open terminal websockets",
            m.open_terminals.clone(),
        );
        registry.register(
            "terminal_bytes",
            "Terminal bytes by direction",
            m.bytes.clone(),
        );
        registry.register(
            "auth_failures",
            "Failed authentications by reason",
            m.auth_failures.clone(),
        );
        registry.register(
            "terminals_closed",
            "Live terminals closed by enforcement",
            m.closed.clone(),
        );
        registry.register(
            "feed_revision",
            "Route feed revision applied",
            m.feed_revision.clone(),
        );
        registry.register(
            "feed_lag_seconds",
            "Seconds since the route feed last answered",
            m.feed_lag_seconds.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Counts `kind` in a family.
    pub fn inc(family: &Family<Label, Counter>, kind: &'static str) {
        family.get_or_create(&Label { kind }).inc();
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
