//! The core's clock on tokio's timeline, so `tokio::time::pause` drives it.

use grasp_sync_core::clock::{Clock, Instant};
use nostr::prelude::Timestamp;

/// Monotonic time from tokio (virtual under `tokio::time::pause`), wall
/// time from the system.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }

    /// The tokio instant of a core instant.
    pub fn to_tokio(&self, at: Instant) -> tokio::time::Instant {
        self.origin + at.since_origin()
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
        Timestamp::now()
    }
}
