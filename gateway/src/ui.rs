//! The sessions page: static assets embedded in the binary, and the recordings player
//! read from `gateway.player_dir` once at start, served with strict headers.

use std::path::Path;

use anyhow::Context as _;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../assets/index.html"),
    },
    Asset {
        name: "common.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/common.js"),
    },
    Asset {
        name: "workspaces.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/workspaces.js"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../assets/app.css"),
    },
    Asset {
        name: "viewer.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/viewer.js"),
    },
    Asset {
        name: "recording.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/recording.js"),
    },
    Asset {
        name: "admin.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/admin.js"),
    },
    Asset {
        name: "cli-login.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/cli-login.js"),
    },
];

/// The admin console's page: served at `/admin` to admins only, never as an asset.
const ADMIN_PAGE: Asset = Asset {
    name: "admin",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../assets/admin.html"),
};

/// A share link's viewer page: served at `/v/<token>` once the link is checked.
const VIEWER_PAGE: Asset = Asset {
    name: "viewer",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../assets/viewer.html"),
};

/// A recording link's player page: served at `/r/<token>` once control says it plays.
const RECORDING_PAGE: Asset = Asset {
    name: "recording",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../assets/recording.html"),
};

/// The page that asks to sign the command-line client in: served at `/cli-login`.
const CLI_LOGIN_PAGE: Asset = Asset {
    name: "cli-login",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../assets/cli-login.html"),
};

/// The page `GET /auth/logout` answers: a form that posts to sign out, no script.
const SIGN_OUT_PAGE: Asset = Asset {
    name: "sign-out",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../assets/sign-out.html"),
};

/// Content-Security-Policy of the sign-out page: nothing runs, nothing loads but the
/// style sheet. No `form-action`: its one form's answer sends the browser on to the
/// provider's end of session, a redirect `form-action 'self'` would block.
const SIGN_OUT_CSP: &str =
    "default-src 'none'; style-src 'self'; img-src data:; frame-ancestors 'none'; base-uri 'none'";

/// Referrer policy of every page but the sign-out page: nothing leaves.
const NO_REFERRER: &str = "no-referrer";

/// Referrer policy of the sign-out page: its form's POST must carry this origin in
/// `Origin` (under `no-referrer` a browser sends `Origin: null`, which is refused).
const SAME_ORIGIN_REFERRER: &str = "same-origin";

/// Content-Security-Policy of the page: no inline script, nothing from elsewhere.
///
/// `'wasm-unsafe-eval'` lets the recordings player (`/assets/player.js`, served from
/// this origin) compile its terminal emulator's WebAssembly, which it carries inside
/// the script itself. It allows compiling WebAssembly only: no `eval`, no inline
/// script, no script from anywhere but this origin.
pub const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The recordings player (asciinema-player), read from `gateway.player_dir` once at
/// start and served at `/assets/player.js` and `/assets/player.css`.
pub struct Player {
    js: Bytes,
    css: Bytes,
}

impl Player {
    /// Reads `asciinema-player.js` and `asciinema-player.css` from `dir`.
    pub fn load(dir: &Path) -> anyhow::Result<Player> {
        let read = |file: &str| {
            let path = dir.join(file);
            std::fs::read(&path)
                .map(Bytes::from)
                .with_context(|| format!("gateway.player_dir: cannot read {}", path.display()))
        };
        Ok(Player {
            js: read("asciinema-player.js")?,
            css: read("asciinema-player.css")?,
        })
    }

    /// The player's file served as `name`, with its content type.
    fn asset(&self, name: &str) -> Option<(&'static str, Bytes)> {
        match name {
            "player.js" => Some(("text/javascript; charset=utf-8", self.js.clone())),
            "player.css" => Some(("text/css; charset=utf-8", self.css.clone())),
            _ => None,
        }
    }
}

/// Serves an embedded asset (`""` is the page itself) or, when configured, the
/// recordings player's; 404 JSON for anything else.
pub async fn serve(session: &mut Session, name: &str, player: Option<&Player>) -> Result<bool> {
    if let Some((content_type, body)) = player.and_then(|p| p.asset(name)) {
        return write_body(session, content_type, body).await;
    }
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        let body = policy::Refusal::PAGE_NOT_FOUND.body();
        let mut h = ResponseHeader::build(404, Some(2))?;
        h.insert_header("Content-Type", "application/json")?;
        h.insert_header("Content-Length", body.len().to_string())?;
        session.write_response_header(Box::new(h), false).await?;
        session
            .write_response_body(Some(Bytes::from(body)), true)
            .await?;
        return Ok(true);
    };
    write(session, asset).await
}

/// Serves a share link's viewer page (the caller checked the link).
pub async fn serve_viewer(session: &mut Session) -> Result<bool> {
    write(session, &VIEWER_PAGE).await
}

/// Serves a recording link's player page (control said the link plays).
pub async fn serve_recording(session: &mut Session) -> Result<bool> {
    write(session, &RECORDING_PAGE).await
}

/// Serves the page that asks to sign out; it signs nobody out itself.
pub async fn serve_sign_out(session: &mut Session) -> Result<bool> {
    write_with(
        session,
        SIGN_OUT_PAGE.content_type,
        Bytes::from_static(SIGN_OUT_PAGE.body),
        SIGN_OUT_CSP,
        SAME_ORIGIN_REFERRER,
    )
    .await
}

/// Serves the page that asks to sign the command-line client in; it signs nothing in
/// until the user allows it.
pub async fn serve_cli_login(session: &mut Session) -> Result<bool> {
    write(session, &CLI_LOGIN_PAGE).await
}

/// Serves the admin console's page (the caller checked that the user is an admin).
pub async fn serve_admin(session: &mut Session) -> Result<bool> {
    write(session, &ADMIN_PAGE).await
}

async fn write(session: &mut Session, asset: &Asset) -> Result<bool> {
    write_body(session, asset.content_type, Bytes::from_static(asset.body)).await
}

async fn write_body(session: &mut Session, content_type: &str, body: Bytes) -> Result<bool> {
    write_with(session, content_type, body, CSP, NO_REFERRER).await
}

async fn write_with(
    session: &mut Session,
    content_type: &str,
    body: Bytes,
    csp: &str,
    referrer_policy: &str,
) -> Result<bool> {
    let mut h = ResponseHeader::build(200, Some(8))?;
    h.insert_header("Content-Type", content_type)?;
    h.insert_header("Content-Length", body.len().to_string())?;
    h.insert_header("Content-Security-Policy", csp)?;
    h.insert_header("X-Content-Type-Options", "nosniff")?;
    h.insert_header("Referrer-Policy", referrer_policy)?;
    h.insert_header("X-Frame-Options", "DENY")?;
    h.insert_header("Cache-Control", "no-cache")?;
    session.write_response_header(Box::new(h), false).await?;
    let head = session.req_header().method == "HEAD";
    session
        .write_response_body(if head { None } else { Some(body) }, true)
        .await?;
    Ok(true)
}

/// An HTML error page for browser navigations, with the same code and message as the
/// JSON answer (so a non-owner and an unknown session still look the same).
/// Whether the sessions page may send a browser back to `path` once signed in: a
/// terminal (`/s/<id>/`), a share link (`/v/<token>`), a recording link (`/r/<token>`)
/// or the command-line client's sign-in page (`/cli-login`) of this gateway, spelled
/// in the few characters they use (nothing to escape, nothing that leaves the origin).
/// The page checks the same.
pub fn returns_after_sign_in(path: &str) -> bool {
    if path == "/cli-login" {
        return true;
    }
    let rest = ["/s/", "/v/", "/r/"]
        .iter()
        .find_map(|p| path.strip_prefix(p));
    rest.is_some_and(|r| {
        let token = r.strip_suffix('/').unwrap_or(r);
        (1..=256).contains(&token.len())
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

pub async fn error_page(
    session: &mut Session,
    status: u16,
    code: &str,
    message: &str,
    sign_in_then: Option<&str>,
) -> Result<bool> {
    let escape = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    // Signed out on a page that needs a sign-in: the sessions page signs in, then goes
    // back there. The path rides in the fragment, which no server log sees (a share
    // link's path is its secret).
    let next = match sign_in_then.filter(|p| returns_after_sign_in(p)) {
        Some(path) => format!(
            "<p><a id=\"sign-in-then\" class=\"button\" href=\"/#next={path}\">Sign in to go on</a></p>"
        ),
        None => String::new(),
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{status} · termgate</title><meta name=\"termgate-error\" content=\"{}\"><link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/assets/app.css\"></head><body><header><h1>termgate</h1></header><main><h2>{status}: {}</h2><p><code>{}</code></p>{next}<p><a href=\"/\">Back to your sessions</a></p></main></body></html>",
        escape(code),
        escape(message),
        escape(code)
    );
    let mut h = ResponseHeader::build(status, Some(6))?;
    h.insert_header("Content-Type", "text/html; charset=utf-8")?;
    h.insert_header("Content-Length", body.len().to_string())?;
    // The sessions page shows terminals in a frame, and a refused terminal lands there.
    h.insert_header(
        "Content-Security-Policy",
        CSP.replace("frame-ancestors 'none'", "frame-ancestors 'self'"),
    )?;
    h.insert_header("X-Content-Type-Options", "nosniff")?;
    h.insert_header("Cache-Control", "no-store")?;
    session.write_response_header(Box::new(h), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::{
        returns_after_sign_in, ADMIN_PAGE, ASSETS, CLI_LOGIN_PAGE, RECORDING_PAGE, SIGN_OUT_PAGE,
        VIEWER_PAGE,
    };

    #[test]
    fn every_asset_a_page_loads_is_served() {
        let pages = [
            ASSETS[0].body,
            ADMIN_PAGE.body,
            VIEWER_PAGE.body,
            RECORDING_PAGE.body,
            CLI_LOGIN_PAGE.body,
            SIGN_OUT_PAGE.body,
        ];
        let mut seen = 0;
        for page in pages {
            let text = std::str::from_utf8(page).expect("a page is UTF-8");
            for part in text.split("\"/assets/").skip(1) {
                let name = &part[..part.find('"').expect("a quoted path")];
                // The recordings player is read from `gateway.player_dir`, not embedded.
                if name.starts_with("player.") {
                    continue;
                }
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "a page loads /assets/{name}, which is not served"
                );
                seen += 1;
            }
        }
        assert!(seen >= 4, "the pages' assets were not found ({seen})");
    }

    #[test]
    fn only_a_terminal_share_recording_or_client_sign_in_path_of_this_gateway_is_gone_back_to() {
        for ok in [
            "/s/abcdefghij234567/",
            "/v/abcdefghij234567-0123456789abcdef",
            "/v/abcdefghij234567-0123456789abcdef/",
            "/r/abcdefghij234567-00ff",
            "/cli-login",
        ] {
            assert!(returns_after_sign_in(ok), "{ok}");
        }
        for refused in [
            "/",
            "/s/",
            "/s//",
            "/api/sessions",
            "/admin",
            "/s/x/ws",
            "/v/a/b",
            "/v/a\"><script>",
            "/v/a%22",
            "//evil.example/v/a",
            "/s/../admin",
            "/x/abc",
            "/cli-login/",
            "/cli-login#port=1",
            &format!("/v/{}", "a".repeat(257)),
        ] {
            assert!(!returns_after_sign_in(refused), "{refused}");
        }
    }
}
