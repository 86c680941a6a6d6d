//! `Proxy`, the gateway's `ProxyHttp`, and what it is made of: the shared state, the
//! ttyd pool, control's endpoint and the hooks debug builds honour for tests.

use std::sync::Arc;
use std::time::Duration;

use super::upstream::TtydUpstream;
use crate::state::Gateway;

/// The gateway's `ProxyHttp`.
pub struct Proxy {
    /// Shared state.
    pub g: Arc<Gateway>,
    /// The ttyd pool.
    pub ttyd: TtydUpstream,
    /// Where control is, and the CA its certificate is checked against over TLS.
    pub control_addr: crate::certificate::ControlEndpoint,
    /// Hooks that only debug builds honour, for tests.
    pub hooks: TestHooks,
}

/// Test hooks, read from the environment by debug builds only (release builds always
/// have none).
#[derive(Debug, Default, Clone, Copy)]
pub struct TestHooks {
    /// `TERMGATE_TEST_BODY_FILTER_DELAY_MS`: an await in `request_body_filter` before a
    /// terminal's upgrade, which makes Pingora's end-of-body race (cloudflare/pingora#946)
    /// near-certain on its own upgrade path.
    pub body_filter_delay: Option<Duration>,
    /// `TERMGATE_TEST_PINGORA_TUNNEL=1`: terminals take Pingora's own upgrade path
    /// (which shows cloudflare/pingora#946) instead of the gateway's tunnel.
    pub pingora_tunnel: bool,
    /// `TERMGATE_TEST_RECORD_ALL=1`: every terminal websocket is recorded (output), a
    /// target's too, so benchmarks compare the same ttyd recorded and not.
    pub record_all: bool,
}

impl TestHooks {
    /// The hooks set in the environment of a debug build; none in a release build.
    pub fn from_env() -> Self {
        if !cfg!(debug_assertions) {
            return TestHooks::default();
        }
        TestHooks {
            body_filter_delay: std::env::var("TERMGATE_TEST_BODY_FILTER_DELAY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis),
            pingora_tunnel: std::env::var("TERMGATE_TEST_PINGORA_TUNNEL").is_ok_and(|v| v == "1"),
            record_all: std::env::var("TERMGATE_TEST_RECORD_ALL").is_ok_and(|v| v == "1"),
        }
    }
}
