//! The Docker endpoints dockgate knows, and the query each one takes.

use super::denied::{deny, Denied, Reason};
use super::target::{is_plain_ref, Asked, Method};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ContainerCall {
    Inspect,
    Attach,
    Resize,
    Wait,
    Start,
    Kill,
    Remove,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint<'a> {
    Ping,
    Version,
    Info,
    ContainerCreate,
    ContainerList,
    Events,
    Container(ContainerCall, &'a str),
    VolumeCreate,
    VolumeInspect(&'a str),
    VolumeRemove(&'a str),
    VolumeList,
    VolumeUsage,
}

pub(super) fn endpoint(asked: &Asked) -> Option<Endpoint<'_>> {
    use ContainerCall as C;
    use Method::{Delete, Get, Head, Post};
    let s: Vec<&str> = asked.segments.iter().map(String::as_str).collect();
    Some(match (asked.method, s.as_slice()) {
        (Get | Head, ["_ping"]) => Endpoint::Ping,
        (Get, ["version"]) => Endpoint::Version,
        (Get, ["info"]) => Endpoint::Info,
        (Get, ["events"]) => Endpoint::Events,
        (Post, ["containers", "create"]) => Endpoint::ContainerCreate,
        (Get, ["containers", "json"]) => Endpoint::ContainerList,
        (Get, ["containers", id, "json"]) => Endpoint::Container(C::Inspect, id),
        (Post, ["containers", id, "attach"]) => Endpoint::Container(C::Attach, id),
        (Post, ["containers", id, "resize"]) => Endpoint::Container(C::Resize, id),
        (Post, ["containers", id, "wait"]) => Endpoint::Container(C::Wait, id),
        (Post, ["containers", id, "start"]) => Endpoint::Container(C::Start, id),
        (Post, ["containers", id, "kill"]) => Endpoint::Container(C::Kill, id),
        (Delete, ["containers", id]) => Endpoint::Container(C::Remove, id),
        (Post, ["volumes", "create"]) => Endpoint::VolumeCreate,
        (Get, ["volumes", name]) => Endpoint::VolumeInspect(name),
        (Delete, ["volumes", name]) => Endpoint::VolumeRemove(name),
        (Get, ["volumes"]) => Endpoint::VolumeList,
        (Get, ["system", "df"]) => Endpoint::VolumeUsage,
        _ => return None,
    })
}

type Check = fn(&str) -> bool;

/// Docker's `BoolValue` reads anything; these are the spellings clients send.
fn flag(v: &str) -> bool {
    ["", "0", "1", "true", "false"]
        .iter()
        .any(|f| v.eq_ignore_ascii_case(f))
}

/// What Docker's `BoolValue` reads as false.
fn false_flag(v: &str) -> bool {
    ["", "0", "no", "false", "none"]
        .iter()
        .any(|f| v.trim().eq_ignore_ascii_case(f))
}

fn dimension(v: &str) -> bool {
    (1..=5).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit())
}

fn digits(v: &str) -> bool {
    (1..=9).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit())
}

fn detach_keys(v: &str) -> bool {
    (1..=64).contains(&v.len())
        && v.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b',' | b'@' | b'[' | b']' | b'^' | b'_')
        })
}

fn wait_condition(v: &str) -> bool {
    matches!(v, "not-running" | "next-exit" | "removed")
}

fn signal(v: &str) -> bool {
    (1..=16).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-'))
}

fn timestamp(v: &str) -> bool {
    (1..=40).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'+' | b'-'))
}

fn is_empty_str(v: &str) -> bool {
    v.is_empty()
}

/// `type=volume`, or bollard's one-element list of it.
fn volume_type(v: &str) -> bool {
    matches!(v, "volume" | "[\"volume\"]")
}

fn anything(_: &str) -> bool {
    true
}

const NO_QUERY: &[(&str, Check)] = &[];
const INSPECT_QUERY: &[(&str, Check)] = &[("size", flag)];
const ATTACH_QUERY: &[(&str, Check)] = &[
    ("stream", flag),
    ("stdin", flag),
    ("stdout", flag),
    ("stderr", flag),
    ("logs", flag),
    ("detachKeys", detach_keys),
];
const RESIZE_QUERY: &[(&str, Check)] = &[("h", dimension), ("w", dimension)];
const WAIT_QUERY: &[(&str, Check)] = &[("condition", wait_condition)];
const KILL_QUERY: &[(&str, Check)] = &[("signal", signal)];
const REMOVE_QUERY: &[(&str, Check)] = &[("v", flag), ("force", flag), ("link", false_flag)];
// A volume in use is not removed: `force` stays off.
const VOLUME_REMOVE_QUERY: &[(&str, Check)] = &[("force", false_flag)];
const CREATE_QUERY: &[(&str, Check)] = &[("name", is_plain_ref), ("platform", is_empty_str)];
// `filters` is read by `filtered_instance`.
const LIST_QUERY: &[(&str, Check)] = &[
    ("all", flag),
    ("limit", digits),
    ("size", flag),
    ("filters", anything),
];
// Only the volumes' figures: the answer is cut to this deployment's volumes anyway.
const VOLUME_USAGE_QUERY: &[(&str, Check)] = &[("type", volume_type), ("verbose", flag)];
// `filters` is read by `filtered_instance`.
const VOLUME_LIST_QUERY: &[(&str, Check)] = &[("filters", anything)];
const EVENTS_QUERY: &[(&str, Check)] = &[
    ("since", timestamp),
    ("until", timestamp),
    ("filters", anything),
];

fn query_rules(ep: &Endpoint<'_>) -> &'static [(&'static str, Check)] {
    use ContainerCall as C;
    match ep {
        Endpoint::Container(C::Inspect, _) => INSPECT_QUERY,
        Endpoint::Container(C::Attach, _) => ATTACH_QUERY,
        Endpoint::Container(C::Resize, _) => RESIZE_QUERY,
        Endpoint::Container(C::Wait, _) => WAIT_QUERY,
        Endpoint::Container(C::Kill, _) => KILL_QUERY,
        Endpoint::Container(C::Remove, _) => REMOVE_QUERY,
        Endpoint::ContainerCreate => CREATE_QUERY,
        Endpoint::ContainerList => LIST_QUERY,
        Endpoint::Events => EVENTS_QUERY,
        Endpoint::VolumeRemove(_) => VOLUME_REMOVE_QUERY,
        Endpoint::VolumeList => VOLUME_LIST_QUERY,
        Endpoint::VolumeUsage => VOLUME_USAGE_QUERY,
        Endpoint::Container(C::Start, _)
        | Endpoint::Ping
        | Endpoint::Version
        | Endpoint::Info
        | Endpoint::VolumeCreate
        | Endpoint::VolumeInspect(_) => NO_QUERY,
    }
}

pub(super) fn check_query(asked: &Asked, ep: &Endpoint<'_>) -> Result<(), Denied> {
    let rules = query_rules(ep);
    for (k, v) in &asked.query {
        match rules.iter().find(|(name, _)| *name == k.as_str()) {
            None => {
                return Err(deny(
                    Reason::QueryNotAllowed,
                    format!(
                        "{} {} takes no query parameter {k:?}",
                        asked.method,
                        asked.path()
                    ),
                ))
            }
            Some((_, ok)) if !ok(v) => {
                return Err(deny(
                    Reason::QueryNotAllowed,
                    format!("query parameter {k}={v:?} is not allowed"),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}
