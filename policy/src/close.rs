//! Why a live terminal closes: one stable name and one sentence per reason, for the
//! gateway's close frames, logs and metrics, and for control's judgement of a front
//! proxy's terminal (`grant::recheck`).

/// Why a live terminal was closed, or must close now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The session ended, or its container or owner changed.
    RouteRemoved,
    /// The user was locked.
    UserLocked,
    /// The credential expired (with `gateway.close_on_token_expiry`).
    TokenExpired,
    /// The browser that opened it signed out (here, on another gateway, or from
    /// another browser's "sign out everywhere").
    SignedOut,
    /// An admin revoked the credential that opened it.
    TokenRevoked,
    /// The user may no longer open it (a target whose list narrowed).
    AccessRemoved,
    /// The share link a viewer watched through was revoked or expired, or its owner
    /// was locked.
    ShareEnded,
    /// A peer's invitation to a session was revoked or expired, they left, or the
    /// session's owner was locked.
    PeerRemoved,
}

impl CloseReason {
    /// Stable name, for logs, metrics and the grant check's answer.
    pub fn as_str(&self) -> &'static str {
        match self {
            CloseReason::RouteRemoved => "route_removed",
            CloseReason::UserLocked => "user_locked",
            CloseReason::TokenExpired => "token_expired",
            CloseReason::SignedOut => "signed_out",
            CloseReason::TokenRevoked => "token_revoked",
            CloseReason::AccessRemoved => "access_removed",
            CloseReason::ShareEnded => "share_ended",
            CloseReason::PeerRemoved => "peer_removed",
        }
    }

    /// What the user is told, in words.
    pub fn sentence(&self) -> &'static str {
        self.message()
            .strip_prefix("termgate: ")
            .unwrap_or(self.message())
    }

    /// The gateway's close frame: the sentence, said by termgate.
    pub fn message(&self) -> &'static str {
        match self {
            CloseReason::RouteRemoved => "termgate: this session was ended",
            CloseReason::UserLocked => "termgate: your account was locked",
            CloseReason::TokenExpired => "termgate: your sign-in expired",
            CloseReason::SignedOut => "termgate: signed out",
            CloseReason::TokenRevoked => "termgate: your sign-in was revoked",
            CloseReason::AccessRemoved => "termgate: your access to this terminal was removed",
            CloseReason::ShareEnded => "termgate: this share link was revoked or expired",
            CloseReason::PeerRemoved => "termgate: your access to this session was removed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_a_name_a_sentence_and_a_frame_that_says_termgate() {
        for r in [
            CloseReason::RouteRemoved,
            CloseReason::UserLocked,
            CloseReason::TokenExpired,
            CloseReason::SignedOut,
            CloseReason::TokenRevoked,
            CloseReason::AccessRemoved,
            CloseReason::ShareEnded,
            CloseReason::PeerRemoved,
        ] {
            assert!(r.message().starts_with("termgate: "), "{r:?}");
            assert_eq!(format!("termgate: {}", r.sentence()), r.message());
            // A close frame's reason fits its 123 bytes.
            assert!(r.message().len() <= 123, "{r:?}");
        }
        assert_eq!(
            CloseReason::RouteRemoved.sentence(),
            "this session was ended"
        );
    }
}
