//! termgate's gateway: the single ingress. It authenticates every request, and on the
//! websocket upgrade checks Origin and ownership before ttyd sees a byte; it keeps a
//! route cache fed by control, keeps serving known sessions when control is down, and
//! closes live terminals whose access ended.

pub mod activity;
pub mod audit;
pub mod certificate;
pub mod clock;
pub mod control_client;
pub mod head_deadline;
pub mod metrics;
pub mod module;
pub mod oidc;
pub mod proxy;
pub mod recording;
pub mod routes;
pub mod services;
pub mod state;
pub mod target_credentials;
pub mod terminals;
pub mod ui;
pub mod verified;
pub mod ws;
