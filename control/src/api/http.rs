//! The API's plumbing every group of routes shares: replies, authentication, query
//! parameters, bounded JSON bodies, session ids from paths and the common refusals.

use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use policy::{Principal, SessionId};
use serde::Serialize;

use crate::error::ApiError;
use crate::service::Control;

pub(super) type Reply = Response<Full<Bytes>>;

/// An answer whose body may stream from a file.
pub(super) type Streamed =
    Response<http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>>;

/// Bytes read from a recording's file per frame.
const CHUNK: usize = 64 * 1024;

/// A whole-body answer as a streamed one.
pub(super) fn boxed(r: Reply) -> Streamed {
    r.map(|b| b.map_err(|never| match never {}).boxed_unsync())
}

/// A recording's file as a 200 answer, streamed a frame at a time: never read whole.
pub(super) fn cast_file(file: tokio::fs::File, size: u64) -> Streamed {
    let chunks = futures_util::stream::try_unfold(file, |mut file| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; CHUNK];
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some((Bytes::from(buf), file)))
    });
    let body = StreamBody::new(chunks.map_ok(Frame::data));
    let mut r = Response::new(BodyExt::boxed_unsync(body));
    let headers = r.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-asciicast"),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(size));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub(super) fn json<T: Serialize>(status: u16, value: &T) -> Reply {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(super) fn empty(status: u16) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT);
    r
}

pub(super) fn error(e: &ApiError) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(e.body())));
    *r.status_mut() = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(super) fn bearer(req: &Request<Incoming>) -> Option<&[u8]> {
    policy::identity::bearer(req.headers().get(AUTHORIZATION)?.as_bytes())
}

/// The caller: a valid token of a user who is not locked. A locked user, admin or not,
/// is refused on every endpoint, so a locked admin can neither unlock themselves nor
/// lock anyone else.
pub(super) fn authenticate(
    control: &Control,
    req: &Request<Incoming>,
) -> Result<Principal, ApiError> {
    let token = bearer(req)
        .ok_or_else(|| ApiError::UNAUTHENTICATED.with_message("a bearer token is required"))?;
    authenticate_token(control, token)
}

/// The user of `token`, checked as [`authenticate`] checks a bearer token.
pub(super) fn authenticate_token(control: &Control, token: &[u8]) -> Result<Principal, ApiError> {
    let who = control.sign_ins.verify(token).map_err(|e| {
        tracing::info!(target: "audit", decision = "deny", reason = e.reason(), "token refused");
        ApiError::from(&e)
    })?;
    if control.users.is_locked(&who.sub)? {
        tracing::info!(target: "audit", sub = %who.sub, decision = "deny", reason = ApiError::LOCKED.code, "locked caller refused");
        return Err(ApiError::LOCKED);
    }
    Ok(who)
}

/// Compares in time independent of where the inputs differ.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Proof that a request carried the service token: the gateways' endpoints take one,
/// and only [`authenticate_service`] makes one.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServiceCaller(());

/// The caller of a gateways' endpoint: a bearer token equal to the service token.
pub(super) fn authenticate_service(
    control: &Control,
    req: &Request<Incoming>,
) -> Result<ServiceCaller, ApiError> {
    match (bearer(req), control.service_token()) {
        (Some(got), Some(want)) if constant_time_eq(got, want) => Ok(ServiceCaller(())),
        _ => Err(ApiError::UNAUTHENTICATED.with_message("the service token is required")),
    }
}

pub(super) fn query_param<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.uri()
        .query()?
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
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

pub(super) fn session_id(seg: &str) -> Result<SessionId, ApiError> {
    // A malformed id cannot name anyone's session: the same 404 as an unknown one.
    SessionId::parse(seg).map_err(|_| ApiError::NOT_FOUND)
}

/// A method the endpoint does not take.
pub(super) fn not_allowed() -> ApiError {
    ApiError::METHOD_NOT_ALLOWED
}

/// A path no endpoint has.
pub(super) fn no_such_endpoint() -> ApiError {
    ApiError::PAGE_NOT_FOUND.with_message("no such endpoint")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
