//! How a request's body came, and whether the call may or must have one.

use super::denied::{deny, Denied, Reason};
use super::limits::MAX_BODY;
use super::target::Asked;

/// How a request's body came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Neither `Content-Length` nor `Transfer-Encoding`.
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A request's body as far as the binary knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyInfo<'a> {
    /// How it came.
    pub framing: Framing,
    /// Its bytes, once read (after a `Verdict::ReadBody`).
    pub bytes: Option<&'a [u8]>,
}

impl<'a> BodyInfo<'a> {
    /// No body declared.
    pub fn none() -> BodyInfo<'a> {
        BodyInfo {
            framing: Framing::None,
            bytes: None,
        }
    }

    /// `Content-Length: n`, not read yet.
    pub fn length(n: u64) -> BodyInfo<'a> {
        BodyInfo {
            framing: Framing::Length(n),
            bytes: None,
        }
    }

    /// `Transfer-Encoding: chunked`, not read.
    pub fn chunked() -> BodyInfo<'a> {
        BodyInfo {
            framing: Framing::Chunked,
            bytes: None,
        }
    }

    /// The same framing with the bytes read.
    pub fn with_bytes(self, bytes: &'a [u8]) -> BodyInfo<'a> {
        BodyInfo {
            bytes: Some(bytes),
            ..self
        }
    }
}

pub(super) fn no_body(body: &BodyInfo<'_>, asked: &Asked) -> Result<(), Denied> {
    let declared = match body.framing {
        Framing::None | Framing::Length(0) => false,
        Framing::Length(_) | Framing::Chunked => true,
    };
    if declared || body.bytes.is_some_and(|b| !b.is_empty()) {
        return Err(deny(
            Reason::BodyNotAllowed,
            format!("{} {} takes no body", asked.method, asked.path()),
        ));
    }
    Ok(())
}

pub(super) enum Body<'a> {
    Read(&'a [u8]),
    Pending(usize),
}

pub(super) fn json_body<'a>(body: &BodyInfo<'a>) -> Result<Body<'a>, Denied> {
    let declared = match body.framing {
        Framing::None | Framing::Length(0) => {
            return Err(deny(
                Reason::BodyRequired,
                "a create needs a JSON body with a Content-Length",
            ))
        }
        Framing::Chunked => {
            return Err(deny(
                Reason::BodyChunked,
                "a create body must come with a Content-Length, not chunked",
            ))
        }
        Framing::Length(n) => n,
    };
    let declared = usize::try_from(declared)
        .ok()
        .filter(|n| *n <= MAX_BODY)
        .ok_or_else(|| {
            deny(
                Reason::BodyTooLarge,
                format!("a create body may be at most {MAX_BODY} bytes, {declared} declared"),
            )
        })?;
    match body.bytes {
        None => Ok(Body::Pending(declared)),
        Some(b) if b.len() == declared => Ok(Body::Read(b)),
        Some(b) => Err(deny(
            Reason::BodyLengthMismatch,
            format!("{} body bytes, {declared} declared", b.len()),
        )),
    }
}
