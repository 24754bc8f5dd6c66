//! What was learned of one relay, kept across its connections: the limits
//! it told (NIP-11) and those it taught by refusing (subscriptions, REQs per
//! window, frame size, NIP-77), and the page size it was seen to honour.
//! From them, the limits work on the relay is held to.
//!
//! What a refusal or a drop teaches is not forever, in the shape of TCP's
//! congestion window: a lesson lowers a limit at once (the frame budget to
//! half the frame that was dropped, the subscription limit to one below
//! what was open, the REQ rate to half), and each quiet period without a
//! new lesson raises it one bounded step, until it is back at what the
//! relay told or we configured and is forgotten. One network blip after a
//! large frame costs a relay a few periods, not the life of the process; a
//! relay really at a limit refuses the probe and is lowered again.

use std::time::Duration;

use nostr::prelude::Filter;

use crate::clock::Instant;
use crate::engine::config::{EngineConfig, RelayLimits, MIN_FRAME_BUDGET};

/// Time without a new lesson after which a lowered subscription limit or
/// frame budget is raised one step.
pub(crate) const LIMIT_PROBE_PERIOD: Duration = Duration::from_secs(5 * 60);
/// Steps from the learning floor back to a relay's full frame budget: each
/// [`LIMIT_PROBE_PERIOD`] raises a lowered budget by this fraction of the
/// full one (at least [`MIN_FRAME_BUDGET`]).
const FRAME_BUDGET_STEPS: usize = 8;

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
    /// The subscription count at which the relay refused one more (raised
    /// again by [`Learned::recover_limits`]).
    sub_limit: Option<usize>,
    /// When the learned subscription limit last changed.
    sub_limit_changed_at: Option<Instant>,
    /// Subscriptions the relay lets us open per rate window, learned from a
    /// rate-limit refusal.
    rate: Option<usize>,
    /// When the learned rate last changed (a refusal halved it, or it was
    /// raised again).
    rate_changed_at: Option<Instant>,
    /// A frame budget smaller than the relay announced, learned when it
    /// dropped the connection right after a large frame (raised again by
    /// [`Learned::recover_limits`]).
    smaller_frame_budget: Option<usize>,
    /// When the smaller frame budget last changed.
    frame_budget_changed_at: Option<Instant>,
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
    pub(crate) fn refused_subscription(&mut self, open: usize, now: Instant) -> usize {
        let limit = open.saturating_sub(1).max(2);
        self.sub_limit = Some(self.sub_limit.map_or(limit, |old| old.min(limit)));
        self.sub_limit_changed_at = Some(now);
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
    pub(crate) fn dropped_after_frame(&mut self, len: usize, now: Instant) -> Option<usize> {
        if len <= MIN_FRAME_BUDGET {
            return None;
        }
        let budget = (len / 2).max(MIN_FRAME_BUDGET);
        if self.smaller_frame_budget.is_some_and(|old| budget >= old) {
            return None;
        }
        self.smaller_frame_budget = Some(budget);
        self.frame_budget_changed_at = Some(now);
        Some(budget)
    }

    /// Raises a lowered subscription limit and frame budget one step each
    /// once [`LIMIT_PROBE_PERIOD`] passed without a new lesson: the
    /// subscription limit by one, the frame budget by an eighth of the
    /// relay's full budget (at least [`MIN_FRAME_BUDGET`]). A limit raised
    /// back to what the relay told or we configured is forgotten. Returns
    /// `true` when a limit was raised.
    pub(crate) fn recover_limits(&mut self, now: Instant, config: &EngineConfig) -> bool {
        let mut raised = false;
        if let Some(limit) = due(self.sub_limit, self.sub_limit_changed_at, now) {
            let full = self.told_subscription_limit(config);
            self.sub_limit = (limit + 1 < full).then_some(limit + 1);
            self.sub_limit_changed_at = Some(now);
            raised = true;
        }
        if let Some(budget) = due(self.smaller_frame_budget, self.frame_budget_changed_at, now) {
            let full = self.told_frame_budget(config);
            let next = budget.saturating_add((full / FRAME_BUDGET_STEPS).max(MIN_FRAME_BUDGET));
            self.smaller_frame_budget = (next < full).then_some(next);
            self.frame_budget_changed_at = Some(now);
            raised = true;
        }
        raised
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
        let full = self.told_subscription_limit(config);
        self.sub_limit
            .map_or(full, |learned| learned.min(full))
            .max(1)
    }

    /// The subscription limit before any refusal: ours, or the relay's
    /// NIP-11 `max_subscriptions` if smaller.
    fn told_subscription_limit(&self, config: &EngineConfig) -> usize {
        told_or_ours(
            self.limits.max_subscriptions,
            config.limits.max_subscriptions,
        )
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
        let full = self.told_frame_budget(config);
        self.smaller_frame_budget
            .map_or(full, |learned| learned.min(full))
            .max(1024)
    }

    /// The frame budget before any drop: the relay's NIP-11
    /// `max_message_length`, else the configured default. A told budget is
    /// honoured even below the learning floor; a kilobyte is the least any
    /// REQ needs.
    fn told_frame_budget(&self, config: &EngineConfig) -> usize {
        self.limits
            .max_message_length
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

/// A lowered limit `learned` (changed at `at`) whose quiet period has
/// passed at `now`: it is due to be raised a step.
fn due(learned: Option<usize>, at: Option<Instant>, now: Instant) -> Option<usize> {
    let (learned, at) = (learned?, at?);
    (now.saturating_duration_since(at) >= LIMIT_PROBE_PERIOD).then_some(learned)
}

/// A count the relay told (NIP-11) or ours, the smaller; at least one.
fn told_or_ours(told: Option<usize>, ours: usize) -> usize {
    told.map_or(ours, |told| told.min(ours)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::DEFAULT_FRAME_BUDGET;

    fn at(secs: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(secs)
    }

    #[test]
    fn a_frame_budget_halved_by_a_blip_climbs_back_a_step_per_quiet_period() {
        let config = EngineConfig::default();
        let mut learned = Learned::default();
        assert_eq!(learned.frame_budget(&config), DEFAULT_FRAME_BUDGET);
        // One drop right after a full-budget frame: halved at once.
        assert_eq!(
            learned.dropped_after_frame(DEFAULT_FRAME_BUDGET, at(0)),
            Some(DEFAULT_FRAME_BUDGET / 2)
        );
        assert!(
            !learned.recover_limits(at(60), &config),
            "not before a quiet period"
        );
        assert_eq!(learned.frame_budget(&config), DEFAULT_FRAME_BUDGET / 2);
        let step = DEFAULT_FRAME_BUDGET / FRAME_BUDGET_STEPS;
        let mut now = 0;
        let mut budgets = vec![learned.frame_budget(&config)];
        while learned.frame_budget(&config) < DEFAULT_FRAME_BUDGET {
            now += LIMIT_PROBE_PERIOD.as_secs();
            assert!(learned.recover_limits(at(now), &config));
            budgets.push(learned.frame_budget(&config));
            assert!(
                budgets.len() <= FRAME_BUDGET_STEPS + 1,
                "bounded: {budgets:?}"
            );
        }
        assert!(
            budgets.windows(2).all(|pair| pair[1] - pair[0] <= step),
            "slow, bounded steps: {budgets:?}"
        );
        assert_eq!(learned.frame_budget(&config), DEFAULT_FRAME_BUDGET);
        assert!(
            !learned.recover_limits(at(now + 3_600), &config),
            "back at the full budget, the lesson is forgotten"
        );
    }

    #[test]
    fn a_frame_budget_never_climbs_past_what_the_relay_told() {
        let config = EngineConfig::default();
        let mut learned = Learned::default();
        learned.set_limits(RelayLimits {
            max_message_length: Some(131_072),
            ..RelayLimits::default()
        });
        learned.dropped_after_frame(131_072, at(0));
        let mut now = 0;
        for _ in 0..20 {
            now += LIMIT_PROBE_PERIOD.as_secs();
            learned.recover_limits(at(now), &config);
            assert!(learned.frame_budget(&config) <= 131_072);
        }
        assert_eq!(learned.frame_budget(&config), 131_072);
    }

    #[test]
    fn a_new_drop_during_recovery_halves_again_and_restarts_the_quiet_period() {
        let config = EngineConfig::default();
        let mut learned = Learned::default();
        learned.dropped_after_frame(DEFAULT_FRAME_BUDGET, at(0));
        let period = LIMIT_PROBE_PERIOD.as_secs();
        assert!(learned.recover_limits(at(period), &config));
        let raised = learned.frame_budget(&config);
        assert!(raised > DEFAULT_FRAME_BUDGET / 2);
        // The relay really is at a limit: the probe's frame is dropped.
        assert_eq!(
            learned.dropped_after_frame(raised, at(period + 10)),
            Some(raised / 2)
        );
        assert!(
            !learned.recover_limits(at(2 * period), &config),
            "quiet period restarted"
        );
        assert!(learned.recover_limits(at(2 * period + 10), &config));
    }

    #[test]
    fn a_subscription_limit_lowered_by_a_refusal_climbs_back_one_per_quiet_period() {
        let config = EngineConfig::default();
        let full = config.limits.max_subscriptions;
        let mut learned = Learned::default();
        // A blip: one refusal with 6 open (a relay restarting, a proxy).
        assert_eq!(learned.refused_subscription(6, at(0)), 5);
        assert_eq!(learned.subscription_limit(&config), 5);
        assert!(!learned.recover_limits(at(LIMIT_PROBE_PERIOD.as_secs() - 1), &config));
        let mut now = 0;
        let mut limits = vec![5];
        while learned.subscription_limit(&config) < full {
            now += LIMIT_PROBE_PERIOD.as_secs();
            assert!(learned.recover_limits(at(now), &config));
            limits.push(learned.subscription_limit(&config));
            assert!(limits.len() <= full, "bounded: {limits:?}");
        }
        assert!(
            limits.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "{limits:?}"
        );
        assert!(
            !learned.recover_limits(at(now + 3_600), &config),
            "forgotten"
        );
        // Told limits stay the ceiling.
        learned.set_limits(RelayLimits {
            max_subscriptions: Some(8),
            ..RelayLimits::default()
        });
        learned.refused_subscription(8, at(now));
        for step in 1..30 {
            learned.recover_limits(at(now + step * LIMIT_PROBE_PERIOD.as_secs()), &config);
            assert!(learned.subscription_limit(&config) <= 8);
        }
        assert_eq!(learned.subscription_limit(&config), 8);
    }
}
