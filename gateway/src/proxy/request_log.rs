//! What a request leaves in the logs: its access line, and for a terminal its audit line
//! and metrics.

use super::ctx::{Ctx, Decision};
use crate::metrics::{Label, Metrics};

/// What the access line says of the request itself.
pub(super) struct RequestLine {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) status: u16,
}

/// The access log line; for terminals also the audit line and metrics.
pub(super) fn log(metrics: &Metrics, line: &RequestLine, error: Option<&str>, ctx: &Ctx) {
    let status = line.status;
    let sub = ctx
        .principal
        .as_ref()
        .map(|p| p.sub.as_str())
        .unwrap_or("-");
    let session_id = ctx
        .session
        .map(|s| s.to_string())
        .unwrap_or_else(|| "-".into());
    let closed = ctx
        .terminal
        .ticket()
        .and_then(|t| t.closed())
        .map(|r| r.as_str())
        .unwrap_or("");
    let decision = ctx.decision.as_str();
    // A share link's path is its token: the access line names the share instead; a
    // recording link's, the link.
    let path = if line.path.starts_with("/v/") {
        match &ctx.share {
            Some(share) => format!("/v/<share {share}>"),
            None => "/v/<token>".to_owned(),
        }
    } else if line.path.starts_with("/r/") {
        let cast = if line.path.ends_with("/cast") {
            "/cast"
        } else {
            ""
        };
        match &ctx.share {
            Some(link) => format!("/r/<link {link}>{cast}"),
            None => "/r/<token>".to_owned(),
        }
    } else {
        line.path.clone()
    };
    tracing::info!(
        target: "access",
        request_id = ctx.request_id,
        method = %line.method,
        path = %path,
        sub,
        session = %session_id,
        decision,
        reason = ctx.reason,
        status,
        bytes_up = ctx.bytes_up,
        bytes_down = ctx.bytes_down,
        duration_ms = ctx.started.elapsed().as_millis() as u64,
        closed_by = closed,
        error = error.unwrap_or_default(),
        "request"
    );
    if let (Some(share), true) = (&ctx.share, ctx.terminal.requested()) {
        tracing::info!(target: "audit", request_id = ctx.request_id, viewer = sub, session = %session_id, share = %share, decision, reason = ctx.reason, status, "share view");
    }
    if ctx.terminal.requested() {
        tracing::info!(target: "audit", request_id = ctx.request_id, sub, session = %session_id, decision, reason = ctx.reason, status, "terminal access");
        let outcome = if ctx.decision == Decision::Allow {
            "allow"
        } else {
            ctx.reason
        };
        Metrics::inc(&metrics.upgrades, outcome);
        metrics
            .bytes
            .get_or_create(&Label { kind: "up" })
            .inc_by(ctx.bytes_up);
        metrics
            .bytes
            .get_or_create(&Label { kind: "down" })
            .inc_by(ctx.bytes_down);
    }
}
