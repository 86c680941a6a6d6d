//! The first message of a ttyd websocket, for a target started with `ttyd -c`.
//!
//! Such a ttyd wants its credential twice: as basic auth on the upgrade (the gateway
//! sets that header) and as `AuthToken` in the first message, the JSON that opens the
//! terminal. ttyd's page would fetch that token from `/token` and so hold the password;
//! instead the gateway answers `/token` with an empty token and writes the real one
//! into the first message on its way up. The browser never sees the credential.
//!
//! Client frames are masked (RFC 6455 §5.3): the frame is unmasked, its JSON given the
//! token, and masked again with the same key. Only the first message is touched; every
//! later byte passes as it came.

/// What became of the bytes received so far.
#[derive(Debug, PartialEq, Eq)]
pub enum FirstMessage {
    /// The first frame is not complete yet.
    NeedMore,
    /// The frame with the token, followed by whatever came after it.
    Rewritten(Vec<u8>),
    /// Not the opening message of ttyd's protocol.
    Invalid(&'static str),
}

/// Largest opening message accepted (ttyd's is well under 200 bytes).
pub const MAX_FIRST_MESSAGE: usize = 4096;

/// A `ttyd -c` target's first message on its way up: the token to write into it and
/// the bytes of it received so far.
#[derive(Debug)]
pub struct Pending {
    token: String,
    received: Vec<u8>,
}

impl Pending {
    /// Waits for the first message, to give it `token`.
    pub fn new(token: String) -> Self {
        Pending {
            token,
            received: Vec::new(),
        }
    }

    /// Takes `bytes` going up: `Ok(None)` while the message is not whole (they are
    /// held), then the message with its token and whatever followed it, to send on
    /// (after which the caller drops this). An error says why the websocket is refused.
    pub fn take(&mut self, bytes: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
        self.received.extend_from_slice(bytes);
        match inject_auth_token(&self.received, &self.token) {
            FirstMessage::NeedMore if self.received.len() <= MAX_FIRST_MESSAGE + 16 => Ok(None),
            FirstMessage::NeedMore => Err("the first websocket message is too large"),
            FirstMessage::Rewritten(out) => Ok(Some(out)),
            FirstMessage::Invalid(why) => Err(why),
        }
    }
}

/// Gives the opening message in `buf` the `AuthToken` `token`.
pub fn inject_auth_token(buf: &[u8], token: &str) -> FirstMessage {
    let [b0, b1, ..] = *buf else {
        return FirstMessage::NeedMore;
    };
    let opcode = b0 & 0x0f;
    if b0 & 0x80 == 0 || !(opcode == 1 || opcode == 2) || b0 & 0x70 != 0 {
        return FirstMessage::Invalid("the first message is not one whole data frame");
    }
    if b1 & 0x80 == 0 {
        return FirstMessage::Invalid("a client frame must be masked");
    }
    let (len, offset) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (usize::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return FirstMessage::NeedMore,
        },
        127 => return FirstMessage::Invalid("the first message is too large"),
        n => (usize::from(n), 2),
    };
    if len > MAX_FIRST_MESSAGE {
        return FirstMessage::Invalid("the first message is too large");
    }
    let Some(frame) = buf.get(..offset + 4 + len) else {
        return FirstMessage::NeedMore;
    };
    let mask = [
        frame[offset],
        frame[offset + 1],
        frame[offset + 2],
        frame[offset + 3],
    ];
    let payload: Vec<u8> = frame[offset + 4..]
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ mask[i % 4])
        .collect();
    let Ok(serde_json::Value::Object(mut message)) = serde_json::from_slice(&payload) else {
        return FirstMessage::Invalid("the first message is not ttyd's JSON");
    };
    message.insert("AuthToken".into(), token.into());
    let payload = serde_json::Value::Object(message).to_string().into_bytes();
    let mut out = Vec::with_capacity(payload.len() + 8 + buf.len() - frame.len());
    out.push(b0);
    match u16::try_from(payload.len()) {
        Ok(n) if n < 126 => out.push(0x80 | n as u8),
        Ok(n) => {
            out.push(0x80 | 126);
            out.extend_from_slice(&n.to_be_bytes());
        }
        Err(_) => return FirstMessage::Invalid("the first message is too large"),
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out.extend_from_slice(&buf[frame.len()..]);
    FirstMessage::Rewritten(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0x80 | opcode];
        if payload.len() < 126 {
            f.push(0x80 | payload.len() as u8);
        } else {
            f.push(0x80 | 126);
            f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    fn unmasked_payload(f: &[u8]) -> Vec<u8> {
        let (len, off) = match f[1] & 0x7f {
            126 => (usize::from(u16::from_be_bytes([f[2], f[3]])), 4),
            n => (usize::from(n), 2),
        };
        let mask = &f[off..off + 4];
        f[off + 4..off + 4 + len]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4])
            .collect()
    }

    #[test]
    fn the_token_is_written_into_the_opening_message_and_the_rest_passes() {
        let open = frame(
            2,
            br#"{"AuthToken":"","columns":80,"rows":24}"#,
            [1, 2, 3, 4],
        );
        let mut buf = open.clone();
        buf.extend_from_slice(b"next");
        let FirstMessage::Rewritten(out) = inject_auth_token(&buf, "dXNlcjpwYXNz") else {
            panic!("not rewritten");
        };
        assert!(out.ends_with(b"next"));
        let json: serde_json::Value =
            serde_json::from_slice(&unmasked_payload(&out[..out.len() - 4])).unwrap();
        assert_eq!(json["AuthToken"], "dXNlcjpwYXNz");
        assert_eq!(
            (json["columns"].as_u64(), json["rows"].as_u64()),
            (Some(80), Some(24))
        );
        assert_eq!(out[0], 0x82, "opcode kept");
    }

    #[test]
    fn a_long_token_moves_the_frame_to_the_16_bit_length() {
        let open = frame(
            1,
            br#"{"AuthToken":"","columns":80,"rows":24}"#,
            [9, 9, 9, 9],
        );
        let token = "x".repeat(300);
        let FirstMessage::Rewritten(out) = inject_auth_token(&open, &token) else {
            panic!("not rewritten");
        };
        assert_eq!(out[1] & 0x7f, 126);
        let json: serde_json::Value = serde_json::from_slice(&unmasked_payload(&out)).unwrap();
        assert_eq!(json["AuthToken"], token.as_str());
    }

    #[test]
    fn a_partial_frame_waits_and_foreign_frames_are_refused() {
        let open = frame(2, br#"{"columns":80,"rows":24}"#, [1, 2, 3, 4]);
        for cut in 0..open.len() {
            assert_eq!(
                inject_auth_token(&open[..cut], "t"),
                FirstMessage::NeedMore,
                "{cut}"
            );
        }
        let mut unmasked = open.clone();
        unmasked[1] &= 0x7f;
        assert!(matches!(
            inject_auth_token(&unmasked, "t"),
            FirstMessage::Invalid(_)
        ));
        let ping = frame(9, b"", [0; 4]);
        assert!(matches!(
            inject_auth_token(&ping, "t"),
            FirstMessage::Invalid(_)
        ));
        let input = frame(2, b"0ls\r", [5, 6, 7, 8]);
        assert!(matches!(
            inject_auth_token(&input, "t"),
            FirstMessage::Invalid(_)
        ));
        let mut huge = vec![0x82, 0x80 | 127];
        huge.extend_from_slice(&[0; 12]);
        assert!(matches!(
            inject_auth_token(&huge, "t"),
            FirstMessage::Invalid(_)
        ));
    }
}
