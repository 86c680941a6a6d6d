//! Reading a request's head: one header's bytes, the headers' size, and the checks every
//! request's head passes whatever its route.

use pingora::http::RequestHeader;
use policy::Refusal;

use crate::state::Gateway;

/// The raw bytes of a request header, if present.
pub(super) fn header<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a [u8]> {
    req.headers.get(name).map(|v| v.as_bytes())
}

/// The size of the request's headers, as counted against `max_request_header_bytes`.
fn header_bytes(req: &RequestHeader) -> usize {
    req.headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum()
}

/// What every request's head must be, whatever its route: within
/// `max_request_header_bytes`, one copy of the headers that must be unique, and one
/// session cookie.
pub(super) fn check_head(g: &Gateway, req: &RequestHeader) -> Result<(), Refusal> {
    if header_bytes(req) > g.config.gateway.max_request_header_bytes {
        return Err(Refusal::HEADERS_TOO_LARGE);
    }
    // One copy each, or the request means different things to different readers
    // (a proxy in front may read the other copy).
    for once in ["host", "authorization", "content-length"] {
        if req.headers.get_all(once).iter().nth(1).is_some() {
            return Err(Refusal::BAD_HEADERS);
        }
    }
    let cookies = req
        .headers
        .get_all("cookie")
        .into_iter()
        .map(|v| v.as_bytes());
    if policy::identity::session_cookie_is_ambiguous(cookies, &g.config.auth.cookie_name) {
        return Err(Refusal::BAD_HEADERS);
    }
    Ok(())
}
