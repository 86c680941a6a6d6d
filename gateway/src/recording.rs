//! Terminal recordings in asciicast v2 (profiles' `record` and `record_input`).
//!
//! A recorded terminal's tunnel reads ttyd's protocol in both directions with a
//! [`Recorder`]: output (server messages starting `'0'`), resizes (client `'1'` with
//! `{"columns","rows"}`), the first client message's size, and input (client `'0'`)
//! when the profile records input. Each read of a socket becomes at most one event,
//! copied into a pooled buffer and queued, without waiting, for the gateway's one
//! writer thread (started with the first recording), which keeps every open
//! recording's file; the tunnel never waits for the disk. Each terminal may have
//! `gateway.recording_queue` events waiting: one more makes the tunnel close the
//! terminal before the bytes of that read are passed on, so a recording never misses
//! what the browser saw.
//!
//! The writer turns events into asciicast lines (output split inside a UTF-8
//! sequence is carried to the next event), writes `<spool>/<session>/<name>.cast.part`
//! and, when the terminal ends, renames it to `.cast` and wakes the [`Uploader`], which
//! hands every finished file to control (`PUT /v1/recordings/<session>/<name>`) and
//! deletes it once control has answered 204. A file control could not take stays in
//! the spool and is sent again at the next sweep.
//!
//! Unrecorded terminals have no `Recorder`: their output is never parsed.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use policy::SessionId;
use tokio::sync::Notify;

use crate::proxy::ws_frames::FrameHead;
use crate::state::Gateway;

/// Largest resize or first message gathered from a browser, bytes (ttyd's are tens).
const MAX_CONTROL_MESSAGE: usize = 4096;
/// How often the spool is swept for files control has not taken yet.
const SWEEP: Duration = Duration::from_secs(5);
/// Stack of the writer thread: it only formats lines and writes them.
const WRITER_STACK: usize = 256 * 1024;
/// What a recording whose writer failed counts as waiting: always full.
const FAILED: usize = usize::MAX / 2;
/// Buffers the writer hands back for reuse, and the largest one kept: a terminal that
/// was busy once holds little once it is idle again.
const SPARE_BUFFERS: usize = 4;
const SPARE_CAPACITY: usize = 16 * 1024;

/// Where recordings are spooled, and what wakes their uploader.
pub struct Spool {
    dir: PathBuf,
    queue: usize,
    /// `TERMGATE_TEST_RECORDING_WRITER_DELAY_MS` (debug builds only): a pause before
    /// each event is written, so tests can make a writer fall behind.
    writer_delay: Option<Duration>,
    wake: Arc<Notify>,
    next: AtomicU64,
    /// The writer thread's queue, once a terminal was recorded.
    writer: std::sync::Mutex<Option<mpsc::Sender<Msg>>>,
}

/// The writer of a recording fell behind: the terminal must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

impl Spool {
    /// A spool in `dir`, with queues of `queue` events per terminal.
    pub fn new(dir: PathBuf, queue: usize) -> Self {
        let writer_delay = if cfg!(debug_assertions) {
            std::env::var("TERMGATE_TEST_RECORDING_WRITER_DELAY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis)
        } else {
            None
        };
        Spool {
            dir,
            queue,
            writer_delay,
            wake: Arc::new(Notify::new()),
            next: AtomicU64::new(0),
            writer: std::sync::Mutex::new(None),
        }
    }

    /// The writer thread's queue, started on first use.
    fn writer(&self) -> io::Result<mpsc::Sender<Msg>> {
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| io::Error::other("the recording writer's lock is poisoned"))?;
        if let Some(tx) = writer.as_ref() {
            return Ok(tx.clone());
        }
        let (tx, rx) = mpsc::channel();
        let wake = Arc::clone(&self.wake);
        let delay = self.writer_delay;
        std::thread::Builder::new()
            .name("recorder".into())
            .stack_size(WRITER_STACK)
            .spawn(move || write_recordings(rx, &wake, delay))?;
        *writer = Some(tx.clone());
        Ok(tx)
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts recording a terminal of `session`: its file is made by the writer thread
    /// (a failure there makes the recording full, so the terminal closes).
    pub fn start(&self, session: SessionId, input: bool) -> io::Result<Recorder> {
        let started_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // Unique per gateway process and terminal; the time first, so names sort.
        let name = format!("{}-{}-{n}", started_at.as_millis(), std::process::id());
        let dir = self.dir.join(session.to_string());
        let tx = self.writer()?;
        let (spare_tx, spare) = mpsc::sync_channel(SPARE_BUFFERS);
        let waiting = Arc::new(AtomicUsize::new(0));
        tx.send(Msg::Open {
            id: n,
            part: dir.join(format!("{name}.cast.part")),
            done: dir.join(format!("{name}.cast")),
            timestamp: started_at.as_secs(),
            spare: spare_tx,
            waiting: Arc::clone(&waiting),
        })
        .map_err(|_| io::Error::other("the recording writer has stopped"))?;
        let queue = Queue {
            id: n,
            tx,
            waiting,
            limit: self.queue,
        };
        Ok(Recorder::new(queue, spare, input))
    }
}

/// What the writer thread is told.
enum Msg {
    /// A terminal is recorded from now on.
    Open {
        id: u64,
        part: PathBuf,
        done: PathBuf,
        timestamp: u64,
        spare: SyncSender<Vec<u8>>,
        waiting: Arc<AtomicUsize>,
    },
    Event(u64, Event),
    /// The terminal ended: its file is made final.
    Close(u64),
}

/// A recording's place in the writer's queue.
struct Queue {
    id: u64,
    tx: mpsc::Sender<Msg>,
    /// Its events queued and not yet written ([`FAILED`]: its writer failed).
    waiting: Arc<AtomicUsize>,
    limit: usize,
}

impl Queue {
    /// Queues an event without waiting; full once `limit` are waiting.
    fn send(&self, event: Event) -> Result<(), QueueFull> {
        if self.waiting.load(Ordering::Acquire) >= self.limit {
            return Err(QueueFull);
        }
        self.waiting.fetch_add(1, Ordering::AcqRel);
        self.tx
            .send(Msg::Event(self.id, event))
            .map_err(|_| QueueFull)
    }
}

/// One asciicast event, or the terminal's size from its first message.
#[derive(Debug)]
enum Event {
    /// The first message's size: the header's width and height.
    Size {
        cols: u16,
        rows: u16,
    },
    Output {
        at: f64,
        bytes: Vec<u8>,
    },
    Input {
        at: f64,
        bytes: Vec<u8>,
    },
    Resize {
        at: f64,
        cols: u16,
        rows: u16,
    },
}

/// A recorded terminal's side in its tunnel: parses each read and queues its events.
pub struct Recorder {
    queue: Queue,
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
    fn new(queue: Queue, spare: Receiver<Vec<u8>>, input: bool) -> Self {
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

/// The writer thread: every open recording's file, written event by event.
fn write_recordings(rx: Receiver<Msg>, wake: &Notify, delay: Option<Duration>) {
    let mut open: HashMap<u64, Writer> = HashMap::new();
    let mut joined = Vec::new();
    for msg in rx {
        match msg {
            Msg::Open {
                id,
                part,
                done,
                timestamp,
                spare,
                waiting,
            } => match Writer::create(part, done, timestamp, spare, Arc::clone(&waiting)) {
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
                if let Err(e) = w.event(event, &mut joined) {
                    tracing::error!(error = %e, path = %w.part.display(), "a recording could not be written: its terminal closes");
                    w.waiting.store(FAILED, Ordering::Release);
                    open.remove(&id);
                } else {
                    w.waiting.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Msg::Close(id) => {
                if let Some(w) = open.remove(&id) {
                    let part = w.part.clone();
                    if let Err(e) = w.finish() {
                        tracing::error!(error = %e, path = %part.display(), "a recording could not be finished");
                    }
                    wake.notify_one();
                }
            }
        }
    }
}

/// One open recording, on the writer thread.
struct Writer {
    file: File,
    part: PathBuf,
    done: PathBuf,
    /// The line being written.
    out: Vec<u8>,
    timestamp: u64,
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
            part,
            done,
            out: Vec::new(),
            timestamp,
            header_written: false,
            output_carry: Vec::new(),
            input_carry: Vec::new(),
            last: 0.0,
            spare,
            waiting,
        })
    }

    /// Writes one event (its line, and the header before the first).
    fn event(&mut self, event: Event, joined: &mut Vec<u8>) -> io::Result<()> {
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
        self.flush_line()
    }

    fn flush_line(&mut self) -> io::Result<()> {
        self.file.write_all(&self.out)?;
        self.out.clear();
        if self.out.capacity() > SPARE_CAPACITY {
            self.out = Vec::new();
        }
        Ok(())
    }

    /// The terminal ended: what is left written, the file synced and renamed final.
    fn finish(mut self) -> io::Result<()> {
        self.header(80, 24)?;
        let last = self.last;
        // A sequence cut by the end of the terminal: what is left, replaced.
        for (code, carry) in [("o", &self.output_carry), ("i", &self.input_carry)] {
            if !carry.is_empty() {
                let s = String::from_utf8_lossy(carry);
                writeln!(self.out, "[{last:.6}, \"{code}\", {}]", json_string(&s))?;
            }
        }
        self.flush_line()?;
        self.file.sync_all()?;
        fs::rename(&self.part, &self.done)
    }

    fn header(&mut self, cols: u16, rows: u16) -> io::Result<()> {
        if self.header_written {
            return Ok(());
        }
        self.header_written = true;
        writeln!(
            self.out,
            "{{\"version\": 2, \"width\": {cols}, \"height\": {rows}, \"timestamp\": {}, \"env\": {{\"TERM\": \"xterm-256color\"}}}}",
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
fn escape_into(out: &mut impl Write, s: &str) -> io::Result<()> {
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

/// Hands finished recordings to control and deletes them once control has them.
pub struct Uploader(pub Arc<Gateway>);

#[async_trait]
impl BackgroundService for Uploader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let g = &self.0;
        let spool = g.recordings.dir().to_path_buf();
        loop {
            finish_stale(&spool);
            sweep(g, &spool).await;
            tokio::select! {
                _ = g.recordings.wake.notified() => {}
                _ = tokio::time::sleep(SWEEP) => {}
                _ = shutdown.changed() => {
                    sweep(g, &spool).await;
                    return;
                }
            }
        }
    }
}

/// Finishes the recordings a gateway that is gone left unfinished (its pid, in the
/// name, no longer runs; another live gateway sharing the spool, such as the old
/// process of an upgrade, finishes its own): cut after the last whole line, then
/// handed over like any other.
fn finish_stale(spool: &Path) {
    let me = std::process::id();
    for (_, path) in spooled(spool, ".cast.part") {
        let pid = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('-').nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| p == me || Path::new(&format!("/proc/{p}")).exists());
        if alive {
            continue;
        }
        let done = path.with_extension("");
        if let Err(e) = cut_after_last_line(&path).and_then(|()| fs::rename(&path, &done)) {
            tracing::warn!(error = %e, path = %path.display(), "cannot finish a recording left by a stopped gateway");
        }
    }
}

/// Truncates a file after its last newline (a line cut by a crash is dropped).
fn cut_after_last_line(path: &Path) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = fs::OpenOptions::new().read(true).write(true).open(path)?;
    let len = f.metadata()?.len();
    let mut end = len;
    let mut chunk = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = (end - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut chunk[..n])?;
        if let Some(i) = chunk[..n].iter().rposition(|b| *b == b'\n') {
            return f.set_len(start + i as u64 + 1);
        }
        end = start;
    }
    f.set_len(0)
}

/// The files of the spool ending in `suffix`, with their session.
fn spooled(spool: &Path, suffix: &str) -> Vec<(SessionId, PathBuf)> {
    let mut found = Vec::new();
    let Ok(sessions) = fs::read_dir(spool) else {
        return found;
    };
    for dir in sessions.flatten() {
        let Some(id) = dir
            .file_name()
            .to_str()
            .and_then(|s| SessionId::parse(s).ok())
        else {
            continue;
        };
        let Ok(files) = fs::read_dir(dir.path()) else {
            continue;
        };
        for f in files.flatten() {
            if f.file_name().to_str().is_some_and(|n| n.ends_with(suffix)) {
                found.push((id, f.path()));
            }
        }
    }
    found
}

async fn sweep(g: &Gateway, spool: &Path) {
    for (session, path) in spooled(spool, ".cast") {
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".cast"))
        else {
            continue;
        };
        // Control refuses a file over its bound (the same configuration): kept aside
        // rather than sent again at every sweep.
        let max = g.config.control.max_recording_bytes;
        if fs::metadata(&path).is_ok_and(|m| m.len() > max) {
            let aside = path.with_extension("cast.too-large");
            let _ = fs::rename(&path, &aside);
            tracing::error!(target: "audit", session = %session, recording = name, path = %aside.display(), "a recording is larger than control.max_recording_bytes: kept in the spool, not handed over");
            continue;
        }
        match g.control.put_recording(&session, name, &path).await {
            Ok(()) => {
                if let Err(e) = fs::remove_file(&path) {
                    tracing::warn!(error = %e, path = %path.display(), "cannot delete a recording control has taken");
                }
                if let Some(dir) = path.parent() {
                    // Only when empty: another terminal of the session may be recording.
                    let _ = fs::remove_dir(dir);
                }
                tracing::info!(target: "audit", session = %session, recording = name, "recording handed to control");
            }
            Err(e) => {
                tracing::warn!(session = %session, recording = name, error = %e, "control did not take a recording; it stays in the spool");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame with first byte `b0` and `payload`, masked for a client frame.
    fn framed(b0: u8, payload: &[u8], masked: bool) -> Vec<u8> {
        let len = payload.len();
        let m = if masked { 0x80 } else { 0 };
        let mut f = vec![b0];
        match len {
            0..=125 => f.push(m | len as u8),
            126..=65535 => {
                f.push(m | 126);
                f.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                f.push(m | 127);
                f.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        if masked {
            let mask = [0x37, 0xfa, 0x21, 0x3d];
            f.extend_from_slice(&mask);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        } else {
            f.extend_from_slice(payload);
        }
        f
    }

    fn spool(queue: usize) -> (tempfile::TempDir, Spool) {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().to_path_buf(), queue);
        (dir, spool)
    }

    /// Waits for the one finished recording of `session` and reads its lines.
    fn finished(spool: &Spool, session: SessionId) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let files = spooled(spool.dir(), ".cast");
            if let Some((s, path)) = files.first() {
                assert_eq!(*s, session);
                let text = fs::read_to_string(path).unwrap();
                return text
                    .lines()
                    .map(|l| serde_json::from_str(l).expect("every line is JSON"))
                    .collect();
            }
            assert!(Instant::now() < deadline, "no finished recording");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn id() -> SessionId {
        SessionId::from_random([7; 10])
    }

    #[test]
    fn output_resizes_and_input_become_asciicast_events_in_any_split() {
        let mut up = Vec::new();
        up.extend(framed(
            0x82,
            br#"{"AuthToken":"","columns":100,"rows":30}"#,
            true,
        ));
        up.extend(framed(0x82, b"0ls\r", true));
        up.extend(framed(0x89, b"0ping", true));
        up.extend(framed(0x82, br#"1{"columns":120,"rows":40}"#, true));
        // A fragmented input message: its continuation's first byte is not a command.
        up.extend(framed(0x02, b"0ab", true));
        up.extend(framed(0x80, b"1c", true));
        let mut down = Vec::new();
        down.extend(framed(0x82, "0héllo ".as_bytes(), false));
        down.extend(framed(0x82, b"1title", false));
        down.extend(framed(0x82, b"0world\r\n", false));
        for chunk in [1, 2, 3, 5, 7, 64, 4096] {
            for input in [false, true] {
                let (_dir, spool) = spool(1024);
                let mut r = spool.start(id(), input).unwrap();
                for c in up.chunks(chunk) {
                    r.upward(c).unwrap();
                }
                for c in down.chunks(chunk) {
                    r.downward(c).unwrap();
                }
                drop(r);
                let lines = finished(&spool, id());
                let header = &lines[0];
                assert_eq!(header["version"], 2);
                assert_eq!(
                    (header["width"].as_u64(), header["height"].as_u64()),
                    (Some(100), Some(30)),
                    "chunks of {chunk}"
                );
                assert_eq!(header["env"]["TERM"], "xterm-256color");
                let events = &lines[1..];
                let joined = |code: &str| -> String {
                    events
                        .iter()
                        .filter(|e| e[1] == code)
                        .map(|e| e[2].as_str().unwrap().to_owned())
                        .collect()
                };
                assert_eq!(joined("o"), "héllo world\r\n", "chunks of {chunk}");
                assert_eq!(joined("r"), "120x40", "chunks of {chunk}");
                if input {
                    assert_eq!(joined("i"), "ls\rab1c", "chunks of {chunk}");
                } else {
                    assert_eq!(joined("i"), "", "chunks of {chunk}: no input");
                }
                let times: Vec<f64> = events.iter().map(|e| e[0].as_f64().unwrap()).collect();
                assert!(times.windows(2).all(|w| w[0] <= w[1]), "monotonic times");
            }
        }
    }

    #[test]
    fn a_utf8_sequence_split_across_reads_is_carried_to_the_next_event() {
        let (_dir, spool) = spool(64);
        let mut r = spool.start(id(), false).unwrap();
        r.upward(&framed(0x82, br#"{"columns":80,"rows":24}"#, true))
            .unwrap();
        // "€" is three bytes; the first frame ends after two of them.
        let euro = "€".as_bytes();
        let mut first = b"0a".to_vec();
        first.extend_from_slice(&euro[..2]);
        let mut second = b"0".to_vec();
        second.extend_from_slice(&euro[2..]);
        second.extend_from_slice(b"b\xffc");
        r.downward(&framed(0x82, &first, false)).unwrap();
        r.downward(&framed(0x82, &second, false)).unwrap();
        drop(r);
        let lines = finished(&spool, id());
        let out: Vec<&str> = lines[1..].iter().map(|e| e[2].as_str().unwrap()).collect();
        assert_eq!(out, ["a", "€b\u{fffd}c"]);
    }

    #[test]
    fn a_full_queue_is_reported_instead_of_dropping_events() {
        // A writer that has not taken anything yet: the fifth event finds no room.
        let (tx, queue) = mpsc::channel();
        let (_spare_tx, spare) = mpsc::sync_channel(1);
        let q = Queue {
            id: 1,
            tx,
            waiting: Arc::new(AtomicUsize::new(0)),
            limit: 4,
        };
        let mut r = Recorder::new(q, spare, true);
        let frame = framed(0x82, b"0output", false);
        for _ in 0..4 {
            assert_eq!(r.downward(&frame), Ok(()));
        }
        assert_eq!(r.downward(&frame), Err(QueueFull));
        assert_eq!(r.upward(&framed(0x82, b"0typed", true)), Err(QueueFull));
        assert_eq!(r.downward(&frame[..3]), Ok(()));
        // A writer that failed is as full as one that is behind; one that is gone too.
        r.queue.waiting.store(0, Ordering::Release);
        assert_eq!(r.downward(&frame[3..]), Ok(()));
        r.queue.waiting.store(FAILED, Ordering::Release);
        assert_eq!(r.downward(&frame), Err(QueueFull));
        r.queue.waiting.store(0, Ordering::Release);
        drop(queue);
        assert_eq!(r.downward(&frame), Err(QueueFull));
    }

    #[test]
    fn a_gone_gateways_unfinished_recording_is_cut_after_its_last_line_and_finished() {
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join(id().to_string());
        fs::create_dir_all(&session).unwrap();
        // pid 0 never runs a gateway; our own pid is a live one.
        let gone = session.join("1-0-1.cast.part");
        let ours = session.join(format!("1-{}-2.cast.part", std::process::id()));
        fs::write(
            &gone,
            "{\"version\": 2}\n[0.1, \"o\", \"a\"]\n[0.2, \"o\", \"b",
        )
        .unwrap();
        fs::write(&ours, "{}\n").unwrap();
        finish_stale(dir.path());
        let done = session.join("1-0-1.cast");
        assert_eq!(
            fs::read_to_string(&done).unwrap(),
            "{\"version\": 2}\n[0.1, \"o\", \"a\"]\n"
        );
        assert!(ours.exists(), "a live gateway's recording is left to it");
    }

    #[test]
    fn escaped_text_reads_back_as_the_same_string() {
        let mut text: String = (0u8..128).map(char::from).collect();
        text.push_str("é€😀\u{2028}");
        let mut out = b"\"".to_vec();
        escape_into(&mut out, &text).unwrap();
        out.push(b'"');
        let back: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, text);
    }

    #[test]
    fn frames_without_ttyd_output_queue_nothing() {
        let (_dir, spool) = spool(4);
        let mut r = spool.start(id(), false).unwrap();
        for _ in 0..100 {
            r.downward(&framed(0x89, b"0ping", false)).unwrap();
            r.downward(&framed(0x82, b"1title", false)).unwrap();
            r.downward(&framed(0x82, b"", false)).unwrap();
        }
        drop(r);
        let lines = finished(&spool, id());
        assert_eq!(lines.len(), 1, "only the header: {lines:?}");
    }
}
