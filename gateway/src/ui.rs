//! The sessions page: static assets embedded in the binary, served with strict headers.

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
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../assets/app.css"),
    },
];

/// Content-Security-Policy of the page: no inline script, nothing from elsewhere.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Serves an embedded asset (`""` is the page itself); 404 JSON for anything else.
pub async fn serve(session: &mut Session, name: &str) -> Result<bool> {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        let body = policy::ErrorBody::new("not_found", "no such page").to_json();
        let mut h = ResponseHeader::build(404, Some(2))?;
        h.insert_header("Content-Type", "application/json")?;
        h.insert_header("Content-Length", body.len().to_string())?;
        session.write_response_header(Box::new(h), false).await?;
        session
            .write_response_body(Some(Bytes::from(body)), true)
            .await?;
        return Ok(true);
    };
    let mut h = ResponseHeader::build(200, Some(8))?;
    h.insert_header("Content-Type", asset.content_type)?;
    h.insert_header("Content-Length", asset.body.len().to_string())?;
    h.insert_header("Content-Security-Policy", CSP)?;
    h.insert_header("X-Content-Type-Options", "nosniff")?;
    h.insert_header("Referrer-Policy", "no-referrer")?;
    h.insert_header("X-Frame-Options", "DENY")?;
    h.insert_header("Cache-Control", "no-cache")?;
    session.write_response_header(Box::new(h), false).await?;
    let head = session.req_header().method == "HEAD";
    session
        .write_response_body(
            if head {
                None
            } else {
                Some(Bytes::from_static(asset.body))
            },
            true,
        )
        .await?;
    Ok(true)
}
