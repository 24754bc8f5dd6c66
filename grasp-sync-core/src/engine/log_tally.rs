//! When a routine refusal is worth a log line: the first time and every
//! thousandth after ([`LogTally`]). Kept apart from the engine's counters
//! (`EngineStats`): a counter is only read, never asked to decide.

/// A running count of one kind of refusal that says when to log it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogTally {
    count: u64,
}

impl LogTally {
    /// Adds `n`; `true` when this is the first or the count crossed a
    /// multiple of 1 000 (log it, with [`LogTally::count`]).
    pub(crate) fn add(&mut self, n: u64) -> bool {
        let before = self.count;
        self.count = self.count.saturating_add(n);
        n > 0 && (before == 0 || before / 1_000 != self.count / 1_000)
    }

    /// How many were added.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}

/// The log tallies of the caps' routine refusals.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CapLogs {
    /// Sync+ participants not remembered.
    pub(crate) participants: LogTally,
    /// Sync+ outbox relays kept out by the global cap.
    pub(crate) outbox_relays: LogTally,
    /// Relays an announcement listed that wait for a slot.
    pub(crate) relays: LogTally,
    /// Root events of unannounced repositories not indexed.
    pub(crate) roots: LogTally,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_and_every_thousandth_are_logged() {
        let mut tally = LogTally::default();
        let logged: Vec<u64> = (1..=2_500).filter(|_| tally.add(1)).collect();
        assert_eq!(logged, vec![1, 1_000, 2_000]);
        assert_eq!(tally.count(), 2_500);
        assert!(tally.add(600), "crossing 3 000 in one step");
        assert!(!tally.add(0), "nothing added, nothing to log");
    }
}
