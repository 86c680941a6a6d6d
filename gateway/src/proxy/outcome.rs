//! What a route's handler answers with: [`Allowed`], with what the request does next
//! ([`Next`]), or [`Denied`] around the [`Refusal`] to answer.

use policy::{Principal, Refusal};

use super::reply::{Json, Redirect};
use super::upstream::Upstream;
use crate::terminals::Ticket;

/// An allowed request: why it was allowed (for the logs), what happens next, and what
/// admission learnt of it; `request_filter` alone keeps these in `Ctx`.
pub(super) struct Allowed {
    pub(super) reason: &'static str,
    pub(super) next: Next,
    /// The verified caller.
    pub(super) principal: Option<Principal>,
    /// The verified token, passed on to control as a bearer header.
    pub(super) token: Option<String>,
    /// A terminal websocket's slot among the open terminals.
    pub(super) ticket: Option<Ticket>,
    /// The share link a viewer came through (its id, never its token).
    pub(super) share: Option<String>,
}

impl Allowed {
    /// Allowed for `reason`, with nothing learnt of the caller.
    pub(super) fn new(reason: &'static str, next: Next) -> Self {
        Allowed {
            reason,
            next,
            principal: None,
            token: None,
            ticket: None,
            share: None,
        }
    }
}

/// A refused request: the refusal to answer, and what the access and audit lines keep
/// of it.
pub(super) struct Denied {
    pub(super) refusal: Refusal,
    /// A finer reason than the refusal's code (why a token was refused); empty: none.
    pub(super) reason: &'static str,
    /// The caller, when verified before the refusal.
    pub(super) principal: Option<Principal>,
    /// The share link a viewer came through, when known before the refusal.
    pub(super) share: Option<String>,
}

impl Denied {
    /// `refusal`, of a caller verified before it.
    pub(super) fn of(refusal: Refusal, principal: Option<Principal>) -> Self {
        Denied {
            principal,
            ..Denied::from(refusal)
        }
    }
}

impl From<Refusal> for Denied {
    fn from(refusal: Refusal) -> Self {
        Denied {
            refusal,
            reason: "",
            principal: None,
            share: None,
        }
    }
}

/// What an allowed request does next.
pub(super) enum Next {
    /// Goes on to an upstream.
    Proxy(Upstream),
    /// Is answered here with JSON.
    Reply(Json),
    /// Is answered with an embedded asset of the sessions page.
    Asset(String),
    /// Is answered with the admin console's page.
    AdminPage,
    /// Is answered with a redirect (sign-in through the identity provider).
    Redirect(Redirect),
    /// Is answered with a share link's viewer page.
    ViewerPage,
    /// Is answered with a recording link's player page.
    RecordingPage,
    /// Is answered with the page that asks to sign out (a form that posts).
    SignOutPage,
    /// Is answered with the page that asks to sign the command-line client in.
    CliLoginPage,
}
