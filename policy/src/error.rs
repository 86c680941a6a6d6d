//! The one JSON error shape of the external contract:
//! `{"error":{"code":"<snake_case>","message":"<human text>"}}`.

use serde::{Deserialize, Serialize};

/// An API error as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error itself.
    pub error: ErrorDetail,
}

/// Code and message of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable snake_case code, for programs.
    pub code: String,
    /// Human-readable explanation, for people.
    pub message: String,
}

impl ErrorBody {
    /// Builds an error body from a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }
    }

    /// Serialises the body to JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising two strings into JSON cannot fail.
        serde_json::to_vec(self).unwrap_or_else(|_| {
            b"{\"error\":{\"code\":\"internal\",\"message\":\"internal error\"}}".to_vec()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_has_the_contract_shape() {
        let body = ErrorBody::new("session_not_found", "no such session").to_json();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "session_not_found");
        assert_eq!(v["error"]["message"], "no such session");
        assert_eq!(v.as_object().unwrap().len(), 1);
    }
}
