//! What both binaries set up the same way at start: the configuration with its exit
//! status, the log subscriber, the capture of audit events for control's trail, and
//! the Prometheus registry their metrics live in.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use policy::audit::AuditEntry;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};

use prometheus_client::registry::{Metric, Registry};

use crate::model::Config;

/// Loads the configuration of `binary` (reading the files `part` reads), or prints why
/// it cannot and gives the exit status for a bad configuration (2), so every binary
/// refuses a mistake the same way.
pub fn load_or_refuse(binary: &str, path: &Path, part: crate::Part) -> Result<Config, ExitCode> {
    crate::load_for(path, part).map_err(|e| {
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

/// Where a process's audit events go: a bounded queue that [`audit_layer`] fills without
/// blocking the event's caller. Before [`AuditSink::open`] events are not kept; with a
/// full queue they are counted as dropped (the log on stderr keeps every line).
#[derive(Debug)]
pub struct AuditSink {
    tx: OnceLock<SyncSender<AuditEntry>>,
    dropped: AtomicU64,
}

impl Default for AuditSink {
    fn default() -> Self {
        Self::new()
    }
}

impl AuditSink {
    /// A sink that keeps nothing until opened (usable in a `static`).
    pub const fn new() -> Self {
        AuditSink {
            tx: OnceLock::new(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Starts keeping events, up to `capacity` waiting; the receiver they arrive on.
    /// `None` when the sink was opened before (its first reader keeps it).
    pub fn open(&self, capacity: usize) -> Option<Receiver<AuditEntry>> {
        let (tx, rx) = sync_channel(capacity);
        self.tx.set(tx).ok().map(|()| rx)
    }

    /// Events that found the queue full since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn offer(&self, entry: AuditEntry) {
        let Some(tx) = self.tx.get() else { return };
        if tx.try_send(entry).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The layer that hands every `tracing` event with target `audit` to `sink` as an
/// [`AuditEntry`] (message, level and fields as text), for [`init_tracing_with`].
pub fn audit_layer<S>(sink: &'static AuditSink) -> impl Layer<S>
where
    S: Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    Capture(sink).with_filter(AuditOnly)
}

struct AuditOnly;

impl<S> Filter<S> for AuditOnly {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        meta.target() == "audit"
    }
}

struct Capture(&'static AuditSink);

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if self.0.tx.get().is_none() {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0.offer(AuditEntry {
            at_ms: now_ms(),
            level: event.metadata().level().to_string(),
            message: fields.message,
            fields: fields.rest,
        });
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: BTreeMap<String, String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.message = value;
        } else {
            self.rest.insert(field.name().to_owned(), value);
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
    use super::{audit_layer, AuditSink, MetricsRegistry};
    use prometheus_client::metrics::counter::Counter;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn only_audit_events_are_captured_with_their_fields_and_message() {
        static SINK: AuditSink = AuditSink::new();
        let subscriber = tracing_subscriber::registry().with(audit_layer(&SINK));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "audit", sub = "alice", "before the sink is open");
        });
        let rx = SINK.open(2).expect("first open");
        assert!(SINK.open(2).is_none(), "a sink is opened once");
        let subscriber = tracing_subscriber::registry().with(audit_layer(&SINK));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(session = "abc", sub = "alice", "not audit");
            tracing::info!(target: "audit", session = "abc", sub = %"alice", n = 3, "session created");
            tracing::warn!(target: "audit", sub = "bob", by = "root", "user lock");
            tracing::info!(target: "audit", "past the queue's capacity");
        });
        let got: Vec<_> = rx.try_iter().collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(SINK.dropped(), 1, "the third found the queue full");
        assert_eq!(got[0].message, "session created");
        assert_eq!(got[0].level, "INFO");
        assert_eq!(got[0].fields["session"], "abc");
        assert_eq!(got[0].fields["sub"], "alice");
        assert_eq!(got[0].fields["n"], "3");
        assert!(got[0].at_ms > 0);
        assert!(got[1].concerns_user("root") && got[1].concerns_user("bob"));
        assert_eq!(got[1].level, "WARN");
    }

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
