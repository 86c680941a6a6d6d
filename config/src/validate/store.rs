//! The rules for `[store]`: where control keeps its state, and the change log's length.

use super::common::within;
use crate::model::Config;

/// Checks `[store]`.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) {
    if c.store.path.as_os_str().is_empty() {
        err("store.path", "must not be empty".into());
    }
    within(
        "store.change_log_len",
        c.store.change_log_len,
        16,
        1 << 20,
        err,
    );
}
