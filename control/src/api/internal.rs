//! The endpoints gateways call with the service token: the route feed, activity and
//! terminal reports, recording uploads and the gateways' audit lines.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request};
use policy::audit::{AuditReport, MAX_REPORT_ENTRIES};
use policy::{SessionId, Sub};

use super::http::{
    empty, json, no_such_endpoint, not_allowed, query_param, read_json, session_id, Reply,
    ServiceCaller,
};
use crate::error::ApiError;
use crate::service::Control;
use policy::reports::{InputReport, TerminalsReport};

/// Longest a feed poller may ask to wait, seconds.
const MAX_FEED_WAIT: u64 = 30;

/// `GET /v1/routes` (the route feed, long-polled) and `GET /v1/routes/<id>` (one route).
pub(super) async fn routes(
    control: Arc<Control>,
    req: Request<Incoming>,
    _gateway: ServiceCaller,
    rest: &[&str],
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match rest {
        [] => {
            if method != Method::GET {
                return Err(not_allowed());
            }
            let after = query_param(&req, "after")
                .unwrap_or("0")
                .parse::<u64>()
                .map_err(|_| {
                    ApiError::INVALID_QUERY.with_message("after must be a revision number")
                })?;
            let wait = query_param(&req, "wait")
                .unwrap_or("0")
                .parse::<u64>()
                .map_err(|_| ApiError::INVALID_QUERY.with_message("wait must be seconds"))?;
            let epoch = query_param(&req, "epoch").filter(|e| !e.is_empty());
            let page = control
                .sessions
                .feed(after, epoch, Duration::from_secs(wait.min(MAX_FEED_WAIT)))
                .await?;
            Ok(json(200, &page))
        }
        [id] => {
            if method != Method::GET {
                return Err(not_allowed());
            }
            let id = session_id(id)?;
            let lookup = control.sessions.route(&id)?.ok_or(ApiError::NOT_FOUND)?;
            Ok(json(200, &lookup))
        }
        _ => Err(no_such_endpoint()),
    }
}

/// `POST /v1/activity`: when users last typed into sessions' terminals.
pub(super) async fn activity(
    control: Arc<Control>,
    req: Request<Incoming>,
    _gateway: ServiceCaller,
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if method != Method::POST {
        return Err(not_allowed());
    }
    let reports: Vec<InputReport> = read_json(req, limit).await?;
    let inputs: Vec<(SessionId, u64)> = reports
        .into_iter()
        .map(|r| (r.session, r.last_input))
        .collect();
    control.sessions.record_input(&inputs)?;
    Ok(empty(204))
}

/// `POST /v1/terminals`: the terminals and viewers one gateway has open.
pub(super) async fn terminals(
    control: Arc<Control>,
    req: Request<Incoming>,
    _gateway: ServiceCaller,
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if method != Method::POST {
        return Err(not_allowed());
    }
    let report: TerminalsReport = read_json(req, limit).await?;
    if report.gateway.is_empty() || report.gateway.len() > 64 {
        return Err(ApiError::INVALID_JSON.with_message("gateway must be 1 to 64 characters"));
    }
    if report.replica.as_ref().is_some_and(|r| r.len() > 512) {
        return Err(ApiError::INVALID_JSON.with_message("replica must be at most 512 bytes"));
    }
    let every = Duration::from_millis(report.every_ms.clamp(100, 60_000));
    let counts: Vec<(SessionId, u32)> = report
        .open
        .into_iter()
        .map(|o| (o.session, o.open))
        .collect();
    let users: Option<Vec<(Sub, u32)>> = report
        .users
        .map(|u| u.into_iter().map(|u| (u.sub, u.open)).collect());
    control.sessions.record_terminals(
        &report.gateway,
        report.replica.as_deref(),
        every,
        &counts,
        users.as_deref().unwrap_or_default(),
    );
    control
        .shares
        .record_viewers(&report.gateway, report.viewers);
    Ok(match users {
        Some(_) => json(200, &control.sessions.terminals_elsewhere(&report.gateway)),
        None => empty(204),
    })
}

/// `PUT /v1/recordings/<id>/<name>`: a recording a gateway hands over.
pub(super) async fn recordings(
    control: Arc<Control>,
    req: Request<Incoming>,
    _gateway: ServiceCaller,
    rest: &[&str],
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match rest {
        [id, name] => {
            if method != Method::PUT {
                return Err(not_allowed());
            }
            let id = session_id(id)?;
            let name = (*name).to_owned();
            control
                .sessions
                .recordings()
                .put(&id, &name, req.into_body())
                .await?;
            Ok(empty(204))
        }
        _ => Err(no_such_endpoint()),
    }
}

/// `POST /v1/audit`: a gateway's audit lines, kept beside control's own.
pub(super) async fn audit_report(
    control: Arc<Control>,
    req: Request<Incoming>,
    _gateway: ServiceCaller,
    limit: usize,
) -> Result<Reply, ApiError> {
    let report: AuditReport = read_json(req, limit).await?;
    if report.gateway.is_empty() || report.gateway.len() > 64 {
        return Err(ApiError::INVALID_JSON.with_message("gateway must be 1 to 64 characters"));
    }
    if report.entries.len() > MAX_REPORT_ENTRIES {
        return Err(ApiError::INVALID_JSON
            .with_message(format!("at most {MAX_REPORT_ENTRIES} entries per report")));
    }
    control.append_gateway_audit(&report.gateway, report.entries)?;
    Ok(empty(204))
}
