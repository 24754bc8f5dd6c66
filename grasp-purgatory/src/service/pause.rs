//! Fetches held back while a historic sync brings a repository's events in waves: its
//! announcement and state first, its pull requests and their updates a moment later.
//! Fetching at the first wave fetches again at the next, and every fetch spends the
//! host's politeness budget (30 a minute by default). A host that knows when its
//! historic sync ends pauses the fetches until then ([`Purgatory::pause_fetches`]),
//! never longer than the bound it gives: each repository then needs one fetch per
//! clone URL for all of its events.
//!
//! [`Purgatory::pause_fetches`]: super::Purgatory::pause_fetches

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use grasp_sync_core::clock::Instant;

/// Whether fetches wait, and until when at the latest.
#[derive(Debug, Default)]
pub(super) struct FetchPause {
    /// Paused until this instant; `None`: not paused.
    until: Mutex<Option<Instant>>,
}

impl FetchPause {
    /// The bound, locked (a panic elsewhere leaves it as it was).
    fn until(&self) -> MutexGuard<'_, Option<Instant>> {
        self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pauses fetches from `now` for `max` at most.
    pub(super) fn pause(&self, now: Instant, max: Duration) {
        *self.until() = Some(now + max);
    }

    /// Ends the pause.
    pub(super) fn resume(&self) {
        *self.until() = None;
    }

    /// Whether fetches wait at `now` (a pause whose bound passed ends).
    pub(super) fn is_paused(&self, now: Instant) -> bool {
        let mut until = self.until();
        match *until {
            Some(at) if now < at => true,
            Some(_) => {
                tracing::info!("the fetch pause reached its bound: fetching");
                *until = None;
                false
            }
            None => false,
        }
    }

    /// When the pause ends at the latest, while paused.
    pub(super) fn deadline(&self) -> Option<Instant> {
        *self.until()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_lasts_until_resumed_or_its_bound() {
        let pause = FetchPause::default();
        let t0 = Instant::ZERO;
        assert!(!pause.is_paused(t0), "not paused to begin with");
        pause.pause(t0, Duration::from_secs(60));
        assert!(pause.is_paused(t0 + Duration::from_secs(59)));
        assert_eq!(pause.deadline(), Some(t0 + Duration::from_secs(60)));
        pause.resume();
        assert!(!pause.is_paused(t0 + Duration::from_secs(1)));
        pause.pause(t0, Duration::from_secs(60));
        assert!(
            !pause.is_paused(t0 + Duration::from_secs(60)),
            "the bound ends it"
        );
        assert_eq!(pause.deadline(), None);
    }
}
