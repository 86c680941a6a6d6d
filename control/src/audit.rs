//! The audit trail kept in the store, so an admin can search it by user and session.
//!
//! Every `tracing` event with target `audit` (session created, ended, refused, user
//! locked, …) is also handed, without blocking the caller, to one writer thread that
//! appends it to the store's `audit` tree in batches. The log on stderr stays the
//! complete record; the store keeps the newest [`KEEP`] entries for the console.

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use config::telemetry::AuditSink;
pub use policy::audit::AuditEntry;
use tracing::Subscriber;
use tracing_subscriber::layer::Layer;

use crate::service::Control;

// The search itself lives with the `audit` tree; this path names it too.
pub use crate::store::AuditQuery;

/// Entries the store keeps; older ones are pruned as new ones come.
pub const KEEP: usize = 100_000;
/// Entries waiting for the writer; past this, new ones are counted as dropped.
const QUEUE: usize = 8_192;
/// Entries written in one batch.
const BATCH: usize = 256;

static SINK: AuditSink = AuditSink::new();

/// The `tracing` layer that hands audit events to the writer (dropped before the
/// writer starts, and counted as dropped when its queue is full).
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    config::telemetry::audit_layer(&SINK)
}

/// Audit lines that could not be queued for the store since start.
pub fn dropped() -> u64 {
    SINK.dropped()
}

/// Starts the writer thread for `control`'s store; entries from now on are kept.
pub fn start(control: Arc<Control>) -> std::io::Result<()> {
    // Opened once per process; a second start (tests) keeps the first writer.
    let Some(rx) = SINK.open(QUEUE) else {
        return Ok(());
    };
    std::thread::Builder::new()
        .name("audit-writer".into())
        .spawn(move || write_loop(&control, &rx))?;
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
