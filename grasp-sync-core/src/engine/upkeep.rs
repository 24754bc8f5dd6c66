//! After every input: connect relays whose backoff allows it and start
//! queued work where limits allow — on every relay when the input may have
//! changed more than its own relay, on that relay alone otherwise, so the
//! cost of an input does not grow with the number of relays.

use nostr::prelude::RelayUrl;

use super::SyncEngine;
use crate::clock::Now;

/// What an input on one relay can change for the others: batches created
/// or ended (planning, confirmations), relays added or dropped, the store
/// falling behind or catching up. Equal before and after an input → only
/// its relay needs a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reach {
    batches: u64,
    batches_ended: u64,
    relays: usize,
    connections: usize,
    store_keeps_up: bool,
}

impl SyncEngine {
    /// The current [`Reach`], taken before an input.
    pub(super) fn reach(&self) -> Reach {
        Reach {
            batches: self.out.batches_issued(),
            batches_ended: self.stats.batches_confirmed + self.stats.batches_failed,
            relays: self.relays.tracked_count(),
            connections: self.relays.connected().count(),
            store_keeps_up: self.store_keeps_up(),
        }
    }

    /// After an input on `relay` (or on no relay: a store answer): only
    /// `relay` is pumped unless the input reached further than it
    /// (`before` differs from now), then everything is.
    pub(super) fn maintain_after(&mut self, now: Now, relay: Option<&RelayUrl>, before: Reach) {
        if self.reach() != before {
            return self.maintain(now);
        }
        self.observe(now);
        if let Some(relay) = relay {
            self.pump(now, relay);
            self.refresh_deadline(relay);
        }
    }

    /// After an input that may concern any relay: connect relays whose
    /// backoff allows it, start queued work where limits allow.
    pub(super) fn maintain(&mut self, now: Now) {
        self.observe(now);
        self.connect_ready_relays(now);
        let relays: Vec<RelayUrl> = self.relays.connected().cloned().collect();
        for relay in relays {
            self.pump(now, &relay);
        }
        self.refresh_all_deadlines();
    }
}
