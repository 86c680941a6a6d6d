//! Background services: the route feed follower and the token-expiry sweeper.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::clock::now;
use crate::state::{ClosedFor, Gateway};
use crate::terminals::CloseReason;

/// How long one feed poll may wait at control.
const FEED_WAIT: Duration = Duration::from_secs(20);

/// Follows control's route feed, applying changes and closing revoked terminals.
pub struct FeedFollower(pub Arc<Gateway>);

#[async_trait]
impl BackgroundService for FeedFollower {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let g = &self.0;
        let mut backoff = Duration::from_millis(100);
        let mut last_answer = Instant::now();
        loop {
            // The first poll asks without waiting so that readiness comes quickly.
            let wait = if g.routes.is_synced() {
                FEED_WAIT
            } else {
                Duration::ZERO
            };
            let epoch = g.routes.epoch();
            let polled = tokio::select! {
                r = g.control.feed(g.routes.rev(), &epoch, wait) => r,
                _ = shutdown.changed() => return,
            };
            match polled {
                Ok(page) => {
                    backoff = Duration::from_millis(100);
                    last_answer = Instant::now();
                    let revoked = g.routes.apply(&page);
                    if page.reset {
                        tracing::info!(
                            rev = page.rev,
                            routes = page.routes.len(),
                            "route feed reset applied"
                        );
                    }
                    g.enforce(&revoked);
                    g.metrics
                        .feed_revision
                        .set(i64::try_from(page.rev).unwrap_or(i64::MAX));
                    g.metrics.feed_lag_seconds.set(0);
                }
                Err(e) => {
                    g.metrics
                        .feed_lag_seconds
                        .set(i64::try_from(last_answer.elapsed().as_secs()).unwrap_or(i64::MAX));
                    tracing::warn!(error = %e, retry_in = ?backoff, "route feed unavailable; serving known sessions");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.changed() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// Closes terminals whose token expired; independent of traffic and of control.
pub struct ExpirySweeper(pub Arc<Gateway>);

#[async_trait]
impl BackgroundService for ExpirySweeper {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut ticks: u32 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let g = &self.0;
                    let t = now();
                    let n = g.terminals.close_expired(t);
                    g.said_closed(n, CloseReason::TokenExpired, "token_expired", ClosedFor::Anything);
                    let n = g.terminals.close_expired_views(t);
                    g.said_closed(n, CloseReason::ShareEnded, "share_expired", ClosedFor::Anything);
                    let n = g.terminals.close_expired_peers(t);
                    g.said_closed(n, CloseReason::PeerRemoved, "peer_expired", ClosedFor::Anything);
                    g.metrics.open_terminals.set(i64::try_from(g.terminals.open()).unwrap_or(i64::MAX));
                    ticks = ticks.wrapping_add(1);
                    if ticks.is_multiple_of(240) {
                        // Once a minute: entries whose tokens can no longer verify.
                        g.routes.prune_revoked(now(), g.config.auth.leeway_seconds);
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}
