//! Sessions through the gateway's API: list, create, end, and a session named by id or
//! by its unique name.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::failure::Failure;
use crate::gateway::{Gateway, Reply};

/// A session (or a target the user may open) as the list shows it.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its state (`running`, `creating`, …).
    pub state: String,
    /// The API's whole view of it.
    pub view: Value,
}

impl Listed {
    fn from_view(view: Value) -> Option<Listed> {
        let text = |k: &str| view.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(Listed {
            id: text("id")?,
            name: text("name").unwrap_or_default(),
            state: text("state").unwrap_or_default(),
            view,
        })
    }
}

impl Listed {
    /// Whether it has not ended (nor begun to end).
    pub fn is_live(&self) -> bool {
        matches!(self.state.as_str(), "creating" | "running" | "unreachable")
    }
}

/// What the user asks a new session to be.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Its profile.
    pub profile: String,
    /// Its name (default: the profile's).
    pub name: Option<String>,
    /// Option values by name.
    pub options: BTreeMap<String, String>,
}

/// Reads `key=value`, as `--option` takes it.
pub fn option(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected NAME=VALUE, got {text:?}")),
    }
}

/// Every session the user may open: their own, those they were invited to, targets.
pub async fn list(gw: &Gateway) -> Result<Vec<Listed>, Failure> {
    listed(gw, "/api/sessions", "listing sessions").await
}

async fn listed(gw: &Gateway, path: &str, doing: &str) -> Result<Vec<Listed>, Failure> {
    let reply = gw.call("GET", path, None).await?;
    list_of(gw, &reply, doing)
}

/// The sessions a list's answer holds.
fn list_of(gw: &Gateway, reply: &Reply, doing: &str) -> Result<Vec<Listed>, Failure> {
    if reply.status != 200 {
        return Err(gw.refused(reply, doing));
    }
    let body = reply.json();
    let sessions = body
        .get("sessions")
        .and_then(Value::as_array)
        .ok_or_else(|| Failure::error(format!("{doing}: the gateway's answer has no list")))?;
    Ok(sessions
        .iter()
        .cloned()
        .filter_map(Listed::from_view)
        .collect())
}

/// Creates a session; its view.
pub async fn create(gw: &Gateway, new: &NewSession) -> Result<Listed, Failure> {
    let mut body = json!({"profile": new.profile, "options": new.options});
    if let Some(name) = &new.name {
        body["name"] = json!(name);
    }
    let reply = gw.call("POST", "/api/sessions", Some(&body)).await?;
    if reply.status != 201 {
        return Err(gw.refused(&reply, "creating a session"));
    }
    Listed::from_view(reply.json())
        .ok_or_else(|| Failure::error("creating a session: the gateway's answer has no id"))
}

/// Ends the session `wanted` names.
pub async fn end(gw: &Gateway, wanted: &str) -> Result<Listed, Failure> {
    let session = find(gw, wanted).await?;
    let reply = gw
        .call("DELETE", &format!("/api/sessions/{}", session.id), None)
        .await?;
    match reply.status {
        200 | 204 => Ok(session),
        404 => Err(Failure::not_found(wanted)),
        _ => Err(gw.refused(&reply, &format!("ending {wanted}"))),
    }
}

/// The session `wanted` names: a listed id, else the one listed session of that name,
/// else — when it is spelled like an id — that id unlisted, for the gateway to judge
/// (whether it is unknown or another user's, the answer is the same "not found").
pub async fn find(gw: &Gateway, wanted: &str) -> Result<Listed, Failure> {
    let listed = list(gw).await?;
    pick(listed, wanted)
}

/// The session `wanted` names, for its terminal: as [`find`] finds it, or — where the
/// gateway's URL has no API, as behind a front proxy that passes only terminals
/// (docs/front-proxies.md "Behind a front proxy") — an id as it is, for the terminal's
/// own check to judge (the same "not found" for an unknown id and another user's). A
/// name needs the API's list.
pub async fn find_to_open(gw: &Gateway, wanted: &str) -> Result<Listed, Failure> {
    let doing = "listing sessions";
    let reply = gw.call("GET", "/api/sessions", None).await?;
    if reply.status == 401 || !reply.not_the_api() {
        return pick(list_of(gw, &reply, doing)?, wanted);
    }
    if policy::SessionId::parse(wanted).is_err() {
        return Err(Failure::error(format!(
            "{} has no termgate API to find the session named {wanted:?} ({}: {}): a \
             name needs the gateway's API; name the session by its id",
            gw.url.as_str(),
            reply.status,
            reply.message()
        )));
    }
    Ok(unlisted(wanted))
}

/// [`find`] among ended sessions too (their recordings are kept): a live session of
/// that name wins over ended ones.
pub async fn find_any(gw: &Gateway, wanted: &str) -> Result<Listed, Failure> {
    let mut all = list(gw).await?;
    all.extend(listed(gw, "/api/history", "listing ended sessions").await?);
    pick(all, wanted)
}

/// What a refusal about the session `wanted` names means: the one "not found" of an
/// unknown session or another user's, else the gateway's own message.
pub fn refused(gw: &Gateway, reply: &Reply, wanted: &str, doing: &str) -> Failure {
    let unknown = reply.status == 404 && reply.message() == policy::Refusal::NOT_FOUND.message;
    if unknown {
        Failure::not_found(wanted)
    } else {
        gw.refused(reply, doing)
    }
}

/// Reads a time to live as people write one: `90` or `90s`, `15m`, `1h`, `7d`.
pub fn ttl(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("expected a duration such as 90s, 15m, 1h or 7d, got {text:?}"))?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (s, m, h or d)")),
    };
    n.checked_mul(unit)
        .filter(|s| *s > 0)
        .ok_or_else(|| format!("{text:?} is not a duration above zero"))
}

fn pick(listed: Vec<Listed>, wanted: &str) -> Result<Listed, Failure> {
    if let Some(s) = listed.iter().find(|s| s.id == wanted) {
        return Ok(s.clone());
    }
    let named: Vec<&Listed> = listed.iter().filter(|s| s.name == wanted).collect();
    // A name is reused once its session ended: the live one is meant.
    let live: Vec<&Listed> = named.iter().copied().filter(|s| s.is_live()).collect();
    let named = if live.is_empty() { named } else { live };
    match named.as_slice() {
        [one] => Ok((*one).clone()),
        [] if policy::SessionId::parse(wanted).is_ok() => Ok(unlisted(wanted)),
        [] => Err(Failure::not_found(wanted)),
        several => {
            let ids: Vec<&str> = several.iter().map(|s| s.id.as_str()).collect();
            Err(Failure::error(format!(
                "{} sessions are named {wanted:?} ({}): name one by its id",
                ids.len(),
                ids.join(", ")
            )))
        }
    }
}

/// A session known by its id alone.
fn unlisted(id: &str) -> Listed {
    Listed {
        id: id.to_owned(),
        name: String::new(),
        state: String::new(),
        view: Value::Null,
    }
}

/// The list as a table for people.
pub fn table(listed: &[Listed], now: u64) -> String {
    let rows: Vec<[String; 5]> = listed
        .iter()
        .map(|s| {
            let text = |k: &str| s.view.get(k).and_then(Value::as_str).unwrap_or("-");
            let created = s.view.get("created_at").and_then(Value::as_u64);
            let mut state = s.state.clone();
            if s.view.get("role").and_then(Value::as_str) == Some("peer") {
                state.push_str(" (peer)");
            }
            [
                s.id.clone(),
                s.name.clone(),
                text("profile").to_owned(),
                state,
                created.map_or("-".into(), |t| ago(now, t)),
            ]
        })
        .collect();
    crate::table::render(["ID", "NAME", "PROFILE", "STATE", "CREATED"], &rows)
}

/// `then` as an age from `now`: `12s ago`, `5m ago`, `3h ago`, `2d ago`.
pub fn ago(now: u64, then: u64) -> String {
    let s = now.saturating_sub(then);
    match s {
        0..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86_399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// `then` from `now` as a time ahead, to the nearest unit: `in 30m` for 29m59s,
/// `in 3h`; past it, `expired`.
pub fn until(now: u64, then: u64) -> String {
    let near = |s: u64, unit: u64| (s + unit / 2) / unit;
    match then.checked_sub(now) {
        None | Some(0) => "expired".into(),
        Some(s @ 0..=59) => format!("in {s}s"),
        Some(s @ 60..=3569) => format!("in {}m", near(s, 60)),
        Some(s @ 3570..=84_599) => format!("in {}h", near(s, 3600)),
        Some(s) => format!("in {}d", near(s, 86_400)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: &str, name: &str) -> Listed {
        Listed::from_view(json!({"id": id, "name": name, "state": "running", "profile": "default", "created_at": 100})).unwrap()
    }

    const A: &str = "aaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccc";

    #[test]
    fn a_session_is_named_by_id_or_by_its_unique_name() {
        let all = || vec![listed(A, "build"), listed(B, "shell"), listed(C, "shell")];
        let mut ended = listed(C, "shell");
        ended.state = "terminated".into();
        assert_eq!(
            pick(vec![listed(B, "shell"), ended.clone()], "shell")
                .unwrap()
                .id,
            B
        );
        assert_eq!(pick(vec![ended], "shell").unwrap().id, C);
        assert_eq!(pick(all(), A).unwrap().id, A);
        assert_eq!(pick(all(), "build").unwrap().id, A);
        let e = pick(all(), "shell").unwrap_err();
        assert!(e.message.contains(B) && e.message.contains(C), "{e}");
        assert_eq!(
            pick(all(), "nothing").unwrap_err(),
            Failure::not_found("nothing")
        );
        // An id nobody listed goes to the gateway, which answers for it.
        let unlisted = "dddddddddddddddd";
        assert_eq!(pick(all(), unlisted).unwrap().id, unlisted);
    }

    #[test]
    fn the_table_lines_up_and_marks_a_peers_session() {
        let mut shared = listed(B, "pairing");
        shared.view["role"] = json!("peer");
        let t = table(&[listed(A, "build"), shared], 400);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("ID  "), "{t}");
        assert!(
            lines[1].contains("build") && lines[1].ends_with("5m ago"),
            "{t}"
        );
        assert!(lines[2].contains("running (peer)"), "{t}");
        let col = lines[0].find("NAME").unwrap();
        assert_eq!(&lines[1][col..col + 5], "build");
    }

    #[test]
    fn a_time_ahead_reads_to_the_nearest_unit() {
        assert_eq!(until(100, 100), "expired");
        assert_eq!(until(100, 159), "in 59s");
        assert_eq!(until(0, 1799), "in 30m");
        assert_eq!(until(0, 3569), "in 59m");
        assert_eq!(until(0, 3599), "in 1h");
        assert_eq!(until(0, 5400), "in 2h");
        assert_eq!(until(0, 86_399), "in 1d");
        assert_eq!(until(0, 604_800), "in 7d");
    }

    #[test]
    fn a_ttl_is_seconds_minutes_hours_or_days() {
        assert_eq!(ttl("90"), Ok(90));
        assert_eq!(ttl("90s"), Ok(90));
        assert_eq!(ttl("15m"), Ok(900));
        assert_eq!(ttl("1h"), Ok(3600));
        assert_eq!(ttl("7d"), Ok(604_800));
        for bad in [
            "",
            "h",
            "1w",
            "0",
            "0h",
            "-1h",
            "1.5h",
            "99999999999999999999d",
        ] {
            assert!(ttl(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn options_are_name_equals_value() {
        assert_eq!(option("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(option("=x").is_err());
        assert!(option("novalue").is_err());
    }
}
