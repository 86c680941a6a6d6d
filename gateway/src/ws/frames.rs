//! The size of each websocket frame a browser sends up a terminal
//! (`gateway.max_ws_frame_bytes`), and where the frames a ttyd sends down begin and end
//! ([`Boundaries`]: the one place a close frame of the gateway's can go).
//!
//! ttyd (libwebsockets) gathers a message in memory until its last fragment, and one
//! ttyd serves every terminal: one huge frame would grow the process all terminals
//! share. The gateway reads only frame headers and skips payloads by their length, so
//! the cost is per frame, not per byte, and nothing is copied but header bytes.
//!
//! The same reader tells input from the rest: the first payload byte of a ttyd client
//! message is its command (`'0'` input, `'1'` resize, `'2'`/`'3'` pause/resume, `'{'`
//! the first JSON message). For each input message it touches the session's
//! [`InputClock`] (profiles' `idle_timeout_seconds`); control frames (pings) and
//! continuations never count.

use crate::clock::InputClock;

/// A websocket frame's header, read as far as its payload length (RFC 6455 §5.2): the
/// one reader of frame headers, used here and by `recording`'s reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHead {
    /// The last frame of its message.
    pub fin: bool,
    /// `1` text, `2` binary, `0` continuation, `8` and up control frames.
    pub opcode: u8,
    /// The payload's length.
    pub len: u64,
    /// The whole header's length, masking key included: 2 to 14 bytes.
    pub size: usize,
    masked: bool,
}

impl FrameHead {
    /// The longest header: 2 bytes, an 8-byte length and a 4-byte masking key.
    pub(crate) const MAX: usize = 14;

    /// Reads the first bytes of a header; `None` until they hold the payload length.
    #[inline]
    pub(crate) fn parse(bytes: &[u8]) -> Option<FrameHead> {
        let [b0, b1, rest @ ..] = bytes else {
            return None;
        };
        let masked = b1 & 0x80 != 0;
        let (len_bytes, len) = match b1 & 0x7f {
            126 => (2, None),
            127 => (8, None),
            n => (0, Some(u64::from(n))),
        };
        let len = match len {
            Some(len) => len,
            None => rest
                .get(..len_bytes)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        };
        Some(FrameHead {
            fin: b0 & 0x80 != 0,
            opcode: b0 & 0x0f,
            len,
            size: 2 + len_bytes + if masked { 4 } else { 0 },
            masked,
        })
    }

    /// The masking key of a masked frame, from its whole header (`size` bytes or more);
    /// `None` when unmasked.
    #[inline]
    pub(crate) fn mask(&self, bytes: &[u8]) -> Option<[u8; 4]> {
        if !self.masked {
            return None;
        }
        bytes.get(self.size - 4..self.size)?.try_into().ok()
    }
}

/// A frame header received a byte at a time.
#[derive(Debug, Default)]
struct HeadBytes {
    bytes: [u8; FrameHead::MAX],
    have: usize,
}

impl HeadBytes {
    /// Takes the next byte of a header: the header as far as it is known (`None` until
    /// its payload length is), and whether it is whole. A whole header's bytes stay
    /// readable ([`HeadBytes::bytes`]) until the next header begins.
    #[inline]
    fn push(&mut self, byte: u8) -> Option<(FrameHead, bool)> {
        self.bytes[self.have] = byte;
        self.have += 1;
        let head = FrameHead::parse(&self.bytes[..self.have])?;
        let whole = self.have >= head.size;
        if whole {
            self.have = 0;
        }
        Some((head, whole))
    }

    /// No header in progress.
    fn is_empty(&self) -> bool {
        self.have == 0
    }

    /// The last whole header's bytes.
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Passes over as much of the current frame's payload (`skip` bytes still to come) as
/// `data` holds.
#[inline]
fn pass_payload(skip: &mut u64, data: &mut &[u8]) {
    let n = (*skip).min(data.len() as u64);
    *skip -= n;
    *data = &data[n as usize..];
}

/// Where the reader is in the stream of client frames.
#[derive(Debug, Default)]
pub(crate) struct FrameSizes {
    /// Payload bytes of the current frame still to pass.
    skip: u64,
    head: HeadBytes,
    /// Touched on input; `None`: input is not recorded (a target's terminal).
    clock: Option<InputClock>,
    /// The mask of a data frame's first payload byte, while that byte is still to come.
    command_mask: Option<u8>,
}

/// A frame whose payload is larger than the bound.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TooLarge(pub u64);

impl FrameSizes {
    /// A reader that touches `clock` for each input message.
    pub(crate) fn new(clock: Option<InputClock>) -> Self {
        FrameSizes {
            clock,
            ..FrameSizes::default()
        }
    }

    /// Reads the frame headers in `data`; refuses a frame with a payload over `max`.
    /// Touches the clock (once per call) when an input message began in `data`.
    pub(crate) fn feed(&mut self, data: &[u8], max: u64) -> Result<(), TooLarge> {
        let mut typed = false;
        let r = self.read(data, max, &mut typed);
        if typed {
            if let Some(c) = &self.clock {
                c.touch();
            }
        }
        r
    }

    fn read(&mut self, mut data: &[u8], max: u64, typed: &mut bool) -> Result<(), TooLarge> {
        while !data.is_empty() {
            if self.skip > 0 {
                if let Some(mask) = self.command_mask.take() {
                    *typed |= data[0] ^ mask == b'0';
                }
                pass_payload(&mut self.skip, &mut data);
                continue;
            }
            let pushed = self.head.push(data[0]);
            data = &data[1..];
            let Some((head, whole)) = pushed else {
                continue;
            };
            // Refused as soon as the length is known, before the mask arrives.
            if head.len > max {
                return Err(TooLarge(head.len));
            }
            if !whole {
                continue;
            }
            self.skip = head.len;
            // Text or binary, not a continuation: its first byte is ttyd's command.
            self.command_mask =
                (self.clock.is_some() && head.len > 0 && matches!(head.opcode, 1 | 2))
                    .then(|| head.mask(self.head.bytes()).map_or(0, |m| m[0]));
        }
        Ok(())
    }
}

/// Where the ttyd's frames to the browser begin and end. The tunnel writes its own
/// close frame only between two of them, and none once the ttyd sent its own. Headers
/// only are read, as [`FrameSizes`] does: the cost is per frame, not per byte.
#[derive(Debug, Default)]
pub(crate) struct Boundaries {
    /// Payload bytes of the current frame still to pass.
    skip: u64,
    head: HeadBytes,
    /// The ttyd began a close frame of its own.
    closed: bool,
}

impl Boundaries {
    /// Whether the bytes read so far end a frame.
    pub(crate) fn at_boundary(&self) -> bool {
        self.skip == 0 && self.head.is_empty()
    }

    /// Whether the ttyd sent a close frame of its own.
    pub(crate) fn ttyd_closed(&self) -> bool {
        self.closed
    }

    /// Reads all of `data`.
    pub(crate) fn read(&mut self, data: &[u8]) {
        self.read_to(data, false);
    }

    /// Reads `data` as far as the end of the frame in progress; how many of its bytes
    /// that is (`0` on a boundary already, all of them if the frame goes on past them).
    pub(crate) fn read_to_boundary(&mut self, data: &[u8]) -> usize {
        self.read_to(data, true)
    }

    fn read_to(&mut self, mut data: &[u8], stop: bool) -> usize {
        let total = data.len();
        while !data.is_empty() {
            if stop && self.at_boundary() {
                break;
            }
            if self.skip > 0 {
                pass_payload(&mut self.skip, &mut data);
                continue;
            }
            let pushed = self.head.push(data[0]);
            data = &data[1..];
            if let Some((head, true)) = pushed {
                self.closed |= head.opcode == 8;
                self.skip = head.len;
            }
        }
        total - data.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> Vec<u8> {
        framed(0x82, &vec![b'x'; len])
    }

    /// A masked client frame with first byte `b0` and `payload`.
    fn framed(b0: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![b0];
        match len {
            0..=125 => f.push(0x80 | len as u8),
            126..=65535 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    #[test]
    fn a_frame_head_is_read_as_far_as_its_length_then_whole() {
        for len in [0, 125, 126, 65535, 65536] {
            let f = framed(0x82, &vec![b'x'; len]);
            let size = f.len() - len;
            for short in 0..size {
                let head = FrameHead::parse(&f[..short]);
                let known = short >= size - 4;
                assert_eq!(head.is_some(), known, "len {len}, {short} bytes");
            }
            let head = FrameHead::parse(&f[..size]).unwrap();
            assert_eq!(
                (head.fin, head.opcode, head.len, head.size),
                (true, 2, len as u64, size)
            );
            assert_eq!(head.mask(&f[..size]), Some([0x37, 0xfa, 0x21, 0x3d]));
        }
        let unmasked = FrameHead::parse(&[0x01, 5]).unwrap();
        assert_eq!(
            (unmasked.fin, unmasked.opcode, unmasked.len, unmasked.size),
            (false, 1, 5, 2)
        );
        assert_eq!(unmasked.mask(&[0x01, 5]), None);
    }

    /// Feeds `stream` in chunks of `chunk`; whether the clock was touched.
    fn touched(stream: &[u8], chunk: usize) -> bool {
        let clock = InputClock::default();
        let mut f = FrameSizes::new(Some(clock.clone()));
        for c in stream.chunks(chunk) {
            assert_eq!(f.feed(c, 1 << 20), Ok(()));
        }
        clock.last() != 0
    }

    #[test]
    fn only_ttyd_input_messages_touch_the_clock_in_any_split() {
        let mut quiet = Vec::new();
        quiet.extend(framed(0x82, br#"{"AuthToken":"","columns":80,"rows":24}"#));
        quiet.extend(framed(0x82, br#"1{"columns":100,"rows":30}"#));
        quiet.extend(framed(0x82, b"2"));
        quiet.extend(framed(0x82, b"3"));
        quiet.extend(framed(0x89, b"0ping")); // a ping whose payload looks like input
        quiet.extend(framed(0x8a, b"0pong"));
        quiet.extend(framed(0x82, b""));
        // A fragmented resize whose continuation begins with '0'.
        quiet.extend(framed(0x02, b"1{"));
        quiet.extend(framed(0x80, b"0}"));
        let mut typed = quiet.clone();
        typed.extend(framed(0x82, b"0ls\r"));
        let mut text = quiet.clone();
        text.extend(framed(0x81, b"0x"));
        let mut long = quiet.clone();
        long.extend(framed(0x82, &[b'0'; 70_000]));
        for chunk in [1, 2, 3, 5, 7, 13, 4096, 1 << 20] {
            assert!(!touched(&quiet, chunk), "chunks of {chunk}: no input");
            assert!(touched(&typed, chunk), "chunks of {chunk}: input");
            assert!(touched(&text, chunk), "chunks of {chunk}: input as text");
            assert!(touched(&long, chunk), "chunks of {chunk}: long input");
        }
    }

    #[test]
    fn without_a_clock_nothing_is_recorded() {
        let mut f = FrameSizes::new(None);
        assert_eq!(f.feed(&framed(0x82, b"0ls"), 1 << 20), Ok(()));
        assert_eq!(f.command_mask, None);
    }

    #[test]
    fn frames_within_the_bound_pass_in_any_split() {
        let mut stream = Vec::new();
        for len in [0, 1, 125, 126, 300, 65535, 65536, 70000] {
            stream.extend(frame(len));
        }
        for chunk in [1, 2, 3, 7, 13, 4096, stream.len()] {
            let mut f = FrameSizes::default();
            for c in stream.chunks(chunk) {
                assert_eq!(f.feed(c, 70000), Ok(()), "chunks of {chunk}");
            }
            assert_eq!(
                (f.skip, f.head.is_empty()),
                (0, true),
                "chunks of {chunk}: ends on a boundary"
            );
        }
    }

    #[test]
    fn a_frame_over_the_bound_is_refused_from_its_header_alone() {
        let big = frame(70001);
        let mut f = FrameSizes::default();
        // Only the header (2 + 8 + 4 bytes) is needed to refuse it.
        assert_eq!(f.feed(&big[..14], 70000), Err(TooLarge(70001)));
        let mut f = FrameSizes::default();
        let mut header = vec![0x82, 0xff];
        header.extend_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(f.feed(&header, 1 << 20), Err(TooLarge(u64::MAX)));
    }

    /// An unmasked server frame with first byte `b0` and `payload`.
    fn server_frame(b0: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = framed(b0, payload);
        // Unmask: drop the key, clear the bit, and the payload is XORed back.
        let head = FrameHead::parse(&f).unwrap();
        let mask = head.mask(&f).unwrap();
        let body: Vec<u8> = f[head.size..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4])
            .collect();
        f.truncate(head.size - 4);
        f[1] &= 0x7f;
        f.extend(body);
        f
    }

    #[test]
    fn the_ttyds_frame_boundaries_are_found_in_any_split() {
        let frames = [
            server_frame(0x82, b"0hello"),
            server_frame(0x82, &[b'x'; 300]),
            server_frame(0x02, b"0frag"),
            server_frame(0x89, b""),
            server_frame(0x80, &[b'y'; 70_000]),
        ];
        let ends: Vec<usize> = frames
            .iter()
            .scan(0, |at, f| {
                *at += f.len();
                Some(*at)
            })
            .collect();
        let stream = frames.concat();
        for chunk in [1, 2, 3, 7, 13, 4096, stream.len()] {
            // Read whole: a boundary exactly at each frame's end, and nowhere inside.
            let mut b = Boundaries::default();
            let mut at = 0;
            for c in stream.chunks(chunk) {
                b.read(c);
                at += c.len();
                assert_eq!(
                    b.at_boundary(),
                    ends.contains(&at),
                    "chunks of {chunk}, at {at}"
                );
            }
            // Read to a boundary from anywhere: it stops at the next frame's end.
            for start in [1, 5, ends[0] + 1, ends[1], ends[3] + 3] {
                let mut b = Boundaries::default();
                b.read(&stream[..start]);
                let next = *ends.iter().find(|e| **e >= start).unwrap();
                let mut at = start;
                for c in stream[start..].chunks(chunk) {
                    let n = b.read_to_boundary(c);
                    at += n;
                    if n < c.len() {
                        break;
                    }
                }
                assert_eq!(at, next, "chunks of {chunk}, from {start}");
                assert!(b.at_boundary());
                assert_eq!(
                    b.read_to_boundary(&stream[at..]),
                    0,
                    "on a boundary: nothing"
                );
            }
            assert!(!b.ttyd_closed());
        }
    }

    #[test]
    fn a_close_frame_of_the_ttyds_is_seen() {
        let mut b = Boundaries::default();
        b.read(&server_frame(0x82, b"0bye"));
        assert!(!b.ttyd_closed());
        let close = server_frame(0x88, &1000u16.to_be_bytes());
        b.read(&close[..1]);
        assert!(!b.ttyd_closed() && !b.at_boundary());
        b.read(&close[1..]);
        assert!(b.ttyd_closed() && b.at_boundary());
    }
}
