//! Exponential backoff with a cap: the one formula used by relay health
//! (`5 s · 2^(n−1)` capped at 1 h) and by the purgatory sync queue
//! (`20 s · 2^(n−1)` capped at 2 min).

use std::time::Duration;

/// `base · 2^(attempt−1)`, capped at `max`, saturating on overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExponentialBackoff {
    /// The delay after the first failure.
    pub base: Duration,
    /// The largest delay ever returned.
    pub max: Duration,
}

impl ExponentialBackoff {
    /// A backoff starting at `base` and capped at `max`.
    pub const fn new(base: Duration, max: Duration) -> Self {
        ExponentialBackoff { base, max }
    }

    /// The delay after `attempt` consecutive failures.
    ///
    /// Attempts `0` and `1` both give `base` (capped at `max`); each further
    /// attempt doubles it until `max`. Monotone in `attempt`, never above `max`.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1);
        // 2^31 seconds is beyond any sensible cap; stop doubling early so the
        // multiplication below cannot overflow a u32 shift.
        let factor = 1u32.checked_shl(doublings.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_health_backoff_matches_the_spec() {
        let b = ExponentialBackoff::new(Duration::from_secs(5), Duration::from_secs(3600));
        let secs: Vec<u64> = (1..=12).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(
            secs,
            vec![5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600]
        );
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn purgatory_backoff_matches_the_spec() {
        let b = ExponentialBackoff::new(Duration::from_secs(20), Duration::from_secs(120));
        let secs: Vec<u64> = (0..=6).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(secs, vec![20, 20, 40, 80, 120, 120, 120]);
    }
}
