//! The session's live coverage: the live plan ([`LivePlan`]: which live
//! REQs cover Layer 1 and the items' Layers 2+3, which filters are polled
//! instead), whether it overflows or must be rebuilt, and opening, filing,
//! rebuilding and applying it. The bookkeeping of what is live, waits and
//! is polled is the connection's `LiveCoverage`.

use indexmap::IndexSet;
use nostr::prelude::{Filter, SubscriptionId};
use tracing::info;

use super::super::config::EngineConfig;
use super::super::live_coverage::{LiveList, Polling};
use super::super::session_events::Noted;
use super::super::timer_table::RelayTimer;
use super::super::Command;
use super::{Ctx, RelaySession};
use crate::clock::Now;
use crate::filters::{announcement_filter, item_filters, FilterMode};
use crate::model::PendingItems;

/// What a relay's live subscriptions cover ([`RelaySession::live_plan`]).
#[derive(Debug)]
pub(crate) struct LivePlan {
    /// The live REQs, each a list of filters, within the live slots.
    covered: Vec<Vec<Filter>>,
    /// The filters that did not fit: polled with `since` instead.
    polled: IndexSet<Filter>,
}

impl LivePlan {
    /// The plan for `reqs`, packed live REQs in order: the first
    /// `live_slots` of them live, the filters of the rest polled (each
    /// once).
    pub(crate) fn split(reqs: Vec<Vec<Filter>>, live_slots: usize) -> Self {
        let mut reqs = reqs.into_iter();
        let covered = reqs.by_ref().take(live_slots).collect();
        let polled = reqs.flatten().collect();
        LivePlan { covered, polled }
    }

    /// The live REQs and the polled filters.
    pub(crate) fn into_parts(self) -> (Vec<Vec<Filter>>, IndexSet<Filter>) {
        (self.covered, self.polled)
    }
}

/// The session's live plan and live subscriptions.
impl RelaySession {
    /// The live plan for `items` — which live REQs cover Layer 1 and the
    /// items' Layers 2+3, and which filters are polled instead: the filters
    /// packed into as few REQs as the relay's filter and frame limits allow,
    /// the first [`Learned::live_slots`] of them live, the rest polled
    /// with a `since` catch-up (historic work always keeps its slots).
    /// Layer 1 only where announcements are discovered (`discovers`).
    pub(crate) fn live_plan(
        &self,
        items: &PendingItems,
        discovers: bool,
        config: &EngineConfig,
    ) -> LivePlan {
        let mut filters = Vec::new();
        if discovers {
            filters.push(announcement_filter(FilterMode::Live));
        }
        filters.extend(item_filters(
            items,
            config.limits.chunk_size,
            FilterMode::Live,
        ));
        let packed = self.pack(filters, config);
        LivePlan::split(packed, self.learned.live_slots(config))
    }

    /// `true` if live REQs for `new_filters` more filters in `new_reqs` REQs
    /// do not fit next to the live subscriptions open or waiting: over the
    /// consolidation threshold of incremental filters, over the live slots,
    /// or over the subscription limit. Then the live plan is rebuilt
    /// ([`RelaySession::live_plan`]) instead of adding to it.
    pub(crate) fn live_overflows(
        &self,
        new_filters: usize,
        new_reqs: usize,
        config: &EngineConfig,
    ) -> bool {
        let Some(conn) = self.link.conn() else {
            return false;
        };
        let over_threshold =
            conn.live().incremental_filters() + new_filters > config.limits.consolidation_threshold;
        let over_budget = conn.over_live_slots(new_reqs, self.learned.live_slots(config))
            || conn.open_count() + new_reqs > self.learned.subscription_limit(config);
        over_threshold || over_budget
    }

    /// `true` if the live plan must be rebuilt though no filter is added
    /// ([`RelaySession::pump`] asks): nothing live, open or waiting, and
    /// nothing polled (Layer 1 live went with a consolidation that found no
    /// slot), or more live subscriptions open and waiting than the live
    /// slots (they shrank: limits told or learned after connecting).
    /// Adding filters asks [`RelaySession::live_overflows`].
    pub(crate) fn live_must_rebuild(&self, config: &EngineConfig) -> bool {
        let Some(conn) = self.link.conn() else {
            return false;
        };
        conn.live().covers_nothing() || conn.over_live_slots(0, self.learned.live_slots(config))
    }

    // --- Live subscriptions ---------------------------------------------

    /// Adds live subscriptions for `items`, consolidating when the relay
    /// would get too many live filters or subscriptions. A relay already
    /// polled for what does not fit gets the new filters polled too.
    pub(super) fn add_live(&mut self, cx: &mut Ctx<'_>, now: Now, items: &PendingItems) {
        let filters = item_filters(items, cx.config.limits.chunk_size, FilterMode::Live);
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        if conn.live().is_polling() {
            conn.live_mut().poll_more(filters);
            return;
        }
        if !self.rate_allows(now.instant, cx.config) {
            if let Some(conn) = self.link.conn_mut() {
                conn.live_mut().defer(items, now.unix);
            }
            return;
        }
        let filter_count = filters.len();
        let reqs = self.pack(filters, cx.config);
        if self.live_overflows(filter_count, reqs.len(), cx.config) {
            return self.rebuild_live(cx, now, items);
        }
        for filters in reqs {
            self.open_live(cx, now, filters, LiveList::Incremental);
        }
    }

    /// Opens one live REQ with `filters` and files it in `list`. When live
    /// coverage had been waiting, what was published meanwhile is caught up.
    pub(super) fn open_live(
        &mut self,
        cx: &mut Ctx<'_>,
        now: Now,
        filters: Vec<Filter>,
        list: LiveList,
    ) {
        let id = cx.out.sub_id("live");
        if !self.is_connected() {
            return;
        }
        if let Some(conn) = self.link.conn_mut() {
            conn.open_live(id.clone(), filters.clone(), list, now.instant);
        }
        self.catch_up_gap(cx, now, &filters);
        let relay = cx.relay.clone();
        self.emit(cx, Command::Subscribe { relay, id, filters });
    }

    /// Consolidation: closes the live subscriptions and covers Layer 1 and
    /// the confirmed ∪ pending ∪ waiting ∪ `extra` items of Layers 2+3 with
    /// the live plan ([`RelaySession::live_plan`]; pending batches keep
    /// running). During a rate-limit cooldown nothing is sent and `extra`
    /// waits.
    pub(crate) fn rebuild_live(&mut self, cx: &mut Ctx<'_>, now: Now, extra: &PendingItems) {
        if !self.rate_allows(now.instant, cx.config) {
            if let Some(conn) = self.link.conn_mut() {
                conn.live_mut().defer(extra, now.unix);
            }
            return;
        }
        let mut items = self.batches.items();
        if let Some(state) = &self.state {
            items.extend(&state.items(cx.repos.ids()));
        }
        items.extend(extra);
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        items.extend(&conn.live_mut().take_deferred());
        let plan = self.live_plan(&items, cx.discovers, cx.config);
        let (closing, opened, started_polling) = self.apply_live_plan(plan, now, cx.config);
        if let Some(uncovered) = started_polling {
            info!(relay = %cx.relay, uncovered, "live filters do not fit the relay's limits; polling the rest");
        }
        cx.events.push(Noted::Consolidated);
        for id in closing {
            self.unsubscribe(cx, &id);
        }
        for filters in opened {
            self.open_live(cx, now, filters, LiveList::Base);
        }
    }

    // --- Filing and applying live coverage -----------------------------------

    /// The relay closed the live subscription `id` without refusing its
    /// slot: live coverage is gone until the rebuild, due after the work
    /// retry's delay; the rebuilt REQs fetch what was published meanwhile.
    pub(crate) fn live_closed(&mut self, id: &SubscriptionId, now: Now, config: &EngineConfig) {
        if let Some(conn) = self.link.conn_mut() {
            conn.live_lost(id, now.unix);
        }
        let delay = self.work_failed(&config.health);
        self.timers
            .set(RelayTimer::RebuildLive, now.instant + delay);
    }

    /// Applies a consolidation's live plan: every live subscription is
    /// closed (its late events still accepted for a while), the polled
    /// filters are set and their poll scheduled (what the last poll did not
    /// reach is caught up by filters that go live), and the covered REQs fill
    /// the free live slots, the rest waiting for one. Returns the
    /// subscriptions to close, the REQs to open now, and, when polling
    /// starts, how many filters are polled.
    pub(crate) fn apply_live_plan(
        &mut self,
        plan: LivePlan,
        now: Now,
        config: &EngineConfig,
    ) -> (Vec<SubscriptionId>, Vec<Vec<Filter>>, Option<usize>) {
        let limit = self.learned.subscription_limit(config);
        let live_slots = self.learned.live_slots(config);
        let Some(conn) = self.link.conn_mut() else {
            return (Vec::new(), Vec::new(), None);
        };
        let (covered, uncovered) = plan.into_parts();
        // Slots free now (historic work keeps its own); the rest of the
        // covered REQs wait for a slot.
        let (closing, opened, polling) =
            conn.apply_live_plan(covered, uncovered, limit, live_slots, now.unix);
        let started_polling = match polling {
            Polling::Off => {
                self.timers.clear(RelayTimer::Poll);
                None
            }
            Polling::Started(filters) => Some(filters),
            Polling::Continues => None,
        };
        if polling != Polling::Off {
            self.timers.set_unless_set(
                RelayTimer::Poll,
                now.instant + config.timeouts.uncovered_poll_interval,
            );
        }
        (closing, opened, started_polling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Kind;

    fn req(kinds: &[u16]) -> Vec<Filter> {
        kinds
            .iter()
            .map(|kind| Filter::new().kind(Kind::Custom(*kind)))
            .collect()
    }

    #[test]
    fn the_first_reqs_go_live_and_the_filters_of_the_rest_are_polled() {
        let reqs = vec![req(&[1, 2]), req(&[3]), req(&[4, 5]), req(&[5])];
        let (covered, polled) = LivePlan::split(reqs.clone(), 2).into_parts();
        assert_eq!(covered, vec![req(&[1, 2]), req(&[3])]);
        assert_eq!(polled.into_iter().collect::<Vec<_>>(), req(&[4, 5]));
        let (covered, polled) = LivePlan::split(reqs.clone(), 0).into_parts();
        assert!(covered.is_empty());
        assert_eq!(polled.len(), 5);
        let (covered, polled) = LivePlan::split(reqs, 10).into_parts();
        assert_eq!(covered.len(), 4);
        assert!(polled.is_empty());
    }
}
