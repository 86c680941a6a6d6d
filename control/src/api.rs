//! control's HTTP API (hyper 1): routing, authentication, bodies, JSON.
//!
//! User calls carry the user's JWT as a bearer token (the gateway turns the cookie into
//! one); the route feed carries the service token. Bodies are bounded, unknown fields
//! refused, and every error is the JSON shape of design §2.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use policy::audit::{AuditReport, MAX_REPORT_ENTRIES};
use policy::revocation::Fingerprint;
use policy::{Principal, SessionId, Sub};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::audit::{AuditEntry, AuditQuery};
use crate::authz::AuthzRequest;
use crate::error::ApiError;
use crate::recordings::RecordingView;
use crate::service::{
    may_lock, Control, CreateRequest, ListedTarget, RedrawRequest, RevocationRequest, SessionView,
    ShareRequest, SignInReport, SignInView, TargetPatch, TargetRequest, TargetView, Whose,
};

/// `POST /v1/terminals`: the terminals one gateway has open, per session and per user
/// (a zero for one that had some at its previous report), sent at least every
/// `every_ms`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TerminalsReport {
    gateway: String,
    /// Where the gateway serves (its host and listener), the same across its restarts.
    #[serde(default)]
    replica: Option<String>,
    every_ms: u64,
    open: Vec<OpenTerminals>,
    /// Open per user. A report without it (a gateway from before deployment-wide
    /// limits) is answered 204, as it expects; with it, 200 and the other gateways'
    /// counts.
    #[serde(default)]
    users: Option<Vec<UserTerminals>>,
    /// The share-link viewers it has open, all of them.
    #[serde(default)]
    viewers: Vec<crate::live::Viewers>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UserTerminals {
    sub: Sub,
    open: u32,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenTerminals {
    session: SessionId,
    open: u32,
}

/// One entry of `POST /v1/activity`: when a user last typed into a session's
/// terminals on the reporting gateway.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InputReport {
    session: SessionId,
    /// Seconds since the Unix epoch.
    last_input: u64,
}

type Reply = Response<Full<Bytes>>;

/// Longest a feed poller may ask to wait, seconds.
const MAX_FEED_WAIT: u64 = 30;

fn json<T: Serialize>(status: u16, value: &T) -> Reply {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn empty(status: u16) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT);
    r
}

fn error(e: &ApiError) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(e.body())));
    *r.status_mut() = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn bearer(req: &Request<Incoming>) -> Option<&[u8]> {
    policy::identity::bearer(req.headers().get(AUTHORIZATION)?.as_bytes())
}

/// The caller: a valid token of a user who is not locked. A locked user, admin or not,
/// is refused on every endpoint, so a locked admin can neither unlock themselves nor
/// lock anyone else.
fn authenticate(control: &Control, req: &Request<Incoming>) -> Result<Principal, ApiError> {
    let token = bearer(req)
        .ok_or_else(|| ApiError::UNAUTHENTICATED.with_message("a bearer token is required"))?;
    let who = control.verify(token).map_err(|e| {
        tracing::info!(target: "audit", decision = "deny", reason = e.reason(), "token refused");
        ApiError::from(&e)
    })?;
    if control.is_locked(&who.sub)? {
        tracing::info!(target: "audit", sub = %who.sub, decision = "deny", reason = ApiError::LOCKED.code, "locked caller refused");
        return Err(ApiError::LOCKED);
    }
    Ok(who)
}

/// Compares in time independent of where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authenticate_service(control: &Control, req: &Request<Incoming>) -> Result<(), ApiError> {
    match (bearer(req), control.service_token()) {
        (Some(got), Some(want)) if constant_time_eq(got, want) => Ok(()),
        _ => Err(ApiError::UNAUTHENTICATED.with_message("the service token is required")),
    }
}

fn query_param<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.uri()
        .query()?
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

async fn read_json<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
    limit: usize,
) -> Result<T, ApiError> {
    let too_big = || {
        ApiError::BODY_TOO_LARGE.with_message(format!("request body is larger than {limit} bytes"))
    };
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > limit {
            return Err(too_big());
        }
    }
    let body = Limited::new(req.into_body(), limit)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_big()
            } else {
                ApiError::BAD_BODY
            }
        })?
        .to_bytes();
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::INVALID_JSON.with_message(format!("invalid request body: {e}")))
}

fn session_id(seg: &str) -> Result<SessionId, ApiError> {
    // A malformed id cannot name anyone's session: the same 404 as an unknown one.
    SessionId::parse(seg).map_err(|_| ApiError::NOT_FOUND)
}

#[derive(Serialize)]
struct AuditLines {
    lines: Vec<AuditEntry>,
}

/// `GET /v1/sessions/<id>/recordings`.
#[derive(Serialize)]
struct RecordingList {
    recordings: Vec<RecordingView>,
}

#[derive(Serialize)]
struct Users {
    locked: Vec<String>,
}

/// Audit lines an admin asks for; `sub` and `session` are form-encoded (a `sub` may
/// hold any character).
fn audit_query(query: &str) -> Result<AuditQuery, ApiError> {
    let mut q = AuditQuery {
        limit: 100,
        ..AuditQuery::default()
    };
    let number = |name: &str, v: &str| {
        v.parse::<u64>()
            .map_err(|_| ApiError::INVALID_QUERY.with_message(format!("{name} must be a number")))
    };
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "sub" if !v.is_empty() => q.sub = Some(v.into_owned()),
            "session" if !v.is_empty() => q.session = Some(v.into_owned()),
            "before_ms" => q.before_ms = Some(number("before_ms", &v)?),
            "limit" => {
                q.limit = usize::try_from(number("limit", &v)?)
                    .unwrap_or(usize::MAX)
                    .clamp(1, 1_000);
            }
            _ => {}
        }
    }
    Ok(q)
}

#[derive(Serialize)]
struct Sessions<T> {
    sessions: Vec<T>,
}

/// One entry of a session list: a session, or a target the caller may open.
#[derive(Serialize)]
#[serde(untagged)]
enum Listed<'a> {
    Session(SessionView<'a>),
    Target(ListedTarget<'a>),
}

#[derive(Serialize)]
struct Targets<'a> {
    targets: Vec<TargetView<'a>>,
}

/// `GET /healthz` on either listener. Fields in name order, as the answer always was.
#[derive(Serialize)]
struct Health {
    /// The store's revision (API listener only).
    #[serde(skip_serializing_if = "Option::is_none")]
    rev: Option<u64>,
    status: &'static str,
}

/// `GET /v1/profiles`.
#[derive(Serialize)]
struct Profiles<'a> {
    profiles: Vec<ProfileView<'a>>,
}

/// A profile as users see it. Fields in name order, as the answer always was.
#[derive(Serialize)]
struct ProfileView<'a> {
    description: &'a str,
    name: &'a str,
    options: BTreeMap<&'a str, OptionView<'a>>,
}

/// One option of a profile, without the variable it is passed in.
#[derive(Serialize)]
struct OptionView<'a> {
    default: &'a str,
    description: &'a str,
    values: &'a [String],
}

impl<'a> ProfileView<'a> {
    fn new(name: &'a str, p: &'a config::Profile) -> Self {
        ProfileView {
            description: &p.description,
            name,
            options: p
                .options
                .iter()
                .map(|(k, o)| {
                    let view = OptionView {
                        default: &o.default,
                        description: &o.description,
                        values: &o.values,
                    };
                    (k.as_str(), view)
                })
                .collect(),
        }
    }
}

/// `GET /v1/authz`: a proxy's terminal check (nginx `auth_request`). 200 with the
/// grant in `X-Termgate-*` headers and no body, or the refusal as everywhere else; a
/// 401 carries `WWW-Authenticate`, which nginx passes on.
fn authz(control: &Control, req: &Request<Incoming>) -> Result<Reply, ApiError> {
    let h = req.headers();
    let one = |name: &str| h.get(name).map(HeaderValue::as_bytes);
    let cookies: Vec<&[u8]> = h
        .get_all(hyper::header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    let asked = AuthzRequest {
        uri: one("x-original-uri"),
        method: one("x-original-method"),
        origin: one("origin"),
        authorization: one("authorization"),
        cookies: &cookies,
    };
    let grant = control.authorize(&asked)?;
    let mut reply = empty(200);
    let headers = reply.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        // Every value comes from the store or a verified token; one that is not a valid
        // header value fails the request rather than being altered.
        let v = HeaderValue::from_str(value).map_err(|_| ApiError::INTERNAL)?;
        headers.insert(name, v);
        Ok::<(), ApiError>(())
    };
    set("x-termgate-upstream", &grant.upstream)?;
    set("x-termgate-uri", &grant.uri)?;
    set("x-termgate-user", &grant.user)?;
    set("x-termgate-reason", grant.reason)?;
    if let Some(arg) = &grant.arg {
        set("x-termgate-arg", arg)?;
    }
    set("cache-control", "no-store")?;
    Ok(reply)
}

/// `/v1/signins…`: a gateway records a sign-in (`POST`, with the sign-in's own token);
/// users list theirs (`GET`, admins `?sub=`), sign out the current one
/// (`DELETE …/current`), one by id (`DELETE …/<id>`) or all (`DELETE`, "everywhere").
async fn sign_ins(
    control: &Control,
    req: Request<Incoming>,
    rest: &[&str],
    limit: usize,
) -> Result<Reply, ApiError> {
    let who = authenticate(control, &req)?;
    let token = bearer(&req).unwrap_or_default().to_vec();
    let whose = match query_param(&req, "sub") {
        None | Some("") => None,
        Some(s) => Some(
            form_urlencoded::parse(format!("sub={s}").as_bytes())
                .next()
                .and_then(|(_, v)| Sub::parse(&v))
                .ok_or(ApiError::INVALID_SUB)?,
        ),
    };
    let method = req.method().clone();
    match (rest, method) {
        ([], Method::GET) => {
            let list = control.list_sign_ins(&who, whose.as_ref())?;
            let current = Fingerprint::of(&token);
            let views: Vec<SignInView<'_>> = list
                .iter()
                .map(|s| control.sign_in_view(s, &current))
                .collect();
            Ok(json(200, &serde_json::json!({ "signins": views })))
        }
        ([], Method::POST) => {
            let report: SignInReport = read_json(req, limit).await?;
            let s = control.record_sign_in(&who, &token, &report)?;
            Ok(json(201, &control.sign_in_view(&s, &s.fingerprint)))
        }
        ([], Method::DELETE) => {
            let n = control.sign_out_all(&who, whose.as_ref())?;
            Ok(json(200, &serde_json::json!({ "signed_out": n })))
        }
        (["current"], Method::DELETE) => {
            control.sign_out_current(&who, &token)?;
            Ok(empty(204))
        }
        ([id], Method::DELETE) => {
            control.sign_out(&who, id, whose.as_ref())?;
            Ok(empty(204))
        }
        ([] | ["current"] | [_], _) => Err(ApiError::METHOD_NOT_ALLOWED),
        _ => Err(ApiError::PAGE_NOT_FOUND),
    }
}

async fn route(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, ApiError> {
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path
        .strip_prefix("/v1/")
        .map(|p| p.split('/').collect())
        .unwrap_or_default();
    let method = req.method().clone();
    let limit = control.max_body_bytes();
    let not_allowed = || ApiError::METHOD_NOT_ALLOWED;
    match segments.as_slice() {
        ["healthz"] => Ok(json(
            200,
            &Health {
                rev: Some(control.rev()),
                status: "ok",
            },
        )),
        ["routes"] => {
            authenticate_service(&control, &req)?;
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
                .feed(after, epoch, Duration::from_secs(wait.min(MAX_FEED_WAIT)))
                .await?;
            Ok(json(200, &page))
        }
        ["routes", id] => {
            authenticate_service(&control, &req)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            let id = session_id(id)?;
            let lookup = control.route(&id)?.ok_or(ApiError::NOT_FOUND)?;
            Ok(json(200, &lookup))
        }
        ["activity"] => {
            authenticate_service(&control, &req)?;
            if method != Method::POST {
                return Err(not_allowed());
            }
            let reports: Vec<InputReport> = read_json(req, limit).await?;
            let inputs: Vec<(SessionId, u64)> = reports
                .into_iter()
                .map(|r| (r.session, r.last_input))
                .collect();
            control.record_input(&inputs)?;
            Ok(empty(204))
        }
        ["terminals"] => {
            authenticate_service(&control, &req)?;
            if method != Method::POST {
                return Err(not_allowed());
            }
            let report: TerminalsReport = read_json(req, limit).await?;
            if report.gateway.is_empty() || report.gateway.len() > 64 {
                return Err(
                    ApiError::INVALID_JSON.with_message("gateway must be 1 to 64 characters")
                );
            }
            if report.replica.as_ref().is_some_and(|r| r.len() > 512) {
                return Err(
                    ApiError::INVALID_JSON.with_message("replica must be at most 512 bytes")
                );
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
            control.record_terminals(
                &report.gateway,
                report.replica.as_deref(),
                every,
                &counts,
                users.as_deref().unwrap_or_default(),
            );
            control.record_viewers(&report.gateway, report.viewers);
            Ok(match users {
                Some(_) => json(200, &control.terminals_elsewhere(&report.gateway)),
                None => empty(204),
            })
        }
        ["authz"] => {
            if method != Method::GET && method != Method::HEAD {
                return Err(not_allowed());
            }
            authz(&control, &req)
        }
        ["profiles"] => {
            authenticate(&control, &req)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            let profiles = control
                .profiles()
                .iter()
                .map(|(name, p)| ProfileView::new(name, p))
                .collect();
            Ok(json(200, &Profiles { profiles }))
        }
        ["signins", rest @ ..] => sign_ins(&control, req, rest, limit).await,
        ["revocations"] => {
            let who = authenticate(&control, &req)?;
            match method {
                Method::GET => Ok(json(
                    200,
                    &serde_json::json!({ "revocations": control.revocations(&who)? }),
                )),
                Method::POST => {
                    if !who.admin {
                        return Err(ApiError::ADMIN_REQUIRED
                            .with_message("only an admin may revoke tokens"));
                    }
                    let body: RevocationRequest = read_json(req, limit).await?;
                    Ok(json(201, &control.revoke_tokens(&who, &body)?))
                }
                _ => Err(not_allowed()),
            }
        }
        ["sessions"] => {
            let who = authenticate(&control, &req)?;
            match method {
                Method::GET => {
                    let whose = Whose::asked(
                        query_param(&req, "all") == Some("true"),
                        query_param(&req, "owner"),
                    );
                    let list = control.list(&who, &whose)?;
                    // Targets that allow the caller are listed with their own sessions
                    // (not in an admin's listing of someone else's).
                    let targets = if whose == Whose::Own {
                        control.targets_for(&who)?
                    } else {
                        Vec::new()
                    };
                    let mut sessions: Vec<Listed<'_>> = list
                        .iter()
                        .map(|s| Listed::Session(control.view(s)))
                        .collect();
                    sessions.extend(
                        targets
                            .iter()
                            .map(|t| Listed::Target(ListedTarget::from(t))),
                    );
                    Ok(json(200, &Sessions { sessions }))
                }
                Method::POST => {
                    let body: CreateRequest = read_json(req, limit).await?;
                    let (s, timing) = control.create(&who, body).await?;
                    let mut reply = json(201, &control.view(&s));
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
        ["history"] => {
            let who = authenticate(&control, &req)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            let whose = Whose::asked(
                query_param(&req, "all") == Some("true"),
                query_param(&req, "owner"),
            );
            let list = control.history(&who, &whose)?;
            Ok(json(
                200,
                &Sessions {
                    sessions: list.iter().map(|s| control.view(s)).collect(),
                },
            ))
        }
        ["sessions", id] => {
            let who = authenticate(&control, &req)?;
            let id = session_id(id)?;
            match method {
                Method::GET => {
                    if let Some(t) = control.target_for(&who, &id)? {
                        return Ok(json(200, &ListedTarget::from(&t)));
                    }
                    let s = control.get(&who, &id)?;
                    Ok(json(200, &control.view(&s)))
                }
                Method::DELETE => {
                    // 204 once the end is decided and durable: its terminals are
                    // closing now, its container goes in the background.
                    control.end(&who, &id)?;
                    Ok(empty(204))
                }
                _ => Err(not_allowed()),
            }
        }
        ["sessions", id, "redraw"] => {
            let who = authenticate(&control, &req)?;
            let id = session_id(id)?;
            if method != Method::POST {
                return Err(not_allowed());
            }
            let body: RedrawRequest = read_json(req, limit).await?;
            control.redraw(&who, &id, body).await?;
            Ok(empty(204))
        }
        ["recordings", id, name] => {
            authenticate_service(&control, &req)?;
            if method != Method::PUT {
                return Err(not_allowed());
            }
            let id = session_id(id)?;
            let name = (*name).to_owned();
            control
                .recordings()
                .put(&id, &name, req.into_body())
                .await?;
            Ok(empty(204))
        }
        ["sessions", id, "recordings"] => {
            let who = authenticate(&control, &req)?;
            let id = session_id(id)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            // Owner or admin, for active and ended sessions alike; others: 404.
            control.get(&who, &id)?;
            let list = control.recordings().list(&id);
            Ok(json(200, &RecordingList { recordings: list }))
        }
        ["sessions", id, "recordings", name] => {
            let who = authenticate(&control, &req)?;
            let id = session_id(id)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            control.get(&who, &id)?;
            let bytes = control.recordings().read(&id, name).await?;
            tracing::info!(target: "audit", sub = %who.sub, session = %id, recording = %name, "recording read");
            let mut r = Response::new(Full::new(bytes));
            let headers = r.headers_mut();
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/x-asciicast"),
            );
            if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}.cast\"")) {
                headers.insert(hyper::header::CONTENT_DISPOSITION, v);
            }
            Ok(r)
        }
        ["sessions", id, "shares"] => {
            let who = authenticate(&control, &req)?;
            let id = session_id(id)?;
            match method {
                Method::GET => {
                    let shares = control.list_shares(&who, &id)?;
                    Ok(json(200, &serde_json::json!({ "shares": shares })))
                }
                Method::POST => {
                    let body: ShareRequest = read_json(req, limit).await?;
                    Ok(json(201, &control.create_share(&who, &id, &body)?))
                }
                _ => Err(not_allowed()),
            }
        }
        ["sessions", id, "shares", share] => {
            let who = authenticate(&control, &req)?;
            let id = session_id(id)?;
            if method != Method::DELETE {
                return Err(not_allowed());
            }
            control.revoke_share(&who, &id, share)?;
            Ok(empty(204))
        }
        ["targets"] => {
            let who = authenticate(&control, &req)?;
            match method {
                Method::GET => {
                    let list = control.list_targets(&who)?;
                    Ok(json(
                        200,
                        &Targets {
                            targets: list.iter().map(TargetView::from).collect(),
                        },
                    ))
                }
                Method::POST => {
                    // Admin first: a non-admin learns nothing from the body's problems.
                    control.list_targets(&who)?;
                    let body: TargetRequest = read_json(req, limit).await?;
                    let t = control.create_target(&who, body)?;
                    Ok(json(201, &TargetView::from(&t)))
                }
                _ => Err(not_allowed()),
            }
        }
        ["targets", id] => {
            let who = authenticate(&control, &req)?;
            let id = session_id(id)?;
            match method {
                Method::GET => {
                    let t = control
                        .list_targets(&who)?
                        .into_iter()
                        .find(|t| t.id == id)
                        .ok_or(ApiError::NOT_FOUND)?;
                    Ok(json(200, &TargetView::from(&t)))
                }
                Method::PATCH => {
                    control.list_targets(&who)?;
                    let body: TargetPatch = read_json(req, limit).await?;
                    let t = control.patch_target(&who, &id, body)?;
                    Ok(json(200, &TargetView::from(&t)))
                }
                Method::DELETE => {
                    control.delete_target(&who, &id)?;
                    Ok(empty(204))
                }
                _ => Err(not_allowed()),
            }
        }
        ["audit"] if method == Method::POST => {
            authenticate_service(&control, &req)?;
            let report: AuditReport = read_json(req, limit).await?;
            if report.gateway.is_empty() || report.gateway.len() > 64 {
                return Err(
                    ApiError::INVALID_JSON.with_message("gateway must be 1 to 64 characters")
                );
            }
            if report.entries.len() > MAX_REPORT_ENTRIES {
                return Err(ApiError::INVALID_JSON
                    .with_message(format!("at most {MAX_REPORT_ENTRIES} entries per report")));
            }
            control.append_gateway_audit(&report.gateway, report.entries)?;
            Ok(empty(204))
        }
        ["audit"] => {
            let who = authenticate(&control, &req)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            let query = audit_query(req.uri().query().unwrap_or(""))?;
            let lines = control.audit(&who, &query)?;
            Ok(json(200, &AuditLines { lines }))
        }
        ["users"] => {
            let who = authenticate(&control, &req)?;
            if method != Method::GET {
                return Err(not_allowed());
            }
            let locked = control.locked_users(&who)?;
            Ok(json(200, &Users { locked }))
        }
        ["users", sub, "lock"] => {
            let who = authenticate(&control, &req)?;
            let lock = match method {
                Method::POST => true,
                Method::DELETE => false,
                _ => return Err(not_allowed()),
            };
            may_lock(&who)?;
            let sub = Sub::parse(sub).ok_or(ApiError::INVALID_SUB)?;
            control.set_lock(&who, &sub, lock).map(|_| empty(204))
        }
        _ => Err(ApiError::PAGE_NOT_FOUND.with_message("no such endpoint")),
    }
}

async fn handle(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let reply = match route(control, req).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = error(&e);
            if e.status == 401 && path == "/v1/authz" {
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer"),
                );
            }
            r
        }
    };
    tracing::debug!(%method, %path, status = reply.status().as_u16(), "request");
    Ok(reply)
}

async fn handle_admin(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, Infallible> {
    Ok(match req.uri().path() {
        "/metrics" => {
            let mut r = Response::new(Full::new(Bytes::from(control.metrics().render())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        "/healthz" => json(
            200,
            &Health {
                rev: None,
                status: "ok",
            },
        ),
        _ => error(&ApiError::PAGE_NOT_FOUND.with_message("no such endpoint")),
    })
}

/// Which of control's two listeners.
#[derive(Clone, Copy)]
pub enum Listener {
    /// The internal API.
    Api,
    /// Metrics and health.
    Admin,
}

/// Serves one listener until `shutdown` fires, then lets open requests finish for up
/// to `grace`.
pub async fn serve(
    control: Arc<Control>,
    listener: TcpListener,
    which: Listener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    grace: Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (stream, _peer): (_, SocketAddr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let control = Arc::clone(&control);
        let service = hyper::service::service_fn(move |req| {
            let control = Arc::clone(&control);
            async move {
                match which {
                    Listener::Api => handle(control, req).await,
                    Listener::Admin => handle_admin(control, req).await,
                }
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(10))
            .max_buf_size(64 * 1024)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                // Clients that hang up or send garbage end here; nothing to repair.
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "open requests did not finish within the grace period"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_answers_keep_the_bytes_of_the_old_json() {
        let p: config::Profile = serde_json::from_value(serde_json::json!({
            "image": "termgate/session:dev",
            "description": "a shell",
            "options": {"shell": {"env": "SESSION_SHELL", "values": ["sh", "ash"], "default": "sh", "description": "which shell"}},
        }))
        .expect("a profile");
        let options: serde_json::Map<String, serde_json::Value> = p
            .options
            .iter()
            .map(|(k, o)| (k.clone(), serde_json::json!({"description": o.description, "values": o.values, "default": o.default})))
            .collect();
        let old = serde_json::json!({"profiles": [
            serde_json::json!({"name": "dev", "description": p.description, "options": options})
        ]});
        let new = Profiles {
            profiles: vec![ProfileView::new("dev", &p)],
        };
        assert_eq!(
            serde_json::to_string(&new).unwrap(),
            serde_json::to_string(&old).unwrap()
        );
        let health = Health {
            rev: Some(7),
            status: "ok",
        };
        assert_eq!(
            serde_json::to_string(&health).unwrap(),
            serde_json::json!({"status": "ok", "rev": 7}).to_string()
        );
        let admin = Health {
            rev: None,
            status: "ok",
        };
        assert_eq!(
            serde_json::to_string(&admin).unwrap(),
            serde_json::json!({"status": "ok"}).to_string()
        );
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
