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
//! and, when the terminal ends, renames it to `.cast` and wakes the uploader
//! (`services/uploader.rs`), which hands every finished file to control
//! (`PUT /v1/recordings/<session>/<name>`) and deletes it once control has answered 204. A file control could not take stays in
//! the spool and is sent again at the next sweep.
//!
//! Unrecorded terminals have no `Recorder`: their output is never parsed.
//!
//! - [`queue`]: what passes from a tunnel to the writer, and each recording's bound;
//! - [`recorder`]: a tunnel's side, reading frames and queuing events;
//! - [`writer`]: the writer thread, turning events into asciicast files.

mod queue;
mod recorder;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use policy::SessionId;
use tokio::sync::Notify;

pub use queue::{Limits, QueueFull};
pub use recorder::Recorder;

use queue::{Msg, Queue, SPARE_BUFFERS};
use writer::write_recordings;

/// Stack of the writer thread: it only formats lines and writes them.
const WRITER_STACK: usize = 256 * 1024;

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
    /// How large a recording and the spool may grow.
    limits: Limits,
    /// Bytes in the spool now: what was there at the start, what the writer wrote
    /// since, less what the uploader handed over.
    spooled: Arc<AtomicU64>,
}

/// Bytes of the files under `dir` (two levels: sessions, then their files).
fn size_of_spool(dir: &Path) -> u64 {
    let Ok(sessions) = std::fs::read_dir(dir) else {
        return 0;
    };
    sessions
        .flatten()
        .filter_map(|s| std::fs::read_dir(s.path()).ok())
        .flat_map(|files| files.flatten())
        .filter_map(|f| f.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

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
        let spooled = Arc::new(AtomicU64::new(size_of_spool(&dir)));
        Spool {
            dir,
            queue,
            writer_delay,
            wake: Arc::new(Notify::new()),
            next: AtomicU64::new(0),
            writer: std::sync::Mutex::new(None),
            limits: Limits::default(),
            spooled,
        }
    }

    /// The same spool, its files bounded by `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// A file of `bytes` left the spool (control took it).
    pub(crate) fn released(&self, bytes: u64) {
        let _ = self
            .spooled
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(bytes))
            });
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
        let bounds = queue::Bounds {
            limits: self.limits,
            spooled: Arc::clone(&self.spooled),
        };
        std::thread::Builder::new()
            .name("recorder".into())
            .stack_size(WRITER_STACK)
            .spawn(move || write_recordings(rx, &wake, delay, &bounds))?;
        *writer = Some(tx.clone());
        Ok(tx)
    }

    /// Resolves when the writer has finished a recording's file (for the uploader).
    pub(crate) async fn finished(&self) {
        self.wake.notified().await
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts recording a terminal of `session` where `user` types (named in the
    /// header): its file is made by the writer thread (a failure there makes the
    /// recording full, so the terminal closes).
    pub fn start(
        &self,
        session: SessionId,
        input: bool,
        user: Option<&str>,
    ) -> io::Result<Recorder> {
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
            user: user.map(str::to_owned),
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::Instant;

    use super::queue::FAILED;
    use super::writer::escape_into;
    use super::*;
    use crate::services::uploader::{finish_stale, spooled};

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
                let mut r = spool.start(id(), input, Some("peer:bob")).unwrap();
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
                assert_eq!(header["termgate"]["user"], "peer:bob", "who typed");
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
        let mut r = spool.start(id(), false, None).unwrap();
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

    /// Sends output frames until the recorder refuses one (at most `max`); how many
    /// it took.
    fn flood(r: &mut Recorder, max: usize) -> usize {
        let frame = framed(0x82, &[b'0'; 1001], false);
        for n in 0..max {
            if r.downward(&frame).is_err() {
                return n;
            }
            // The writer counts what it wrote before the next one is judged.
            let deadline = Instant::now() + Duration::from_secs(5);
            while r.queue.waiting.load(Ordering::Acquire) == 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        max
    }

    #[test]
    fn a_recording_that_reaches_its_bound_stops_within_it_and_is_finished() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            recording: 16 * 1024,
            spool: 1 << 30,
        };
        let spool = Spool::new(dir.path().to_path_buf(), 1024).with_limits(limits);
        let mut r = spool.start(id(), false, None).unwrap();
        let taken = flood(&mut r, 1000);
        assert!(
            taken > 5 && taken < 20,
            "{taken} frames of 1000 bytes in 16 KiB"
        );
        assert!(r.too_large(), "the refusal says why");
        drop(r);
        let lines = finished(&spool, id());
        assert!(lines.len() > 5);
        let (_, path) = spooled(spool.dir(), ".cast").remove(0);
        let len = fs::metadata(&path).unwrap().len();
        assert!(len <= limits.recording, "{len} bytes");
        // Handed over: the spool's total goes down by the file.
        let before = spool.spooled.load(Ordering::Acquire);
        spool.released(len);
        assert_eq!(spool.spooled.load(Ordering::Acquire), before - len);
    }

    #[test]
    fn the_spool_in_all_is_bounded_counting_what_is_already_there() {
        let dir = tempfile::tempdir().unwrap();
        // A recording control has not taken yet, from before this start.
        let old = dir.path().join(SessionId::from_random([1; 10]).to_string());
        fs::create_dir_all(&old).unwrap();
        fs::write(old.join("1-0-1.cast"), vec![b'x'; 40 * 1024]).unwrap();
        let limits = Limits {
            recording: 1 << 20,
            spool: 48 * 1024,
        };
        let spool = Spool::new(dir.path().to_path_buf(), 1024).with_limits(limits);
        let mut r = spool.start(id(), false, None).unwrap();
        let taken = flood(&mut r, 1000);
        // The last one taken is the one the writer found no room for.
        assert!(taken <= 8, "{taken} frames of 1000 bytes in the 8 KiB left");
        assert!(r.too_large());
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
        let mut r = spool.start(id(), false, None).unwrap();
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
