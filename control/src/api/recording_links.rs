//! Recording links: the owner's `/v1/sessions/<id>/recordings/<name>/links[/<link>]`
//! (make, list, revoke), and the gateways' `/v1/recording-links/<token>[/check]`
//! (service token), which plays a link's recording as a body streamed from its file.
//! The viewer, when the gateway verified one, comes as `X-Termgate-Viewer: <sub>`.
//! Nothing here logs a token: its path is logged as `/v1/recording-links/<token>`.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request};
use policy::recording_link::RecordingToken;
use policy::{Principal, Refusal, SessionId, Sub};

use super::http::{
    boxed, cast_file, empty, json, no_such_endpoint, not_allowed, read_json, ServiceCaller,
    Streamed,
};
use super::wire::{
    CreatedRecordingLink, RecordingLinkCheck, RecordingLinkRequest, RecordingLinkView,
    RecordingLinks,
};
use crate::error::ApiError;
use crate::service::Control;

/// `/v1/sessions/<id>/recordings/<name>/links` (GET list, POST make) and
/// `…/links/<link>` (DELETE revoke): the owner's or an admin's.
pub(super) async fn manage(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    id: SessionId,
    name: &str,
    link: Option<&str>,
    limit: usize,
) -> Result<super::http::Reply, ApiError> {
    let method = req.method().clone();
    match (link, method) {
        (None, Method::GET) => {
            let (links, modes) = control
                .recording_links
                .list_recording_links(who, &id, name)?;
            let links = links.into_iter().map(RecordingLinkView::from).collect();
            Ok(json(200, &RecordingLinks { links, modes }))
        }
        (None, Method::POST) => {
            // Who first: another's recording is the 404 of an unknown one, whatever
            // the body says.
            control
                .recording_links
                .list_recording_links(who, &id, name)?;
            let body: RecordingLinkRequest = read_json(req, limit).await?;
            let link = control.recording_links.create_recording_link(
                who,
                &id,
                name,
                body.ttl_seconds,
                body.mode.as_deref(),
            )?;
            Ok(json(201, &CreatedRecordingLink::from(link)))
        }
        (Some(link), Method::DELETE) => {
            control
                .recording_links
                .revoke_recording_link(who, &id, name, link)?;
            Ok(empty(204))
        }
        _ => Err(not_allowed()),
    }
}

/// `/v1/recording-links/<token>` (the recording, streamed) and
/// `/v1/recording-links/<token>/check` (whether it plays): for gateways only.
pub(super) async fn play(
    control: Arc<Control>,
    req: Request<Incoming>,
    _gateway: ServiceCaller,
) -> Result<Streamed, ApiError> {
    let path = req.uri().path().to_owned();
    let rest = path
        .strip_prefix("/v1/recording-links/")
        .unwrap_or_default();
    let (token, check) = match rest.split_once('/') {
        None => (rest, false),
        Some((token, "check")) => (token, true),
        Some(_) => return Err(no_such_endpoint()),
    };
    if req.method() != Method::GET {
        return Err(not_allowed());
    }
    let token = RecordingToken::parse(token).ok_or(Refusal::PAGE_NOT_FOUND)?;
    let viewer = req
        .headers()
        .get("x-termgate-viewer")
        .and_then(|v| v.to_str().ok())
        .map(|v| Sub::parse(v).ok_or(Refusal::INVALID_SUB))
        .transpose()?;
    let link = control
        .recording_links
        .recording_link_plays(&token, viewer.as_ref())
        // The recording itself, for a `signed-in` link and no viewer: the same 404 as
        // any link that plays nothing (the page says to sign in).
        .map_err(|r| {
            if check || r.status != 401 {
                r
            } else {
                Refusal::PAGE_NOT_FOUND
            }
        })?;
    if check {
        let answer = RecordingLinkCheck {
            id: link.id,
            session: link.session,
            recording: link.recording,
            expires_at: link.expires_at,
        };
        return Ok(boxed(json(200, &answer)));
    }
    let (file, size) = control
        .sessions
        .recordings()
        .open_file(&link.session, &link.recording)
        .await
        // A link whose recording went (retention) plays nothing: the same 404.
        .map_err(|e| {
            if e.status == 404 {
                Refusal::PAGE_NOT_FOUND
            } else {
                e
            }
        })?;
    let who = viewer.as_ref().map_or("anyone", Sub::as_str);
    tracing::info!(target: "audit", viewer = who, session = %link.session, recording = %link.recording, link = %link.id, bytes = size, "recording viewed by link");
    Ok(cast_file(file, size))
}
