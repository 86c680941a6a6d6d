//! The body of every answer dockgate gives, and the empty one.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};

/// The body of every answer dockgate gives.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}
