//! Default values of the configuration keys, named by the sections' `#[serde(default)]`
//! attributes.

use std::path::PathBuf;

/// `profiles.<name>.stop_grace_seconds` when a profile leaves it out; also the grace of
/// a session whose profile this configuration no longer has.
pub const DEFAULT_STOP_GRACE_SECONDS: u64 = 2;

pub fn instance() -> String {
    "termgate".into()
}
pub fn leeway() -> u64 {
    30
}
pub fn admin_role() -> String {
    "admin".into()
}
pub fn cookie_name() -> String {
    "termgate_session".into()
}
pub fn token_ttl() -> u64 {
    3600
}
pub fn oidc_auth_method() -> String {
    "client_secret_basic".into()
}
pub fn oidc_scopes() -> Vec<String> {
    ["openid", "email", "profile"].map(String::from).to_vec()
}
pub fn oidc_sub_claim() -> String {
    "sub".into()
}
pub fn oidc_groups_claim() -> String {
    "groups".into()
}
pub fn oidc_session_max() -> u64 {
    28800
}
pub fn oidc_timeout_ms() -> u64 {
    5000
}
pub fn gateway_listen() -> String {
    "127.0.0.1:8080".into()
}
pub fn gateway_admin_listen() -> String {
    "127.0.0.1:9080".into()
}
pub fn control_url() -> String {
    "http://127.0.0.1:7070".into()
}
pub fn control_timeout_ms() -> u64 {
    2000
}
pub fn terminals_per_user() -> u32 {
    8
}
pub fn terminals_per_session() -> u32 {
    4
}
pub fn yes() -> bool {
    true
}
pub fn drain_seconds() -> u64 {
    10
}
pub fn header_bytes() -> usize {
    16 * 1024
}
pub fn body_bytes() -> usize {
    64 * 1024
}
pub fn header_timeout_ms() -> u64 {
    10_000
}
pub fn ws_frame_bytes() -> u64 {
    1 << 20
}
pub fn auth_failures() -> u32 {
    30
}
pub fn negative_cache_ms() -> u64 {
    2000
}
pub fn lookup_misses() -> u32 {
    120
}
pub fn activity_report_ms() -> u64 {
    5000
}
pub fn terminal_report_ms() -> u64 {
    250
}
pub fn upgrade_socket() -> PathBuf {
    "gateway-upgrade.sock".into()
}
pub fn pid_file() -> PathBuf {
    "gateway.pid".into()
}
pub fn gateway_recordings_dir() -> PathBuf {
    "recordings-spool".into()
}
pub fn recordings_spool_max_bytes() -> u64 {
    1 << 30
}
pub fn recording_queue() -> usize {
    256
}
pub fn control_recordings_dir() -> PathBuf {
    "recordings".into()
}
pub fn recordings_prune_ms() -> u64 {
    60_000
}
pub fn max_recording_bytes() -> u64 {
    64 << 20
}
pub fn authz_sign_in_url() -> String {
    "/".into()
}
pub fn control_listen() -> String {
    "127.0.0.1:7070".into()
}
pub fn control_admin_listen() -> String {
    "127.0.0.1:9070".into()
}
pub fn docker_timeout() -> u64 {
    10
}
pub fn reconcile_interval() -> u64 {
    30
}
pub fn orphan_grace() -> u64 {
    60
}
pub fn max_token_lifetime() -> u64 {
    86_400
}
pub fn creating_grace() -> u64 {
    120
}
pub fn stop_grace() -> u64 {
    DEFAULT_STOP_GRACE_SECONDS
}
pub fn redraw_pause_ms() -> u64 {
    150
}
pub fn history_per_user() -> usize {
    200
}
pub fn ttyd_binary() -> PathBuf {
    "ttyd".into()
}
pub fn ttyd_viewer_socket() -> PathBuf {
    "ttyd/ttyd-view.sock".into()
}
pub fn shares() -> String {
    "signed-in".into()
}
pub fn recording_links() -> String {
    "signed-in".into()
}
pub fn ttyd_socket() -> PathBuf {
    "ttyd/ttyd.sock".into()
}
pub fn docker_cli() -> PathBuf {
    "docker".into()
}
pub fn store_path() -> PathBuf {
    "store".into()
}
pub fn change_log() -> usize {
    1024
}
pub fn per_user() -> u32 {
    3
}
pub fn global() -> u32 {
    50
}
pub fn user() -> String {
    "1000:1000".into()
}
pub fn network() -> String {
    "none".into()
}
pub fn memory_mb() -> u64 {
    512
}
pub fn pids_limit() -> i64 {
    256
}
pub fn cpus() -> f64 {
    1.0
}
pub fn tmp_mb() -> u64 {
    64
}
pub fn mount_kind() -> String {
    "bind".into()
}
