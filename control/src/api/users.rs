//! The handlers about users rather than one session: profiles, sign-ins, revocations,
//! the admin's audit search and user locks.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request};
use policy::revocation::Fingerprint;
use policy::{Principal, Sub};

use super::http::{
    authenticate_token, bearer, empty, json, no_such_endpoint, not_allowed, query_param, read_json,
    Reply, ServiceCaller,
};
use super::wire::{
    AuditLines, ProfileView, Profiles, RecordingsOfUser, RecordingsUsage, RevocationRequest,
    Revocations, SignInView, SignIns, SignedOut, Users,
};
use crate::error::ApiError;
use crate::retention;
use crate::service::{may_lock, Control};
use crate::store::AuditQuery;
use policy::reports::SignInReport;

/// `GET /v1/profiles`: the profiles sessions are created from.
pub(super) fn profiles(
    control: Arc<Control>,
    req: Request<Incoming>,
    _signed_in: &Principal,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if method != Method::GET {
        return Err(not_allowed());
    }
    let profiles = control
        .sessions
        .profiles()
        .iter()
        .map(|(name, p)| ProfileView::new(name, p))
        .collect();
    Ok(json(200, &Profiles { profiles }))
}

/// `/v1/signins…` for user `who`: they list theirs (`GET`, admins `?sub=`), sign out
/// the current one (`DELETE …/current`), one by id (`DELETE …/<id>`) or all (`DELETE`,
/// "everywhere"). A gateway's `POST` is [`record_sign_in`].
pub(super) fn sign_ins(
    control: &Control,
    req: Request<Incoming>,
    who: &Principal,
    rest: &[&str],
) -> Result<Reply, ApiError> {
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
            let list = control.sign_ins.list_sign_ins(who, whose.as_ref())?;
            let current = Fingerprint::of(&token);
            let views: Vec<SignInView<'_>> =
                list.iter().map(|s| SignInView::of(s, &current)).collect();
            Ok(json(200, &SignIns { signins: views }))
        }
        ([], Method::DELETE) => {
            let (n, before) = control.sign_ins.sign_out_all(who, whose.as_ref())?;
            Ok(json(
                200,
                &SignedOut {
                    signed_out: n,
                    tokens_issued_before: before,
                },
            ))
        }
        (["current"], Method::DELETE) => {
            control.sign_ins.sign_out_current(who, &token)?;
            Ok(empty(204))
        }
        ([id], Method::DELETE) => {
            control.sign_ins.sign_out(who, id, whose.as_ref())?;
            Ok(empty(204))
        }
        ([] | ["current"] | [_], _) => Err(ApiError::METHOD_NOT_ALLOWED),
        _ => Err(ApiError::PAGE_NOT_FOUND),
    }
}

/// `POST /v1/signins`: a gateway records the sign-in whose token it is about to set as
/// a cookie. Only a gateway, with the service token: what the record says (method,
/// gateway, browser, address) is listed to the user and kept in the audit trail, so a
/// user's own token may not file one (answered as the endpoint it is not: 404, by
/// `route`).
pub(super) async fn record_sign_in(
    control: &Control,
    req: Request<Incoming>,
    _gateway: ServiceCaller,
    limit: usize,
) -> Result<Reply, ApiError> {
    let report: SignInReport = read_json(req, limit).await?;
    let who = authenticate_token(control, report.token.as_bytes())?;
    let s = control
        .sign_ins
        .record_sign_in(&who, report.token.as_bytes(), &report)?;
    Ok(json(201, &SignInView::of(&s, &s.fingerprint)))
}

/// `/v1/revocations`: the revocations in force (`GET`) and an admin's new one (`POST`).
pub(super) async fn revocations(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match method {
        Method::GET => Ok(json(
            200,
            &Revocations {
                revocations: control.sign_ins.revocations(who)?,
            },
        )),
        Method::POST => {
            if !who.admin {
                return Err(
                    ApiError::ADMIN_REQUIRED.with_message("only an admin may revoke tokens")
                );
            }
            let body: RevocationRequest = read_json(req, limit).await?;
            Ok(json(
                201,
                &control.sign_ins.revoke_tokens(who, &body.into())?,
            ))
        }
        _ => Err(not_allowed()),
    }
}

/// `GET /v1/retention`: what the recordings hold and the rules that keep them, for an
/// admin's console.
pub(super) fn recordings_usage(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if method != Method::GET {
        return Err(not_allowed());
    }
    if !who.admin {
        return Err(ApiError::ADMIN_REQUIRED.with_message("only an admin may see all recordings"));
    }
    let u = retention::usage(&control.sessions);
    let users = u.users.into_iter().map(|o| RecordingsOfUser {
        sub: o.sub,
        files: o.files,
        bytes: o.bytes,
    });
    Ok(json(
        200,
        &RecordingsUsage {
            files: u.files,
            bytes: u.bytes,
            oldest_stored_at: u.oldest_stored_at,
            keep_days: u.keep_days,
            max_total_bytes: u.max_total_bytes,
            max_user_bytes: u.max_user_bytes,
            users: users.collect(),
        },
    ))
}

/// `GET /v1/audit`: an admin's search of the audit trail.
pub(super) fn audit(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if method != Method::GET {
        return Err(not_allowed());
    }
    let query = audit_query(req.uri().query().unwrap_or(""))?;
    let lines = control.audit(who, &query)?;
    Ok(json(200, &AuditLines { lines }))
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

/// `GET /v1/users` (the locked users) and `POST`/`DELETE /v1/users/<sub>/lock`.
pub(super) fn users(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    rest: &[&str],
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match rest {
        [] => {
            if method != Method::GET {
                return Err(not_allowed());
            }
            let locked = control.users.locked_users(who)?;
            Ok(json(200, &Users { locked }))
        }
        [sub, "lock"] => {
            let lock = match method {
                Method::POST => true,
                Method::DELETE => false,
                _ => return Err(not_allowed()),
            };
            may_lock(who)?;
            let sub = Sub::parse(sub).ok_or(ApiError::INVALID_SUB)?;
            control.users.set_lock(who, &sub, lock).map(|_| empty(204))
        }
        _ => Err(no_such_endpoint()),
    }
}
