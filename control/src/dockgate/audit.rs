//! dockgate's refusals in control's audit trail: queued without waiting, sent in
//! batches to control's `POST /v1/audit` (as a gateway sends its own lines), kept and
//! sent again while control does not answer.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use policy::audit::{AuditEntry, AuditReport, MAX_REPORT_ENTRIES};
use tokio::sync::mpsc;

/// Lines waiting while control does not answer; the oldest go first beyond it (each
/// is in dockgate's log as well).
const MAX_PENDING: usize = 10_000;
/// How long one report may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause after a report control did not take.
const RETRY: Duration = Duration::from_secs(1);

/// Where refusals go besides the log.
#[derive(Debug, Clone)]
pub struct AuditSender {
    tx: mpsc::Sender<AuditEntry>,
}

impl AuditSender {
    /// Sends to control at `base` (`http://host:port`) presenting `service_token`, as
    /// `reporter` (the `gateway` field of control's trail).
    pub fn start(base: &str, service_token: &str, reporter: &str) -> AuditSender {
        let (tx, rx) = mpsc::channel(MAX_REPORT_ENTRIES * 4);
        let url = format!("{}/v1/audit", base.trim_end_matches('/'));
        let bearer = format!("Bearer {}", service_token.trim());
        tokio::spawn(run(rx, url, bearer, reporter.to_owned()));
        AuditSender { tx }
    }

    /// Queues one line; never waits (a full queue drops it: it is in the log).
    pub fn send(&self, entry: AuditEntry) {
        let _ = self.tx.try_send(entry);
    }
}

async fn run(mut rx: mpsc::Receiver<AuditEntry>, url: String, bearer: String, reporter: String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut pending: Vec<AuditEntry> = Vec::new();
    loop {
        if pending.is_empty() {
            match rx.recv().await {
                Some(e) => pending.push(e),
                None => return,
            }
        }
        while let Ok(e) = rx.try_recv() {
            pending.push(e);
        }
        if pending.len() > MAX_PENDING {
            let over = pending.len() - MAX_PENDING;
            pending.drain(..over);
        }
        let batch = pending.len().min(MAX_REPORT_ENTRIES);
        let report = AuditReport {
            gateway: reporter.clone(),
            entries: pending[..batch].to_vec(),
        };
        let body = serde_json::to_vec(&report).unwrap_or_default();
        let req = Request::builder()
            .method(Method::POST)
            .uri(url.as_str())
            .header(AUTHORIZATION, bearer.as_str())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)));
        let sent = match req {
            Ok(req) => matches!(
                tokio::time::timeout(SEND_TIMEOUT, client.request(req)).await,
                Ok(Ok(resp)) if resp.status().is_success()
            ),
            Err(_) => false,
        };
        if sent {
            pending.drain(..batch);
        } else {
            tracing::debug!("dockgate: control did not take {batch} audit line(s); retrying");
            tokio::time::sleep(RETRY).await;
        }
    }
}
