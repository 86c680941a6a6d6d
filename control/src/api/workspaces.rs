//! `/v1/workspaces…`: a user's workspaces (list, create), one of them (get, rename,
//! delete) and its copies; `/v1/shared-workspaces…`: the shared ones (admins).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request};
use policy::{Principal, SessionId};
use serde::{Deserialize, Serialize};

use super::http::{empty, json, not_allowed, read_json, Reply};
use crate::error::ApiError;
use crate::model::{Session, Workspace, WorkspaceOrigin, WorkspaceState};
use crate::service::Control;

/// Body of `POST /v1/workspaces`, `PATCH /v1/workspaces/<id>` and
/// `POST /v1/workspaces/<id>/copy`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    name: String,
}

/// Body of `POST /v1/shared-workspaces`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewShared {
    name: String,
    /// An existing volume of `docker.shared_volumes`; left out: termgate makes one.
    #[serde(default)]
    volume: Option<String>,
    #[serde(default)]
    host: Option<String>,
}

/// One grant as the API says it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantBody {
    /// `user:<sub>` or `role:<role>`.
    to: String,
    /// `ro` or `rw`.
    access: String,
}

/// Body of `PATCH /v1/shared-workspaces/<id>`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SharedPatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    grants: Option<Vec<GrantBody>>,
}

/// A session that uses a workspace.
#[derive(Debug, Serialize)]
struct UsedBy<'a> {
    id: &'a SessionId,
    name: &'a str,
}

/// A workspace as the API shows it.
#[derive(Debug, Serialize)]
struct WorkspaceView<'a> {
    id: &'a SessionId,
    name: &'a str,
    /// `home` (the user's home volume, kept), `created` (termgate made it and may
    /// remove it), `shared` (termgate made it for sharing) or `borrowed` (an existing
    /// volume, shared, never removed).
    origin: &'static str,
    /// What the caller may do in it: `rw` or `ro` (a shared one granted read-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    access: Option<&'static str>,
    /// A shared workspace's grants (admins' view).
    #[serde(skip_serializing_if = "Option::is_none")]
    grants: Option<Vec<GrantBody>>,
    /// `ready`, `copying` or `failed`.
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copied_from: Option<&'a SessionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<&'a str>,
    size_bytes: Option<u64>,
    created_at: u64,
    in_use_by: Vec<UsedBy<'a>>,
}

fn view<'a>(w: &'a Workspace, users: &'a [Session]) -> WorkspaceView<'a> {
    view_as(w, users, None)
}

/// `w` as `who` sees it: with their access, or (`None`) as its owner or an admin.
fn view_as<'a>(
    w: &'a Workspace,
    users: &'a [Session],
    who: Option<&Principal>,
) -> WorkspaceView<'a> {
    let (state, failure) = match &w.state {
        WorkspaceState::Ready => ("ready", None),
        WorkspaceState::Copying { .. } => ("copying", None),
        WorkspaceState::Failed { reason } => ("failed", Some(reason.as_str())),
    };
    WorkspaceView {
        id: &w.id,
        name: &w.name,
        origin: match w.origin {
            WorkspaceOrigin::Home => "home",
            WorkspaceOrigin::Created => "created",
            WorkspaceOrigin::Shared => "shared",
            WorkspaceOrigin::Borrowed => "borrowed",
        },
        access: who
            .and_then(|p| w.access(&p.sub, &p.roles))
            .map(|ro| if ro { "ro" } else { "rw" }),
        grants: (who.is_none() && w.origin.is_shared()).then(|| {
            w.grants
                .iter()
                .map(|g| GrantBody {
                    to: g.to.clone(),
                    access: if g.read_only { "ro" } else { "rw" }.to_owned(),
                })
                .collect()
        }),
        state,
        failure,
        copied_from: w.copied_from.as_ref(),
        host: w.host.as_deref(),
        size_bytes: w.size_bytes,
        created_at: w.created_at,
        in_use_by: users
            .iter()
            .map(|s| UsedBy {
                id: &s.id,
                name: &s.name,
            })
            .collect(),
    }
}

#[derive(Serialize)]
struct Workspaces<'a> {
    workspaces: Vec<WorkspaceView<'a>>,
}

/// A malformed id names no one's workspace: the same 404 as an unknown one.
fn workspace_id(seg: &str) -> Result<SessionId, ApiError> {
    SessionId::parse(seg).map_err(|_| ApiError::WORKSPACE_NOT_FOUND)
}

/// `/v1/workspaces` and `/v1/workspaces/<id>…`.
pub(super) async fn workspaces(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    rest: &[&str],
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match (rest, method) {
        ([], Method::GET) => {
            let list = control.workspaces.workspaces(who)?;
            let workspaces = list.iter().map(|(w, u)| view_as(w, u, Some(who))).collect();
            Ok(json(200, &Workspaces { workspaces }))
        }
        ([], Method::POST) => {
            let body: Named = read_json(req, limit).await?;
            let w = control.workspaces.create_workspace(who, &body.name)?;
            Ok(json(201, &view(&w, &[])))
        }
        ([id], Method::GET) => {
            let (w, users) = control.workspaces.workspace(who, &workspace_id(id)?)?;
            Ok(json(200, &view_as(&w, &users, Some(who))))
        }
        ([id], Method::PATCH) => {
            let id = workspace_id(id)?;
            let body: Named = read_json(req, limit).await?;
            let w = control.workspaces.rename_workspace(who, &id, &body.name)?;
            let (_, users) = control.workspaces.workspace(who, &id)?;
            Ok(json(200, &view(&w, &users)))
        }
        ([id], Method::DELETE) => {
            control
                .workspaces
                .delete_workspace(who, &workspace_id(id)?)
                .await?;
            Ok(empty(204))
        }
        ([id, "copy"], Method::POST) => {
            let id = workspace_id(id)?;
            let body: Named = read_json(req, limit).await?;
            let w = control.workspaces.copy_workspace(who, &id, &body.name)?;
            Ok(json(202, &view(&w, &[])))
        }
        ([] | [_] | [_, "copy"], _) => Err(not_allowed()),
        _ => Err(super::http::no_such_endpoint()),
    }
}

/// `/v1/shared-workspaces` and `/v1/shared-workspaces/<id>` (admins).
pub(super) async fn shared(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    rest: &[&str],
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match (rest, method) {
        ([], Method::GET) => {
            let list = control.workspaces.shared_workspaces(who)?;
            let workspaces = list.iter().map(|(w, u)| view(w, u)).collect();
            Ok(json(200, &Workspaces { workspaces }))
        }
        ([], Method::POST) => {
            let body: NewShared = read_json(req, limit).await?;
            let w = control.workspaces.create_shared_workspace(
                who,
                &body.name,
                body.volume.as_deref(),
                body.host.as_deref(),
            )?;
            Ok(json(201, &view(&w, &[])))
        }
        ([id], Method::PATCH) => {
            let id = workspace_id(id)?;
            let body: SharedPatch = read_json(req, limit).await?;
            let grants: Option<Vec<(String, String)>> = body
                .grants
                .map(|g| g.into_iter().map(|g| (g.to, g.access)).collect());
            let w = control.workspaces.update_shared_workspace(
                who,
                &id,
                body.name.as_deref(),
                grants.as_deref(),
            )?;
            Ok(json(200, &view(&w, &[])))
        }
        ([id], Method::DELETE) => {
            control
                .workspaces
                .delete_shared_workspace(who, &workspace_id(id)?)
                .await?;
            Ok(empty(204))
        }
        ([] | [_], _) => Err(not_allowed()),
        _ => Err(super::http::no_such_endpoint()),
    }
}
