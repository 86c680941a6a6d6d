//! What the gateway reads of a terminal's websocket bytes, below the proxy and the
//! recording that both use it: frame headers ([`frames`]) and the first message of a
//! `ttyd -c` target ([`first_message`]). Only this module knows the frame format.

pub mod first_message;
pub mod frames;
