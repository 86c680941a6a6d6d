//! A recorded terminal's side in its tunnel: ttyd's protocol read in both directions,
//! each read turned into at most one event and queued for the writer without waiting.

use std::sync::mpsc::Receiver;
use std::time::Instant;

use super::queue::{Event, Msg, Queue, QueueFull};
use crate::ws::frames::FrameHead;

/// Largest resize or first message gathered from a browser, bytes (ttyd's are tens).
const MAX_CONTROL_MESSAGE: usize = 4096;

/// A recorded terminal's side in its tunnel: parses each read and queues its events.
pub struct Recorder {
    pub(super) queue: Queue,
    /// Buffers the writer is done with.
    spare: Receiver<Vec<u8>>,
    started: Instant,
    input: bool,
    down: FrameReader,
    up: FrameReader,
    /// Output of the current read.
    buf: Vec<u8>,
    /// Input of the current read.
    input_buf: Vec<u8>,
    /// A resize or first message being gathered.
    message: Vec<u8>,
}

impl Recorder {
    pub(super) fn new(queue: Queue, spare: Receiver<Vec<u8>>, input: bool) -> Self {
        Recorder {
            queue,
            spare,
            started: Instant::now(),
            input,
            down: FrameReader::default(),
            up: FrameReader::default(),
            buf: Vec::new(),
            input_buf: Vec::new(),
            message: Vec::new(),
        }
    }

    /// Whether the recording stopped at its size bound (the terminal must close, and
    /// says so).
    pub fn too_large(&self) -> bool {
        self.queue
            .waiting
            .load(std::sync::atomic::Ordering::Acquire)
            == super::queue::TOO_LARGE
    }

    /// Records what ttyd sent in one read (server frames).
    pub fn downward(&mut self, bytes: &[u8]) -> Result<(), QueueFull> {
        let Recorder { down, buf, .. } = self;
        down.feed(bytes, &mut |piece| {
            if let Piece::Data(b'0', raw) = piece {
                raw.copy_into(buf);
            }
        });
        if self.buf.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::replace(&mut self.buf, self.spare.try_recv().unwrap_or_default());
        let at = self.at();
        self.queue.send(Event::Output { at, bytes })
    }

    /// Records what the browser sent in one read (masked client frames), before any
    /// rewriting by the gateway. Events keep the order they came in.
    pub fn upward(&mut self, bytes: &[u8]) -> Result<(), QueueFull> {
        let at = self.at();
        let mut result = Ok(());
        let Recorder {
            queue,
            spare,
            up,
            input,
            input_buf,
            message,
            ..
        } = self;
        let flush_input = |input_buf: &mut Vec<u8>, result: &mut Result<(), QueueFull>| {
            if !input_buf.is_empty() {
                let bytes = std::mem::replace(input_buf, spare.try_recv().unwrap_or_default());
                *result = result.and(queue.send(Event::Input { at, bytes }));
            }
        };
        up.feed(bytes, &mut |piece| match piece {
            Piece::Start(b'{') => {
                message.clear();
                message.push(b'{');
            }
            Piece::Start(b'1') => message.clear(),
            Piece::Data(b'0', raw) if *input => raw.copy_into(input_buf),
            // Longer than any size message: not gathered, so it does not parse.
            Piece::Data(b'1' | b'{', raw)
                if message.len() + raw.bytes.len() <= MAX_CONTROL_MESSAGE =>
            {
                raw.copy_into(message)
            }
            // Too long: spoiled, so that no later piece makes it parse.
            Piece::Data(b'1' | b'{', _) => {
                message.clear();
                message.push(b'!');
            }
            Piece::End(cmd @ (b'1' | b'{')) => {
                let Some((cols, rows)) = size_of(message) else {
                    return;
                };
                flush_input(input_buf, &mut result);
                let event = if cmd == b'{' {
                    Event::Size { cols, rows }
                } else {
                    Event::Resize { at, cols, rows }
                };
                result = result.and(queue.send(event));
            }
            _ => {}
        });
        flush_input(input_buf, &mut result);
        result
    }

    fn at(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.queue.tx.send(Msg::Close(self.queue.id));
    }
}

/// `columns` and `rows` of a ttyd resize or first message.
fn size_of(json: &[u8]) -> Option<(u16, u16)> {
    #[derive(serde::Deserialize)]
    struct Size {
        columns: u16,
        rows: u16,
    }
    let s: Size = serde_json::from_slice(json).ok()?;
    (s.columns > 0 && s.rows > 0).then_some((s.columns, s.rows))
}

/// Payload bytes as they came, with the mask that hides them (client frames).
pub(crate) struct Raw<'a> {
    bytes: &'a [u8],
    mask: Option<[u8; 4]>,
    /// Position of `bytes[0]` in its frame's payload.
    offset: usize,
}

impl Raw<'_> {
    fn copy_into(&self, dst: &mut Vec<u8>) {
        match self.mask {
            None => dst.extend_from_slice(self.bytes),
            Some(m) => dst.extend(
                self.bytes
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ m[(self.offset + i) % 4]),
            ),
        }
    }
}

/// What a [`FrameReader`] finds in a data message: its command (first payload byte)
/// when it starts, the rest of its payload in pieces, and its end.
pub(crate) enum Piece<'a> {
    Start(u8),
    Data(u8, Raw<'a>),
    End(u8),
}

/// Reads websocket frames across read boundaries, without copying, and reports the
/// pieces of data messages by their ttyd command.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    head: [u8; FrameHead::MAX],
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: u64,
    /// Payload bytes of the current frame seen.
    offset: usize,
    mask: Option<[u8; 4]>,
    /// The current frame is a control frame (ping, pong, close): skipped.
    control: bool,
    fin: bool,
    /// The command of the data message in progress, once its first byte is seen.
    command: Option<u8>,
    /// The next payload byte is a data message's first.
    want_command: bool,
    /// Inside a frame (its header or payload).
    in_frame: bool,
}

impl FrameReader {
    pub(crate) fn feed(&mut self, mut data: &[u8], out: &mut impl FnMut(Piece<'_>)) {
        while !data.is_empty() {
            if self.in_frame && self.have == 0 {
                // Payload.
                let n = self.left.min(data.len() as u64) as usize;
                let (mut chunk, rest) = data.split_at(n);
                data = rest;
                if !self.control {
                    if self.want_command && !chunk.is_empty() {
                        let m = self.mask.map_or(0, |m| m[self.offset % 4]);
                        let command = chunk[0] ^ m;
                        self.want_command = false;
                        self.command = Some(command);
                        self.offset += 1;
                        chunk = &chunk[1..];
                        out(Piece::Start(command));
                    }
                    if let (Some(command), false) = (self.command, chunk.is_empty()) {
                        out(Piece::Data(
                            command,
                            Raw {
                                bytes: chunk,
                                mask: self.mask,
                                offset: self.offset,
                            },
                        ));
                    }
                }
                self.offset += chunk.len();
                self.left -= n as u64;
                if self.left == 0 {
                    self.end_frame(out);
                }
                continue;
            }
            self.in_frame = true;
            self.head[self.have] = data[0];
            self.have += 1;
            data = &data[1..];
            let head = match FrameHead::parse(&self.head[..self.have]) {
                Some(head) if self.have >= head.size => head,
                _ => continue,
            };
            self.left = head.len;
            self.mask = head.mask(&self.head);
            self.have = 0;
            self.offset = 0;
            self.fin = head.fin;
            self.control = head.opcode >= 8;
            if matches!(head.opcode, 1 | 2) {
                self.command = None;
                self.want_command = true;
            }
            if self.left == 0 {
                self.end_frame(out);
            }
        }
    }

    fn end_frame(&mut self, out: &mut impl FnMut(Piece<'_>)) {
        self.in_frame = false;
        self.have = 0;
        if self.fin && !self.control {
            if let Some(c) = self.command.take() {
                out(Piece::End(c));
            }
            self.want_command = false;
        }
    }
}
