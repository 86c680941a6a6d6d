//! The `/v1/sessions…`, `/v1/history` and `/v1/targets…` handlers: a user's sessions
//! (create, list, get, end, redraw), their recordings and share links, ended sessions,
//! and the targets admins register.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request};
use policy::Principal;

use super::http::{
    cast_file, empty, json, no_such_endpoint, not_allowed, query_param, read_json, session_id,
    Reply, Streamed,
};
use super::wire::{
    CreateRequest, CreatedShare, Listed, ListedTarget, PeerRequest, PeerView, Peers, RecordingList,
    RecordingView, RedrawRequest, SessionView, Sessions, ShareRequest, Shares, TargetPatch,
    TargetRequest, TargetView, Targets,
};
use crate::error::ApiError;
use crate::service::{Control, Whose};

/// `/v1/sessions` (list, create) and `/v1/sessions/<id>…`: one session (get, end), its
/// redraw, its recordings and its share links.
pub(super) async fn sessions(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    rest: &[&str],
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match rest {
        [] => {
            match method {
                Method::GET => {
                    let whose = Whose::asked(
                        query_param(&req, "all") == Some("true"),
                        query_param(&req, "owner"),
                    );
                    let list = control.sessions.list(who, &whose)?;
                    // Targets that allow the caller are listed with their own sessions
                    // (not in an admin's listing of someone else's).
                    // So are the sessions the caller was invited to co-drive, marked.
                    let (targets, peer_of) = if whose == Whose::Own {
                        (
                            control.targets.targets_for(who)?,
                            control.peers.peer_sessions(&who.sub)?,
                        )
                    } else {
                        (Vec::new(), Vec::new())
                    };
                    let mut sessions: Vec<Listed<'_>> = list
                        .iter()
                        .map(|s| Listed::Session(Box::new(control.sessions.shown(s).into())))
                        .collect();
                    sessions.extend(peer_of.iter().map(|(s, until)| {
                        Listed::Session(Box::new(control.sessions.shown_to_peer(s, *until).into()))
                    }));
                    sessions.extend(
                        targets
                            .iter()
                            .map(|t| Listed::Target(ListedTarget::from(t))),
                    );
                    Ok(json(200, &Sessions { sessions }))
                }
                Method::POST => {
                    let body: CreateRequest = read_json(req, limit).await?;
                    let (s, timing) = control.sessions.create(who, body.into()).await?;
                    let mut reply = json(201, &SessionView::from(control.sessions.shown(&s)));
                    // Server-Timing lets clients (and the benchmarks) split control's own
                    // time from Docker's.
                    let header = format!(
                        "docker;dur={:.3}, total;dur={:.3}",
                        timing.docker.as_secs_f64() * 1000.0,
                        timing.total.as_secs_f64() * 1000.0
                    );
                    if let Ok(v) = HeaderValue::from_str(&header) {
                        reply.headers_mut().insert("server-timing", v);
                    }
                    Ok(reply)
                }
                _ => Err(not_allowed()),
            }
        }
        [id] => {
            let id = session_id(id)?;
            match method {
                Method::GET => {
                    if let Some(t) = control.targets.target_for(who, &id)? {
                        return Ok(json(200, &ListedTarget::from(&t)));
                    }
                    // A peer asks after the session it co-drives as its owner does (the
                    // page watches it while its terminal is open), and sees it as it
                    // is listed to them.
                    let s = match control.sessions.get(who, &id) {
                        Err(e) if e.code == ApiError::NOT_FOUND.code => {
                            return match control.peers.peer_session(who, &id) {
                                Ok((s, until)) => Ok(json(
                                    200,
                                    &SessionView::from(control.sessions.shown_to_peer(&s, until)),
                                )),
                                Err(p) if p.code == e.code => Err(e),
                                Err(p) => Err(p),
                            };
                        }
                        r => r?,
                    };
                    Ok(json(200, &SessionView::from(control.sessions.shown(&s))))
                }
                Method::DELETE => {
                    // 204 once the end is decided and durable: its terminals are
                    // closing now, its container goes in the background.
                    control.sessions.end(who, &id)?;
                    Ok(empty(204))
                }
                _ => Err(not_allowed()),
            }
        }
        [id, "redraw"] => {
            let id = session_id(id)?;
            if method != Method::POST {
                return Err(not_allowed());
            }
            let body: RedrawRequest = read_json(req, limit).await?;
            control
                .sessions
                .redraw(who, &id, body.cols, body.rows)
                .await?;
            Ok(empty(204))
        }
        [id, "recordings"] => {
            let id = session_id(id)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            // Owner or admin, for active and ended sessions alike; others: 404.
            control.sessions.get(who, &id)?;
            let list = control.sessions.recordings().list(&id);
            let recordings = list.into_iter().map(RecordingView::from).collect();
            Ok(json(200, &RecordingList { recordings }))
        }
        [_, "recordings", _] => {
            // A GET is answered by `download`, streamed.
            Err(not_allowed())
        }
        [id, "recordings", name, "links"] => {
            let id = session_id(id)?;
            super::recording_links::manage(control, req, who, id, name, None, limit).await
        }
        [id, "recordings", name, "links", link] => {
            let id = session_id(id)?;
            super::recording_links::manage(control, req, who, id, name, Some(link), limit).await
        }
        [id, "shares"] => {
            let id = session_id(id)?;
            match method {
                Method::GET => {
                    let shares = control.shares.list_shares(who, &id)?;
                    Ok(json(
                        200,
                        &Shares {
                            shares: shares.into_iter().map(Into::into).collect(),
                        },
                    ))
                }
                Method::POST => {
                    let body: ShareRequest = read_json(req, limit).await?;
                    let link = control.shares.create_share(
                        who,
                        &id,
                        body.ttl_seconds,
                        body.max_viewers,
                    )?;
                    Ok(json(201, &CreatedShare::from(link)))
                }
                _ => Err(not_allowed()),
            }
        }
        [id, "peers"] => {
            let id = session_id(id)?;
            match method {
                Method::GET => {
                    let peers = control.peers.list_peers(who, &id)?;
                    Ok(json(
                        200,
                        &Peers {
                            peers: peers.into_iter().map(PeerView::from).collect(),
                        },
                    ))
                }
                Method::POST => {
                    let body: PeerRequest = read_json(req, limit).await?;
                    let peer = control
                        .peers
                        .invite_peer(who, &id, &body.sub, body.ttl_seconds)?;
                    Ok(json(201, &PeerView::from(peer)))
                }
                _ => Err(not_allowed()),
            }
        }
        [id, "peers", sub] => {
            let id = session_id(id)?;
            if method != Method::DELETE {
                return Err(not_allowed());
            }
            control.peers.remove_peer(who, &id, sub)?;
            Ok(empty(204))
        }
        [id, "shares", share] => {
            let id = session_id(id)?;
            if method != Method::DELETE {
                return Err(not_allowed());
            }
            control.shares.revoke_share(who, &id, share)?;
            Ok(empty(204))
        }
        _ => Err(no_such_endpoint()),
    }
}

/// `GET /v1/history`: ended sessions, with the same visibility as the session list.
pub(super) fn history(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if method != Method::GET {
        return Err(not_allowed());
    }
    let whose = Whose::asked(
        query_param(&req, "all") == Some("true"),
        query_param(&req, "owner"),
    );
    let list = control.sessions.history(who, &whose)?;
    Ok(json(
        200,
        &Sessions {
            sessions: list
                .iter()
                .map(|s| SessionView::from(control.sessions.shown(s)))
                .collect(),
        },
    ))
}

/// `/v1/targets` and `/v1/targets/<id>`: the targets, listed, registered, read, changed
/// and removed (admin only).
pub(super) async fn targets(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    rest: &[&str],
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match rest {
        [] => {
            match method {
                Method::GET => {
                    let list = control.targets.list_targets(who)?;
                    Ok(json(
                        200,
                        &Targets {
                            targets: list.iter().map(TargetView::from).collect(),
                        },
                    ))
                }
                Method::POST => {
                    // Admin first: a non-admin learns nothing from the body's problems.
                    control.targets.list_targets(who)?;
                    let body: TargetRequest = read_json(req, limit).await?;
                    let t = control.targets.create_target(who, body)?;
                    Ok(json(201, &TargetView::from(&t)))
                }
                _ => Err(not_allowed()),
            }
        }
        [id] => {
            let id = session_id(id)?;
            match method {
                Method::GET => {
                    let t = control
                        .targets
                        .list_targets(who)?
                        .into_iter()
                        .find(|t| t.id == id)
                        .ok_or(ApiError::NOT_FOUND)?;
                    Ok(json(200, &TargetView::from(&t)))
                }
                Method::PATCH => {
                    control.targets.list_targets(who)?;
                    let body: TargetPatch = read_json(req, limit).await?;
                    let t = control.targets.patch_target(who, &id, body.into())?;
                    Ok(json(200, &TargetView::from(&t)))
                }
                Method::DELETE => {
                    control.targets.delete_target(who, &id)?;
                    Ok(empty(204))
                }
                _ => Err(not_allowed()),
            }
        }
        _ => Err(no_such_endpoint()),
    }
}

/// `GET /v1/sessions/<id>/recordings/<name>`: the owner's or an admin's download, as
/// an attachment, streamed from the file.
pub(super) async fn download(
    control: Arc<Control>,
    who: &Principal,
    id: &str,
    name: &str,
) -> Result<Streamed, ApiError> {
    let id = session_id(id)?;
    control.sessions.get(who, &id)?;
    let (file, size) = control.sessions.recordings().open_file(&id, name).await?;
    tracing::info!(target: "audit", sub = %who.sub, session = %id, recording = %name, bytes = size, "recording read");
    let mut r = cast_file(file, size);
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}.cast\"")) {
        r.headers_mut()
            .insert(hyper::header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}
