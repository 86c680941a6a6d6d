//! dockgate's refusals in control's audit trail: queued without waiting, sent in
//! batches to control's `POST /v1/audit` (as a gateway sends its own lines), kept and
//! sent again while control does not answer.
//!
//! Control's API is `http://host:port` or `https://host:port`; over `https://` its
//! certificate is checked against the deployment's CA and for the URL's host (an IP
//! address as an IP address), as a gateway checks it, and dockgate presents its own
//! certificate should control ask for one. A control that cannot be reached, or whose
//! certificate fails the check, gets nothing: the reason is logged once (again when it
//! changes), and the lines wait.

use std::sync::Arc;
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

/// Control's API as given (`--control-url`): whether it speaks TLS, and its
/// `host:port`. `None` for anything but `http://host:port` or `https://host:port` (a
/// trailing `/` aside): no path, no user, a port.
pub fn control_address(url: &str) -> Option<(bool, &str)> {
    let (tls, addr) = match url.strip_prefix("https://") {
        Some(addr) => (true, addr),
        None => (false, url.strip_prefix("http://")?),
    };
    let addr = addr.strip_suffix('/').unwrap_or(addr);
    let (host, port) = addr.rsplit_once(':')?;
    let bracketed = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
    let name = if bracketed {
        &host[1..host.len() - 1]
    } else {
        host
    };
    let host_ok = !name.is_empty()
        && (bracketed || !name.contains(':'))
        && !name.contains(['/', '?', '#', '@', ' ', '[', ']']);
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
    (host_ok && port_ok).then_some((tls, addr))
}

/// Where refusals go besides the log.
#[derive(Debug, Clone)]
pub struct AuditSender {
    tx: mpsc::Sender<AuditEntry>,
}

impl AuditSender {
    /// Sends to control at `base` (`http://host:port`, or `https://host:port` with
    /// `tls`, the settings control's certificate is checked with) presenting
    /// `service_token`, as `reporter` (the `gateway` field of control's trail).
    pub fn start(
        base: &str,
        service_token: &str,
        reporter: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> AuditSender {
        let (tx, rx) = mpsc::channel(MAX_REPORT_ENTRIES * 4);
        let url = format!("{}/v1/audit", base.trim_end_matches('/'));
        let bearer = format!("Bearer {}", service_token.trim());
        let sender = Sender {
            client: client(tls),
            url,
            bearer,
            reporter: reporter.to_owned(),
        };
        tokio::spawn(sender.run(rx));
        AuditSender { tx }
    }

    /// Queues one line; never waits (a full queue drops it: it is in the log).
    pub fn send(&self, entry: AuditEntry) {
        let _ = self.tx.try_send(entry);
    }
}

type Connector = hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// Plain HTTP, or TLS with `tls` only (an `https://` base comes with it).
fn client(tls: Option<Arc<rustls::ClientConfig>>) -> Client<Connector, Full<Bytes>> {
    let connector = match tls {
        Some(tls) => hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(rustls::ClientConfig::clone(&tls))
            .https_only()
            .enable_http1()
            .build(),
        // Never used for TLS: the base is http://.
        None => hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config::pki::no_roots())
            .https_or_http()
            .enable_http1()
            .build(),
    };
    Client::builder(TokioExecutor::new()).build(connector)
}

struct Sender {
    client: Client<Connector, Full<Bytes>>,
    url: String,
    bearer: String,
    reporter: String,
}

impl Sender {
    async fn run(self, mut rx: mpsc::Receiver<AuditEntry>) {
        let mut pending: Vec<AuditEntry> = Vec::new();
        // Why the last report was not taken, logged once until it changes.
        let mut failing: Option<String> = None;
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
            match self.post(&pending[..batch]).await {
                Ok(()) => {
                    pending.drain(..batch);
                    if failing.take().is_some() {
                        tracing::info!(control = %self.url, "dockgate: control takes audit lines again");
                    }
                }
                Err(why) => {
                    if failing.as_deref() == Some(why.as_str()) {
                        tracing::debug!(control = %self.url, "dockgate: control did not take {batch} audit line(s): {why}; retrying");
                    } else {
                        tracing::warn!(control = %self.url, "dockgate: control did not take {batch} audit line(s): {why}; retrying every {RETRY:?}");
                        failing = Some(why);
                    }
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// One report; why control did not take it.
    async fn post(&self, entries: &[AuditEntry]) -> Result<(), String> {
        let report = AuditReport {
            gateway: self.reporter.clone(),
            entries: entries.to_vec(),
        };
        let body = serde_json::to_vec(&report).map_err(|e| e.to_string())?;
        let req = Request::builder()
            .method(Method::POST)
            .uri(self.url.as_str())
            .header(AUTHORIZATION, self.bearer.as_str())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(SEND_TIMEOUT, self.client.request(req)).await {
            Ok(Ok(resp)) if resp.status().is_success() => Ok(()),
            Ok(Ok(resp)) => Err(format!("control answered {}", resp.status())),
            Ok(Err(e)) => Err(with_sources(&e)),
            Err(_) => Err(format!("no answer within {SEND_TIMEOUT:?}")),
        }
    }
}

/// An error with every error under it: a refused certificate is what a failed connect
/// comes from.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_url_is_a_scheme_a_host_and_a_port_only() {
        assert_eq!(
            control_address("https://10.0.0.1:7070"),
            Some((true, "10.0.0.1:7070"))
        );
        assert_eq!(
            control_address("http://127.0.0.1:7070/"),
            Some((false, "127.0.0.1:7070"))
        );
        assert_eq!(
            control_address("https://[::1]:7070"),
            Some((true, "[::1]:7070"))
        );
        assert_eq!(
            control_address("https://control.example:443"),
            Some((true, "control.example:443"))
        );
        for bad in [
            "10.0.0.1:7070",
            "tls://10.0.0.1:7070",
            "https://10.0.0.1",
            "https://10.0.0.1:0",
            "https://10.0.0.1:70000",
            "https://:7070",
            "https://10.0.0.1:7070/v1",
            "https://user@10.0.0.1:7070",
            "https://::1:7070",
            "ftp://10.0.0.1:7070",
        ] {
            assert_eq!(control_address(bad), None, "{bad}");
        }
    }
}
