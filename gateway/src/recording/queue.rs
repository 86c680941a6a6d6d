//! What passes from a recorded terminal's tunnel to the writer thread: the messages and
//! events, and each recording's bounded place in the queue.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;

/// What a recording whose writer failed counts as waiting: always full.
pub(super) const FAILED: usize = usize::MAX / 2;
/// What a recording that reached its size limit counts as waiting: always full.
pub(super) const TOO_LARGE: usize = FAILED + 1;
/// Buffers the writer hands back for reuse, and the largest one kept: a terminal that
/// was busy once holds little once it is idle again.
pub(super) const SPARE_BUFFERS: usize = 4;
pub(super) const SPARE_CAPACITY: usize = 16 * 1024;

/// How large the spool's files may grow.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// One recording's file (control refuses a larger one).
    pub recording: u64,
    /// The spool in all.
    pub spool: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            recording: 64 << 20,
            spool: 1 << 30,
        }
    }
}

/// How large the writer lets files grow, and the spool's running total.
pub(super) struct Bounds {
    pub(super) limits: Limits,
    pub(super) spooled: Arc<std::sync::atomic::AtomicU64>,
}

/// The writer of a recording fell behind: the terminal must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

/// What the writer thread is told.
pub(super) enum Msg {
    /// A terminal is recorded from now on.
    Open {
        id: u64,
        part: PathBuf,
        done: PathBuf,
        timestamp: u64,
        /// Who types in the terminal (its `X-Termgate-User`: a `sub`, or `peer:<sub>`).
        user: Option<String>,
        spare: SyncSender<Vec<u8>>,
        waiting: Arc<AtomicUsize>,
    },
    Event(u64, Event),
    /// The terminal ended: its file is made final.
    Close(u64),
}

/// A recording's place in the writer's queue.
pub(super) struct Queue {
    pub(super) id: u64,
    pub(super) tx: mpsc::Sender<Msg>,
    /// Its events queued and not yet written ([`FAILED`]: its writer failed).
    pub(super) waiting: Arc<AtomicUsize>,
    pub(super) limit: usize,
}

impl Queue {
    /// Queues an event without waiting; full once `limit` are waiting.
    pub(super) fn send(&self, event: Event) -> Result<(), QueueFull> {
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
pub(super) enum Event {
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
