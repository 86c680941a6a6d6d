//! Why dockgate refuses a request: the [`Reason`] codes and the [`Denied`] answered.

use std::fmt;

use crate::error::ErrorBody;
use crate::sandbox::Rule;

/// Why a request was refused: a stable snake_case code each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A method Docker's API does not route (or not in its exact spelling).
    MethodNotAllowed,
    /// A target that is not one unambiguous origin-form path.
    BadTarget,
    /// A `/v…` prefix outside 1.24–1.52.
    UnsupportedVersion,
    /// A query that cannot be read one way only.
    BadQuery,
    /// An endpoint the role may not call.
    EndpointNotAllowed,
    /// A container or volume reference of the wrong form for the role.
    BadReference,
    /// A query parameter the endpoint does not take from this role, or a bad value.
    QueryNotAllowed,
    /// A list or event call without the instance label filter.
    FilterRequired,
    /// A body on a call that takes none.
    BodyNotAllowed,
    /// A create without a body, or with `Content-Length: 0`.
    BodyRequired,
    /// A create body sent chunked.
    BodyChunked,
    /// A body over [`MAX_BODY`](super::limits::MAX_BODY).
    BodyTooLarge,
    /// A body whose length is not the declared one.
    BodyLengthMismatch,
    /// A body that is not one JSON value without duplicate keys.
    InvalidJson,
    /// A body field of the wrong JSON type.
    InvalidBody,
    /// A body field termgate never sends with a value other than its default.
    FieldNotAllowed,
    /// A mount with options, of a type other than bind or volume, or legacy `Binds`.
    MountOptions,
    /// A tmpfs without `nosuid`, `nodev` and a size, or with other options.
    TmpfsOptions,
    /// A volume with another driver or with driver options.
    VolumeDriver,
    /// A create without termgate's labels.
    LabelsRequired,
    /// A create that is not exactly what this deployment's configuration declares
    /// (see [`crate::declared`]), or a bind source that resolves where no mount may.
    NotDeclared,
    /// A container red line ([`sandbox::Rule`](Rule)).
    Sandbox(Rule),
}

impl Reason {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            Reason::MethodNotAllowed => "method_not_allowed",
            Reason::BadTarget => "bad_target",
            Reason::UnsupportedVersion => "unsupported_version",
            Reason::BadQuery => "bad_query",
            Reason::EndpointNotAllowed => "endpoint_not_allowed",
            Reason::BadReference => "bad_reference",
            Reason::QueryNotAllowed => "query_not_allowed",
            Reason::FilterRequired => "filter_required",
            Reason::BodyNotAllowed => "body_not_allowed",
            Reason::BodyRequired => "body_required",
            Reason::BodyChunked => "body_chunked",
            Reason::BodyTooLarge => "body_too_large",
            Reason::BodyLengthMismatch => "body_length_mismatch",
            Reason::InvalidJson => "invalid_json",
            Reason::InvalidBody => "invalid_body",
            Reason::FieldNotAllowed => "field_not_allowed",
            Reason::MountOptions => "mount_options",
            Reason::TmpfsOptions => "tmpfs_options",
            Reason::VolumeDriver => "volume_driver",
            Reason::LabelsRequired => "labels_required",
            Reason::NotDeclared => "not_declared",
            Reason::Sandbox(rule) => rule.name(),
        }
    }
}

/// A refusal: the rule and what broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The rule.
    pub reason: Reason,
    /// What broke it, for people.
    pub message: String,
}

impl Denied {
    /// Every refusal is answered with this status.
    pub const STATUS: u16 = 403;

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.reason.code()
    }

    /// `{"error":{"code":…,"message":…}}`.
    pub fn error_body(&self) -> ErrorBody {
        ErrorBody::new(self.code(), format!("dockgate: {}", self.message))
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message)
    }
}

pub(super) fn deny(reason: Reason, message: impl Into<String>) -> Denied {
    Denied {
        reason,
        message: message.into(),
    }
}
