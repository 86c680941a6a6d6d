//! The sizes and Docker API versions dockgate accepts.

/// The oldest Docker API minor version accepted in a `/v1.NN` prefix (Docker 1.12).
pub const MIN_API_MINOR: u8 = 24;
/// The newest Docker API minor version accepted in a `/v1.NN` prefix (Docker 29.x).
pub const MAX_API_MINOR: u8 = 52;
/// The longest request target accepted, in bytes.
pub const MAX_TARGET_LEN: usize = 16 * 1024;
/// The largest create body accepted, in bytes.
pub const MAX_BODY: usize = 256 * 1024;
