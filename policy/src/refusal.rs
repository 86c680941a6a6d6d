//! Refusals as values: an HTTP status, a stable code and a human message.
//!
//! Every refusal the gateway or control answers is one of the constants below, at most
//! with a more specific message, so each code is spelled once and always travels with
//! the same status. A refusal renders as the JSON shape of design §2 through [`ErrorBody`].

use std::borrow::Cow;
use std::fmt;

use crate::error::ErrorBody;
use crate::identity::TokenError;
use crate::quota::QuotaExceeded;

/// A refusal: HTTP status, stable code, human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status to answer with.
    pub status: u16,
    /// Stable snake_case code, for programs.
    pub code: &'static str,
    /// Human-readable message, for people.
    pub message: Cow<'static, str>,
}

/// A refusal with a fixed message, usable in constants.
const fn refusal(status: u16, code: &'static str, message: &'static str) -> Refusal {
    Refusal {
        status,
        code,
        message: Cow::Borrowed(message),
    }
}

impl Refusal {
    /// Unknown session, or a session that is not the caller's: indistinguishable.
    pub const NOT_FOUND: Refusal = refusal(404, "session_not_found", "no such session");
    /// A terminal grant that is malformed or not sealed by this control.
    pub const GRANT_INVALID: Refusal =
        refusal(403, "grant_invalid", "the terminal grant is not valid");
    /// The user is locked by an administrator.
    pub const LOCKED: Refusal = refusal(403, "user_locked", "this user is locked");
    /// No credential, or one that does not verify.
    pub const UNAUTHENTICATED: Refusal = refusal(
        401,
        "unauthenticated",
        "sign in first: no token or session cookie",
    );
    /// A failed authentication from an address past its per-minute limit of failures.
    pub const TOO_MANY_FAILURES: Refusal = refusal(
        429,
        "too_many_failures",
        "too many failed sign-ins from this address; wait a minute",
    );
    /// Request headers larger than the configured limit.
    pub const HEADERS_TOO_LARGE: Refusal =
        refusal(431, "headers_too_large", "request headers are too large");
    /// A path no route can have (encodings, control bytes, …).
    pub const BAD_PATH: Refusal = refusal(400, "bad_path", "the path is malformed");
    /// Headers that must appear once (`Host`, `Authorization`, `Content-Length`)
    /// repeated, or the session cookie with two different values: which copy counts
    /// would be a guess, and proxies guess differently.
    pub const BAD_HEADERS: Refusal = refusal(
        400,
        "bad_headers",
        "Host, Authorization and Content-Length may each appear only once, the session cookie with one value",
    );
    /// An upgrade that is not a websocket handshake ttyd would accept, or an upgrade of
    /// anything but a terminal's websocket (`h2c` included).
    pub const BAD_UPGRADE: Refusal = refusal(
        400,
        "bad_upgrade",
        "only /s/<id>/ws upgrades, as a version 13 websocket with a key and the tty subprotocol",
    );
    /// A well-formed path (or endpoint) that is not a route.
    pub const PAGE_NOT_FOUND: Refusal = refusal(404, "not_found", "no such page");
    /// A method the path does not accept.
    pub const METHOD_NOT_ALLOWED: Refusal =
        refusal(405, "method_not_allowed", "method not allowed on this path");
    /// A body on a request that must not carry one (terminals).
    pub const BODY_NOT_ALLOWED: Refusal =
        refusal(400, "body_not_allowed", "terminal requests carry no body");
    /// A request body larger than the configured limit.
    pub const BODY_TOO_LARGE: Refusal = refusal(413, "body_too_large", "request body is too large");
    /// A request body that could not be read.
    pub const BAD_BODY: Refusal = refusal(400, "bad_body", "could not read the request body");
    /// A request body that is not the expected JSON.
    pub const INVALID_JSON: Refusal = refusal(400, "invalid_json", "invalid request body");
    /// A query parameter with a value of the wrong form.
    pub const INVALID_QUERY: Refusal = refusal(400, "invalid_query", "invalid query parameter");
    /// A terminal past the open-terminal limit of its user or session.
    pub const TOO_MANY_TERMINALS: Refusal = refusal(
        429,
        "too_many_terminals",
        "you have too many open terminals",
    );
    /// Cookie credential without an Origin header.
    pub const ORIGIN_MISSING: Refusal = refusal(403, "origin_missing", "Origin header is required");
    /// The opaque origin `null`.
    pub const ORIGIN_NULL: Refusal = refusal(403, "origin_null", "Origin null is not allowed");
    /// An Origin header that is not one parseable origin.
    pub const ORIGIN_MALFORMED: Refusal =
        refusal(403, "origin_malformed", "Origin header is malformed");
    /// A well-formed origin that is not on the allow-list.
    pub const ORIGIN_NOT_ALLOWED: Refusal =
        refusal(403, "origin_not_allowed", "Origin is not allowed");
    /// The control service did not answer (the gateway's route lookup or API proxy).
    pub const CONTROL_UNAVAILABLE: Refusal = refusal(
        503,
        "control_unavailable",
        "the control service is not answering; try again shortly",
    );
    /// A sign-out (or a revocation) could not reach control: nothing was revoked, and
    /// the caller is told so rather than shown a success.
    pub const SIGN_OUT_FAILED: Refusal = refusal(
        503,
        "sign_out_failed",
        "the sign-out did not happen: the control service is not answering; you are still signed in, try again shortly",
    );
    /// A sign-in could not be recorded at control: no cookie is set, since a sign-in
    /// nobody could sign out is not made.
    pub const SIGN_IN_UNAVAILABLE: Refusal = refusal(
        503,
        "sign_in_unavailable",
        "signing in needs the control service, which is not answering; try again shortly",
    );
    /// No such sign-in of the caller's (another user's and unknown look the same).
    pub const SIGN_IN_NOT_FOUND: Refusal = refusal(404, "sign_in_not_found", "no such sign-in");
    /// A revocation that names nothing, or too much.
    pub const INVALID_REVOCATION: Refusal = refusal(
        400,
        "invalid_revocation",
        "give either {\"jti\": …} or {\"sub\": …, \"issued_before\": …}",
    );
    /// The control service took the connection but did not answer within its bound
    /// (`gateway.control_timeout_ms`, plus control's Docker bound for a call that waits
    /// on Docker): hung, or overloaded.
    pub const CONTROL_TIMEOUT: Refusal = refusal(
        504,
        "control_timeout",
        "the control service did not answer in time; try again shortly",
    );
    /// ttyd did not answer.
    pub const TERMINAL_UNAVAILABLE: Refusal = refusal(
        502,
        "terminal_unavailable",
        "the terminal service is not answering",
    );
    /// The Docker host that runs the session does not answer; its terminals fail fast.
    pub const HOST_UNAVAILABLE: Refusal = refusal(
        502,
        "host_unavailable",
        "the host that runs this session is not answering",
    );
    /// A target definition with a field that is not valid (the message names it).
    pub const INVALID_TARGET: Refusal =
        refusal(400, "invalid_target", "the target definition is not valid");
    /// A target's credential file cannot be read by the gateway.
    pub const TARGET_MISCONFIGURED: Refusal = refusal(
        502,
        "target_misconfigured",
        "this terminal's credential cannot be read; tell an administrator",
    );
    /// Proxying failed for another reason.
    pub const PROXY_ERROR: Refusal =
        refusal(502, "proxy_error", "the request could not be proxied");
    /// A request that failed with an HTTP status but no more specific code; callers set
    /// the status.
    pub const REQUEST_FAILED: Refusal = refusal(400, "error", "request failed");
    /// A create past the user's or the deployment's session quota.
    pub const QUOTA_EXCEEDED: Refusal = refusal(429, "quota_exceeded", "session quota reached");
    /// The request conflicts with the session's current state.
    pub const CONFLICT: Refusal = refusal(409, "conflict", "the session changed meanwhile");
    /// The session store failed (details are in control's log only).
    pub const STORE_ERROR: Refusal = refusal(
        500,
        "store_error",
        "the session store failed; see control's log",
    );
    /// The store's disk cannot take writes now (full, read-only): writes are refused,
    /// reads still answer. The message names the cause.
    pub const STORE_UNAVAILABLE: Refusal = refusal(
        503,
        "store_unavailable",
        "the session store cannot write now; reads still work",
    );
    /// Docker did not answer.
    pub const DOCKER_UNAVAILABLE: Refusal =
        refusal(503, "docker_unavailable", "Docker is not answering");
    /// No Docker host that the profile allows answers and has room for a new session.
    pub const NO_HOST_AVAILABLE: Refusal = refusal(
        503,
        "no_host_available",
        "no Docker host can take a new session now",
    );
    /// Docker answered with an error.
    pub const DOCKER_ERROR: Refusal = refusal(502, "docker_error", "Docker failed");
    /// A container spec that breaks the sandbox's red lines.
    pub const SANDBOX_REFUSED: Refusal =
        refusal(500, "sandbox_refused", "container spec breaks red lines");
    /// A recorded terminal on a listener that cannot record (TLS: Pingora carries
    /// those bytes, and the recorder reads only the gateway's own tunnel).
    pub const RECORDING_UNAVAILABLE: Refusal = refusal(
        502,
        "recording_unavailable",
        "this terminal is recorded, which this gateway listener cannot do",
    );
    /// A failure of control itself.
    pub const INTERNAL: Refusal = refusal(500, "internal", "internal error");
    /// An action only an admin may take.
    pub const ADMIN_REQUIRED: Refusal = refusal(403, "admin_required", "only an admin may do this");
    /// An admin locking or unlocking themselves.
    pub const OWN_LOCK: Refusal =
        refusal(403, "own_lock", "an admin cannot lock or unlock themselves");
    /// An action that needs a running session.
    pub const NOT_RUNNING: Refusal = refusal(409, "not_running", "the session is not running");
    /// A profile name that is not configured.
    pub const UNKNOWN_PROFILE: Refusal = refusal(400, "unknown_profile", "no such profile");
    /// A session name that is too long or not printable.
    pub const INVALID_NAME: Refusal = refusal(
        400,
        "invalid_name",
        "name must be at most 64 printable characters",
    );
    /// Not the caller's workspace, or no such workspace: the same answer.
    pub const WORKSPACE_NOT_FOUND: Refusal =
        refusal(404, "workspace_not_found", "no such workspace");
    /// A workspace a session uses, or one being copied from, cannot be deleted or
    /// copied now.
    pub const WORKSPACE_IN_USE: Refusal =
        refusal(409, "workspace_in_use", "the workspace is in use");
    /// A workspace choice or name the profile or the request cannot take.
    pub const INVALID_WORKSPACE: Refusal =
        refusal(400, "invalid_workspace", "invalid workspace choice");
    /// A profile option that does not exist or has a value it does not offer.
    pub const INVALID_OPTION: Refusal = refusal(400, "invalid_option", "invalid profile option");
    /// A terminal size out of range.
    pub const INVALID_SIZE: Refusal =
        refusal(400, "invalid_size", "cols must be 2-1000 and rows 1-1000");
    /// A user name that is not a valid `sub`.
    pub const INVALID_SUB: Refusal = refusal(400, "invalid_sub", "not a valid user name");
    /// The session's profile has `shares = "off"`.
    pub const SHARES_OFF: Refusal = refusal(
        403,
        "shares_off",
        "this session's profile does not allow share links",
    );
    /// The session's profile has `peers = false`.
    pub const PEERS_OFF: Refusal = refusal(
        403,
        "peers_off",
        "this session's profile does not allow peers",
    );
    /// A peer invitation's `sub` (the owner, or not a user name) or `ttl_seconds` out
    /// of range.
    pub const INVALID_PEER: Refusal = refusal(
        400,
        "invalid_peer",
        "sub must be another user's name and ttl_seconds 60-86400",
    );
    /// The session's profile has `recording_links = "off"`.
    pub const RECORDING_LINKS_OFF: Refusal = refusal(
        403,
        "recording_links_off",
        "this session's profile does not allow links to its recordings",
    );
    /// A recording link's `ttl_seconds` or `mode` out of range.
    pub const INVALID_RECORDING_LINK: Refusal = refusal(
        400,
        "invalid_recording_link",
        "ttl_seconds must be 60-2592000 and mode \"anyone\" or \"signed-in\"",
    );
    /// A share link's `ttl_seconds` or `max_viewers` out of range.
    pub const INVALID_SHARE: Refusal = refusal(
        400,
        "invalid_share",
        "ttl_seconds must be 1-604800 and max_viewers 1-1000",
    );
    /// A share link already has its `max_viewers` watching.
    pub const TOO_MANY_VIEWERS: Refusal = refusal(
        429,
        "too_many_viewers",
        "this share link has as many viewers as it allows",
    );
    /// No read-only ttyd pool serves the session's host.
    pub const NO_VIEWER_POOL: Refusal = refusal(
        409,
        "no_viewer_pool",
        "the session's host has no read-only terminal pool (viewer_pool)",
    );

    // Sign-in through the identity provider (`policy::oidc`): each refusal of the
    // callback has its own code, shown on the page the browser lands on.
    /// No flow cookie, or a tampered one.
    pub const OIDC_FLOW_MISSING: Refusal = refusal(
        400,
        "oidc_flow_missing",
        "this browser has no sign-in in progress; start again",
    );
    /// The flow cookie expired.
    pub const OIDC_FLOW_EXPIRED: Refusal = refusal(
        400,
        "oidc_flow_expired",
        "the sign-in took too long; start again",
    );
    /// The callback's `state` is not this browser's.
    pub const OIDC_STATE_MISMATCH: Refusal = refusal(
        400,
        "oidc_state_mismatch",
        "the sign-in answer does not belong to this browser",
    );
    /// The callback was already used.
    pub const OIDC_REPLAYED: Refusal =
        refusal(400, "oidc_replayed", "this sign-in answer was already used");
    /// The provider answered with an error.
    pub const OIDC_PROVIDER_REFUSED: Refusal = refusal(
        403,
        "oidc_provider_refused",
        "the identity provider refused the sign-in",
    );
    /// The callback lacks what it must carry.
    pub const OIDC_BAD_CALLBACK: Refusal =
        refusal(400, "oidc_bad_callback", "the sign-in answer is malformed");
    /// The answer names another issuer (mix-up).
    pub const OIDC_WRONG_ISSUER: Refusal = refusal(
        400,
        "oidc_wrong_issuer",
        "the sign-in answer comes from another identity provider",
    );
    /// The provider did not exchange the code.
    pub const OIDC_CODE_REJECTED: Refusal = refusal(
        400,
        "oidc_code_rejected",
        "the identity provider did not accept the sign-in code",
    );
    /// The ID token does not verify.
    pub const OIDC_INVALID_ID_TOKEN: Refusal =
        refusal(400, "oidc_invalid_id_token", "the ID token is not valid");
    /// The ID token was issued to another client.
    pub const OIDC_WRONG_AUDIENCE: Refusal = refusal(
        400,
        "oidc_wrong_audience",
        "the ID token was issued to another application",
    );
    /// The ID token's nonce is not this browser's.
    pub const OIDC_NONCE_MISMATCH: Refusal = refusal(
        400,
        "oidc_nonce_mismatch",
        "the ID token does not belong to this sign-in",
    );
    /// The ID token is expired.
    pub const OIDC_ID_TOKEN_EXPIRED: Refusal =
        refusal(400, "oidc_id_token_expired", "the ID token is expired");
    /// The configured user-name claim is missing or not a valid user name.
    pub const OIDC_BAD_SUBJECT: Refusal = refusal(
        403,
        "oidc_bad_subject",
        "the identity provider did not name a valid user",
    );
    /// The user name would be an e-mail address the provider has not verified.
    pub const OIDC_EMAIL_UNVERIFIED: Refusal = refusal(
        403,
        "oidc_email_unverified",
        "the identity provider has not verified this account's e-mail address",
    );
    /// The account's domain or groups are not allowed.
    pub const OIDC_NOT_ALLOWED: Refusal =
        refusal(403, "oidc_not_allowed", "this account may not sign in here");
    /// The provider cannot be reached.
    pub const OIDC_PROVIDER_UNAVAILABLE: Refusal = refusal(
        502,
        "oidc_provider_unavailable",
        "the identity provider is not answering; try again shortly",
    );

    // The command-line client signed in through the browser (`policy::cli_login`): the
    // client prints each refusal's message, so each says what to do.
    /// The page posted something that is not an S256 challenge.
    pub const CLI_CHALLENGE_INVALID: Refusal = refusal(
        400,
        "cli_challenge_invalid",
        "this sign-in page was not opened by termgate login; run it again",
    );
    /// A code this deployment did not seal, or an altered one.
    pub const CLI_CODE_INVALID: Refusal = refusal(
        400,
        "cli_code_invalid",
        "this sign-in code is not valid; run termgate login again",
    );
    /// A code past its minute, or past the browser sign-in it came from.
    pub const CLI_CODE_EXPIRED: Refusal = refusal(
        400,
        "cli_code_expired",
        "this sign-in code expired; run termgate login again",
    );
    /// A code presented with another verifier than its challenge's.
    pub const CLI_VERIFIER_MISMATCH: Refusal = refusal(
        400,
        "cli_verifier_mismatch",
        "this sign-in code was made for another termgate login",
    );
    /// A code whose sign-in was made already.
    pub const CLI_CODE_USED: Refusal = refusal(
        400,
        "cli_code_used",
        "this sign-in code was used already; run termgate login again",
    );
    /// A gateway without a signing key mints no sign-ins.
    pub const CLI_LOGIN_UNAVAILABLE: Refusal = refusal(
        404,
        "cli_login_unavailable",
        "this gateway cannot sign termgate in through the browser (no auth.signing_key_file); use termgate login URL --token",
    );

    /// The same refusal with a more specific message.
    pub fn with_message(self, message: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal {
            message: message.into(),
            ..self
        }
    }

    /// The JSON body: `{"error":{"code":…,"message":…}}`.
    pub fn body(&self) -> Vec<u8> {
        ErrorBody::new(self.code, self.message.as_ref()).to_json()
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for Refusal {}

impl From<&TokenError> for Refusal {
    /// A token that does not verify; the message names the reason, never the token.
    fn from(e: &TokenError) -> Self {
        Refusal::UNAUTHENTICATED.with_message(format!("token refused: {}", e.reason()))
    }
}

impl From<QuotaExceeded> for Refusal {
    fn from(q: QuotaExceeded) -> Self {
        Refusal::QUOTA_EXCEEDED.with_message(q.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::origin::OriginDenied;

    #[test]
    fn a_refusal_renders_the_contract_shape() {
        let v: serde_json::Value = serde_json::from_slice(&Refusal::NOT_FOUND.body()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": {"code": "session_not_found", "message": "no such session"}})
        );
    }

    #[test]
    fn a_specific_message_keeps_status_and_code() {
        let r =
            Refusal::TOO_MANY_TERMINALS.with_message("this session has too many open terminals");
        assert_eq!((r.status, r.code), (429, "too_many_terminals"));
        assert_eq!(r.message, "this session has too many open terminals");
    }

    #[test]
    fn origin_refusals_keep_their_codes_and_messages() {
        for (d, code) in [
            (OriginDenied::Missing, "origin_missing"),
            (OriginDenied::Null, "origin_null"),
            (OriginDenied::Malformed, "origin_malformed"),
            (OriginDenied::NotAllowed, "origin_not_allowed"),
        ] {
            let r = Refusal::from(d);
            assert_eq!(
                (r.status, r.code, r.message.as_ref()),
                (403, code, d.to_string().as_str())
            );
            assert_eq!(d.reason(), code);
        }
    }

    #[test]
    fn a_refused_token_names_its_reason() {
        let r = Refusal::from(&TokenError::Expired);
        assert_eq!((r.status, r.code), (401, "unauthenticated"));
        assert_eq!(r.message, "token refused: expired");
    }
}
