//! The purgatory's clock: tokio time mapped onto the core's [`Instant`], so the whole
//! service runs on virtual time under `tokio::time::pause`.

use std::time::Duration;

use grasp_sync_core::clock::Instant;
use nostr::prelude::Timestamp;

/// Reads tokio's clock as the core's [`Instant`] (time since the clock was made) and as
/// unix time (the system time at creation plus tokio time elapsed since).
#[derive(Clone, Copy, Debug)]
pub struct PurgatoryClock {
    origin: tokio::time::Instant,
    origin_unix: Timestamp,
}

impl PurgatoryClock {
    /// A clock starting now.
    pub fn new() -> Self {
        PurgatoryClock {
            origin: tokio::time::Instant::now(),
            origin_unix: Timestamp::now(),
        }
    }

    /// Now, for the core's state machines.
    pub fn now(&self) -> Instant {
        Instant::from_duration(self.origin.elapsed())
    }

    /// Now as unix time.
    pub fn unix(&self) -> Timestamp {
        self.origin_unix + self.origin.elapsed()
    }

    /// The tokio instant of a core instant, for sleeping until it.
    /// Saturates a year ahead instead of overflowing.
    pub fn to_tokio(&self, at: Instant) -> tokio::time::Instant {
        let latest = far_future();
        self.origin
            .checked_add(at.since_origin())
            .map_or(latest, |at| at.min(latest))
    }

    /// The tokio instant `after` from now, saturating a year ahead.
    pub fn tokio_after(&self, after: Duration) -> tokio::time::Instant {
        tokio::time::Instant::now()
            .checked_add(after)
            .map_or(far_future(), |at| at.min(far_future()))
    }
}

/// A year from now: later deadlines are clamped to it (the loop wakes at least every
/// loop interval anyway).
fn far_future() -> tokio::time::Instant {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    tokio::time::Instant::now() + YEAR
}

impl Default for PurgatoryClock {
    fn default() -> Self {
        Self::new()
    }
}
