//! ttyd's terminal protocol as the page speaks it (ttyd 1.7): a JSON opening message
//! with the window's size, then typed bytes behind `'0'` and sizes behind `'1'`; the
//! terminal's output comes back behind `'0'`. And what a close frame means for the
//! user: the gateway says why it closed a terminal in the frame's reason.

use policy::close::CloseReason;

use crate::failure::Status;

/// The opening message. The token is empty: the gateway checked the sign-in at the
/// upgrade, and writes a target's own credential in itself when it needs one.
pub fn hello(columns: u16, rows: u16) -> Vec<u8> {
    serde_json::json!({"AuthToken": "", "columns": columns, "rows": rows})
        .to_string()
        .into_bytes()
}

/// Typed bytes.
pub fn input(bytes: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(bytes.len() + 1);
    frame.push(b'0');
    frame.extend_from_slice(bytes);
    frame
}

/// A new window size.
pub fn resize(columns: u16, rows: u16) -> Vec<u8> {
    let mut frame = b"1".to_vec();
    frame.extend_from_slice(
        serde_json::json!({"columns": columns, "rows": rows})
            .to_string()
            .as_bytes(),
    );
    frame
}

/// The terminal's output in a message from ttyd; `None` for its other messages (the
/// window title, the page's preferences).
pub fn output(message: &[u8]) -> Option<&[u8]> {
    match message {
        [b'0', rest @ ..] => Some(rest),
        _ => None,
    }
}

/// The end of the terminal's output, for the reason a pool behind a front proxy prints
/// before it closes a terminal (docs/front-proxies.md "Behind a front proxy"): no
/// gateway carries the terminal there to say it in a close frame, so `ttyd-attach`
/// writes `\r\ntermgate: <sentence>\r\n` as the terminal's last output, then ends.
#[derive(Debug, Default)]
pub struct Tail(Vec<u8>);

impl Tail {
    /// Enough for the longest reason and its line breaks.
    const KEEP: usize = 256;

    /// Output as it is shown.
    pub fn push(&mut self, bytes: &[u8]) {
        self.0
            .extend_from_slice(&bytes[bytes.len().saturating_sub(Self::KEEP)..]);
        let extra = self.0.len().saturating_sub(Self::KEEP);
        self.0.drain(..extra);
    }

    /// The gateway's reason the output ends with, on a line of its own as the pool
    /// prints it; none for anything else (a program that merely exited).
    pub fn reason(&self) -> Option<&'static str> {
        let text = self.0.strip_suffix(b"\r\n")?;
        let start = text.windows(2).rposition(|w| w == b"\r\n")? + 2;
        let line = &text[start..];
        GATEWAY_REASONS
            .iter()
            .map(|(r, _)| r.message())
            .find(|m| m.as_bytes() == line)
    }
}

/// The reasons the gateway closes a terminal with, and the status each ends in.
const GATEWAY_REASONS: [(CloseReason, Status); 8] = [
    (CloseReason::RouteRemoved, Status::Ended),
    (CloseReason::SignedOut, Status::SignIn),
    (CloseReason::TokenRevoked, Status::SignIn),
    (CloseReason::TokenExpired, Status::SignIn),
    (CloseReason::UserLocked, Status::AccessRemoved),
    (CloseReason::AccessRemoved, Status::AccessRemoved),
    (CloseReason::PeerRemoved, Status::AccessRemoved),
    (CloseReason::ShareEnded, Status::AccessRemoved),
];

/// What a close frame (`code`, `reason`) ends the attach with: its status, and what to
/// tell the user.
pub fn closed(code: u16, reason: &str) -> (Status, String) {
    if let Some((_, status)) = GATEWAY_REASONS.iter().find(|(r, _)| r.message() == reason) {
        return (*status, reason.to_owned());
    }
    if reason.starts_with("termgate: ") {
        return (Status::ClosedOther, reason.to_owned());
    }
    // ttyd closes with 1000 when the program exited, 1011 when it failed.
    match (code, reason) {
        (1000, "") => (
            Status::Done,
            "termgate: the session's program exited".to_owned(),
        ),
        (_, "") => (
            Status::ClosedOther,
            format!("termgate: the terminal closed (websocket code {code})"),
        ),
        _ => (
            Status::ClosedOther,
            format!("termgate: the terminal closed: {reason}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_a_pool_prints_last_is_read_and_nothing_else() {
        let mut t = Tail::default();
        t.push(&[b'x'; 1000]);
        t.push(b"$ \r\ntermgate: this session");
        t.push(b" was ended\r\n");
        assert_eq!(t.reason(), Some("termgate: this session was ended"));
        let read = |bytes: &[u8]| {
            let mut t = Tail::default();
            t.push(bytes);
            t.reason()
        };
        assert_eq!(
            read(b"\r\ntermgate: signed out\r\n"),
            Some("termgate: signed out")
        );
        for other in [
            &b""[..],
            b"exit\r\n",
            b"\r\ntermgate: this session was ended",
            b"\r\ntermgate: this session was ended\r\n$ ",
            b"\r\nsay termgate: signed out\r\n",
            b"\r\ntermgate: refusing to attach: no such container\r\n",
        ] {
            assert_eq!(read(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn messages_are_ttyds() {
        let hello: serde_json::Value = serde_json::from_slice(&hello(100, 30)).unwrap();
        assert_eq!(
            hello,
            serde_json::json!({"AuthToken": "", "columns": 100, "rows": 30})
        );
        assert_eq!(input(b"ls\r"), b"0ls\r");
        assert_eq!(resize(90, 20), br#"1{"columns":90,"rows":20}"#);
        assert_eq!(output(b"0hi"), Some(&b"hi"[..]));
        assert_eq!(output(b"1bash (host)"), None);
        assert_eq!(output(b""), None);
    }

    #[test]
    fn each_close_reason_of_the_gateway_has_its_status() {
        assert_eq!(
            closed(1000, "termgate: this session was ended"),
            (Status::Ended, "termgate: this session was ended".into())
        );
        assert_eq!(closed(1000, "termgate: signed out").0, Status::SignIn);
        assert_eq!(
            closed(1000, "termgate: your account was locked").0,
            Status::AccessRemoved
        );
        assert_eq!(
            closed(1000, "termgate: the recording fell behind; terminal closed").0,
            Status::ClosedOther
        );
        assert_eq!(closed(1000, "").0, Status::Done);
        assert_eq!(closed(1011, "").0, Status::ClosedOther);
        for (reason, status) in GATEWAY_REASONS {
            assert_eq!(closed(1000, reason.message()).0, status);
            assert_ne!(status, Status::Done);
        }
    }
}
