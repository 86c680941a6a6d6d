//! The gateway's calls to control: one-off route lookups, the route feed and the
//! reports (input times, open terminals, audit lines). Every call is bounded by
//! `gateway.control_timeout_ms` (the feed's long poll by its wait on top). Over
//! `https://` control's certificate is checked against `pki.ca_file` and for the URL's
//! host.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::channel::Channel;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use policy::feed::{FeedPage, RouteLookup};
use policy::SessionId;

pub use policy::reports::SignInReport;
use policy::reports::{self, InputReport, SessionOpen, TerminalsReport, UserOpen};

use crate::terminals::Elsewhere;

/// Control could not be asked (down, slow, or answered something unexpected).
#[derive(Debug, thiserror::Error)]
#[error("control unavailable: {0}")]
pub struct Unavailable(pub String);

/// Why a sign-in was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum NotRecorded {
    /// Control could not be asked.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// Control refused it (409): this sign-in was made, or signed out, already.
    #[error("control refused the sign-in: {0}")]
    Repeated(String),
}

/// A client for control's internal API.
#[derive(Clone)]
pub struct ControlClient {
    client: Client<Connector, Full<Bytes>>,
    /// For bodies streamed from a file (recordings).
    streaming: Client<Connector, Channel<Bytes, std::io::Error>>,
    base: String,
    bearer: String,
    timeout: Duration,
}

/// Plain HTTP, or TLS for an `https://` control.
type Connector = HttpsConnector<HttpConnector>;

impl ControlClient {
    /// A client for `base` (`http://host:port`, or `https://host:port` with `tls`, the
    /// settings control's certificate is checked with) presenting `service_token`.
    pub fn new(
        base: &str,
        service_token: &[u8],
        timeout: Duration,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Self {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = match tls {
            Some(tls) => hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(rustls::ClientConfig::clone(&tls))
                .https_only()
                .enable_http1()
                .wrap_connector(http),
            // Never used for TLS: the base is http://, and an https:// one comes with `tls`.
            None => hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(config::pki::no_roots())
                .https_or_http()
                .enable_http1()
                .wrap_connector(http),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector.clone());
        let streaming = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        ControlClient {
            client,
            streaming,
            base: base.trim_end_matches('/').to_owned(),
            bearer: format!("Bearer {}", String::from_utf8_lossy(service_token)),
            timeout,
        }
    }

    async fn get(&self, path: &str, timeout: Duration) -> Result<(StatusCode, Bytes), Unavailable> {
        let req = Request::get(format!("{}{path}", self.base))
            .header(AUTHORIZATION, &self.bearer)
            .body(Full::default())
            .map_err(|e| Unavailable(e.to_string()))?;
        self.send(req, timeout).await
    }

    async fn send(
        &self,
        req: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), Unavailable> {
        let call = async { status_and_body(self.client.request(req).await).await };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| Unavailable(format!("no answer within {timeout:?}")))?
    }

    /// Asks control for one session's route: `None` when control knows no running
    /// session by that id.
    pub async fn lookup(&self, id: &SessionId) -> Result<Option<RouteLookup>, Unavailable> {
        let (status, body) = self.get(&format!("/v1/routes/{id}"), self.timeout).await?;
        match status {
            StatusCode::OK => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| Unavailable(format!("bad lookup answer: {e}"))),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(Unavailable(format!("lookup answered {s}"))),
        }
    }

    /// Whether the recording link of `token` plays for `viewer` (a verified, unlocked
    /// `sub`; `None`: anyone) — `GET /v1/recording-links/<token>/check`. The inner
    /// error is control's refusal: the 404 of an unknown path, or 401 for a
    /// `signed-in` link and no viewer.
    pub async fn recording_link(
        &self,
        token: &policy::recording_link::RecordingToken,
        viewer: Option<&str>,
    ) -> Result<Result<(), policy::Refusal>, Unavailable> {
        let mut req = Request::get(format!("{}/v1/recording-links/{token}/check", self.base))
            .header(AUTHORIZATION, &self.bearer);
        if let Some(v) = viewer {
            req = req.header("X-Termgate-Viewer", v);
        }
        let req = req
            .body(Full::default())
            .map_err(|_| Unavailable("cannot build the recording link check".into()))?;
        let (status, body) = self.send(req, self.timeout).await?;
        match status {
            StatusCode::OK => Ok(Ok(())),
            StatusCode::NOT_FOUND => Ok(Err(policy::Refusal::PAGE_NOT_FOUND)),
            StatusCode::UNAUTHORIZED => {
                let message = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "sign in to watch this recording".into());
                Ok(Err(policy::Refusal::UNAUTHENTICATED.with_message(message)))
            }
            s => Err(Unavailable(format!("recording link check answered {s}"))),
        }
    }

    /// Records a sign-in this gateway just made (`POST /v1/signins`) with the service
    /// token, which alone may record one; the sign-in's own token goes in the body, and
    /// control takes who and until when from it.
    pub async fn record_sign_in(&self, report: &SignInReport) -> Result<(), NotRecorded> {
        let body = serde_json::to_vec(report).map_err(|e| Unavailable(e.to_string()))?;
        let req = Request::post(format!("{}/v1/signins", self.base))
            .header(AUTHORIZATION, &self.bearer)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Unavailable(e.to_string()))?;
        let (status, body) = self.send(req, self.timeout).await?;
        match status {
            StatusCode::CREATED => Ok(()),
            StatusCode::CONFLICT => Err(NotRecorded::Repeated(
                String::from_utf8_lossy(&body).into_owned(),
            )),
            _ => Err(Unavailable(format!(
                "sign-in record answered {status}: {}",
                String::from_utf8_lossy(&body)
            ))
            .into()),
        }
    }

    /// Signs out the sign-in of `token` (`DELETE /v1/signins/current`). A token control
    /// no longer accepts (expired, revoked already) has nothing left to sign out.
    pub async fn sign_out(&self, token: &str) -> Result<(), Unavailable> {
        let req = Request::delete(format!("{}/v1/signins/current", self.base))
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::default())
            .map_err(|e| Unavailable(e.to_string()))?;
        match self.send(req, self.timeout).await? {
            (StatusCode::NO_CONTENT | StatusCode::UNAUTHORIZED, _) => Ok(()),
            (status, body) => Err(Unavailable(format!(
                "sign-out answered {status}: {}",
                String::from_utf8_lossy(&body)
            ))),
        }
    }

    /// Reports when users last typed into sessions (`POST /v1/activity`): a JSON list
    /// of `{session, last_input}`.
    pub async fn report_input(&self, inputs: &[(SessionId, u64)]) -> Result<(), Unavailable> {
        let body: Vec<InputReport> = inputs
            .iter()
            .map(|(session, last_input)| InputReport {
                session: *session,
                last_input: *last_input,
            })
            .collect();
        self.report("activity", &body).await
    }

    /// Reports the terminals this gateway process (`gateway`, serving as `replica`,
    /// reporting at least every `every`) has open per session and per user, and its
    /// share-link viewers; control answers with what the other gateways have open
    /// (`None`: a control that predates that answer, 204).
    pub async fn report_terminals(
        &self,
        gateway: &str,
        replica: &str,
        every: std::time::Duration,
        counts: &[(SessionId, u32)],
        users: &[(&str, u32)],
        viewers: &[crate::terminals::ShareViewers],
    ) -> Result<Option<Elsewhere>, Unavailable> {
        let body = TerminalsReport {
            gateway: gateway.to_owned(),
            replica: Some(replica.to_owned()),
            every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
            open: counts
                .iter()
                .map(|(session, open)| SessionOpen {
                    session: *session,
                    open: *open,
                })
                .collect(),
            // Every user here signed in with a verified token, so each is a valid sub.
            users: Some(
                users
                    .iter()
                    .filter_map(|(sub, open)| {
                        Some(UserOpen {
                            sub: policy::Sub::parse(sub)?,
                            open: *open,
                        })
                    })
                    .collect(),
            ),
            viewers: viewers.to_vec(),
        };
        let body = serde_json::to_vec(&body).map_err(|e| Unavailable(e.to_string()))?;
        let req = Request::post(format!("{}/v1/terminals", self.base))
            .header(AUTHORIZATION, &self.bearer)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Unavailable(e.to_string()))?;
        match self.send(req, self.timeout).await? {
            (StatusCode::OK, body) => serde_json::from_slice::<reports::Elsewhere>(&body)
                .map(|e| Some(e.into()))
                .map_err(|e| Unavailable(format!("bad terminals answer: {e}"))),
            (StatusCode::NO_CONTENT, _) => Ok(None),
            (status, _) => Err(Unavailable(format!("terminals report answered {status}"))),
        }
    }

    /// Sends audit lines (`POST /v1/audit`, a `policy::audit::AuditReport` already
    /// serialised).
    pub async fn report_audit(&self, body: Vec<u8>) -> Result<(), Unavailable> {
        self.post("audit", body).await
    }

    /// Posts a gateway report to `/v1/<what>`; control answers 204.
    async fn report(&self, what: &str, body: &impl serde::Serialize) -> Result<(), Unavailable> {
        let body = serde_json::to_vec(body).map_err(|e| Unavailable(e.to_string()))?;
        self.post(what, body).await
    }

    async fn post(&self, what: &str, body: Vec<u8>) -> Result<(), Unavailable> {
        let req = Request::post(format!("{}/v1/{what}", self.base))
            .header(AUTHORIZATION, &self.bearer)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Unavailable(e.to_string()))?;
        let (status, _) = self.send(req, self.timeout).await?;
        if status != StatusCode::NO_CONTENT {
            return Err(Unavailable(format!("{what} report answered {status}")));
        }
        Ok(())
    }

    /// Hands a finished recording to control (`PUT /v1/recordings/<session>/<name>`),
    /// streamed from its file; `Ok` once control answered 204.
    pub async fn put_recording(
        &self,
        session: &SessionId,
        name: &str,
        path: &std::path::Path,
    ) -> Result<(), Unavailable> {
        use tokio::io::AsyncReadExt;
        let mut file = tokio::fs::File::open(path)
            .await
            .map_err(|e| Unavailable(format!("reading {}: {e}", path.display())))?;
        let len = file
            .metadata()
            .await
            .map_err(|e| Unavailable(e.to_string()))?
            .len();
        let (mut tx, body) = Channel::<Bytes, std::io::Error>::new(2);
        let req = Request::put(format!("{}/v1/recordings/{session}/{name}", self.base))
            .header(AUTHORIZATION, &self.bearer)
            .header(CONTENT_TYPE, "application/x-asciicast")
            .header(hyper::header::CONTENT_LENGTH, len)
            .body(body)
            .map_err(|e| Unavailable(e.to_string()))?;
        let feed = async move {
            let mut left = len;
            while left > 0 {
                let mut chunk = vec![0u8; 64 * 1024];
                let n = match file.read(&mut chunk).await {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => {
                        tx.abort(e);
                        return;
                    }
                };
                chunk.truncate(n);
                left = left.saturating_sub(n as u64);
                if tx.send_data(Bytes::from(chunk)).await.is_err() {
                    return;
                }
            }
        };
        let call = async {
            let (resp, ()) = tokio::join!(self.streaming.request(req), feed);
            let (status, body) = status_and_body(resp).await?;
            if status != StatusCode::NO_CONTENT {
                return Err(Unavailable(format!(
                    "recording answered {status}: {}",
                    String::from_utf8_lossy(&body)
                )));
            }
            Ok(())
        };
        // A second per MiB on top of the usual bound: large files take their time.
        let timeout = self.timeout + Duration::from_secs(len / (1 << 20) + 1);
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| Unavailable(format!("no answer within {timeout:?}")))?
    }

    /// Long-polls the feed for changes after `after` (a revision of `epoch`, when one
    /// is known), waiting up to `wait`.
    pub async fn feed(
        &self,
        after: u64,
        epoch: &str,
        wait: Duration,
    ) -> Result<FeedPage, Unavailable> {
        // Epochs are hex from control; anything else is not sent.
        let epoch = if epoch.bytes().all(|b| b.is_ascii_hexdigit()) {
            epoch
        } else {
            ""
        };
        let path = format!(
            "/v1/routes?after={after}&epoch={epoch}&wait={}",
            wait.as_secs()
        );
        let (status, body) = self.get(&path, wait + self.timeout).await?;
        if status != StatusCode::OK {
            return Err(Unavailable(format!("feed answered {status}")));
        }
        serde_json::from_slice(&body).map_err(|e| Unavailable(format!("bad feed answer: {e}")))
    }
}

/// An error with every error under it: a refused certificate is what a failed connect
/// comes from.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.ends_with(&more) {
            text = format!("{text}: {more}");
        }
        source = inner.source();
    }
    text
}

/// Control's answer, read whole: its status and body.
async fn status_and_body(
    resp: Result<hyper::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error>,
) -> Result<(StatusCode, Bytes), Unavailable> {
    let resp = resp.map_err(|e| Unavailable(with_sources(&e)))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| Unavailable(e.to_string()))?
        .to_bytes();
    Ok((status, body))
}
