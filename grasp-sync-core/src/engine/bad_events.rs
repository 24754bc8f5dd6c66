//! Is a relay past its threshold of refused events? Every event a
//! connection brings that we refuse (a bad id or signature, outside its
//! subscription's filters, on a subscription not open, over the size
//! limits) is counted for that connection; the one that goes past
//! [`Caps::max_bad_events`](super::Caps::max_bad_events) cuts the relay off,
//! once per connection (an episode). A new connection starts at zero; the
//! relay's health counts each cut as a failure, so the wait before the next
//! connection grows.

/// What one more refused event means for its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadEventVerdict {
    /// Within the threshold: dropped, nothing else.
    Tolerated,
    /// This one went past the threshold: cut the relay off now.
    CutOff,
}

/// The refused events of one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BadEvents {
    count: u64,
}

impl BadEvents {
    /// One more refused event on the connection, against `threshold` (0:
    /// never cut off): [`BadEventVerdict::CutOff`] exactly once, for the
    /// event that goes past it.
    pub(crate) fn record(&mut self, threshold: u64) -> BadEventVerdict {
        self.count = self.count.saturating_add(1);
        if threshold > 0 && self.count == threshold.saturating_add(1) {
            BadEventVerdict::CutOff
        } else {
            BadEventVerdict::Tolerated
        }
    }

    /// Refused events counted on the connection.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_past_the_threshold_cuts_off_once() {
        let mut bad = BadEvents::default();
        for _ in 0..3 {
            assert_eq!(bad.record(3), BadEventVerdict::Tolerated);
        }
        assert_eq!(bad.record(3), BadEventVerdict::CutOff);
        assert_eq!(bad.record(3), BadEventVerdict::Tolerated);
        assert_eq!(bad.count(), 5);
    }

    #[test]
    fn a_threshold_of_zero_never_cuts_off() {
        let mut bad = BadEvents::default();
        for _ in 0..10 {
            assert_eq!(bad.record(0), BadEventVerdict::Tolerated);
        }
    }
}
