//! What may be sent to a relay now: its subscription, filter, frame and
//! rate limits as far as we know them, and the slots kept for history.

use nostr::prelude::RelayUrl;

use super::SyncEngine;
use crate::clock::Now;

impl SyncEngine {
    /// The window over which a learned rate counts openings.
    pub(super) fn rate_window(&self) -> std::time::Duration {
        self.config.health.rate_limit_cooldown
    }

    /// `true` if one more subscription may be opened on `relay` now: a free
    /// slot, no rate-limit cooldown, and the learned rate not used up.
    pub(super) fn may_open(&mut self, now: Now, relay: &RelayUrl) -> bool {
        let limit = self.relays.view(relay).subscription_limit(&self.config);
        let free_slot = self
            .relays
            .conn(relay)
            .is_some_and(|conn| conn.subs.len() < limit);
        free_slot && self.rate_allows(now, relay)
    }

    /// `true` if one more REQ (a new subscription or a next page) may be
    /// sent to `relay` now: no rate-limit cooldown and the learned rate not
    /// used up.
    pub(super) fn rate_allows(&mut self, now: Now, relay: &RelayUrl) -> bool {
        let window = self.rate_window();
        let Some(session) = self.relays.get_mut(relay) else {
            return false;
        };
        if session.health.is_rate_limited(now.instant) {
            return false;
        }
        session.recover_learned_rate(now.instant, window);
        let rate = session.learned_rate;
        let Some(conn) = self.relays.conn_mut(relay) else {
            return false;
        };
        let within = conn.opens_within(now.instant, window);
        rate.is_none_or(|rate| within < rate)
    }

    /// Counts a failure of work on `relay` and returns the delay before it
    /// is retried, as its session's work retry decides — the one answer to "when
    /// to retry": doubling for each failure in a row, so a relay that keeps
    /// refusing (`blocked:`, `auth-required:`) is not hammered.
    pub(super) fn count_failure_and_delay(&mut self, relay: &RelayUrl) -> std::time::Duration {
        let health = &self.config.health;
        self.relays.entry(relay.clone()).work_failed(health)
    }
}

/// A learned rate raised above this many REQs per window is forgotten.
pub(super) const RATE_FORGOTTEN_ABOVE: usize = 256;
/// Rate windows without a refusal before a learned rate is doubled (slower
/// than the halving, so a relay at its limit is probed rarely).
pub(super) const RECOVERY_WINDOWS: u32 = 4;
