//! Read-only share links of a session (`/api/sessions/<id>/shares`): made, listed and
//! removed by its owner. A link is shown once, when it is made: the gateway keeps only
//! its hash.

use serde_json::{json, Value};

use crate::failure::Failure;
use crate::gateway::Gateway;
use crate::sessions::{self, Listed};

/// A link just made.
pub struct Made {
    /// The link, whole (the gateway's URL and `/v/<token>`).
    pub url: String,
    /// The session it shows.
    pub session: Listed,
    /// The gateway's answer, its `url` made whole.
    pub view: Value,
}

/// One live link of one session.
pub struct Live {
    /// The session it shows.
    pub session: Listed,
    /// The gateway's view of it (never the link itself).
    pub view: Value,
}

/// Makes a link to watch `wanted` read-only for `ttl` seconds, by at most
/// `max_viewers` at once.
pub async fn create(
    gw: &Gateway,
    wanted: &str,
    ttl: u64,
    max_viewers: Option<u32>,
) -> Result<Made, Failure> {
    let session = sessions::find(gw, wanted).await?;
    let mut body = json!({ "ttl_seconds": ttl });
    if let Some(m) = max_viewers {
        body["max_viewers"] = json!(m);
    }
    let reply = gw
        .call(
            "POST",
            &format!("/api/sessions/{}/shares", session.id),
            Some(&body),
        )
        .await?;
    if reply.status != 201 {
        return Err(sessions::refused(
            gw,
            &reply,
            wanted,
            &format!("sharing {wanted}"),
        ));
    }
    let mut view = reply.json();
    let path = view
        .get("url")
        .and_then(Value::as_str)
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| Failure::error("sharing: the gateway's answer holds no link"))?;
    let url = format!("{}{path}", gw.url.as_str());
    view["url"] = json!(url);
    Ok(Made { url, session, view })
}

/// The live links of `wanted`, or of every live session of the user's that may have
/// some when `None`.
pub async fn list(gw: &Gateway, wanted: Option<&str>) -> Result<Vec<Live>, Failure> {
    let sessions = match wanted {
        Some(w) => vec![sessions::find(gw, w).await?],
        None => sessions::list(gw)
            .await?
            .into_iter()
            .filter(may_share)
            .collect(),
    };
    let mut out = Vec::new();
    for session in sessions {
        let reply = gw
            .call("GET", &format!("/api/sessions/{}/shares", session.id), None)
            .await?;
        if reply.status != 200 {
            let named = wanted.unwrap_or(&session.id);
            return Err(sessions::refused(gw, &reply, named, "listing share links"));
        }
        let views = reply.json()["shares"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        out.extend(views.into_iter().map(|view| Live {
            session: session.clone(),
            view,
        }));
    }
    Ok(out)
}

/// Removes the link `id` (of `wanted`, else found among the user's sessions); its
/// viewers are closed. The session it showed.
pub async fn remove(gw: &Gateway, id: &str, wanted: Option<&str>) -> Result<Listed, Failure> {
    let live = list(gw, wanted).await?;
    let Some(link) = live.into_iter().find(|l| l.view["id"] == id) else {
        return Err(Failure::error(format!("no share link {id:?}")));
    };
    let reply = gw
        .call(
            "DELETE",
            &format!("/api/sessions/{}/shares/{id}", link.session.id),
            None,
        )
        .await?;
    match reply.status {
        204 | 200 => Ok(link.session),
        _ => Err(gw.refused(&reply, &format!("removing share link {id}"))),
    }
}

/// Whether the user's session may have links: their own, live, its profile allowing
/// them.
fn may_share(s: &Listed) -> bool {
    s.is_live()
        && s.view.get("role").and_then(Value::as_str) != Some("peer")
        && s.view["allows"]["share"] == true
}

/// The links as a table for people.
pub fn table(live: &[Live], now: u64) -> String {
    let rows: Vec<[String; 6]> = live
        .iter()
        .map(|l| {
            let v = &l.view;
            let number = |k: &str| v.get(k).and_then(Value::as_u64);
            let subs: Vec<&str> = v["subs"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let viewers = match number("max_viewers") {
                Some(max) => format!("{}/{max}", number("viewers").unwrap_or(0)),
                None => number("viewers").unwrap_or(0).to_string(),
            };
            [
                v["id"].as_str().unwrap_or("-").to_owned(),
                session_label(&l.session),
                number("expires_at").map_or("-".into(), |t| sessions::until(now, t)),
                if v["signed_in"] == true {
                    "signed-in".into()
                } else {
                    "anyone".into()
                },
                viewers,
                if subs.is_empty() {
                    "-".into()
                } else {
                    subs.join(",")
                },
            ]
        })
        .collect();
    crate::table::render(
        ["ID", "SESSION", "EXPIRES", "WHO", "VIEWERS", "WATCHING"],
        &rows,
    )
}

/// A session as a table names it: its name, else its id.
pub fn session_label(s: &Listed) -> String {
    if s.name.is_empty() {
        s.id.clone()
    } else {
        s.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(view: Value) -> Live {
        Live {
            session: Listed {
                id: "aaaaaaaaaaaaaaaa".into(),
                name: "walk".into(),
                state: "running".into(),
                view: Value::Null,
            },
            view,
        }
    }

    #[test]
    fn the_table_says_who_may_watch_and_who_does() {
        let t = table(
            &[
                live(
                    json!({"id": "0123456789abcdef", "expires_at": 4000, "signed_in": true,
                    "viewers": 2, "max_viewers": 5, "subs": ["bob", "carol"]}),
                ),
                live(
                    json!({"id": "fedcba9876543210", "expires_at": 500, "signed_in": false,
                    "viewers": 0, "subs": []}),
                ),
            ],
            400,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ID "), "{t}");
        assert!(
            lines[1].contains("walk")
                && lines[1].contains("in 1h")
                && lines[1].contains("signed-in"),
            "{t}"
        );
        assert!(
            lines[1].contains("2/5") && lines[1].ends_with("bob,carol"),
            "{t}"
        );
        assert!(
            lines[2].contains("anyone") && lines[2].ends_with('-'),
            "{t}"
        );
    }
}
