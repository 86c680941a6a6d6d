//! Why a command stopped, and the exit status that tells a script so (`termgate --help`
//! lists them; docs/using.md too).

use std::fmt;

/// The exit statuses. A script tells "sign in again" from "no such session" from "the
/// session was ended" without reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done; detached; or the session's program exited.
    Done,
    /// A bad argument, an unreachable gateway, a refused request.
    Error,
    /// Not signed in, or the sign-in expired, was signed out or was revoked.
    SignIn,
    /// No such session, or not one of yours (the gateway does not tell them apart).
    NotFound,
    /// The terminal closed because its session was ended.
    Ended,
    /// The terminal closed because the account was locked or access was removed.
    AccessRemoved,
    /// The gateway closed the terminal for another reason, which is printed.
    ClosedOther,
    /// The connection to the gateway broke without a word from it.
    ConnectionLost,
    /// A signal (SIGHUP, SIGINT, SIGTERM) ended the attach, after the terminal was
    /// given back; the session keeps running.
    Signalled(u8),
}

impl Status {
    /// The process's exit code.
    pub fn code(self) -> i32 {
        match self {
            Status::Done => 0,
            Status::Error => 1,
            // 2 is clap's, for a command line it cannot read.
            Status::SignIn => 3,
            Status::NotFound => 4,
            Status::Ended => 5,
            Status::AccessRemoved => 6,
            Status::ClosedOther => 7,
            Status::ConnectionLost => 8,
            // The shell's convention for a process a signal ended.
            Status::Signalled(n) => 128 + i32::from(n),
        }
    }
}

/// The exit statuses as `termgate --help` prints them.
pub const STATUSES: &str = "\
Exit status:
  0  done; detached (the session keeps running); or the session's program exited
  1  an error: a bad argument, an unreachable gateway, a refused request
  2  the command line could not be read
  3  not signed in, or the sign-in expired, was signed out or revoked: sign in again
  4  no such session (another user's session is not found either)
  5  attach: the session was ended
  6  attach: your account was locked, or your access to the session was removed
  7  attach: the gateway closed the terminal for another reason (printed)
  8  attach: the connection to the gateway was lost
  129, 130, 143  attach: hung up, interrupted or terminated (SIGHUP, SIGINT, SIGTERM);
     the terminal is restored first and the session keeps running";

/// A command that could not do its job: one line for the user, and the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The exit status.
    pub status: Status,
    /// What went wrong, in one line.
    pub message: String,
}

impl Failure {
    /// A failure of the general kind (status 1).
    pub fn error(message: impl Into<String>) -> Failure {
        Failure {
            status: Status::Error,
            message: message.into(),
        }
    }

    /// The credential for `gateway` is missing or no longer accepted.
    pub fn sign_in(gateway: &str, why: &str) -> Failure {
        Failure {
            status: Status::SignIn,
            message: format!("{why}: sign in again with termgate login {gateway}"),
        }
    }

    /// `session` names nothing the caller may use.
    pub fn not_found(session: &str) -> Failure {
        Failure {
            status: Status::NotFound,
            message: format!("no session {session:?}"),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
