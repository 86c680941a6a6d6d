//! Peers of a session (`/api/sessions/<id>/peers`): users its owner invites to type
//! into it for a while. Removing one closes their terminals at once; a peer may remove
//! themself (leave).

use serde_json::{json, Value};

use crate::failure::Failure;
use crate::gateway::Gateway;
use crate::sessions::{self, Listed};

/// Invites `user` to co-drive `wanted` for `ttl` seconds; the session and the
/// gateway's view of the invitation.
pub async fn add(
    gw: &Gateway,
    wanted: &str,
    user: &str,
    ttl: u64,
) -> Result<(Listed, Value), Failure> {
    let session = sessions::find(gw, wanted).await?;
    let body = json!({ "sub": user, "ttl_seconds": ttl });
    let reply = gw
        .call(
            "POST",
            &format!("/api/sessions/{}/peers", session.id),
            Some(&body),
        )
        .await?;
    if reply.status != 201 {
        return Err(sessions::refused(
            gw,
            &reply,
            wanted,
            &format!("inviting {user} to {wanted}"),
        ));
    }
    Ok((session, reply.json()))
}

/// The invitations of `wanted`.
pub async fn list(gw: &Gateway, wanted: &str) -> Result<Vec<Value>, Failure> {
    let session = sessions::find(gw, wanted).await?;
    let reply = gw
        .call("GET", &format!("/api/sessions/{}/peers", session.id), None)
        .await?;
    if reply.status != 200 {
        return Err(sessions::refused(
            gw,
            &reply,
            wanted,
            &format!("listing the peers of {wanted}"),
        ));
    }
    Ok(reply.json()["peers"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// Ends `user`'s invitation to `wanted`; their terminals close.
pub async fn remove(gw: &Gateway, wanted: &str, user: &str) -> Result<Listed, Failure> {
    // It is a segment of the path: nothing else may ride along.
    if policy::Sub::parse(user).is_none() {
        return Err(Failure::error(format!("not a user name: {user:?}")));
    }
    let session = sessions::find(gw, wanted).await?;
    let reply = gw
        .call(
            "DELETE",
            &format!("/api/sessions/{}/peers/{user}", session.id),
            None,
        )
        .await?;
    match reply.status {
        204 | 200 => Ok(session),
        _ => Err(sessions::refused(
            gw,
            &reply,
            wanted,
            &format!("removing {user} from {wanted}"),
        )),
    }
}

/// The invitations as a table for people.
pub fn table(peers: &[Value], now: u64) -> String {
    let rows: Vec<[String; 2]> = peers
        .iter()
        .map(|p| {
            [
                p["sub"].as_str().unwrap_or("-").to_owned(),
                p["expires_at"]
                    .as_u64()
                    .map_or("-".into(), |t| sessions::until(now, t)),
            ]
        })
        .collect();
    crate::table::render(["USER", "EXPIRES"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_each_peer_and_when_their_invitation_ends() {
        let t = table(
            &[
                json!({"sub": "bob", "expires_at": 1000}),
                json!({"sub": "carol-long", "expires_at": 100}),
            ],
            400,
        );
        assert_eq!(
            t,
            "USER        EXPIRES\nbob         in 10m\ncarol-long  expired\n"
        );
    }
}
