//! One connection's live coverage: which live subscriptions cover Layer 1
//! and the items' Layers 2+3 (those of the last consolidation, and those
//! added since), what waits to be covered (live REQs not sent yet, items
//! deferred by a cooldown, the gap they leave), what was closed lately, and
//! the filters that do not fit the relay's limits and are polled instead.
//! The session plans, applies and rebuilds it
//! (`RelaySession::live_plan`, `RelaySession::apply_live_plan`), since that
//! sends REQs and CLOSEs: its fields are seen inside the engine module only
//! (a sibling of the session and of the connection, `RelayConn`, that holds it).

use indexmap::{IndexMap, IndexSet};
use nostr::prelude::{Filter, SubscriptionId, Timestamp};

use crate::model::PendingItems;

/// One connection's live coverage (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct LiveCoverage {
    /// The Layer 1 live subscription.
    pub(super) layer1_live: Option<SubscriptionId>,
    /// Live Layer 2+3 subscriptions of the last consolidation.
    pub(super) live_base: Vec<SubscriptionId>,
    /// Live Layer 2+3 subscriptions added since.
    pub(super) live_incremental: Vec<SubscriptionId>,
    /// Filters in `live_incremental`.
    pub(super) incremental_filters: usize,
    /// Items whose live subscription waits (rate limit, no free slot).
    pub(super) deferred_live: PendingItems,
    /// Filters of live subscriptions closed by a consolidation, for events
    /// the relay sent on them before it saw the CLOSE (newest last, bounded).
    pub(super) closed_live: IndexMap<SubscriptionId, Vec<Filter>>,
    /// Live REQs waiting to be sent: refused by the relay, or not sent yet
    /// for want of a live slot; sent when the relay allows.
    pub(super) waiting_live: Vec<Vec<Filter>>,
    /// Since when some live coverage has been waiting (wall clock): the REQs
    /// that finally open also fetch what was published meanwhile.
    pub(super) live_gap_since: Option<Timestamp>,
    /// Live filters that did not fit the relay's limits: polled with a
    /// `since` catch-up every poll interval instead.
    pub(super) uncovered: IndexSet<Filter>,
    /// The next poll of `uncovered` starts from here (wall clock): when the
    /// filters became uncovered, then the start of the last complete poll.
    pub(super) poll_from: Option<Timestamp>,
}

impl LiveCoverage {
    /// Subscriptions live right now (Layer 1 included).
    pub(crate) fn count(&self) -> usize {
        usize::from(self.layer1_live.is_some()) + self.live_base.len() + self.live_incremental.len()
    }

    /// `true` while some live coverage waits: items deferred, or live REQs
    /// not sent yet.
    pub(crate) fn waits(&self) -> bool {
        !self.deferred_live.is_empty() || !self.waiting_live.is_empty()
    }

    /// How many live filters do not fit the relay's limits and are polled.
    pub(crate) fn uncovered_count(&self) -> usize {
        self.uncovered.len()
    }

    /// How many items' live coverage waits for a cooldown to end.
    pub(crate) fn deferred_count(&self) -> usize {
        self.deferred_live.len()
    }

    /// Live coverage of `items` waits (a rate-limit cooldown): kept for the
    /// next rebuild, and the gap it leaves is caught up from `now`.
    pub(crate) fn defer(&mut self, items: &PendingItems, now: Timestamp) {
        self.deferred_live.extend(items);
        self.live_gap_since.get_or_insert(now);
    }

    /// Forgets a live subscription id in whichever live list holds it.
    pub(crate) fn forget(&mut self, id: &SubscriptionId) {
        if self.layer1_live.as_ref() == Some(id) {
            self.layer1_live = None;
        }
        self.live_base.retain(|live| live != id);
        if let Some(position) = self.live_incremental.iter().position(|live| live == id) {
            self.live_incremental.remove(position);
        }
    }
}
