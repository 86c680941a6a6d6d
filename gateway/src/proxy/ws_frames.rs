//! The size of each websocket frame a browser sends up a terminal
//! (`gateway.max_ws_frame_bytes`).
//!
//! ttyd (libwebsockets) gathers a message in memory until its last fragment, and one
//! ttyd serves every terminal: one huge frame would grow the process all terminals
//! share. The gateway reads only frame headers and skips payloads by their length, so
//! the cost is per frame, not per byte, and nothing is copied but header bytes.

/// Where the reader is in the stream of client frames.
#[derive(Debug, Default)]
pub(super) struct FrameSizes {
    /// Payload bytes of the current frame still to pass.
    skip: u64,
    /// Bytes of a frame header received so far (at most 14: 2 + 8 length + 4 mask).
    head: [u8; 14],
    have: usize,
}

/// A frame whose payload is larger than the bound.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TooLarge(pub u64);

impl FrameSizes {
    /// Reads the frame headers in `data`; refuses a frame with a payload over `max`.
    pub(super) fn feed(&mut self, mut data: &[u8], max: u64) -> Result<(), TooLarge> {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len() as u64);
                self.skip -= n;
                data = &data[n as usize..];
                continue;
            }
            self.head[self.have] = data[0];
            self.have += 1;
            data = &data[1..];
            if self.have < 2 {
                continue;
            }
            let masked = self.head[1] & 0x80 != 0;
            let (len_bytes, short) = match self.head[1] & 0x7f {
                126 => (2, None),
                127 => (8, None),
                n => (0, Some(u64::from(n))),
            };
            if self.have < 2 + len_bytes {
                continue;
            }
            let len = short.unwrap_or_else(|| {
                self.head[2..2 + len_bytes]
                    .iter()
                    .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
            });
            // Refused as soon as the length is known, before the mask arrives.
            if len > max {
                return Err(TooLarge(len));
            }
            if self.have < 2 + len_bytes + if masked { 4 } else { 0 } {
                continue;
            }
            self.skip = len;
            self.have = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> Vec<u8> {
        let mut f = vec![0x82];
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
        f.extend_from_slice(&[1, 2, 3, 4]);
        f.extend(std::iter::repeat_n(b'x', len));
        f
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
                (f.skip, f.have),
                (0, 0),
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
}
