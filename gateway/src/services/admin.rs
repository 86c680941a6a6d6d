//! The admin listener: `/metrics`, `/healthz`, `/readyz` (ready once the route cache
//! has applied one feed answer).

use std::sync::Arc;

use async_trait::async_trait;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::state::Gateway;

/// The admin app.
pub struct Admin(pub Arc<Gateway>);

fn response(status: u16, content_type: &str, body: Vec<u8>) -> http::Response<Vec<u8>> {
    http::Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .header("Content-Length", body.len())
        .body(body)
        .unwrap_or_default()
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        let g = &self.0;
        match session.req_header().uri.path() {
            "/metrics" => {
                g.metrics
                    .open_terminals
                    .set(i64::try_from(g.terminals.open()).unwrap_or(i64::MAX));
                response(
                    200,
                    "text/plain; version=0.0.4",
                    g.metrics.render().into_bytes(),
                )
            }
            "/healthz" => response(200, "application/json", br#"{"status":"ok"}"#.to_vec()),
            "/readyz" if g.routes.is_synced() => {
                let body = serde_json::json!({"ready": true, "rev": g.routes.rev(), "routes": g.routes.len()});
                response(
                    200,
                    "application/json",
                    serde_json::to_vec(&body).unwrap_or_default(),
                )
            }
            "/readyz" => response(503, "application/json", br#"{"ready":false}"#.to_vec()),
            _ => {
                let refusal = policy::Refusal::PAGE_NOT_FOUND.with_message("no such endpoint");
                response(refusal.status, "application/json", refusal.body())
            }
        }
    }
}
