//! Prometheus metrics of the gateway, served on the admin listener.

use config::telemetry::MetricsRegistry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// A single-label set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    /// The label's value.
    pub kind: &'static str,
}

/// Every metric the gateway exports.
pub struct Metrics {
    registry: MetricsRegistry,
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
    /// Terminals open on the other gateways, as control last answered (0 when stale).
    pub elsewhere_terminals: Gauge,
    /// Share-link viewers open on the other gateways, as control last answered.
    pub elsewhere_viewers: Gauge,
    /// 1 while control's answer counts toward the limits, 0 when this gateway counts
    /// only its own terminals (no answer for three report intervals).
    pub elsewhere_fresh: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = MetricsRegistry::new("termgate_gateway");
        Metrics {
            upgrades: r.register(
                "terminal_requests",
                "Terminal requests by decision",
                Family::default(),
            ),
            open_terminals: r.register(
                "open_terminals",
                "Open terminal websockets",
                Gauge::default(),
            ),
            bytes: r.register(
                "terminal_bytes",
                "Terminal bytes by direction",
                Family::default(),
            ),
            auth_failures: r.register(
                "auth_failures",
                "Failed authentications by reason",
                Family::default(),
            ),
            closed: r.register(
                "terminals_closed",
                "Live terminals closed by enforcement",
                Family::default(),
            ),
            feed_revision: r.register(
                "feed_revision",
                "Route feed revision applied",
                Gauge::default(),
            ),
            feed_lag_seconds: r.register(
                "feed_lag_seconds",
                "Seconds since the route feed last answered",
                Gauge::default(),
            ),
            elsewhere_terminals: r.register(
                "elsewhere_terminals",
                "Terminals open on the other gateways, as control last answered",
                Gauge::default(),
            ),
            elsewhere_viewers: r.register(
                "elsewhere_viewers",
                "Share-link viewers open on the other gateways, as control last answered",
                Gauge::default(),
            ),
            elsewhere_fresh: r.register(
                "elsewhere_fresh",
                "1 while the other gateways' counts count toward the terminal limits",
                Gauge::default(),
            ),
            registry: r,
        }
    }
}

impl Metrics {
    /// Counts `kind` in a family.
    pub fn inc(family: &Family<Label, Counter>, kind: &'static str) {
        family.get_or_create(&Label { kind }).inc();
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}
