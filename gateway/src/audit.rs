//! The gateway's audit lines in control's trail: every `tracing` event with target
//! `audit` (terminal access, live terminals closed, token refused, signed in) is kept
//! in a bounded queue and sent to control's `POST /v1/audit` by the activity reporter,
//! so that the admin console finds them beside control's own.
//!
//! The event's caller never waits: the capture is a `try_send` into the queue
//! ([`config::telemetry::AuditSink`]). What control does not take is kept (up to
//! [`KEEP`] lines, the oldest dropped first and counted) and sent again at the next
//! interval; the gateway's stderr log stays the complete record.

use std::collections::VecDeque;
use std::sync::mpsc::Receiver;

use config::telemetry::AuditSink;
use policy::audit::{AuditEntry, MAX_REPORT_ENTRIES};
use tracing::Subscriber;
use tracing_subscriber::layer::Layer;

use crate::control_client::ControlClient;

/// Lines waiting in the capture queue.
const QUEUE: usize = 8_192;
/// Lines kept for control while it does not take them.
pub const KEEP: usize = 16_384;
/// Largest report body: below control's smallest `control.max_body_bytes` default.
const MAX_REPORT_BYTES: usize = 48 * 1024;

static SINK: AuditSink = AuditSink::new();

/// The `tracing` layer that captures the gateway's audit lines.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    config::telemetry::audit_layer(&SINK)
}

/// The lines on their way to control, owned by the activity reporter.
pub struct Outbox {
    rx: Option<Receiver<AuditEntry>>,
    waiting: VecDeque<AuditEntry>,
    dropped: u64,
}

impl Outbox {
    /// Starts keeping the process's audit lines (once per process; a second outbox
    /// stays empty).
    pub fn open() -> Outbox {
        Outbox {
            rx: SINK.open(QUEUE),
            waiting: VecDeque::new(),
            dropped: 0,
        }
    }

    /// Lines not sent to control since start: the capture queue was full, or they were
    /// the oldest past [`KEEP`] while control did not take them.
    pub fn dropped(&self) -> u64 {
        SINK.dropped() + self.dropped
    }

    /// Lines waiting to be sent.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no line waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    fn take_new(&mut self) {
        let Some(rx) = &self.rx else { return };
        while let Ok(e) = rx.try_recv() {
            if self.waiting.len() == KEEP {
                self.waiting.pop_front();
                self.dropped += 1;
            }
            self.waiting.push_back(e);
        }
    }

    /// Sends every waiting line to control, oldest first, in reports of bounded size;
    /// stops at the first report control does not take (kept for the next call).
    pub async fn flush(&mut self, control: &ControlClient, gateway: &str) -> Result<(), String> {
        self.take_new();
        while !self.waiting.is_empty() {
            let (body, n) = self.report(gateway);
            if n == 0 {
                // One line larger than a whole report: it cannot be sent.
                self.waiting.pop_front();
                self.dropped += 1;
                continue;
            }
            control
                .report_audit(body)
                .await
                .map_err(|e| e.to_string())?;
            self.waiting.drain(..n);
        }
        Ok(())
    }

    /// The body of a report holding the oldest waiting lines that fit, and how many.
    fn report(&self, gateway: &str) -> (Vec<u8>, usize) {
        let mut body = Vec::with_capacity(4096);
        body.extend_from_slice(b"{\"gateway\":");
        // A string always serialises.
        body.extend(serde_json::to_vec(gateway).unwrap_or_default());
        body.extend_from_slice(b",\"entries\":[");
        let mut n = 0;
        for e in self.waiting.iter().take(MAX_REPORT_ENTRIES) {
            let Ok(line) = serde_json::to_vec(e) else {
                break;
            };
            if body.len() + line.len() + 3 > MAX_REPORT_BYTES {
                break;
            }
            if n > 0 {
                body.push(b',');
            }
            body.extend(line);
            n += 1;
        }
        body.extend_from_slice(b"]}");
        (body, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::audit::AuditReport;

    fn line(i: usize, text: usize) -> AuditEntry {
        AuditEntry {
            at_ms: i as u64,
            level: "INFO".into(),
            message: "terminal access".into(),
            fields: [("sub".to_owned(), "x".repeat(text))].into_iter().collect(),
        }
    }

    fn outbox(lines: impl IntoIterator<Item = AuditEntry>) -> Outbox {
        Outbox {
            rx: None,
            waiting: lines.into_iter().collect(),
            dropped: 0,
        }
    }

    #[test]
    fn reports_hold_the_oldest_lines_within_the_entry_and_byte_bounds() {
        let o = outbox((0..2 * MAX_REPORT_ENTRIES).map(|i| line(i, 10)));
        let (body, n) = o.report("g1");
        assert_eq!(n, MAX_REPORT_ENTRIES);
        let r: AuditReport = serde_json::from_slice(&body).expect("a valid report");
        assert_eq!(r.gateway, "g1");
        assert_eq!(r.entries.len(), n);
        assert_eq!(r.entries[0].at_ms, 0, "oldest first");

        let o = outbox((0..100).map(|i| line(i, 1_000)));
        let (body, n) = o.report("g1");
        assert!(body.len() <= MAX_REPORT_BYTES, "{}", body.len());
        assert!(
            (40..100).contains(&n),
            "{n} lines of about 1 KB fit in 48 KiB"
        );
        let r: AuditReport = serde_json::from_slice(&body).expect("a valid report");
        assert_eq!(r.entries.len(), n);

        let o = outbox([line(0, MAX_REPORT_BYTES)]);
        assert_eq!(
            o.report("g1").1,
            0,
            "a line larger than a report fits in none"
        );
    }
}
