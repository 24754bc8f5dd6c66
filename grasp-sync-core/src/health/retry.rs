//! Retries of work that is not a connection: a relay's failed batches, the
//! store's refusals, the own relay's reconnects. Each counts its failures in
//! a row and answers with the next delay of its backoff.

use std::time::Duration;

use super::backoff::ExponentialBackoff;

/// Failures in a row of one kind of work and the backoff they climb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    backoff: ExponentialBackoff,
    failures: u32,
}

impl Retry {
    /// No failure yet, climbing `backoff`.
    pub(crate) const fn new(backoff: ExponentialBackoff) -> Self {
        Retry {
            backoff,
            failures: 0,
        }
    }

    /// One more failure of the work whose retry is `slot` (started on
    /// `backoff` at its first failure): the delay before trying again.
    /// Success is `*slot = None`.
    pub(crate) fn fail_in(slot: &mut Option<Retry>, backoff: ExponentialBackoff) -> Duration {
        slot.get_or_insert_with(|| Retry::new(backoff)).fail()
    }

    /// One more failure: the delay before trying again.
    pub(crate) fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.backoff.delay(self.failures)
    }

    /// The work succeeded: the next failure starts from the base delay.
    pub fn succeed(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_climb_with_failures_and_reset_on_success() {
        let mut retry = Retry::new(ExponentialBackoff::new(
            Duration::from_secs(1),
            Duration::from_secs(4),
        ));
        let delays: Vec<u64> = (0..4).map(|_| retry.fail().as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 4]);
        assert_eq!(retry.failures(), 4);
        retry.succeed();
        assert_eq!(retry.fail(), Duration::from_secs(1));
    }
}
