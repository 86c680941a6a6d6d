//! `termgate attach`: the session's terminal in the user's own, through the gateway's
//! websocket, until the detach keys, a close from the gateway, or a signal.

mod keys;
mod local;
mod socket;
mod ttyd;

use std::io::{Read, Write};
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::failure::{Failure, Status};
use crate::gateway::Gateway;
use crate::sessions::Listed;

pub use keys::{parse as parse_detach_keys, DEFAULT as DEFAULT_DETACH_KEYS};

/// How an attach ended: its status, and what the user is told on standard error.
#[derive(Debug)]
pub struct Ended {
    /// The exit status.
    pub status: Status,
    /// One line, after the terminal is given back.
    pub message: String,
}

/// Attaches to `session` (`wanted` is how the user named it) until it ends one way or
/// another; `detach_keys` leave it running.
pub async fn attach(
    gw: &Gateway,
    session: &Listed,
    wanted: &str,
    detach_keys: Vec<u8>,
) -> Result<Ended, Failure> {
    let mut socket = open(gw, session, wanted).await?;
    // Registered before raw mode: from then on these signals end the loop, which gives
    // the terminal back, rather than the process.
    let signals = (|| {
        Ok::<_, std::io::Error>((
            signal(SignalKind::window_change())?,
            signal(SignalKind::terminate())?,
            signal(SignalKind::hangup())?,
            signal(SignalKind::interrupt())?,
        ))
    })()
    .map_err(|e| Failure::error(format!("signals: {e}")))?;
    let (mut winch, mut term, mut hup, mut int) = signals;
    let mut raw = local::Raw::enter().map_err(Failure::error)?;
    let typed = stdin_reader();
    let mut tail = ttyd::Tail::default();
    let ended = pump(
        &mut socket,
        typed,
        &mut keys::Detacher::new(detach_keys),
        &mut tail,
        Signals {
            winch: &mut winch,
            term: &mut term,
            hup: &mut hup,
            int: &mut int,
        },
    )
    .await;
    raw.restore();
    // Behind a front proxy the reason is the terminal's last line, before ttyd closes
    // it as for any program's end (or the connection just drops); a reason the close
    // frame gives is the gateway's, and stands.
    let ended = match (ended, tail.reason()) {
        (Pumped::Closed { code, reason }, Some(printed)) if !reason.starts_with("termgate: ") => {
            Pumped::Closed {
                code,
                reason: printed.to_owned(),
            }
        }
        (Pumped::Lost(_), Some(printed)) => Pumped::Closed {
            code: 1000,
            reason: printed.to_owned(),
        },
        (ended, _) => ended,
    };
    let ended = match ended {
        Pumped::Detached => Ended {
            status: Status::Done,
            message: format!(
                "termgate: detached; the session keeps running (termgate attach {wanted})"
            ),
        },
        Pumped::Closed { code, reason } => {
            let (status, message) = ttyd::closed(code, &reason);
            Ended { status, message }
        }
        Pumped::Lost(why) => Ended {
            status: Status::ConnectionLost,
            message: format!("termgate: the connection to the gateway was lost: {why}"),
        },
        Pumped::Signalled(n) => Ended {
            status: Status::Signalled(n),
            message: format!("termgate: stopped by signal {n}; the session keeps running"),
        },
    };
    // Tell the gateway we are going, briefly: the exit does not wait on it.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), socket.close(None)).await;
    Ok(ended)
}

/// Opens the terminal; a session the list showed may be a moment ahead of the gateway's
/// routes, so its 404 is tried again for a while.
async fn open(gw: &Gateway, session: &Listed, wanted: &str) -> Result<socket::Socket, Failure> {
    let listed = !session.view.is_null();
    if listed && !session.is_live() {
        return Err(Failure {
            status: Status::Ended,
            message: format!("session {wanted:?} has ended ({})", session.state),
        });
    }
    let start = Instant::now();
    loop {
        match socket::open(gw, &session.id, local::size()).await {
            Ok(s) => return Ok(s),
            Err(socket::Refused::Failed(f)) => return Err(f),
            Err(socket::Refused::NotFound) if listed && start.elapsed() < socket::ROUTE_WAIT => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(socket::Refused::NotFound) => return Err(Failure::not_found(wanted)),
        }
    }
}

/// What the user typed, read on a thread of its own (a read of a terminal cannot be
/// cancelled; the process's exit ends it). `None`: standard input ended.
fn stdin_reader() -> mpsc::Receiver<Option<Vec<u8>>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            let read = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(buf[..n].to_vec()),
            };
            let end = read.is_none();
            if tx.blocking_send(read).is_err() || end {
                return;
            }
        }
    });
    rx
}

struct Signals<'a> {
    winch: &'a mut tokio::signal::unix::Signal,
    term: &'a mut tokio::signal::unix::Signal,
    hup: &'a mut tokio::signal::unix::Signal,
    int: &'a mut tokio::signal::unix::Signal,
}

enum Pumped {
    Detached,
    Closed { code: u16, reason: String },
    Lost(String),
    Signalled(u8),
}

/// Moves bytes both ways until something ends the attach.
async fn pump(
    socket: &mut socket::Socket,
    mut typed: mpsc::Receiver<Option<Vec<u8>>>,
    detacher: &mut keys::Detacher,
    tail: &mut ttyd::Tail,
    signals: Signals<'_>,
) -> Pumped {
    let mut stdout = std::io::stdout();
    loop {
        let send = tokio::select! {
            message = socket.next() => match message {
                Some(Ok(Message::Binary(b))) => {
                    write_output(&mut stdout, tail, &b);
                    continue;
                }
                Some(Ok(Message::Text(t))) => {
                    write_output(&mut stdout, tail, t.as_bytes());
                    continue;
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame.map_or((1005, String::new()), |f| {
                        (u16::from(f.code), f.reason.to_string())
                    });
                    return Pumped::Closed { code, reason };
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Pumped::Lost(e.to_string()),
                None => return Pumped::Lost("the connection closed without a word".into()),
            },
            bytes = typed.recv() => match bytes.flatten() {
                Some(bytes) => {
                    let t = detacher.feed(&bytes);
                    if !t.send.is_empty() {
                        if let Err(e) = socket.send(Message::Binary(ttyd::input(&t.send).into())).await {
                            return Pumped::Lost(e.to_string());
                        }
                    }
                    if t.detach {
                        return Pumped::Detached;
                    }
                    continue;
                }
                // Nothing more can be typed: leave the session as the detach keys would.
                None => return Pumped::Detached,
            },
            _ = signals.winch.recv() => {
                let (columns, rows) = local::size();
                ttyd::resize(columns, rows)
            }
            _ = signals.term.recv() => return Pumped::Signalled(15),
            _ = signals.hup.recv() => return Pumped::Signalled(1),
            _ = signals.int.recv() => return Pumped::Signalled(2),
        };
        if let Err(e) = socket.send(Message::Binary(send.into())).await {
            return Pumped::Lost(e.to_string());
        }
    }
}

/// The terminal's output, as it comes; only a message from ttyd with output is written.
fn write_output(stdout: &mut std::io::Stdout, tail: &mut ttyd::Tail, message: &[u8]) {
    if let Some(bytes) = ttyd::output(message) {
        tail.push(bytes);
        let mut out = stdout.lock();
        // A closed standard output leaves nothing to show; the attach goes on until
        // the user or the gateway ends it.
        let _ = out.write_all(bytes).and_then(|()| out.flush());
    }
}
