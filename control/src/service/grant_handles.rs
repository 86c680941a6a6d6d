//! One-use handles for terminal grants, kept in memory until the pool exchanges them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::error::ApiError;

/// How long a handle may wait to be exchanged for its grant: the pool asks as soon as
/// ttyd starts the terminal, right after the check.
const HANDLE_TTL: Duration = Duration::from_secs(60);
/// Most handles waiting at once; past it the oldest go first.
const MAX_HANDLES: usize = 10_000;

/// One-use handles for grants: what reaches the pool through ttyd, which passes a
/// query argument only below 252 bytes and a header's value (in `TTYD_USER`) only
/// below 30, both far shorter than a grant. Kept in memory: a handle lives from the
/// check to the terminal's start, well under a second.
#[derive(Default)]
pub(crate) struct Handles(std::sync::Mutex<HashMap<String, (Instant, String)>>);

impl Handles {
    pub(super) fn put(&self, grant: String) -> Result<String, ApiError> {
        let mut random = [0u8; 12];
        getrandom::getrandom(&mut random).map_err(|_| ApiError::INTERNAL)?;
        let handle: String = std::iter::once('h')
            .chain(random.iter().flat_map(|b| {
                let hex = |n: u8| char::from_digit(u32::from(n), 16).unwrap_or('0');
                [hex(b >> 4), hex(b & 15)]
            }))
            .collect();
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        map.retain(|_, (at, _)| now.duration_since(*at) < HANDLE_TTL);
        if map.len() >= MAX_HANDLES {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(handle.clone(), (now, grant));
        Ok(handle)
    }

    pub(super) fn take(&self, handle: &str) -> Option<String> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (at, grant) = map.remove(handle)?;
        (at.elapsed() < HANDLE_TTL).then_some(grant)
    }
}
