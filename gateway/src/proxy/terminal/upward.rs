//! What is checked of the bytes a browser sends up its terminal, on every path.

use std::borrow::Cow;

use crate::proxy::ctx::Ctx;
use crate::ws::frames;

/// The checks of bytes going up: each frame's size (`max`), and a `ttyd -c` target's
/// first message (held until whole, then sent with its token). `None`: nothing to send
/// yet. An error says why the terminal is closed.
pub(crate) fn upward<'a>(
    ctx: &mut Ctx,
    bytes: &'a [u8],
    max: u64,
) -> Result<Option<Cow<'a, [u8]>>, String> {
    let Some(terminal) = ctx.terminal.admitted_mut() else {
        return Ok(Some(Cow::Borrowed(bytes)));
    };
    if let Err(frames::TooLarge(len)) = terminal.frames.feed(bytes, max) {
        ctx.reason = "ws_frame_too_large";
        return Err(format!(
            "a websocket frame of {len} bytes is over gateway.max_ws_frame_bytes"
        ));
    }
    let Some(pending) = terminal.first_message.as_mut() else {
        return Ok(Some(Cow::Borrowed(bytes)));
    };
    match pending.take(bytes)? {
        None => Ok(None),
        Some(out) => {
            terminal.first_message = None;
            Ok(Some(Cow::Owned(out)))
        }
    }
}
