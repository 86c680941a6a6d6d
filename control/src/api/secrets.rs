//! `/v1/secrets…` (admins): register a secret by reference (a name and a file under
//! `docker.secrets_dir`), list them, read, grant and delete one. No answer ever holds
//! a value: control never has one.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request};
use policy::Principal;
use serde::{Deserialize, Serialize};

use super::http::{empty, json, not_allowed, read_json, Reply};
use crate::error::ApiError;
use crate::model::Secret;
use crate::service::Control;

/// One grant as the API says it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantBody {
    /// `user:<sub>` or `role:<role>`.
    to: String,
}

/// Body of `POST /v1/secrets`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSecret {
    name: String,
    /// The file, absolute or relative to `docker.secrets_dir`.
    path: String,
    #[serde(default)]
    grants: Vec<GrantBody>,
}

/// Body of `PATCH /v1/secrets/<name>`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretPatch {
    grants: Vec<GrantBody>,
}

/// A secret as the API shows it: everything control knows of it.
#[derive(Debug, Serialize)]
struct SecretView<'a> {
    name: &'a str,
    path: &'a str,
    /// Where sessions find it.
    target: String,
    registered_by: &'a str,
    registered_at: u64,
    grants: Vec<GrantBody>,
}

fn view(s: &Secret) -> SecretView<'_> {
    SecretView {
        name: &s.name,
        path: &s.path,
        target: policy::declared::secret_target(&s.name),
        registered_by: s.registered_by.as_str(),
        registered_at: s.registered_at,
        grants: s
            .grants
            .iter()
            .map(|to| GrantBody { to: to.clone() })
            .collect(),
    }
}

#[derive(Serialize)]
struct Secrets<'a> {
    secrets: Vec<SecretView<'a>>,
}

fn grants(g: Vec<GrantBody>) -> Vec<String> {
    g.into_iter().map(|g| g.to).collect()
}

/// `/v1/secrets` and `/v1/secrets/<name>` (admins).
pub(super) async fn secrets(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    rest: &[&str],
    limit: usize,
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    match (rest, method) {
        ([], Method::GET) => {
            let list = control.workspaces.secrets(who)?;
            Ok(json(
                200,
                &Secrets {
                    secrets: list.iter().map(view).collect(),
                },
            ))
        }
        ([], Method::POST) => {
            let body: NewSecret = read_json(req, limit).await?;
            let s = control.workspaces.register_secret(
                who,
                &body.name,
                &body.path,
                &grants(body.grants),
            )?;
            Ok(json(201, &view(&s)))
        }
        ([name], Method::GET) => Ok(json(200, &view(&control.workspaces.secret(who, name)?))),
        ([name], Method::PATCH) => {
            let body: SecretPatch = read_json(req, limit).await?;
            let s = control
                .workspaces
                .grant_secret(who, name, &grants(body.grants))?;
            Ok(json(200, &view(&s)))
        }
        ([name], Method::DELETE) => {
            control.workspaces.delete_secret(who, name)?;
            Ok(empty(204))
        }
        ([] | [_], _) => Err(not_allowed()),
        _ => Err(super::http::no_such_endpoint()),
    }
}
