//! Prometheus metrics of the control service, served on the admin listener.

use config::telemetry::MetricsRegistry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// Label naming a kind of thing (reconcile action, Docker operation, create phase).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    /// The kind.
    pub kind: String,
}

fn kind(k: &str) -> Kind {
    Kind { kind: k.to_owned() }
}

/// Every metric control exports.
pub struct Metrics {
    registry: MetricsRegistry,
    /// Sessions holding resources (creating, running, stopping).
    pub sessions_active: Gauge,
    /// Create latency by phase: `total` (the whole request) and `docker` (create + start).
    pub create_seconds: Family<Kind, Histogram>,
    /// Actions the reconciler took, by kind.
    pub reconcile_actions: Family<Kind, Counter>,
    /// Docker calls that failed, by operation.
    pub docker_errors: Family<Kind, Counter>,
    /// Duration of full reconcile passes.
    pub reconcile_pass_seconds: Histogram,
    /// Current route-feed revision.
    pub feed_rev: Gauge,
    /// 1 when the daemon enforces seccomp on session containers, 0 when it does not.
    pub seccomp_enforced: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = MetricsRegistry::new("termgate_control");
        Metrics {
            sessions_active: r.register(
                "sessions_active",
                "Sessions holding resources",
                Gauge::default(),
            ),
            create_seconds: r.register(
                "create_seconds",
                "Session create latency by phase",
                Family::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.002, 2.0, 14))
                }),
            ),
            reconcile_actions: r.register(
                "reconcile_actions",
                "Reconciler actions by kind",
                Family::default(),
            ),
            docker_errors: r.register(
                "docker_errors",
                "Failed Docker operations by kind",
                Family::default(),
            ),
            reconcile_pass_seconds: r.register(
                "reconcile_pass_seconds",
                "Duration of full reconcile passes",
                Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            ),
            feed_rev: r.register("feed_revision", "Route feed revision", Gauge::default()),
            seccomp_enforced: r.register(
                "seccomp_enforced",
                "Whether session containers run under a seccomp filter",
                Gauge::default(),
            ),
            registry: r,
        }
    }
}

impl Metrics {
    /// Counts a reconciler action.
    pub fn reconciled(&self, action: &str) {
        self.reconcile_actions.get_or_create(&kind(action)).inc();
    }

    /// Counts a failed Docker operation.
    pub fn docker_error(&self, op: &str) {
        self.docker_errors.get_or_create(&kind(op)).inc();
    }

    /// Records one create phase's duration.
    pub fn create_phase(&self, phase: &str, seconds: f64) {
        self.create_seconds
            .get_or_create(&kind(phase))
            .observe(seconds);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}
