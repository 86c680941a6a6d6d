//! A terminal websocket, after admission: the gateway's own tunnel, on every listener
//! (plain TCP or TLS).
//!
//! Pingora is the door: it accepts the connection (and makes its TLS handshake), reads
//! the request head and `request_filter` admits the terminal. Then, instead of handing
//! the upgrade to Pingora's body machinery, [`open`] connects to the ttyd itself,
//! sends the rewritten head, reads ttyd's answer and, after a real `101`, takes the
//! browser's connection out of Pingora's HTTP session and hands both to a
//! [`tunnel::Tunnel`] in a task of its own. A plain connection leaves as its bare
//! socket; a TLS one as the TLS stream over it (unbuffered below rustls: the listener's
//! L4 buffers are off). Mounted in another Pingora proxy (the library's `Module`), the
//! connection leaves as the stream that proxy's listener made. No end-of-body of the upgrade request is relayed after the
//! `101`, so the tunnel cannot be ended by a stale one (cloudflare/pingora#946).
//!
//! - [`socket`]: the two ends, and the ttyd's answer;
//! - [`tunnel`]: the copy loop, enforcement's close frame, the recording;
//! - [`upward`]: what is checked of the browser's bytes, here and on Pingora's path.
//!
//! Pingora's own upgrade path (the `ProxyHttp` body filters) is taken only under the
//! debug-build test hook `TERMGATE_TEST_PINGORA_TUNNEL`, which shows its race.

mod socket;
mod tunnel;
mod upward;

use std::io::{self, ErrorKind};
use std::sync::Arc;
use std::time::Duration;

use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::server::Session as ServerSession;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use tokio::net::TcpStream;
use tokio::sync::Notify;

pub(crate) use upward::upward;

use self::socket::{read_answer, read_more, write_now, Answer, Socket, MAX_HEAD};
use self::tunnel::{Flow, Tunnel};
use super::ctx::Ctx;
use super::parts::Proxy;
use super::request_log::{log, RequestLine};
use super::upstream::{self, no_upstream, Upstream};
use crate::head_deadline::HeadDeadline;
use crate::recording::Recorder;
use crate::ws::frames;

/// Whether the request's connection can leave Pingora for a tunnel of the gateway's own:
/// HTTP/1, plain or TLS, on this gateway's listener or an embedding proxy's.
pub(super) fn eligible(session: &Session) -> bool {
    session.as_downstream().stream().is_some() && !session.as_downstream().is_http2()
}

/// The browser's connection, as this gateway's listener accepted it.
fn downstream(session: &Session) -> Option<&HeadDeadline> {
    session
        .as_downstream()
        .stream()
        .and_then(|s| (**s).as_any().downcast_ref::<HeadDeadline>())
}

fn up_error(etype: ErrorType, why: &'static str, e: io::Error) -> Box<Error> {
    let mut err = Error::because(etype, why, e);
    err.esource = pingora::ErrorSource::Upstream;
    err
}

/// Opens the terminal admitted in `ctx` through the gateway's own tunnel. Before the
/// browser's connection is taken, a failure is returned for `request_filter` to answer
/// as a failure to proxy; after it, the terminal is logged by its tunnel
/// (`Ctx::tunnelled`).
pub(super) async fn open(p: &Proxy, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
    let upstream = ctx.upstream.as_ref().ok_or_else(no_upstream)?;
    if ctx.terminal.ticket().is_none() {
        return Err(Error::explain(
            ErrorType::InternalError,
            "the terminal websocket holds no slot",
        ));
    }
    let mut head = session.req_header().clone();
    upstream::prepare(
        &mut head,
        upstream,
        ctx.principal.as_ref(),
        ctx.token.as_deref(),
    )?;
    let (mut up, answer) = ask_ttyd(p, ctx, &head).await?;
    let record = match upstream {
        Upstream::Ttyd(t) => t.record,
        Upstream::Control(_) => Default::default(),
    };
    if answer.status == 101
        && !record.is_off()
        && answer
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("sec-websocket-extensions"))
    {
        // The extension was not asked for: frames could not be read for the recording.
        return Err(up_error(
            ErrorType::InvalidHTTPHeader,
            "the ttyd negotiated a websocket extension on a recorded terminal",
            io::Error::from(ErrorKind::InvalidData),
        ));
    }
    let mut resp = ResponseHeader::build(answer.status, Some(answer.headers.len() + 5))?;
    for (name, value) in &answer.headers {
        resp.append_header(name.clone(), value.as_slice())?;
    }
    ctx.decorate(&mut resp)?;
    if answer.status != 101 {
        let timeout = Duration::from_millis(p.g.config.gateway.header_timeout_ms);
        return pass_refusal(session, resp, answer, &mut up, timeout).await;
    }
    let mut recorder = match (record.is_off(), ctx.session) {
        (false, Some(id)) => {
            let input = record == policy::feed::Recording::OutputAndInput;
            // Who types here, as ttyd was told: the owner's `sub`, or `peer:<sub>`.
            let user = head
                .headers
                .get("X-Termgate-User")
                .and_then(|v| v.to_str().ok());
            let r = p.g.recordings.start(id, input, user).map_err(|e| {
                Error::because(ErrorType::InternalError, "starting the recording", e)
            })?;
            Some(r)
        }
        _ => None,
    };
    if let Some(r) = recorder.as_mut() {
        if r.downward(&answer.rest).is_err() {
            return Err(Error::explain(
                ErrorType::InternalError,
                "the recording could not take the terminal's first bytes",
            ));
        }
    }
    // Upgraded: from here on the terminal is the tunnel's, and logged by it.
    let ctx = std::mem::replace(ctx, Ctx::tunnelled());
    hand_over(p, session, ctx, &resp, answer, up, recorder).await;
    Ok(())
}

/// Connects to the ttyd (a `tls://` pool's front: with the TLS handshake), sends it
/// `head` (bounded by `control_timeout_ms`) and reads its answer (bounded by
/// `header_timeout_ms`).
async fn ask_ttyd(p: &Proxy, ctx: &Ctx, head: &RequestHeader) -> Result<(Socket, Answer)> {
    let upstream = ctx.upstream.as_ref().ok_or_else(no_upstream)?;
    let pools = p.g.pool_tls.as_deref();
    let peer = upstream.peer(&p.control_addr, &p.ttyd, pools, ctx.request_id)?;
    let target = head.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let request_line = format!("{} {target} HTTP/1.1", head.method);
    let out = head_bytes(request_line.as_bytes(), &head.headers, &[]);
    let gateway = &p.g.config.gateway;
    let connect_timeout = Duration::from_millis(gateway.control_timeout_ms);
    let up = pingora_timeout::timeout(
        connect_timeout,
        Socket::connect_and_send(&peer, pools.map(|t| t.client()), &out),
    )
    .await;
    let mut up = match up {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(up_error(
                ErrorType::ConnectRefused,
                "connecting to the ttyd and sending the upgrade",
                e,
            ))
        }
        Err(_) => {
            return Err(up_error(
                ErrorType::ConnectTimedout,
                "connecting to the ttyd",
                io::Error::from(ErrorKind::TimedOut),
            ))
        }
    };
    let answer_timeout = Duration::from_millis(gateway.header_timeout_ms);
    match pingora_timeout::timeout(answer_timeout, read_answer(&mut up)).await {
        Ok(Ok(a)) => Ok((up, a)),
        Ok(Err(e)) => Err(up_error(
            ErrorType::ReadError,
            "reading the ttyd's answer",
            e,
        )),
        Err(_) => Err(up_error(
            ErrorType::ReadTimedout,
            "reading the ttyd's answer",
            io::Error::from(ErrorKind::TimedOut),
        )),
    }
}

/// Not upgraded: Pingora answers it, with the body the ttyd sent (its length as
/// declared, bounded; ttyd's refusals are short).
async fn pass_refusal(
    session: &mut Session,
    mut resp: ResponseHeader,
    answer: Answer,
    up: &mut Socket,
    timeout: Duration,
) -> Result<()> {
    let mut body = answer.rest;
    let declared = answer
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<usize>().ok())
        .filter(|n| *n <= MAX_HEAD);
    if let Some(n) = declared {
        let _ = pingora_timeout::timeout(timeout, read_more(up, &mut body, n)).await;
        body.truncate(n);
    }
    resp.remove_header("transfer-encoding");
    resp.insert_header("Content-Length", body.len().to_string())?;
    resp.insert_header("Connection", "close")?;
    session.set_keepalive(None);
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body.into()), true).await?;
    Ok(())
}

/// After the ttyd's `101`: writes the `101` to the browser, takes its connection out of
/// Pingora, hands the terminal to enforcement and starts its tunnel. A failure here is
/// the terminal's access line, not an answer (the `101` may be out).
async fn hand_over(
    p: &Proxy,
    session: &mut Session,
    mut ctx: Ctx,
    resp: &ResponseHeader,
    answer: Answer,
    up: Socket,
    recorder: Option<Recorder>,
) {
    let g = &p.g;
    let line = RequestLine {
        method: session.req_header().method.to_string(),
        path: session.req_header().uri.path().to_owned(),
        status: 101,
    };
    // Not needed past the upgrade (enforcement keys on its hash): not kept for the
    // terminal's life.
    ctx.token = None;
    // The ttyd's connection closes before the slot is freed (as at a tunnel's end).
    let fail = |mut ctx: Ctx, up: Socket, why: String| {
        log(&g.metrics, &line, Some(&why), &ctx);
        drop(up);
        ctx.terminal.free_slot();
    };
    let reply = head_bytes(
        b"HTTP/1.1 101 Switching Protocols",
        &resp.headers,
        &answer.rest,
    );
    ctx.bytes_down += answer.rest.len() as u64;
    // A plain socket takes the 101 while it is still Pingora's (taking it out costs
    // system calls of its own); what it did not take at once, and a TLS connection's
    // whole 101, is written once the connection is the tunnel's.
    let written = match downstream(session) {
        Some(d) if d.is_plain_tcp() => d.with_tcp(|socket| write_now(socket, &reply)),
        _ => Ok(0),
    };
    let n = match written {
        Ok(n) => n,
        Err(e) => {
            session.set_keepalive(None);
            fail(ctx, up, format!("writing the 101: {e}"));
            return;
        }
    };
    let mut down = match take_downstream(session) {
        Ok(down) => down,
        Err(e) => {
            session.set_keepalive(None);
            fail(ctx, up, format!("taking the browser's connection: {e}"));
            return;
        }
    };
    if let Err(e) = down.write_all(&reply[n..]).await {
        fail(ctx, up, format!("writing the 101: {e}"));
        return;
    }
    // The 101 is out: from here on enforcement wakes the tunnel to close.
    let wake = Arc::new(Notify::new());
    let handed = match ctx.terminal.ticket() {
        Some(t) => t.hand_to_tunnel(Arc::clone(&wake)),
        None => Err(io::Error::other("the terminal websocket holds no slot")),
    };
    if let Err(e) = handed {
        fail(
            ctx,
            up,
            format!("cannot keep the terminal for enforcement: {e}"),
        );
        return;
    }
    let mut frames_down = frames::Boundaries::default();
    frames_down.read(&answer.rest);
    let tunnel = Tunnel {
        ctx,
        g: Arc::clone(g),
        line,
        flow: Flow::default(),
        frames_down,
        woken: Box::pin(wake.notified_owned()),
        closing: None,
        recorder,
        down,
        up,
    };
    tokio::spawn(tunnel.run());
}

/// An HTTP/1.1 head as sent: its first line (without the line end), `headers`, the
/// blank line, and then `after` (bytes that follow the head).
fn head_bytes(first_line: &[u8], headers: &http::HeaderMap, after: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 + after.len());
    out.extend_from_slice(first_line);
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(after);
    out
}

/// Takes the browser's connection out of Pingora's session, leaving a stand-in that
/// Pingora then finishes as a request already answered: an empty in-memory stream
/// (reads find its end at once; no descriptor, no registration). A plain connection of
/// this gateway's listener leaves as its bare socket, a TLS one as Pingora's TLS
/// stream, and an embedding proxy's connection (the library's `Module`) as the stream its
/// listener made.
fn take_downstream(session: &mut Session) -> io::Result<Socket> {
    let stand_in: pingora::protocols::Stream = Box::new(std::io::Cursor::new(Vec::<u8>::new()));
    let taken = std::mem::replace(
        &mut *session.downstream_session,
        ServerSession::new_http1(stand_in),
    );
    let ServerSession::H1(h1) = taken else {
        return Err(io::Error::other("not an HTTP/1 connection"));
    };
    let stream = h1.into_inner();
    if !(*stream).as_any().is::<HeadDeadline>() {
        return Ok(Socket::Stream(stream));
    }
    let stream = stream
        .into_any()
        .downcast::<HeadDeadline>()
        .map_err(|_| io::Error::other("not a connection of this gateway's listener"))?;
    if stream.is_plain_tcp() {
        Ok(Socket::Tcp(TcpStream::from_std(stream.into_tcp()?)?))
    } else {
        Ok(Socket::Stream(stream.into_stream()))
    }
}
