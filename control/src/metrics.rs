//! Prometheus metrics of the control service, served on the admin listener.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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
    registry: Registry,
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
        let mut registry = Registry::with_prefix("termgate_control");
        let sessions_active = Gauge::default();
        let create_seconds = Family::<Kind, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.002, 2.0, 14))
        });
        let reconcile_actions = Family::<Kind, Counter>::default();
        let docker_errors = Family::<Kind, Counter>::default();
        let reconcile_pass_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let feed_rev = Gauge::default();
        registry.register(
            "sessions_active",
            "Sessions holding resources",
            sessions_active.clone(),
        );
        registry.register(
            "create_seconds",
            "Session create latency by phase",
            create_seconds.clone(),
        );
        registry.register(
            "reconcile_actions",
            "Reconciler actions by kind",
            reconcile_actions.clone(),
        );
        registry.register(
            "docker_errors",
            "Failed Docker operations by kind",
            docker_errors.clone(),
        );
        registry.register(
            "reconcile_pass_seconds",
            "Duration of full reconcile passes",
            reconcile_pass_seconds.clone(),
        );
        registry.register("feed_revision", "Route feed revision", feed_rev.clone());
        let seccomp_enforced = Gauge::default();
        registry.register(
            "seccomp_enforced",
            "Whether session containers run under a seccomp filter",
            seccomp_enforced.clone(),
        );
        Metrics {
            registry,
            sessions_active,
            create_seconds,
            reconcile_actions,
            docker_errors,
            seccomp_enforced,
            reconcile_pass_seconds,
            feed_rev,
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
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
