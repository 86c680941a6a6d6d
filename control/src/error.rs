//! API errors: status, stable code, message — rendered as DESIGN's JSON shape.

use crate::docker::DockerError;
use crate::store::StoreError;

/// An error answered to an API caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Stable snake_case code.
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl ApiError {
    /// Builds an error.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(400, code, message)
    }

    /// The one "no such session" answer, for unknown and not-yours alike.
    pub fn not_found() -> Self {
        let d = policy::Denial::NOT_FOUND;
        Self::new(d.status, d.code, d.message)
    }

    /// From a policy denial.
    pub fn denied(d: policy::Denial) -> Self {
        Self::new(d.status, d.code, d.message)
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        policy::ErrorBody::new(self.code, self.message.clone()).to_json()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Quota(q) => ApiError::new(429, policy::QuotaExceeded::CODE, q.to_string()),
            StoreError::NotFound => ApiError::not_found(),
            StoreError::Conflict(m) => ApiError::new(409, "conflict", m),
            e @ StoreError::StateChanged(_) => ApiError::new(409, "conflict", e.to_string()),
            other => {
                tracing::error!(error = %other, "store error");
                ApiError::new(
                    500,
                    "store_error",
                    "the session store failed; see control's log",
                )
            }
        }
    }
}

impl From<DockerError> for ApiError {
    fn from(e: DockerError) -> Self {
        match e {
            DockerError::Unavailable(m) => ApiError::new(
                503,
                "docker_unavailable",
                format!("Docker is not answering: {m}"),
            ),
            DockerError::Refused(v) => {
                let rules: Vec<String> = v.iter().map(|v| v.to_string()).collect();
                ApiError::new(
                    500,
                    "sandbox_refused",
                    format!("container spec breaks red lines: {}", rules.join("; ")),
                )
            }
            DockerError::NotFound => {
                ApiError::new(502, "docker_error", "Docker reported a missing object")
            }
            DockerError::Conflict(m) => ApiError::new(502, "docker_error", m),
            DockerError::Other { op, message } => ApiError::new(
                502,
                "docker_error",
                format!("Docker {op} failed: {message}"),
            ),
        }
    }
}
