//! The audit trail kept in the store, so an admin can search it by user and session.
//!
//! Every `tracing` event with target `audit` (session created, ended, refused, user
//! locked, …) is also handed, without blocking the caller, to one writer thread that
//! appends it to the store's `audit` tree in batches. The log on stderr stays the
//! complete record; the store keeps the newest [`KEEP`] entries for the console.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};

use crate::service::Control;

/// Entries the store keeps; older ones are pruned as new ones come.
pub const KEEP: usize = 100_000;
/// Entries waiting for the writer; past this, new ones are counted as dropped.
const QUEUE: usize = 8_192;
/// Entries written in one batch.
const BATCH: usize = 256;

/// One audit line as stored and served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `INFO`, `WARN`, …
    pub level: String,
    /// The event's message ("session created").
    pub message: String,
    /// The event's fields as text (`session`, `sub`, `by`, `reason`, …).
    pub fields: BTreeMap<String, String>,
}

impl AuditEntry {
    /// Whether the entry is about `sub`: as the user acted for (`sub`), the actor
    /// (`by`) or the session's owner (`owner`).
    pub fn concerns_user(&self, sub: &str) -> bool {
        ["sub", "by", "owner"]
            .iter()
            .any(|k| self.fields.get(*k).is_some_and(|v| v == sub))
    }

    /// Whether the entry is about session `id`.
    pub fn concerns_session(&self, id: &str) -> bool {
        self.fields.get("session").is_some_and(|v| v == id)
    }
}

/// What an admin searches for: newest first, up to `limit`, older than `before_ms`.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries about this user.
    pub sub: Option<String>,
    /// Only entries about this session.
    pub session: Option<String>,
    /// Only entries strictly older than this (for the next page).
    pub before_ms: Option<u64>,
    /// At most this many.
    pub limit: usize,
}

static SINK: OnceLock<SyncSender<AuditEntry>> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The `tracing` layer that hands audit events to the writer (dropped before the
/// writer starts, and counted as dropped when its queue is full).
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    Capture.with_filter(AuditOnly)
}

/// Audit lines that could not be queued for the store since start.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Starts the writer thread for `control`'s store; entries from now on are kept.
pub fn start(control: Arc<Control>) -> std::io::Result<()> {
    let (tx, rx) = sync_channel(QUEUE);
    std::thread::Builder::new()
        .name("audit-writer".into())
        .spawn(move || write_loop(&control, &rx))?;
    // Set once per process; a second start (tests) keeps the first writer.
    let _ = SINK.set(tx);
    Ok(())
}

/// Entries written between two prunes (the first batch prunes too).
const PRUNE_EVERY: usize = 1_024;

fn write_loop(control: &Control, rx: &Receiver<AuditEntry>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut since_prune = PRUNE_EVERY;
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        // A store that cannot write now (disk full, read-only) loses these lines from
        // the console only; they are on stderr. Not logged under `audit`, which would
        // feed this loop.
        match control.append_audit(&batch) {
            Ok(()) => since_prune += batch.len(),
            Err(e) => {
                tracing::warn!(error = %e, lines = batch.len(), "audit lines not kept in the store");
            }
        }
        batch.clear();
        if since_prune >= PRUNE_EVERY {
            since_prune = 0;
            if let Err(e) = control.prune_audit(KEEP) {
                tracing::warn!(error = %e, "old audit lines not pruned");
            }
        }
    }
}

struct AuditOnly;

impl<S> Filter<S> for AuditOnly {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        meta.target() == "audit"
    }
}

struct Capture;

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let Some(sink) = SINK.get() else { return };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let entry = AuditEntry {
            at_ms: now_ms(),
            level: event.metadata().level().to_string(),
            message: fields.message,
            fields: fields.rest,
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = sink.try_send(entry) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn only_audit_events_are_captured_with_their_fields_and_message() {
        let (tx, rx) = sync_channel(16);
        // The process-wide sink: this test is the only one in the crate that sets it.
        SINK.set(tx).expect("first sink");
        let subscriber = tracing_subscriber::registry().with(layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(session = "abc", sub = "alice", "not audit");
            tracing::info!(target: "audit", session = "abc", sub = %"alice", n = 3, "session created");
            tracing::warn!(target: "audit", sub = "bob", by = "root", "user lock");
        });
        let got: Vec<AuditEntry> = rx.try_iter().collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].message, "session created");
        assert_eq!(got[0].level, "INFO");
        assert_eq!(got[0].fields["session"], "abc");
        assert_eq!(got[0].fields["sub"], "alice");
        assert_eq!(got[0].fields["n"], "3");
        assert!(got[0].concerns_user("alice") && got[0].concerns_session("abc"));
        assert!(got[1].concerns_user("root") && got[1].concerns_user("bob"));
        assert!(!got[1].concerns_user("alice") && !got[1].concerns_session("abc"));
        assert_eq!(got[1].level, "WARN");
    }
}
