//! Live subscriptions: adding them, consolidating them within the relay's
//! live slots and frame budget, and what does not fit.

use super::frames::pack_filters;
use super::relay_session::LivePlan;
use super::timer_table::RelayTimer;
use crate::filters::{layer2_and_layer3_filters, FilterMode};

use nostr::prelude::{Filter, RelayUrl};
use tracing::info;

use super::runtime::Sub;
use super::{Command, SyncEngine};
use crate::clock::Now;
use crate::model::PendingItems;

impl SyncEngine {
    /// Adds live subscriptions for `items`, consolidating when the relay
    /// would get too many live filters or subscriptions. A relay already
    /// polled for what does not fit gets the new filters polled too.
    pub(super) fn add_live(&mut self, now: Now, relay: &RelayUrl, items: &PendingItems) {
        let filters = layer2_and_layer3_filters(items, self.config.chunk_size, FilterMode::Live);
        let polling = self
            .relays
            .conn(relay)
            .is_some_and(|conn| !conn.uncovered.is_empty());
        // (A filter already polled is not added twice.)
        if polling {
            if let Some(conn) = self.relays.conn_mut(relay) {
                conn.uncovered.extend(filters);
            }
            return;
        }
        if !self.relays.rate_allows(relay, now.instant, &self.config) {
            if let Some(conn) = self.relays.conn_mut(relay) {
                conn.deferred_live.extend(items);
                conn.live_gap_since.get_or_insert(now.unix);
            }
            return;
        }
        let filter_count = filters.len();
        let reqs = pack_filters(
            filters,
            self.relays.view(relay).filters_per_req(&self.config),
            self.relays.view(relay).frame_budget(&self.config),
        );
        if !self.relays.is_connected(relay) {
            return;
        }
        let session = self.relays.view(relay);
        if session.live_overflows(filter_count, reqs.len(), &self.config) {
            return self.rebuild_live(now, relay, items);
        }
        for filters in reqs {
            self.open_live(now, relay, filters, LiveList::Incremental);
        }
    }

    /// Opens one live REQ with `filters` and files it in `list`. When live
    /// coverage had been waiting, what was published meanwhile is caught up.
    pub(super) fn open_live(
        &mut self,
        now: Now,
        relay: &RelayUrl,
        filters: Vec<Filter>,
        list: LiveList,
    ) {
        let id = self.next_sub_id("live");
        let Some(conn) = self.relays.conn_mut(relay) else {
            return;
        };
        match list {
            LiveList::Layer1 => conn.layer1_live = Some(id.clone()),
            LiveList::Base => conn.live_base.push(id.clone()),
            LiveList::Incremental => {
                conn.incremental_filters += filters.len();
                conn.live_incremental.push(id.clone());
            }
        }
        conn.subs.insert(
            id.clone(),
            Sub::Live {
                filters: filters.clone(),
                opened_at: now.instant,
                answered: false,
            },
        );
        conn.last_opened = Some(id.clone());
        self.catch_up_gap(now, relay, &filters);
        self.emit(Command::Subscribe {
            relay: relay.clone(),
            id,
            filters,
        });
    }

    /// Consolidation: closes the live subscriptions and covers Layer 1 and
    /// the confirmed ∪ pending ∪ waiting ∪ `extra` items of Layers 2+3 with
    /// as few REQs as the relay's filter and frame limits allow (pending
    /// batches keep running). REQs beyond the live slots are not sent: their
    /// filters are polled with a `since` catch-up instead, so historic work
    /// always keeps its slots. During a rate-limit cooldown nothing is sent
    /// and `extra` waits.
    pub(super) fn rebuild_live(&mut self, now: Now, relay: &RelayUrl, extra: &PendingItems) {
        if !self.relays.rate_allows(relay, now.instant, &self.config) {
            if let Some(conn) = self.relays.conn_mut(relay) {
                conn.deferred_live.extend(extra);
                conn.live_gap_since.get_or_insert(now.unix);
            }
            return;
        }
        let mut items = self.relays.view(relay).pending.items();
        if let Some(state) = self.relays.state(relay) {
            items.extend(&state.items(self.repos.ids()));
        }
        items.extend(extra);
        let Some(conn) = self.relays.conn_mut(relay) else {
            return;
        };
        items.extend(&std::mem::take(&mut conn.deferred_live));
        let plan = self.relays.view(relay).live_plan(&items, &self.config);
        let limit = self.relays.view(relay).subscription_limit(&self.config);
        let live_slots = self.relays.view(relay).live_slots(&self.config);
        let interval = self.config.uncovered_poll_interval;
        let Some(session) = self.relays.get_mut(relay) else {
            return;
        };
        let Some(conn) = session.conn.as_mut() else {
            return;
        };
        // Their filters are part of the rebuilt set.
        conn.waiting_live.clear();
        let closing: Vec<_> = conn
            .layer1_live
            .take()
            .into_iter()
            .chain(conn.live_base.drain(..))
            .chain(conn.live_incremental.drain(..))
            .collect();
        conn.incremental_filters = 0;
        for id in &closing {
            if let Some(Sub::Live { filters, .. }) = conn.subs.shift_remove(id) {
                conn.closed_live.insert(id.clone(), filters);
            }
        }
        while conn.closed_live.len() > CLOSED_LIVE_KEPT {
            conn.closed_live.shift_remove_index(0);
        }
        let LivePlan {
            covered,
            polled: uncovered,
        } = plan;
        if conn
            .uncovered
            .iter()
            .any(|filter| !uncovered.contains(filter))
        {
            // Filters polled until now go live: what the last poll did not
            // reach is caught up with them.
            if let Some(from) = conn.poll_from {
                conn.live_gap_since = Some(conn.live_gap_since.map_or(from, |gap| gap.min(from)));
            }
        }
        if uncovered.is_empty() {
            conn.poll_from = None;
            session.timers.clear(RelayTimer::Poll);
        } else {
            if conn.uncovered.is_empty() {
                info!(%relay, uncovered = uncovered.len(), "live filters do not fit the relay's limits; polling the rest");
            }
            conn.poll_from.get_or_insert(now.unix);
            session
                .timers
                .set_unless_set(RelayTimer::Poll, now.instant + interval);
        }
        conn.uncovered = uncovered;
        // Slots free now (historic work keeps its own); the rest of the
        // covered REQs wait for a slot.
        let available = limit.saturating_sub(conn.subs.len()).min(live_slots);
        let mut covered = covered.into_iter();
        let opened: Vec<Vec<Filter>> = covered.by_ref().take(available).collect();
        let waiting = conn.waiting_live.len();
        conn.waiting_live.extend(covered);
        if conn.waiting_live.len() > waiting {
            conn.live_gap_since.get_or_insert(now.unix);
        }
        self.stats.consolidations += 1;
        for id in closing {
            self.emit(Command::Unsubscribe {
                relay: relay.clone(),
                id,
            });
        }
        for filters in opened {
            self.open_live(now, relay, filters, LiveList::Base);
        }
    }
}

/// Closed live subscriptions whose late events are still accepted.
const CLOSED_LIVE_KEPT: usize = 64;

/// Which list of live subscriptions a new one belongs to.
#[derive(Clone, Copy, Debug)]
pub(super) enum LiveList {
    /// The Layer 1 subscription opened at connect.
    Layer1,
    /// Opened by a consolidation (or re-sent after a refusal).
    Base,
    /// Added for new items since the last consolidation.
    Incremental,
}
