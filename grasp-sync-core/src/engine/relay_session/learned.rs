//! What was learned of one relay, kept across its connections: the limits
//! it told (NIP-11) and those it taught by refusing (subscriptions, REQs per
//! window, frame size, NIP-77), and the page size it was seen to honour.
//! From them, the limits work on the relay is held to.

use nostr::prelude::Filter;

use crate::clock::Instant;
use crate::engine::config::{EngineConfig, RelayLimits, MIN_FRAME_BUDGET};

/// A learned rate raised above this many REQs per window is forgotten.
const RATE_FORGOTTEN_ABOVE: usize = 256;
/// Rate windows without a refusal before a learned rate is doubled (slower
/// than the halving, so a relay at its limit is probed rarely).
const RECOVERY_WINDOWS: u32 = 4;

/// What was learned of one relay (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Learned {
    /// NIP-11 limits.
    limits: RelayLimits,
    /// The subscription count at which the relay refused one more.
    sub_limit: Option<usize>,
    /// Subscriptions the relay lets us open per rate window, learned from a
    /// rate-limit refusal.
    rate: Option<usize>,
    /// When the learned rate last changed (a refusal halved it, or it was
    /// raised again).
    rate_changed_at: Option<Instant>,
    /// A frame budget smaller than the relay announced, learned when it
    /// dropped the connection right after a large frame.
    smaller_frame_budget: Option<usize>,
    /// The relay refused NIP-77 in some form.
    negentropy_refused: bool,
    /// The most events one single-filter page of the relay brought: its
    /// per-filter page size is at least this.
    page_floor: usize,
}

impl Learned {
    // --- What the relay told and taught ------------------------------------

    /// Takes the relay's NIP-11 limits.
    pub(crate) fn set_limits(&mut self, limits: RelayLimits) {
        self.limits = limits;
    }

    /// The limits the relay told (NIP-11).
    pub(crate) fn told_limits(&self) -> &RelayLimits {
        &self.limits
    }

    /// A "too many subscriptions" refusal with `open` subscriptions open:
    /// the relay's limit becomes one below that (never below two: one live,
    /// one historic slot), or stays lower if it was. Returns the limit the
    /// refusal taught.
    pub(crate) fn refused_subscription(&mut self, open: usize) -> usize {
        let limit = open.saturating_sub(1).max(2);
        self.sub_limit = Some(self.sub_limit.map_or(limit, |old| old.min(limit)));
        limit
    }

    /// A `rate-limited:` refusal after `opened` REQs within the last window:
    /// the learned rate becomes half of that (at least one, and no more than
    /// half the rate learned before).
    pub(crate) fn halve_rate(&mut self, opened: usize, now: Instant) {
        let rate = (self.rate.unwrap_or(opened).min(opened) / 2).max(1);
        self.rate = Some(rate);
        self.rate_changed_at = Some(now);
    }

    /// Subscriptions the relay lets us open per rate window, if a refusal
    /// taught it.
    pub(crate) fn rate(&self) -> Option<usize> {
        self.rate
    }

    /// Raises a learned rate again: doubled after [`RECOVERY_WINDOWS`] rate
    /// windows (`window` each) without a refusal, forgotten once above
    /// [`RATE_FORGOTTEN_ABOVE`]. A single `rate-limited:` (a burst, a
    /// restart of the relay) must not slow the relay down for good; a relay
    /// that keeps refusing halves it again.
    pub(crate) fn recover_rate(&mut self, now: Instant, window: std::time::Duration) {
        let (Some(rate), Some(at)) = (self.rate, self.rate_changed_at) else {
            return;
        };
        if now.saturating_duration_since(at) < window.saturating_mul(RECOVERY_WINDOWS) {
            return;
        }
        let raised = rate.saturating_mul(2);
        self.rate = (raised <= RATE_FORGOTTEN_ABOVE).then_some(raised);
        self.rate_changed_at = Some(now);
    }

    /// The relay dropped the connection right after a frame of `len` bytes:
    /// half of it becomes the frame budget (never below
    /// [`MIN_FRAME_BUDGET`]). Returns the new budget if it is lower than the
    /// one learned before; a frame at or under the floor teaches nothing.
    pub(crate) fn dropped_after_frame(&mut self, len: usize) -> Option<usize> {
        if len <= MIN_FRAME_BUDGET {
            return None;
        }
        let budget = (len / 2).max(MIN_FRAME_BUDGET);
        if self.smaller_frame_budget.is_some_and(|old| budget >= old) {
            return None;
        }
        self.smaller_frame_budget = Some(budget);
        Some(budget)
    }

    /// Remembers that the relay refused NIP-77; `true` the first time.
    pub(crate) fn refuse_negentropy(&mut self) -> bool {
        !std::mem::replace(&mut self.negentropy_refused, true)
    }

    /// `true` once the relay refused NIP-77 in some form.
    pub(crate) fn negentropy_refused(&self) -> bool {
        self.negentropy_refused
    }

    // --- The limits work is held to ------------------------------------------

    /// The smallest subscription limit we know of.
    pub(crate) fn subscription_limit(&self, config: &EngineConfig) -> usize {
        [
            Some(config.limits.max_subscriptions),
            self.limits.max_subscriptions,
            self.sub_limit,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(config.limits.max_subscriptions)
        .max(1)
    }

    /// Filters per REQ we may send.
    pub(crate) fn filters_per_req(&self, config: &EngineConfig) -> usize {
        // (NIP-11 `max_filters` and the configured cap.)
        told_or_ours(self.limits.max_filters, config.limits.max_filters_per_req)
    }

    /// Subscription slots live subscriptions may take: the limit minus the
    /// slots kept for historic work (at least one each). A relay allowing a
    /// single subscription gets none live: everything is polled and the one
    /// slot serves history.
    pub(crate) fn live_slots(&self, config: &EngineConfig) -> usize {
        let limit = self.subscription_limit(config);
        if limit < 2 {
            return 0;
        }
        let historic = config.limits.historic_slots.clamp(1, limit / 2);
        limit.saturating_sub(historic)
    }

    /// The largest frame the relay may be sent: its NIP-11
    /// `max_message_length`, a smaller budget learned from a drop, or the
    /// configured default.
    pub(crate) fn frame_budget(&self, config: &EngineConfig) -> usize {
        // A told budget is honoured even below the learning floor; a
        // kilobyte is the least any REQ needs.
        [self.limits.max_message_length, self.smaller_frame_budget]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(config.limits.default_frame_budget)
            .max(1024)
    }

    /// The `limit` of a historic page: ours, or the relay's NIP-11
    /// `max_limit` if smaller.
    pub(crate) fn page_limit(&self, config: &EngineConfig) -> usize {
        told_or_ours(self.limits.max_limit, config.limits.page_limit)
    }

    /// The page size the relay certainly honours per filter, if we know it:
    /// its NIP-11 `max_limit` (under our page limit), or our page limit once
    /// a single-filter page of it came back full. Only then may filters that
    /// can match the same event share one REQ ([`RelaySession::req_jobs`](super::RelaySession::req_jobs)): a
    /// relay that dedupes within a subscription sends such an event once,
    /// but for one filter's page it may then be one another filter brought,
    /// and where that filter's page ended can only be told from its
    /// `page`-th newest event. A relay that clamps silently below our limit
    /// gets separate REQs, paged one by one.
    pub(crate) fn group_page_limit(&self, config: &EngineConfig) -> Option<usize> {
        let page = self.page_limit(config);
        let told = self.limits.max_limit.is_some();
        (told || self.page_floor >= page).then_some(page)
    }

    /// Learns from a single-filter page of `len` events that the relay
    /// honours our page limit (`page`) per filter, once a page came full.
    pub(crate) fn note_page_len(&mut self, len: usize, page: usize) {
        if len >= page {
            self.page_floor = self.page_floor.max(len);
        }
    }

    /// The frame size limit of a negentropy session of `filter` on this
    /// relay, or `None` if no NEG frame fits its frame budget.
    pub(crate) fn negentropy_frame_limit(
        &self,
        filter: &Filter,
        config: &EngineConfig,
    ) -> Option<u64> {
        crate::engine::frames::negentropy_frame_limit(
            self.frame_budget(config),
            filter,
            config.limits.negentropy_frame_size_limit,
        )
    }
}

/// A count the relay told (NIP-11) or ours, the smaller; at least one.
fn told_or_ours(told: Option<usize>, ours: usize) -> usize {
    told.map_or(ours, |told| told.min(ours)).max(1)
}
