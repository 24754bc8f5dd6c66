//! Live subscriptions: adding them, consolidating them within the relay's
//! live slots and frame budget, and what does not fit.

use crate::filters::{layer2_and_layer3_filters, FilterMode};

use nostr::prelude::{Filter, RelayUrl};
use tracing::info;

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
                conn.defer_live(items, now.unix);
            }
            return;
        }
        let filter_count = filters.len();
        let reqs = self.relays.view(relay).pack(filters, &self.config);
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
        let Some(session) = self.relays.connected_mut(relay) else {
            return;
        };
        session.file_live(id.clone(), filters.clone(), list, now.instant);
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
                conn.defer_live(extra, now.unix);
            }
            return;
        }
        let mut items = self.relays.view(relay).pending.items();
        if let Some(state) = self.relays.state(relay) {
            items.extend(&state.items(self.repos.ids()));
        }
        items.extend(extra);
        let Some(session) = self.relays.connected_mut(relay) else {
            return;
        };
        let Some(conn) = session.conn.as_mut() else {
            return;
        };
        items.extend(&std::mem::take(&mut conn.deferred_live));
        let plan = session.live_plan(&items, &self.config);
        let (closing, opened, started_polling) = session.apply_live_plan(plan, now, &self.config);
        if let Some(uncovered) = started_polling {
            info!(%relay, uncovered, "live filters do not fit the relay's limits; polling the rest");
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
