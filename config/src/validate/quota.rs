//! The rules for `[quota]`: the session limits per user and in all.

use super::common::positive;
use crate::model::Config;

/// Checks `[quota]`.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) {
    positive("quota.per_user", c.quota.per_user.into(), err);
    positive("quota.global", c.quota.global.into(), err);
}
