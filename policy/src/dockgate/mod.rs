//! dockgate: the pure decisions of a fail-closed proxy in front of the Docker daemon's
//! API. A binary listens on one unix socket per role, calls [`normalize`] on each
//! request target and [`decide`] on the result, and forwards only what passes; every
//! refusal is answered `403` with [`Denied::error_body`].
//!
//! Architecture invariant: what reaches Docker through dockgate is exactly the calls
//! listed below, each on objects termgate labelled; a session container is only ever
//! created from a body that maps to a [`ContainerSpec`](crate::sandbox::ContainerSpec) passing
//! [`sandbox::check`](crate::sandbox::check).
//!
//! # The target, read once as Docker reads it
//!
//! Docker (Go's `net/http` and gorilla/mux) percent-decodes the path once and routes on
//! the decoded path, so [`normalize`] decodes once too and refuses every spelling on
//! which two readers could disagree: an encoded `/`, `.` and `..` segments (also
//! encoded), empty segments (`//`, a trailing `/`), control bytes, invalid escapes, a
//! `#`, anything but origin-form. An optional `/v1.NN` prefix is kept (1.24 to 1.52);
//! any other `/v<digits and dots>` is refused, as Docker would route it as a version.
//! A query key given twice is refused (Docker reads the first, a proxy might the last).
//!
//! # What passes
//!
//! Role [`Role::Attach`], the ttyd pool (`deploy/ttyd-attach`: `docker inspect --type
//! container` then `docker attach`), on a full 64-hex container id only:
//!
//! | request | verdict |
//! |---|---|
//! | `GET`/`HEAD /_ping`, `GET /version` | [`Verdict::Pass`] |
//! | `GET /containers/<id>/json` (`size`) | [`Verdict::PassIfLabelled`] |
//! | `POST /containers/<id>/attach` (`stream stdin stdout stderr logs detachKeys`) | [`Verdict::PassIfLabelled`] |
//! | `POST /containers/<id>/resize` (`h w`), `POST /containers/<id>/wait` (`condition`) | [`Verdict::PassIfLabelled`] |
//!
//! Role [`Role::Control`]: exactly the bollard 0.21 calls of `control/src/docker/mod.rs`
//! (`control/src/hosts.rs` and `control/src/reconcile.rs` reach Docker only through
//! it), on plain references (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`, as control's `check_ref`):
//!
//! | bollard call (control's use) | request | verdict |
//! |---|---|---|
//! | `negotiate_version` (`connect`) | `GET /version` | [`Verdict::Pass`] |
//! | `ping` | `GET /_ping` | [`Verdict::Pass`] |
//! | `info` (`seccomp_supported`) | `GET /info` | [`Verdict::Pass`] |
//! | `create_container` | `POST /containers/create?name=…&platform=` + JSON | [`Verdict::PassCreate`] (container) when the body passes [`spec_from_create_body`] |
//! | `start_container` | `POST /containers/<id>/start` | [`Verdict::PassIfLabelled`] |
//! | `kill_container` (`hang_up`) | `POST /containers/<id>/kill?signal=SIGHUP` | [`Verdict::PassIfLabelled`] |
//! | `remove_container` | `DELETE /containers/<id>?v=true&force=true&link=false` | [`Verdict::PassIfLabelled`] |
//! | `inspect_container` (`inspect`, `wait_exit`) | `GET /containers/<id>/json` | [`Verdict::PassIfLabelled`] |
//! | `list_containers` (`list_managed`) | `GET /containers/json?all=true&size=false&filters=…` | [`Verdict::PassFiltered`]: the `label` filter must hold `termgate.managed=session` and `termgate.instance=<i>` |
//! | `resize_container_tty` | `POST /containers/<id>/resize?h=…&w=…` | [`Verdict::PassIfLabelled`] |
//! | `inspect_volume` (`ensure_home_volume`) | `GET /volumes/<name>` | [`Verdict::PassIfLabelled`] (volume) |
//! | `create_volume` (`ensure_home_volume`, `ensure_workspace_volume`) | `POST /volumes/create` + JSON | [`Verdict::PassCreate`] (volume): labelled, no driver options |
//! | `remove_volume` (`remove_workspace_volume`) | `DELETE /volumes/<name>?force=false` | [`Verdict::PassIfLabelled`] (volume) |
//! | `list_volumes` (`list_volumes`) | `GET /volumes?filters=…` | [`Verdict::PassFiltered`]: the `label` filter must hold `termgate.instance=<i>` |
//! | `df` (`volume_sizes`) | `GET /system/df` (`type=volume` taken too) | [`Verdict::PassVolumeUsage`]: the answer cut by [`volume_usage`] |
//! | `events` (`events_since`) | `GET /events?since=…&filters=…` | [`Verdict::PassFiltered`]: the `label` filter must hold `termgate.instance=<i>` |
//!
//! Control calls nothing else, so nothing else passes: no stop, wait, logs or attach
//! for control, no exec, image pull or build, archive, commit, update, rename, prune,
//! network, swarm, plugin, secret or config call, for either role. Docker's list
//! `filters` AND their `label` values, so a listing filtered by the instance label
//! only shows that instance's objects.
//!
//! # Bodies
//!
//! Only the two creates take a body: declared by `Content-Length` (not chunked, not
//! empty), at most [`MAX_BODY`] bytes, read whole ([`Verdict::ReadBody`]), exactly as
//! long as declared, one JSON value without duplicate keys. Every other call must come
//! without a body. The binary should forward a body with `Content-Type:
//! application/json` only (Docker reads a form-encoded body as query parameters).
//!
//! # Where things are
//!
//! This file holds the roles and verdicts, [`decide`] and which endpoints each role may
//! call. `denied.rs` holds the refusals ([`Denied`], [`Reason`]) and `limits.rs` the
//! sizes and API versions accepted. `target.rs` reads the target ([`normalize`]),
//! `endpoint.rs` names the endpoints and the query each takes, `body.rs` judges a
//! body's framing, `json.rs` reads JSON strictly, `create.rs` reads a container create
//! body ([`spec_from_create_body`]) and `objects.rs` names termgate's labels and judges
//! labels, volumes and list filters. The files below import nothing from this one, and
//! never each other in a circle.

mod body;
mod create;
mod declared;
mod denied;
mod endpoint;
mod json;
mod limits;
mod objects;
mod target;
#[cfg(test)]
mod tests;
mod usage;

use std::fmt;

use crate::sandbox::MountKind;

pub use body::{BodyInfo, Framing};
pub use create::spec_from_create_body;
pub use declared::{
    bind_source_ok, container_create_declared, volume_create_declared, CreateLookups, Declared,
};
pub use denied::{Denied, Reason};
pub use limits::{MAX_API_MINOR, MAX_BODY, MAX_TARGET_LEN, MIN_API_MINOR};
pub use objects::{labels_pass, volume_ok, Labels, ObjectKind, INSTANCE_LABEL, MANAGED_LABEL};
pub use target::{is_plain_ref, normalize, ApiVersion, Asked, Method};
pub use usage::{volume_usage, MAX_USAGE_ANSWER};

use body::{json_body, no_body, Body};
use create::create_body;
use denied::deny;
use endpoint::{check_query, endpoint, ContainerCall, Endpoint};
use json::strict_json;
use objects::{filtered_instance, termgate_instance, volume_create};
use target::is_full_id;

/// Who is asking: each role has a socket of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The ttyd pool: inspects and attaches to session containers.
    Attach,
    /// The control service: creates, starts, ends and watches session containers,
    /// copy jobs, and home and workspace volumes.
    Control,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Attach => "attach",
            Role::Control => "control",
        })
    }
}

/// What the binary does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it.
    Pass,
    /// Inspect object `id` of `kind` first (as given: the same reference Docker will
    /// resolve) and forward only if [`labels_pass`] holds for its labels and this
    /// deployment's instance; a missing object is refused as well.
    PassIfLabelled {
        /// What `id` names.
        kind: ObjectKind,
        /// The reference from the path.
        id: String,
    },
    /// A create whose body passed: forward only if `instance` is this deployment's and,
    /// for a container, every volume in `volumes` exists, carries the home labels of
    /// this instance or passes [`volume_ok`] on its driver and options (an existing
    /// volume backed by a host path would otherwise slip in by name).
    PassCreate {
        /// What is created.
        kind: ObjectKind,
        /// The `termgate.instance` label of the body.
        instance: String,
        /// The named volumes the container mounts (empty for a volume).
        volumes: Vec<String>,
    },
    /// A listing or event stream that Docker's `label` filter confines to `instance`:
    /// forward only if it is this deployment's.
    PassFiltered {
        /// The instance named by the filter.
        instance: String,
    },
    /// Forward it (`GET /system/df`) and answer [`volume_usage`] of the daemon's
    /// answer: the figures of this deployment's volumes and of the volumes the
    /// configuration lends, nothing about anything else.
    PassVolumeUsage,
    /// Read the body, exactly this many bytes (its declared length, at most
    /// [`MAX_BODY`]), then call [`decide`] again with them.
    ReadBody {
        /// Bytes to read.
        max: usize,
    },
    /// Answer `403` with [`Denied::error_body`].
    Refuse(Denied),
}

// ---------------------------------------------------------------------------------
// The decision.

/// Whether `role` may call `ep` at all: the two tables of the module doc.
fn permitted(role: Role, ep: &Endpoint<'_>) -> bool {
    use ContainerCall as C;
    match role {
        Role::Attach => matches!(
            ep,
            Endpoint::Ping
                | Endpoint::Version
                | Endpoint::Container(C::Inspect | C::Attach | C::Resize | C::Wait, _)
        ),
        Role::Control => matches!(
            ep,
            Endpoint::Ping
                | Endpoint::Version
                | Endpoint::Info
                | Endpoint::ContainerCreate
                | Endpoint::ContainerList
                | Endpoint::Events
                | Endpoint::Container(C::Inspect | C::Start | C::Kill | C::Remove | C::Resize, _)
                | Endpoint::VolumeCreate
                | Endpoint::VolumeInspect(_)
                | Endpoint::VolumeRemove(_)
                | Endpoint::VolumeList
                | Endpoint::VolumeUsage
        ),
    }
}

/// Decides one request of `role`. Call with the body unread first; a create answers
/// [`Verdict::ReadBody`], then call again with the bytes.
pub fn decide(role: Role, asked: &Asked, body: BodyInfo<'_>) -> Verdict {
    decide_or_deny(role, asked, &body).unwrap_or_else(Verdict::Refuse)
}

fn decide_or_deny(role: Role, asked: &Asked, body: &BodyInfo<'_>) -> Result<Verdict, Denied> {
    let ep = endpoint(asked)
        .filter(|ep| permitted(role, ep))
        .ok_or_else(|| {
            deny(
                Reason::EndpointNotAllowed,
                format!("role {role} may not call {} {}", asked.method, asked.path()),
            )
        })?;
    check_query(asked, &ep)?;
    match ep {
        Endpoint::Ping | Endpoint::Version | Endpoint::Info => {
            no_body(body, asked)?;
            Ok(Verdict::Pass)
        }
        Endpoint::Container(_, id) => {
            let ok = match role {
                Role::Attach => is_full_id(id),
                Role::Control => is_plain_ref(id),
            };
            if !ok {
                return Err(deny(
                    Reason::BadReference,
                    match role {
                        Role::Attach => format!("{id:?} is not a full container id"),
                        Role::Control => format!("{id:?} is not a plain container reference"),
                    },
                ));
            }
            no_body(body, asked)?;
            Ok(Verdict::PassIfLabelled {
                kind: ObjectKind::Container,
                id: id.to_owned(),
            })
        }
        Endpoint::VolumeInspect(name) | Endpoint::VolumeRemove(name) => {
            if !is_plain_ref(name) {
                return Err(deny(
                    Reason::BadReference,
                    format!("{name:?} is not a plain volume name"),
                ));
            }
            no_body(body, asked)?;
            Ok(Verdict::PassIfLabelled {
                kind: ObjectKind::Volume,
                id: name.to_owned(),
            })
        }
        Endpoint::ContainerList => {
            no_body(body, asked)?;
            Ok(Verdict::PassFiltered {
                instance: filtered_instance(asked, &["label"], true)?,
            })
        }
        Endpoint::VolumeList => {
            no_body(body, asked)?;
            Ok(Verdict::PassFiltered {
                instance: filtered_instance(asked, &["label"], false)?,
            })
        }
        Endpoint::VolumeUsage => {
            no_body(body, asked)?;
            Ok(Verdict::PassVolumeUsage)
        }
        Endpoint::Events => {
            no_body(body, asked)?;
            Ok(Verdict::PassFiltered {
                instance: filtered_instance(asked, &["type", "label", "event"], false)?,
            })
        }
        Endpoint::ContainerCreate => {
            let bytes = match json_body(body)? {
                Body::Pending(max) => return Ok(Verdict::ReadBody { max }),
                Body::Read(b) => b,
            };
            let (spec, labels) = create_body(&strict_json(bytes)?, asked.version)?;
            Ok(Verdict::PassCreate {
                kind: ObjectKind::Container,
                instance: termgate_instance(&labels, ObjectKind::Container)?,
                volumes: spec
                    .mounts
                    .into_iter()
                    // No source: an anonymous volume, made with the container.
                    .filter(|m| m.kind == MountKind::Volume && !m.source.is_empty())
                    .map(|m| m.source)
                    .collect(),
            })
        }
        Endpoint::VolumeCreate => {
            let bytes = match json_body(body)? {
                Body::Pending(max) => return Ok(Verdict::ReadBody { max }),
                Body::Read(b) => b,
            };
            Ok(Verdict::PassCreate {
                kind: ObjectKind::Volume,
                instance: volume_create(&strict_json(bytes)?)?,
                volumes: Vec::new(),
            })
        }
    }
}
