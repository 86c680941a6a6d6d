//! termgate's pure decisions.
//!
//! Everything here is a function of its arguments: no I/O, no clock, no async runtime.
//! The gateway and the control service both decide through this crate, so a rule is
//! written once and tested once. Callers pass the current time where a rule needs it.
//!
//! Architecture invariant: this crate never depends on Pingora, bollard, sled, hyper
//! or tokio (`cargo tree -p policy` proves it in CI).

pub mod access;
pub mod audit;
pub mod cli_login;
pub mod client_addr;
pub mod close;
pub mod declared;
pub mod dockgate;
pub mod error;
pub mod feed;
pub mod grant;
pub mod identity;
pub mod lifetime;
pub mod oidc;
pub mod origin;
pub mod path;
pub mod peer;
pub mod quota;
pub mod recording_link;
pub mod refusal;
pub mod reports;
pub mod retention;
pub mod revocation;
pub mod sandbox;
pub mod session_id;
pub mod share;
pub mod target;
pub mod terminal_access;
#[cfg(test)]
mod testing;

pub use access::{decide, decide_terminal, Action, Decision};
pub use client_addr::TrustedProxies;
pub use error::ErrorBody;
pub use identity::{
    KeyError, KeyMaterial, PemKey, Principal, Signer, Sub, TokenClaims, TokenError, Verifier,
    VerifierSettings,
};
pub use lifetime::{Deadline, EndCause, LifetimeLimits};
pub use origin::{CredentialSource, Origin, OriginDenied, OriginPolicy};
pub use path::{classify, CliLoginStep, OidcStep, PathError, PublicRoute, TerminalPart};
pub use quota::{QuotaExceeded, QuotaLimits, QuotaScope};
pub use refusal::Refusal;
pub use sandbox::{ContainerSpec, MountKind, MountSpec, Namespace, NamespaceMode, Rule, Violation};
pub use session_id::{SessionId, SessionIdError};
