//! API errors: policy's [`Refusal`] values (status, stable code, message), rendered as
//! the JSON shape of design §2, and how store and Docker failures map onto them.

use policy::Refusal;

use crate::docker::DockerError;
use crate::store::StoreError;

/// An error answered to an API caller: one of [`Refusal`]'s constants, at most with a
/// more specific message, so control and the gateway spell each code once.
pub type ApiError = Refusal;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Quota(q) => Refusal::from(q),
            StoreError::NotFound => Refusal::NOT_FOUND,
            StoreError::NoHost(m) => Refusal::NO_HOST_AVAILABLE.with_message(m),
            StoreError::Conflict(m) => Refusal::CONFLICT.with_message(m),
            e @ StoreError::StateChanged(_) => Refusal::CONFLICT.with_message(e.to_string()),
            // Not a fault of the store's contents: the disk says no for now, and the
            // caller is told why so that an operator knows what to free or remount.
            StoreError::Unavailable(cause) => {
                tracing::warn!(error = %cause, "write refused: the store cannot write");
                Refusal::STORE_UNAVAILABLE.with_message(format!(
                    "the session store cannot write now ({cause}); reads still work, try again later"
                ))
            }
            other => {
                // The caller hears only that the store failed; the cause goes to the log.
                tracing::error!(error = %other, "store error");
                Refusal::STORE_ERROR
            }
        }
    }
}

impl From<DockerError> for ApiError {
    fn from(e: DockerError) -> Self {
        match e {
            DockerError::Unavailable(m) => {
                Refusal::DOCKER_UNAVAILABLE.with_message(format!("Docker is not answering: {m}"))
            }
            DockerError::Refused(v) => {
                let rules: Vec<String> = v.iter().map(|v| v.to_string()).collect();
                Refusal::SANDBOX_REFUSED.with_message(format!(
                    "container spec breaks red lines: {}",
                    rules.join("; ")
                ))
            }
            DockerError::NotFound => {
                Refusal::DOCKER_ERROR.with_message("Docker reported a missing object")
            }
            DockerError::Conflict(m) => Refusal::DOCKER_ERROR.with_message(m),
            DockerError::Other { op, message } => {
                Refusal::DOCKER_ERROR.with_message(format!("Docker {op} failed: {message}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_that_cannot_write_is_a_503_naming_the_cause_and_corruption_stays_a_500() {
        let io = sled::Error::Io(std::io::Error::from_raw_os_error(28));
        let refused = ApiError::from(StoreError::from(io));
        assert_eq!((refused.status, refused.code), (503, "store_unavailable"));
        assert!(
            refused.message.contains("No space left on device"),
            "{}",
            refused.message
        );
        let corrupt = sled::Error::Corruption { at: None, bt: () };
        let refused = ApiError::from(StoreError::from(corrupt));
        assert_eq!((refused.status, refused.code), (500, "store_error"));
    }
}
