//! The core's clock on tokio's timeline, so `tokio::time::pause` drives it:
//! the workspace's one tokio clock (the sync manager's, and the one to give a
//! purgatory run on paused time: `PurgatoryBuilder::clock`).

use std::time::Duration;

use grasp_sync_core::clock::{Clock, Instant};
use nostr::prelude::Timestamp;

/// Monotonic time from tokio (virtual under `tokio::time::pause`); wall time
/// from the system, but never behind the wall time at creation plus the
/// tokio time elapsed since (so it follows paused time too, and never goes
/// backwards when the system clock is set back).
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    origin_unix: Timestamp,
}

impl TokioClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
            origin_unix: Timestamp::now(),
        }
    }

    /// The tokio instant of a core instant, for sleeping until it. Saturates
    /// a year ahead instead of overflowing.
    pub fn to_tokio(&self, at: Instant) -> tokio::time::Instant {
        const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
        let latest = tokio::time::Instant::now() + YEAR;
        self.origin
            .checked_add(at.since_origin())
            .map_or(latest, |at| at.min(latest))
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::from_duration(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }

    fn unix_time(&self) -> Timestamp {
        Timestamp::now().max(self.origin_unix + self.origin.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_time_on_both_clocks() {
        let clock = TokioClock::new();
        let unix = clock.unix_time();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(clock.now(), Instant::from_secs(3600));
        assert!(clock.unix_time() >= unix + Duration::from_secs(3600));
        assert_eq!(
            clock.to_tokio(Instant::from_secs(10)),
            clock.origin + Duration::from_secs(10)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_far_deadline_saturates_a_year_ahead() {
        let clock = TokioClock::new();
        let far = clock.to_tokio(Instant::from_duration(Duration::MAX));
        let year = Duration::from_secs(365 * 24 * 3600);
        assert_eq!(far, tokio::time::Instant::now() + year);
    }
}
