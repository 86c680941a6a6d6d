//! The user's own terminal while attached: raw mode, so every key reaches the session
//! (Ctrl-C included), and back to how it was on every way out — a normal end, an
//! error, a panic, a signal. And the window's size.

use std::sync::{Mutex, Once};

use rustix::termios::{self, OptionalActions, Termios};

/// The terminal's settings before raw mode, for the panic hook (which has no guard to
/// ask).
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// The size announced when standard input is not a terminal.
const DEFAULT_SIZE: (u16, u16) = (80, 24);

/// Raw mode for as long as it lives; the settings before it come back on drop, on a
/// panic, and through [`Raw::restore`] before an exit.
pub struct Raw {
    active: bool,
}

impl Raw {
    /// Puts standard input's terminal in raw mode; does nothing when it is not one.
    pub fn enter() -> Result<Raw, String> {
        let stdin = std::io::stdin();
        if !termios::isatty(&stdin) {
            return Ok(Raw { active: false });
        }
        let before = termios::tcgetattr(&stdin).map_err(|e| format!("terminal settings: {e}"))?;
        let mut raw = before.clone();
        raw.make_raw();
        *saved() = Some(before);
        restore_on_panic();
        if let Err(e) = termios::tcsetattr(&stdin, OptionalActions::Now, &raw) {
            restore();
            return Err(format!("raw mode: {e}"));
        }
        Ok(Raw { active: true })
    }

    /// Gives the terminal back its settings now (idempotent).
    pub fn restore(&mut self) {
        if std::mem::take(&mut self.active) {
            restore();
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.restore();
    }
}

/// The window's size as `(columns, rows)`.
pub fn size() -> (u16, u16) {
    match termios::tcgetwinsize(std::io::stdin()) {
        Ok(w) if w.ws_col > 0 && w.ws_row > 0 => (w.ws_col, w.ws_row),
        _ => DEFAULT_SIZE,
    }
}

fn saved() -> std::sync::MutexGuard<'static, Option<Termios>> {
    SAVED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Restores the saved settings, once: the output drained first, so nothing written in
/// raw mode is reinterpreted, and input not yet read dropped — keys typed after the
/// detach keys, or a terminal's answer to the session's question (its cursor position),
/// were meant for the session, not for the shell the user comes back to.
fn restore() {
    if let Some(before) = saved().take() {
        let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Flush, &before);
    }
}

/// A panic's message is printed on a terminal given back first, where it reads as text.
fn restore_on_panic() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
