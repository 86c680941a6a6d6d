//! The gateway's background services and its admin listener. Each runs beside the
//! proxy for the process's life; the feed and the admin listener hold the gateway's
//! shared state, the reporter and the uploader only the handles they use:
//!
//! - [`feed`]: the route feed from control, and the sweep of expired tokens and shares;
//! - [`reporter`]: input times, audit lines and open terminals reported to control;
//! - [`uploader`]: finished recordings handed to control;
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz`.

pub mod admin;
pub mod feed;
pub mod reporter;
pub mod uploader;
