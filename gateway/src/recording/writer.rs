//! The writer thread: every open recording's file, its events turned into asciicast
//! lines; a finished file is renamed to `.cast` and the uploader woken.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::queue::{Bounds, Event, Msg, FAILED, SPARE_CAPACITY, TOO_LARGE};

/// Room kept at the end of a recording for what finishing it writes (a cut UTF-8
/// sequence, replaced), so a file stopped at its limit stays within it.
const TAIL: u64 = 256;

/// The writer thread: every open recording's file, written event by event.
pub(super) fn write_recordings(
    rx: Receiver<Msg>,
    wake: &Notify,
    delay: Option<Duration>,
    bounds: &Bounds,
) {
    let mut open: HashMap<u64, Writer> = HashMap::new();
    let mut joined = Vec::new();
    for msg in rx {
        match msg {
            Msg::Open {
                id,
                part,
                done,
                timestamp,
                user,
                spare,
                waiting,
            } => match Writer::create(part, done, timestamp, user, spare, Arc::clone(&waiting)) {
                Ok(w) => {
                    open.insert(id, w);
                }
                Err(e) => {
                    tracing::error!(error = %e, "a recording's file could not be made: its terminal closes");
                    waiting.store(FAILED, Ordering::Release);
                }
            },
            Msg::Event(id, event) => {
                let Some(w) = open.get_mut(&id) else {
                    continue;
                };
                if let Some(d) = delay {
                    std::thread::sleep(d);
                }
                match w.event(event, &mut joined, bounds) {
                    Err(e) => {
                        tracing::error!(error = %e, path = %w.part.display(), "a recording could not be written: its terminal closes");
                        w.waiting.store(FAILED, Ordering::Release);
                        open.remove(&id);
                    }
                    Ok(Written::TooLarge) => {
                        // Kept up to here and handed over; the terminal closes.
                        w.waiting.store(TOO_LARGE, Ordering::Release);
                        if let Some(w) = open.remove(&id) {
                            let part = w.part.clone();
                            if let Err(e) = w.finish(bounds) {
                                tracing::error!(error = %e, path = %part.display(), "a recording could not be finished");
                            }
                            wake.notify_one();
                        }
                    }
                    Ok(Written::Line) => {
                        w.waiting.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            }
            Msg::Close(id) => {
                if let Some(w) = open.remove(&id) {
                    let part = w.part.clone();
                    if let Err(e) = w.finish(bounds) {
                        tracing::error!(error = %e, path = %part.display(), "a recording could not be finished");
                    }
                    wake.notify_one();
                }
            }
        }
    }
}

/// What writing an event did.
enum Written {
    /// Its line is in the file.
    Line,
    /// Its line would take the file past `control.max_recording_bytes` or the spool
    /// past `gateway.recordings_spool_max_bytes`: not written.
    TooLarge,
}

/// One open recording, on the writer thread.
struct Writer {
    file: File,
    /// Bytes in the file.
    written: u64,
    part: PathBuf,
    done: PathBuf,
    /// The line being written.
    out: Vec<u8>,
    timestamp: u64,
    /// Who types in it, named in the header (`"termgate": {"user": …}`).
    user: Option<String>,
    header_written: bool,
    /// The start of a UTF-8 sequence the last output event ended inside.
    output_carry: Vec<u8>,
    input_carry: Vec<u8>,
    /// Time of the last event.
    last: f64,
    spare: SyncSender<Vec<u8>>,
    waiting: Arc<AtomicUsize>,
}

impl Writer {
    fn create(
        part: PathBuf,
        done: PathBuf,
        timestamp: u64,
        user: Option<String>,
        spare: SyncSender<Vec<u8>>,
        waiting: Arc<AtomicUsize>,
    ) -> io::Result<Writer> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // What users saw (and typed) is for the gateway's user alone.
        if let Some(dir) = part.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&part)?;
        Ok(Writer {
            file,
            written: 0,
            part,
            done,
            out: Vec::new(),
            timestamp,
            user,
            header_written: false,
            output_carry: Vec::new(),
            input_carry: Vec::new(),
            last: 0.0,
            spare,
            waiting,
        })
    }

    /// Writes one event (its line, and the header before the first), unless it would
    /// take the file or the spool past its bound.
    fn event(
        &mut self,
        event: Event,
        joined: &mut Vec<u8>,
        bounds: &Bounds,
    ) -> io::Result<Written> {
        match event {
            Event::Size { cols, rows } => self.header(cols, rows)?,
            Event::Output { at, bytes } => {
                self.header(80, 24)?;
                self.last = at;
                self.text(at, "o", &bytes, false, joined)?;
                self.recycle(bytes);
            }
            Event::Input { at, bytes } => {
                self.header(80, 24)?;
                self.last = at;
                self.text(at, "i", &bytes, true, joined)?;
                self.recycle(bytes);
            }
            Event::Resize { at, cols, rows } => {
                self.header(cols, rows)?;
                self.last = at;
                writeln!(self.out, "[{at:.6}, \"r\", \"{cols}x{rows}\"]")?;
            }
        }
        let line = self.out.len() as u64;
        let spooled = bounds.spooled.load(Ordering::Acquire);
        if self.written + line + TAIL > bounds.limits.recording
            || spooled + line + TAIL > bounds.limits.spool
        {
            self.out.clear();
            return Ok(Written::TooLarge);
        }
        self.flush_line(bounds)?;
        Ok(Written::Line)
    }

    fn flush_line(&mut self, bounds: &Bounds) -> io::Result<()> {
        let n = self.out.len() as u64;
        self.written += n;
        bounds.spooled.fetch_add(n, Ordering::AcqRel);
        self.file.write_all(&self.out)?;
        self.out.clear();
        if self.out.capacity() > SPARE_CAPACITY {
            self.out = Vec::new();
        }
        Ok(())
    }

    /// The terminal ended: what is left written, the file synced and renamed final.
    fn finish(mut self, bounds: &Bounds) -> io::Result<()> {
        self.header(80, 24)?;
        let last = self.last;
        // A sequence cut by the end of the terminal: what is left, replaced.
        for (code, carry) in [("o", &self.output_carry), ("i", &self.input_carry)] {
            if !carry.is_empty() {
                let s = String::from_utf8_lossy(carry);
                writeln!(self.out, "[{last:.6}, \"{code}\", {}]", json_string(&s))?;
            }
        }
        self.flush_line(bounds)?;
        self.file.sync_all()?;
        fs::rename(&self.part, &self.done)
    }

    fn header(&mut self, cols: u16, rows: u16) -> io::Result<()> {
        if self.header_written {
            return Ok(());
        }
        self.header_written = true;
        // The terminal's typist: every `i` event of this file is theirs (a peer's
        // terminal is its own recording, named `peer:<sub>`).
        let user = self
            .user
            .as_deref()
            .map(|u| format!(", \"termgate\": {{\"user\": {}}}", json_string(u)))
            .unwrap_or_default();
        writeln!(
            self.out,
            "{{\"version\": 2, \"width\": {cols}, \"height\": {rows}, \"timestamp\": {}, \"env\": {{\"TERM\": \"xterm-256color\"}}{user}}}",
            self.timestamp
        )
    }

    /// One `o` or `i` event of the valid UTF-8 in carry + `bytes`; an incomplete
    /// sequence at the end is carried to the next event, invalid bytes are replaced.
    /// Written straight into the file's buffer, escaped on the way.
    fn text(
        &mut self,
        at: f64,
        code: &str,
        bytes: &[u8],
        input: bool,
        joined: &mut Vec<u8>,
    ) -> io::Result<()> {
        let Writer {
            out,
            output_carry,
            input_carry,
            ..
        } = self;
        let carry = if input { input_carry } else { output_carry };
        let whole: &[u8] = if carry.is_empty() {
            bytes
        } else {
            joined.clear();
            joined.append(carry);
            joined.extend_from_slice(bytes);
            &joined[..]
        };
        let mut started = false;
        let mut begin = |out: &mut Vec<u8>| -> io::Result<()> {
            if !started {
                started = true;
                write!(out, "[{at:.6}, \"{code}\", \"")?;
            }
            Ok(())
        };
        let mut rest = whole;
        while !rest.is_empty() {
            let (valid, after) = match std::str::from_utf8(rest) {
                Ok(s) => (s, None),
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // The first `valid_up_to` bytes are valid UTF-8.
                    let valid = std::str::from_utf8(valid).unwrap_or_default();
                    (valid, Some((e.error_len(), after)))
                }
            };
            if !valid.is_empty() {
                begin(out)?;
                escape_into(out, valid)?;
            }
            match after {
                None => break,
                Some((None, tail)) => {
                    carry.extend_from_slice(tail);
                    break;
                }
                Some((Some(n), tail)) => {
                    begin(out)?;
                    out.write_all(b"\\ufffd")?;
                    rest = &tail[n..];
                }
            }
        }
        if started {
            out.write_all(b"\"]\n")?;
        }
        if joined.capacity() > SPARE_CAPACITY {
            *joined = Vec::new();
        }
        Ok(())
    }

    fn recycle(&self, mut bytes: Vec<u8>) {
        if bytes.capacity() > SPARE_CAPACITY {
            return;
        }
        bytes.clear();
        // Enough spares already, or the recorder has gone: the buffer is freed.
        let _ = self.spare.try_send(bytes);
    }
}

/// Writes `s` as the inside of a JSON string.
pub(super) fn escape_into(out: &mut impl Write, s: &str) -> io::Result<()> {
    let b = s.as_bytes();
    let mut from = 0;
    for (i, &c) in b.iter().enumerate() {
        let short: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.write_all(&b[from..i])?;
        if short.is_empty() {
            write!(out, "\\u{c:04x}")?;
        } else {
            out.write_all(short)?;
        }
        from = i + 1;
    }
    out.write_all(&b[from..])
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}
