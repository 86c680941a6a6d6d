//! What both binaries set up the same way at start: the configuration with its exit
//! status, the log subscriber, and the Prometheus registry their metrics live in.

use std::path::Path;
use std::process::ExitCode;

use prometheus_client::registry::{Metric, Registry};

use crate::Config;

/// Loads the configuration of `binary`, or prints why it cannot and gives the exit
/// status for a bad configuration (2), so both binaries refuse a mistake the same way.
pub fn load_or_refuse(binary: &str, path: &Path) -> Result<Config, ExitCode> {
    crate::load(path).map_err(|e| {
        eprintln!("{binary}: {}: {e}", path.display());
        ExitCode::from(2)
    })
}

/// Logs to stderr, one line per event, at `RUST_LOG` (default `info`); colours only on a
/// terminal. A second call keeps the first subscriber.
pub fn init_tracing() {
    init_tracing_with(tracing_subscriber::layer::Identity::new());
}

/// [`init_tracing`] with one more layer beside the log on stderr (control keeps its
/// audit lines with one). The `RUST_LOG` filter is the stderr log's own, so `extra`
/// sees what it asks for whatever the log shows.
pub fn init_tracing_with<L>(extra: L)
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(extra)
        .with(log)
        .try_init();
}

/// A metrics registry under one name prefix, rendered as Prometheus text.
#[derive(Debug)]
pub struct MetricsRegistry(Registry);

impl MetricsRegistry {
    /// An empty registry whose metric names start with `prefix_`.
    pub fn new(prefix: &str) -> Self {
        MetricsRegistry(Registry::with_prefix(prefix))
    }

    /// Registers `metric` under `name` with its help text and returns it, so a metrics
    /// struct is built field by field with each name next to its field.
    pub fn register<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.0.register(name, help, metric.clone());
        metric
    }

    /// The text exposition of every registered metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::MetricsRegistry;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn registered_metrics_render_under_the_prefix_and_move_with_their_handle() {
        let mut r = MetricsRegistry::new("termgate_test");
        let c: Counter = r.register("things", "Things seen", Counter::default());
        c.inc_by(3);
        let text = r.render();
        assert!(
            text.contains("# HELP termgate_test_things Things seen."),
            "{text}"
        );
        assert!(text.contains("termgate_test_things_total 3"), "{text}");
    }
}
