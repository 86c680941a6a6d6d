//! The copy loop of a terminal's tunnel, after the `101`: one poll function for a bare
//! socket or a TLS stream on the browser's side.
//!
//! - An idle terminal holds no buffer of the tunnel's: a direction is read only when
//!   its connection has bytes, into a per-thread scratch buffer borrowed only within
//!   one poll, and written on at once. Only bytes the other side cannot take yet are
//!   kept, in a buffer owned by that direction until they are written (and that
//!   direction is not read meanwhile). Under TLS (the browser's connection, or a
//!   `tls://` pool's front), what rustls took is flushed before the tunnel waits or ends.
//! - Upward bytes pass each frame's size check (`gateway.max_ws_frame_bytes`) and a
//!   `ttyd -c` target's first message ([`upward`]); a recorded terminal's bytes pass
//!   its [`Recorder`] both ways before they are written on.
//! - The tunnel is the one writer of the browser's connection. Enforcement wakes it
//!   ([`crate::terminals::Ticket::hand_to_tunnel`]); it then passes on the rest of the
//!   ttyd's frame in progress (the ttyd's frame headers are followed for this, not its
//!   payloads), writes its close frame with the reason, and ends. Nothing of the
//!   ttyd's follows the close frame, and none is written once the ttyd sent its own.
//!   A terminal that cannot be closed so within [`CLOSE_GRACE`] (a browser that reads
//!   nothing, a frame that never ends) is cut without one.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::futures::OwnedNotified;

use super::socket::{flush, send, Socket};
use super::upward::upward;
use crate::proxy::ctx::Ctx;
use crate::proxy::request_log::{log, RequestLine};
use crate::recording::{QueueFull, Recorder};
use crate::state::Gateway;
use crate::ws::frames;

/// Bytes read from a connection at a time.
const SCRATCH: usize = 64 * 1024;
/// Full reads of bulk output passed on in a row before the browser's side is looked at.
const READS_PER_WAKE: usize = 8;
/// Rounds of both directions in one poll before the task yields to others.
const ROUNDS_PER_POLL: usize = 16;
/// How long a terminal being closed by enforcement may take to reach a frame boundary
/// and write its close frame before it is cut without one.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(1);

thread_local! {
    /// The one read buffer of each worker thread: held only within one poll of a
    /// tunnel, never across an await.
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// A running tunnel.
///
/// Fields drop in their order: the connections before `ctx`, whose ticket holds the
/// terminal's slot, so that a tunnel dropped unfinished closes the ttyd's connection
/// before its slot is freed too.
pub(super) struct Tunnel {
    pub(super) up: Socket,
    pub(super) down: Socket,
    pub(super) ctx: Ctx,
    pub(super) g: Arc<Gateway>,
    pub(super) line: RequestLine,
    pub(super) flow: Flow,
    /// Where the ttyd's frames to the browser begin and end.
    pub(super) frames_down: frames::Boundaries,
    /// Ready once enforcement woke the tunnel to close (a permit stored before the
    /// first poll counts).
    pub(super) woken: Pin<Box<OwnedNotified>>,
    /// Set once enforcement closes the terminal.
    pub(super) closing: Option<Closing>,
    /// Set for a recorded terminal.
    pub(super) recorder: Option<Recorder>,
}

/// Where the bytes of a tunnel are.
#[derive(Default)]
pub(super) struct Flow {
    /// Bytes read from the browser that the ttyd could not take yet.
    up_pending: Vec<u8>,
    /// Bytes read from the ttyd that the browser could not take yet.
    down_pending: Vec<u8>,
    /// Bytes the browser's connection took into its own buffer (TLS) and has not
    /// written yet.
    down_unflushed: bool,
    /// Bytes the ttyd's connection took into its own buffer (a `tls://` pool's front)
    /// and has not written yet.
    up_unflushed: bool,
    up_eof: bool,
    down_eof: bool,
}

impl Flow {
    /// Writes to the browser what it takes now; keeps the rest.
    fn send_down(
        &mut self,
        down: &mut Socket,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> std::io::Result<()> {
        send(down, cx, bytes, &mut self.down_pending)?;
        self.down_unflushed |= down.buffers();
        Ok(())
    }

    /// Whether everything read from the ttyd is on its way to the browser.
    fn down_written(&self) -> bool {
        self.down_pending.is_empty() && !self.down_unflushed
    }

    /// Writes to the ttyd what it takes now; keeps the rest.
    fn send_up(
        &mut self,
        up: &mut Socket,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> std::io::Result<()> {
        send(up, cx, bytes, &mut self.up_pending)?;
        self.up_unflushed |= up.buffers();
        Ok(())
    }

    /// Whether everything read from the browser is on its way to the ttyd.
    fn up_written(&self) -> bool {
        self.up_pending.is_empty() && !self.up_unflushed
    }
}

/// A terminal that enforcement is closing.
pub(super) struct Closing {
    /// Past it, the terminal is cut without a close frame.
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The close frame is written, or queued in `down_pending`, or not needed (the
    /// ttyd sent its own).
    framed: bool,
}

/// Why the copy loop ended early.
pub(super) type Failure = String;

impl Tunnel {
    /// Copies until the ttyd ends the terminal (or enforcement closes it), or either
    /// side fails; then logs the terminal, frees its slot and closes both sides.
    pub(super) async fn run(mut self) {
        let error = std::future::poll_fn(|cx| self.poll_copy(cx)).await.err();
        log(&self.g.metrics, &self.line, error.as_deref(), &self.ctx);
        let Tunnel {
            mut ctx, down, up, ..
        } = self;
        // The ttyd's connection closes before the slot is freed: a terminal admitted
        // into the freed slot never finds this one still open at the ttyd. The
        // browser's side may take up to its grace to close; the slot does not wait.
        drop(up);
        ctx.terminal.free_slot();
        down.close(CLOSE_GRACE).await;
    }

    /// One wake-up of the tunnel: moves bytes both ways until neither side can move
    /// more (every connection it waits on then holds this task's waker), or until
    /// [`ROUNDS_PER_POLL`] rounds moved bytes (then it yields, woken again at once).
    fn poll_copy(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Failure>> {
        for _ in 0..ROUNDS_PER_POLL {
            if let Some(c) = self.closing.as_mut() {
                if !c.framed && self.frames_down.at_boundary() {
                    c.framed = true;
                    if !self.frames_down.ttyd_closed() {
                        let why = self.ctx.terminal.ticket().and_then(|t| t.closed());
                        let frame = crate::terminals::close_frame(
                            why.map_or("termgate: terminal closed", |w| w.message()),
                        );
                        self.flow
                            .send_down(&mut self.down, cx, &frame)
                            .map_err(|e| format!("browser: {e}"))?;
                    }
                }
                if c.framed && self.flow.down_written() {
                    return Poll::Ready(Ok(()));
                }
                if c.deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(
                        "closed by enforcement without a close frame: the \
                                            browser took nothing, or the ttyd's frame did not end"
                            .into(),
                    ));
                }
            }
            let flow = &self.flow;
            // Either side gone (the ttyd done, the browser away) ends the terminal once
            // what it sent is passed on: a websocket has no use for a half-closed
            // connection.
            if (flow.up_eof && flow.down_written()) || (flow.down_eof && flow.up_written()) {
                return Poll::Ready(Ok(()));
            }
            let open = self.closing.is_none();
            if open && self.woken.as_mut().poll(cx).is_ready() {
                // What the browser sent no longer goes anywhere.
                self.flow.up_pending = Vec::new();
                self.flow.up_unflushed = false;
                self.closing = Some(Closing {
                    deadline: Box::pin(tokio::time::sleep(CLOSE_GRACE)),
                    framed: false,
                });
                continue;
            }
            let mut moved = self.write_pending(cx, open)?;
            if !self.flow.down_eof && self.flow.up_pending.is_empty() {
                moved |= if open {
                    self.pump_up(cx)?
                } else {
                    self.drain(cx)?
                };
            }
            let read_up = !self.flow.up_eof
                && self.flow.down_pending.is_empty()
                && self.closing.as_ref().is_none_or(|c| !c.framed);
            if read_up {
                moved |= self.pump_down(cx, !open)?;
            }
            if !moved {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Writes what waits, before anything new is read (the ttyd's only while the
    /// terminal is `open`). Whether anything moved.
    fn write_pending(&mut self, cx: &mut Context<'_>, open: bool) -> Result<bool, Failure> {
        let Tunnel { flow, down, up, .. } = self;
        let mut moved = false;
        if !flow.down_pending.is_empty() {
            let n = flush(down, cx, &mut flow.down_pending).map_err(|e| format!("browser: {e}"))?;
            flow.down_unflushed |= n > 0 && down.buffers();
            moved |= n > 0;
        }
        if flow.down_unflushed && flow.down_pending.is_empty() {
            if let Poll::Ready(r) = down.poll_flush(cx) {
                r.map_err(|e| format!("browser: {e}"))?;
                flow.down_unflushed = false;
                moved = true;
            }
        }
        if open && !flow.up_pending.is_empty() {
            let n = flush(up, cx, &mut flow.up_pending).map_err(|e| format!("ttyd: {e}"))?;
            flow.up_unflushed |= n > 0 && up.buffers();
            moved |= n > 0;
        }
        if open && flow.up_unflushed && flow.up_pending.is_empty() {
            if let Poll::Ready(r) = up.poll_flush(cx) {
                r.map_err(|e| format!("ttyd: {e}"))?;
                flow.up_unflushed = false;
                moved = true;
            }
        }
        Ok(moved)
    }

    /// Browser → ttyd: one read, checked, written on. Whether anything moved.
    fn pump_up(&mut self, cx: &mut Context<'_>) -> Result<bool, Failure> {
        let max = self.g.config.gateway.max_ws_frame_bytes;
        SCRATCH_BUF.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let n = match self.down.poll_read(cx, &mut scratch) {
                Poll::Pending => return Ok(false),
                Poll::Ready(Ok(0)) => {
                    self.flow.down_eof = true;
                    return Ok(true);
                }
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Err(format!("browser: {e}")),
            };
            let checked = upward(&mut self.ctx, &scratch[..n], max)?;
            if let Some(r) = self.recorder.as_mut() {
                // As the browser sent them (before a target's token is written in).
                if r.upward(&scratch[..n]).is_err() {
                    let boundary = self.frames_down.at_boundary();
                    return Err(self.recording_stopped(cx, boundary));
                }
            }
            let Some(bytes) = checked else {
                return Ok(true);
            };
            self.ctx.bytes_up += bytes.len() as u64;
            self.flow
                .send_up(&mut self.up, cx, &bytes)
                .map_err(|e| format!("ttyd: {e}"))?;
            Ok(true)
        })
    }

    /// ttyd → browser: reads written on at once, while the ttyd has more (a full read)
    /// and the browser takes it all, at most [`READS_PER_WAKE`] times. While `closing`,
    /// only the rest of the frame in progress is passed on; what follows it is dropped.
    /// Whether anything moved.
    fn pump_down(&mut self, cx: &mut Context<'_>, closing: bool) -> Result<bool, Failure> {
        SCRATCH_BUF.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let mut moved = false;
            for _ in 0..READS_PER_WAKE {
                let n = match self.up.poll_read(cx, &mut scratch) {
                    Poll::Pending => return Ok(moved),
                    Poll::Ready(Ok(0)) => {
                        self.flow.up_eof = true;
                        return Ok(true);
                    }
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Err(format!("ttyd: {e}")),
                };
                moved = true;
                let boundary = self.frames_down.at_boundary();
                let n = if closing {
                    self.frames_down.read_to_boundary(&scratch[..n])
                } else {
                    self.frames_down.read(&scratch[..n]);
                    n
                };
                if let Some(r) = self.recorder.as_mut() {
                    // Recorded before the browser sees it, or not passed on at all.
                    if let Err(QueueFull) = r.downward(&scratch[..n]) {
                        return Err(self.recording_stopped(cx, boundary));
                    }
                }
                self.ctx.bytes_down += n as u64;
                self.flow
                    .send_down(&mut self.down, cx, &scratch[..n])
                    .map_err(|e| format!("browser: {e}"))?;
                if n < scratch.len()
                    || !self.flow.down_pending.is_empty()
                    || (closing && self.frames_down.at_boundary())
                {
                    break;
                }
            }
            Ok(moved)
        })
    }

    /// Browser → nowhere, while enforcement closes the terminal: what the browser sends
    /// is read (so that closing its connection resets nothing) and dropped. Whether
    /// anything moved.
    fn drain(&mut self, cx: &mut Context<'_>) -> Result<bool, Failure> {
        SCRATCH_BUF.with(
            |scratch| match self.down.poll_read(cx, &mut scratch.borrow_mut()) {
                Poll::Pending => Ok(false),
                Poll::Ready(Ok(0)) => {
                    self.flow.down_eof = true;
                    Ok(true)
                }
                Poll::Ready(Ok(_)) => Ok(true),
                Poll::Ready(Err(e)) => Err(format!("browser: {e}")),
            },
        )
    }

    /// A recording that cannot go on: its writer fell behind (`gateway.recording_queue`)
    /// or its file reached its bound (`control.max_recording_bytes`, or the spool's
    /// `gateway.recordings_spool_max_bytes`). The terminal is closed rather than
    /// recorded incompletely. The browser is told why in a close frame when one can be
    /// written between frames (`boundary`: the bytes passed on so far end a frame), so
    /// that ttyd's page does not reconnect.
    fn recording_stopped(&mut self, cx: &mut Context<'_>, boundary: bool) -> Failure {
        let too_large = self.recorder.as_ref().is_some_and(Recorder::too_large);
        let (reason, said, failure) = if too_large {
            (
                "recording_too_large",
                "termgate: this terminal's recording reached its size limit; terminal closed",
                "the recording reached its size limit (control.max_recording_bytes or gateway.recordings_spool_max_bytes): terminal closed",
            )
        } else {
            (
                "recording_queue_full",
                "termgate: the recording fell behind; terminal closed",
                "the recording's writer fell behind (gateway.recording_queue): terminal closed rather than recorded incompletely",
            )
        };
        self.ctx.reason = reason;
        if boundary && self.flow.down_pending.is_empty() {
            let frame = crate::terminals::close_frame(said);
            // Best effort: what the browser does not take now is dropped with the
            // terminal (under TLS, rustls's buffer is flushed when the connection is
            // closed).
            let _ = self.flow.send_down(&mut self.down, cx, &frame);
        }
        failure.into()
    }
}
