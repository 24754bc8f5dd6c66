//! What may be sent to a relay now: its subscription, filter, frame and
//! rate limits as far as we know them, and the slots kept for history.

use nostr::prelude::RelayUrl;

use super::SyncEngine;
use crate::clock::Now;

impl SyncEngine {
    /// The smallest subscription limit known for `relay`.
    pub(super) fn sub_limit(&self, relay: &RelayUrl) -> usize {
        self.relays
            .get(relay)
            .map_or(self.config.max_subscriptions.max(1), |known| {
                known.subscription_limit(&self.config)
            })
    }

    /// Filters per REQ allowed on `relay`.
    pub(super) fn filters_per_req(&self, relay: &RelayUrl) -> usize {
        self.relays
            .get(relay)
            .map_or(self.config.max_filters_per_req.max(1), |known| {
                known.filters_per_req(&self.config)
            })
    }

    /// Subscription slots live subscriptions may take on `relay`: the limit
    /// minus the slots kept for historic work (at least one each).
    /// A relay allowing a single subscription gets none live: everything
    /// is polled and the one slot serves history.
    pub(super) fn live_slots(&self, relay: &RelayUrl) -> usize {
        let limit = self.sub_limit(relay);
        if limit < 2 {
            return 0;
        }
        let historic = self.config.historic_slots.clamp(1, limit / 2);
        limit.saturating_sub(historic)
    }

    /// The largest frame `relay` may be sent: its NIP-11
    /// `max_message_length`, a smaller budget learned from a drop, or the
    /// configured default.
    pub(super) fn frame_budget(&self, relay: &RelayUrl) -> usize {
        let known = self.relays.get(relay);
        let told = known.and_then(|known| known.limits.max_message_length);
        let learned = known.and_then(|known| known.learned_frame_budget);
        // A told budget is honoured even below the learning floor; a
        // kilobyte is the least any REQ needs.
        [told, learned]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.config.default_frame_budget)
            .max(1024)
    }

    /// The window over which a learned rate counts openings.
    /// The page size `relay` certainly honours per filter, if we know it:
    /// its NIP-11 `max_limit` (under our page limit), or our page limit once
    /// a single-filter page of it came back full. Only then may filters that
    /// can match the same event share one REQ ([`SyncEngine::req_jobs`]):
    /// a relay that dedupes within a subscription sends such an event once,
    /// but for one filter's page it may then be one another filter brought,
    /// and where that filter's page ended can only be told from its
    /// `page`-th newest event. A relay that clamps silently below our
    /// limit gets separate REQs, paged one by one.
    pub(super) fn group_page_limit(&self, relay: &RelayUrl) -> Option<usize> {
        let known = self.relays.get(relay)?;
        let page = self.page_limit(relay);
        let told = known.limits.max_limit.is_some();
        (told || known.page_floor >= page).then_some(page)
    }

    /// Learns from a single-filter page of `len` events that `relay`
    /// honours our page limit (`page`) per filter, once a page came full.
    pub(super) fn note_page_len(&mut self, relay: &RelayUrl, len: usize, page: usize) {
        if len >= page {
            let known = self.knowledge(relay);
            known.page_floor = known.page_floor.max(len);
        }
    }

    pub(super) fn rate_window(&self) -> std::time::Duration {
        self.config.health.rate_limit_cooldown
    }

    /// `true` if one more subscription may be opened on `relay` now: a free
    /// slot, no rate-limit cooldown, and the learned rate not used up.
    pub(super) fn may_open(&mut self, now: Now, relay: &RelayUrl) -> bool {
        let limit = self.sub_limit(relay);
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
        if self
            .health
            .get(relay)
            .is_some_and(|health| health.is_rate_limited(now.instant))
        {
            return false;
        }
        self.recover_learned_rate(now, relay);
        let rate = self.relays.get(relay).and_then(|known| known.learned_rate);
        let window = self.rate_window();
        let Some(conn) = self.relays.conn_mut(relay) else {
            return false;
        };
        let within = conn.opens_within(now.instant, window);
        rate.is_none_or(|rate| within < rate)
    }

    /// Raises a learned rate again: doubled after [`RECOVERY_WINDOWS`] rate windows without
    /// a refusal, forgotten once above [`RATE_FORGOTTEN_ABOVE`]. A single
    /// `rate-limited:` (a burst, a restart of the relay) must not slow the
    /// relay down for good; a relay that keeps refusing halves it again.
    fn recover_learned_rate(&mut self, now: Now, relay: &RelayUrl) {
        let window = self.rate_window();
        let Some(known) = self.relays.get_mut(relay) else {
            return;
        };
        let (Some(rate), Some(at)) = (known.learned_rate, known.learned_rate_at) else {
            return;
        };
        if now.instant.saturating_duration_since(at) < window.saturating_mul(RECOVERY_WINDOWS) {
            return;
        }
        let raised = rate.saturating_mul(2);
        known.learned_rate = (raised <= RATE_FORGOTTEN_ABOVE).then_some(raised);
        known.learned_rate_at = Some(now.instant);
    }

    /// The delay before retrying work that failed on `relay`, as the health
    /// tracker decides: doubling for each failure in a row, so a relay that
    /// keeps refusing (`blocked:`, `auth-required:`) is not hammered.
    pub(super) fn retry_delay(&mut self, relay: &RelayUrl) -> std::time::Duration {
        self.health.on_work_failed(relay)
    }
}

/// A learned rate raised above this many REQs per window is forgotten.
pub(super) const RATE_FORGOTTEN_ABOVE: usize = 256;
/// Rate windows without a refusal before a learned rate is doubled (slower
/// than the halving, so a relay at its limit is probed rarely).
pub(super) const RECOVERY_WINDOWS: u32 = 4;
