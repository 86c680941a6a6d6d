//! What a store operation returns: [`Result`], [`StoreError`] and the [`Corruption`]
//! of a stored record.

use policy::QuotaExceeded;
use sled::transaction::TransactionError;

use crate::model::SessionState;

/// Result of every store operation.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Creating one more session would exceed a quota.
    #[error("{0}")]
    Quota(QuotaExceeded),
    /// No active session has that id.
    #[error("no such active session")]
    NotFound,
    /// No Docker host may take the new session (none answers, none the profile
    /// allows has room).
    #[error("no Docker host can take the session: {0}")]
    NoHost(String),
    /// The write contradicts what is stored (an id that exists, a transition not allowed).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The record has moved on from the state the caller decided on (it is now in the
    /// given state); nothing was written.
    #[error("the session is now {}, no longer in the state the change was decided on", .0.as_str())]
    StateChanged(SessionState),
    /// A stored record cannot be read back; the store needs repair.
    #[error("corrupt store record: {0}")]
    Corrupt(#[source] Corruption),
    /// The store's disk cannot be written (full, read-only, failing): writes are
    /// refused until it can; reads keep working. The cause names what the system said.
    #[error("the store cannot write: {0}")]
    Unavailable(#[source] std::io::Error),
    /// The database itself failed in another way.
    #[error("store database error: {0}")]
    Db(#[source] sled::Error),
    /// A record could not be written as JSON.
    #[error("store database error: encode: {0}")]
    Encode(#[source] serde_json::Error),
    /// The system gave no randomness for this opening's feed epoch.
    #[error("store database error: no randomness for the feed epoch: {0}")]
    Randomness(#[source] getrandom::Error),
}

/// What is wrong with a stored record.
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    /// Bytes of the wrong size or shape, or a record that contradicts its key.
    #[error("{0}")]
    Malformed(String),
    /// A record whose JSON does not decode.
    #[error("{what}: {source}")]
    Undecodable {
        /// Which record.
        what: String,
        /// What the decoder said.
        #[source]
        source: serde_json::Error,
    },
    /// sled's own checksums failed.
    #[error("{0}")]
    Db(#[source] sled::Error),
}

impl StoreError {
    /// A record of the wrong shape, described by `what`.
    pub(super) fn corrupt(what: impl Into<String>) -> StoreError {
        StoreError::Corrupt(Corruption::Malformed(what.into()))
    }

    /// A record, described by `what`, whose JSON does not decode.
    pub(super) fn undecodable(what: impl Into<String>, source: serde_json::Error) -> StoreError {
        StoreError::Corrupt(Corruption::Undecodable {
            what: what.into(),
            source,
        })
    }
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        match e {
            // sled's own checksum failures are corruption too, and need the same repair.
            e @ sled::Error::Corruption { .. } => StoreError::Corrupt(Corruption::Db(e)),
            sled::Error::Io(e) => StoreError::Unavailable(e),
            other => StoreError::Db(other),
        }
    }
}

impl From<TransactionError<StoreError>> for StoreError {
    fn from(e: TransactionError<StoreError>) -> Self {
        match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(e) => e.into(),
        }
    }
}
