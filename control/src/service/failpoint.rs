//! Failpoints: where the crash-safety tests stop the process between two steps.

/// Aborts the process at a named step when `TERMGATE_FAILPOINT` names it. Debug builds
/// only: the crash-safety tests use it to stop control between two steps.
pub fn failpoint(name: &str) {
    if cfg!(debug_assertions) && std::env::var("TERMGATE_FAILPOINT").is_ok_and(|v| v == name) {
        eprintln!("failpoint {name}: aborting");
        std::process::abort();
    }
}
