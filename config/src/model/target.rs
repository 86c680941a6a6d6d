//! `[[targets]]`: the existing ttyds termgate fronts, and their credentials.

use std::path::PathBuf;

use serde::Deserialize;

/// One `[[targets]]` entry: a ttyd that already runs, opened by the users and roles
/// listed (design §7). Control's `POST /v1/targets` takes the same fields as JSON.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// Unique name, `[a-z0-9-]`; the target's id is derived from it.
    pub name: String,
    /// `http://host:port[/base-path]` or `unix:/path` of the ttyd.
    pub upstream: String,
    /// `sub`s allowed to open it.
    #[serde(default)]
    pub users: Vec<String>,
    /// Token roles allowed to open it.
    #[serde(default)]
    pub roles: Vec<String>,
    /// What the ttyd expects: `{ basic_file = "…" }` (ttyd `-c`, a file holding
    /// `user:pass`) or `{ header = "X-Remote-User" }` (ttyd `-H`, set to the `sub`).
    #[serde(default)]
    pub credential: Option<TargetCredentialConfig>,
}

/// A target's credential: exactly one of the two keys.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetCredentialConfig {
    /// File holding `user:pass` (relative paths against the config file).
    #[serde(default)]
    pub basic_file: Option<PathBuf>,
    /// Header the gateway sets to the user's `sub`.
    #[serde(default)]
    pub header: Option<String>,
}
