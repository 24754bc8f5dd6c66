//! One connection's live coverage: which live subscriptions cover Layer 1
//! and the items' Layers 2+3 (those of the last consolidation, and those
//! added since), what waits to be covered (live REQs not sent yet, items
//! deferred by a cooldown, the gap they leave), what was closed lately, and
//! the filters that do not fit the relay's limits and are polled instead.
//! Its bookkeeping is its own (filing, closing, applying a plan, the gap,
//! the poll); the session plans it (`RelaySession::live_plan`) and sends
//! the REQs and CLOSEs applying it asks for
//! (`RelaySession::apply_live_plan`, `RelaySession::rebuild_live`). A
//! sibling of the session and of the connection, `RelayConn`, that holds it.

use indexmap::{IndexMap, IndexSet};
use nostr::prelude::{Filter, SubscriptionId, Timestamp};

use crate::model::PendingItems;

/// Closed live subscriptions whose late events are still accepted.
const CLOSED_LIVE_KEPT: usize = 64;

/// Which list of live subscriptions a new one belongs to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LiveList {
    /// The Layer 1 subscription opened at connect.
    Layer1,
    /// Opened by a consolidation (or re-sent after a refusal).
    Base,
    /// Added for new items since the last consolidation.
    Incremental,
}

/// What applying a live plan did to the poll of the live filters that do
/// not fit ([`LiveCoverage::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Polling {
    /// Nothing is polled.
    Off,
    /// Polling starts, of this many filters.
    Started(usize),
    /// Polling goes on.
    Continues,
}

/// One connection's live coverage (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct LiveCoverage {
    /// The Layer 1 live subscription.
    layer1_live: Option<SubscriptionId>,
    /// Live Layer 2+3 subscriptions of the last consolidation.
    live_base: Vec<SubscriptionId>,
    /// Live Layer 2+3 subscriptions added since.
    live_incremental: Vec<SubscriptionId>,
    /// Filters in `live_incremental`.
    incremental_filters: usize,
    /// Items whose live subscription waits (rate limit, no free slot).
    deferred_live: PendingItems,
    /// Filters of live subscriptions closed by a consolidation, for events
    /// the relay sent on them before it saw the CLOSE (newest last, bounded).
    closed_live: IndexMap<SubscriptionId, Vec<Filter>>,
    /// Live REQs waiting to be sent: refused by the relay, or not sent yet
    /// for want of a live slot; sent when the relay allows.
    waiting_live: Vec<Vec<Filter>>,
    /// Since when some live coverage has been waiting (wall clock): the REQs
    /// that finally open also fetch what was published meanwhile.
    live_gap_since: Option<Timestamp>,
    /// Live filters that did not fit the relay's limits: polled with a
    /// `since` catch-up every poll interval instead.
    uncovered: IndexSet<Filter>,
    /// The next poll of `uncovered` starts from here (wall clock): when the
    /// filters became uncovered, then the start of the last complete poll.
    poll_from: Option<Timestamp>,
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

    /// How many live REQs wait to be sent.
    pub(crate) fn waiting_count(&self) -> usize {
        self.waiting_live.len()
    }

    /// Filters in live subscriptions added since the last consolidation.
    pub(crate) fn incremental_filters(&self) -> usize {
        self.incremental_filters
    }

    /// `true` while some live filters do not fit and are polled instead.
    pub(crate) fn is_polling(&self) -> bool {
        !self.uncovered.is_empty()
    }

    /// The catch-up of the gap, if live coverage waits: since when it has
    /// (the gap) and the `since` that fetches what was published meanwhile
    /// — `window` seconds earlier (the quick-reconnect window), and never
    /// after `now`.
    pub(crate) fn gap_catch_up(
        &self,
        window: u64,
        now: Timestamp,
    ) -> Option<(Timestamp, Timestamp)> {
        let gap_since = self.live_gap_since?;
        let since = Timestamp::from_secs(
            gap_since
                .as_secs()
                .saturating_sub(window)
                .min(now.as_secs()),
        );
        Some((gap_since, since))
    }

    /// `true` if nothing covers live: no live subscription, none waiting,
    /// nothing polled.
    pub(crate) fn covers_nothing(&self) -> bool {
        self.count() == 0 && self.waiting_count() == 0 && !self.is_polling()
    }

    /// The earliest moment live coverage went missing and is not caught up
    /// yet: the gap, or the span of the polled filters since their last
    /// poll.
    pub(crate) fn uncaught_since(&self) -> Option<Timestamp> {
        let polled = self.poll_from.filter(|_| !self.uncovered.is_empty());
        [self.live_gap_since, polled].into_iter().flatten().min()
    }

    /// Live coverage is missing from `now` on, unless it was already.
    pub(crate) fn gap_opens(&mut self, now: Timestamp) {
        self.live_gap_since.get_or_insert(now);
    }

    /// Live coverage is missing since `from` (or since earlier, if it was
    /// already).
    pub(crate) fn missing_since(&mut self, from: Timestamp) {
        self.live_gap_since = Some(self.live_gap_since.map_or(from, |gap| gap.min(from)));
    }

    /// Nothing waits any more: the REQs that opened caught the gap up.
    pub(crate) fn gap_covered(&mut self) {
        self.live_gap_since = None;
    }

    /// Files the live subscription `id`, of `filters` filters, just opened,
    /// in `list`.
    pub(crate) fn file(&mut self, id: SubscriptionId, list: LiveList, filters: usize) {
        match list {
            LiveList::Layer1 => self.layer1_live = Some(id),
            LiveList::Base => self.live_base.push(id),
            LiveList::Incremental => {
                self.incremental_filters += filters;
                self.live_incremental.push(id);
            }
        }
    }

    /// The relay refused the live subscription `id` of `filters`: its REQ
    /// waits to be sent again, unchanged, and coverage is missing from
    /// `now`.
    pub(crate) fn refused(&mut self, id: &SubscriptionId, filters: Vec<Filter>, now: Timestamp) {
        self.forget(id);
        self.waiting_live.push(filters);
        self.gap_opens(now);
    }

    /// The filters the live subscription `id` had, if a consolidation
    /// closed it lately: events the relay sent before it saw the CLOSE.
    pub(crate) fn closed_filters(&self, id: &SubscriptionId) -> Option<&[Filter]> {
        self.closed_live.get(id).map(Vec::as_slice)
    }

    /// Takes the items whose live coverage waited for a cooldown.
    pub(crate) fn take_deferred(&mut self) -> PendingItems {
        std::mem::take(&mut self.deferred_live)
    }

    /// Takes the next live REQ waiting to be sent.
    pub(crate) fn next_waiting(&mut self) -> Option<Vec<Filter>> {
        self.waiting_live.pop()
    }

    /// New live `filters` are polled with the others that do not fit (a
    /// filter already polled is not added twice).
    pub(crate) fn poll_more(&mut self, filters: Vec<Filter>) {
        self.uncovered.extend(filters);
    }

    /// The next poll of the filters that do not fit: where it starts (the
    /// start of the last complete poll, else `now`), the `since` it asks
    /// from (`window` seconds earlier: the quick-reconnect window) and the
    /// filters; `None` when nothing is polled.
    pub(crate) fn poll(
        &self,
        now: Timestamp,
        window: u64,
    ) -> Option<(Timestamp, Timestamp, Vec<Filter>)> {
        if self.uncovered.is_empty() {
            return None;
        }
        let from = self.poll_from.unwrap_or(now);
        let since = Timestamp::from_secs(from.as_secs().saturating_sub(window));
        Some((from, since, self.uncovered.iter().cloned().collect()))
    }

    /// A poll that started at `started` is complete: the next starts there.
    pub(crate) fn polled_from(&mut self, started: Timestamp) {
        self.poll_from = Some(started);
    }

    /// A consolidation closes every live subscription: their ids (their
    /// filters are handed back with [`LiveCoverage::closed`]); the live
    /// REQs waiting are dropped, their filters part of the rebuilt set.
    pub(crate) fn close_all(&mut self) -> Vec<SubscriptionId> {
        self.waiting_live.clear();
        let closing = self
            .layer1_live
            .take()
            .into_iter()
            .chain(self.live_base.drain(..))
            .chain(self.live_incremental.drain(..))
            .collect();
        self.incremental_filters = 0;
        closing
    }

    /// The live subscription `id` of `filters` was closed by a
    /// consolidation: its late events are still accepted (those of the
    /// newest closed subscriptions).
    pub(crate) fn closed(&mut self, id: SubscriptionId, filters: Vec<Filter>) {
        self.closed_live.insert(id, filters);
        while self.closed_live.len() > CLOSED_LIVE_KEPT {
            self.closed_live.shift_remove_index(0);
        }
    }

    /// Applies the rest of a consolidation's live plan at `now`: the
    /// `polled` filters are polled (what the last poll did not reach is
    /// caught up by the filters that go live), and the `covered` REQs fill
    /// the `available` live slots, the rest waiting for one. Returns the
    /// REQs to open now, and what became of the poll.
    pub(crate) fn apply(
        &mut self,
        covered: Vec<Vec<Filter>>,
        polled: IndexSet<Filter>,
        available: usize,
        now: Timestamp,
    ) -> (Vec<Vec<Filter>>, Polling) {
        if self.uncovered.iter().any(|filter| !polled.contains(filter)) {
            // Filters polled until now go live: what the last poll did not
            // reach is caught up with them.
            if let Some(from) = self.poll_from {
                self.missing_since(from);
            }
        }
        let polling = if polled.is_empty() {
            self.poll_from = None;
            Polling::Off
        } else {
            self.poll_from.get_or_insert(now);
            if self.uncovered.is_empty() {
                Polling::Started(polled.len())
            } else {
                Polling::Continues
            }
        };
        self.uncovered = polled;
        let mut covered = covered.into_iter();
        let opened: Vec<Vec<Filter>> = covered.by_ref().take(available).collect();
        let waiting = self.waiting_live.len();
        self.waiting_live.extend(covered);
        if self.waiting_live.len() > waiting {
            self.gap_opens(now);
        }
        (opened, polling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Kind;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn filter(kind: u16) -> Filter {
        Filter::new().kind(Kind::Custom(kind))
    }

    #[test]
    fn a_gap_is_caught_up_from_a_window_before_it_and_never_after_now() {
        let mut live = LiveCoverage::default();
        assert_eq!(live.gap_catch_up(60, at(2_000)), None);
        live.gap_opens(at(1_000));
        live.gap_opens(at(1_500));
        assert_eq!(live.gap_catch_up(60, at(2_000)), Some((at(1_000), at(940))));
        assert_eq!(live.gap_catch_up(60, at(900)), Some((at(1_000), at(900))));
        assert_eq!(
            live.gap_catch_up(5_000, at(2_000)),
            Some((at(1_000), at(0)))
        );
        live.gap_covered();
        assert_eq!(live.gap_catch_up(60, at(2_000)), None);
    }

    #[test]
    fn a_poll_starts_where_the_last_complete_one_did_a_window_earlier() {
        let mut live = LiveCoverage::default();
        assert_eq!(live.poll(at(500), 60), None);
        live.poll_more(vec![filter(1), filter(2), filter(1)]);
        assert_eq!(
            live.poll(at(500), 60),
            Some((at(500), at(440), vec![filter(1), filter(2)]))
        );
        live.polled_from(at(300));
        let (from, since, _) = live.poll(at(500), 60).expect("polled");
        assert_eq!((from, since), (at(300), at(240)));
    }

    #[test]
    fn live_coverage_covers_nothing_until_something_is_live_waits_or_is_polled() {
        let mut live = LiveCoverage::default();
        assert!(live.covers_nothing());
        live.poll_more(vec![filter(1)]);
        assert!(!live.covers_nothing());
        let mut live = LiveCoverage::default();
        live.file(SubscriptionId::new("live-1"), LiveList::Base, 1);
        assert!(!live.covers_nothing());
        live.forget(&SubscriptionId::new("live-1"));
        assert!(live.covers_nothing());
    }
}
