//! The detach keys: a short sequence typed at the terminal that leaves the session
//! running instead of reaching it. Spelled as Docker spells its own (`ctrl-\,ctrl-\`),
//! a sequence of `ctrl-<key>` and single characters.

/// The default: `Ctrl-\` twice. Rarely typed on purpose, and unlike Docker's `Ctrl-P`
/// it costs no shell or editor a key it uses.
pub const DEFAULT: &str = "ctrl-\\,ctrl-\\";

/// Reads a sequence such as `ctrl-\,ctrl-\` or `ctrl-a,d`; empty turns detaching off.
pub fn parse(text: &str) -> Result<Vec<u8>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|key| {
            let lower = key.to_ascii_lowercase();
            match lower.strip_prefix("ctrl-") {
                Some(k) => match k.as_bytes() {
                    [c @ b'a'..=b'z'] => Ok(c - b'a' + 1),
                    [c @ (b'@' | b'[' | b'\\' | b']' | b'^' | b'_')] => Ok(c - b'@'),
                    _ => Err(format!(
                        "{key:?}: ctrl- takes a letter or one of @ [ \\ ] ^ _"
                    )),
                },
                None => match key.as_bytes() {
                    [c] if c.is_ascii_graphic() => Ok(*c),
                    _ => Err(format!("{key:?}: a key is ctrl-<key> or one character")),
                },
            }
        })
        .collect()
}

/// Watches what is typed for the detach keys. A byte that could begin them is held back
/// until the next one shows whether they were meant.
#[derive(Debug)]
pub struct Detacher {
    keys: Vec<u8>,
    matched: usize,
}

/// What typed bytes come to.
#[derive(Debug, PartialEq, Eq)]
pub struct Typed {
    /// Bytes for the session.
    pub send: Vec<u8>,
    /// The detach keys were typed (bytes after them are dropped).
    pub detach: bool,
}

impl Detacher {
    /// Watches for `keys` (empty: never detaches).
    pub fn new(keys: Vec<u8>) -> Detacher {
        Detacher { keys, matched: 0 }
    }

    /// Takes bytes as they were typed.
    pub fn feed(&mut self, bytes: &[u8]) -> Typed {
        let mut send = Vec::with_capacity(bytes.len() + self.matched);
        for &b in bytes {
            if self.keys.is_empty() {
                send.push(b);
                continue;
            }
            if self.keys.get(self.matched) == Some(&b) {
                self.matched += 1;
                if self.matched == self.keys.len() {
                    self.matched = 0;
                    return Typed { send, detach: true };
                }
                continue;
            }
            // Not the keys after all: what was held goes to the session.
            send.extend_from_slice(&self.keys[..self.matched]);
            self.matched = 0;
            if self.keys.first() == Some(&b) {
                self.matched = 1;
            } else {
                send.push(b);
            }
        }
        Typed {
            send,
            detach: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(send: &[u8], detach: bool) -> Typed {
        Typed {
            send: send.to_vec(),
            detach,
        }
    }

    #[test]
    fn keys_are_spelled_as_docker_spells_them() {
        assert_eq!(parse(DEFAULT).unwrap(), vec![0x1c, 0x1c]);
        assert_eq!(parse("ctrl-a,d").unwrap(), vec![1, b'd']);
        assert_eq!(parse("CTRL-X,ctrl-@").unwrap(), vec![0x18, 0]);
        assert_eq!(parse("").unwrap(), Vec::<u8>::new());
        for bad in ["ctrl-", "ctrl-ab", "ab", "ctrl-1", " ", "a,,b"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_keys_detach_even_split_across_reads_and_are_never_sent() {
        let mut d = Detacher::new(parse(DEFAULT).unwrap());
        assert_eq!(d.feed(b"ls\x1c"), typed(b"ls", false));
        assert_eq!(d.feed(b"\x1cmore"), typed(b"", true));
    }

    #[test]
    fn a_key_that_only_began_the_sequence_is_sent_after_all() {
        let mut d = Detacher::new(parse(DEFAULT).unwrap());
        assert_eq!(d.feed(b"\x1c"), typed(b"", false));
        assert_eq!(d.feed(b"x"), typed(b"\x1cx", false));
        assert_eq!(d.feed(b"a\x1cb\x1c\x1c"), typed(b"a\x1cb", true));
    }

    #[test]
    fn without_keys_everything_is_sent() {
        let mut d = Detacher::new(Vec::new());
        assert_eq!(d.feed(b"\x1c\x1c"), typed(b"\x1c\x1c", false));
    }
}
