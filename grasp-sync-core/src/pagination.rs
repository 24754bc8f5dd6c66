//! Lossless `until` pagination for REQ+EOSE historic sync.
//!
//! A relay answers a REQ with at most some number of events (the filter's
//! `limit`, or a cap of its own that it applies silently), newest first. To
//! read everything we page backwards with `until`. Two traps:
//!
//! - **Silent clamps.** A relay that caps `limit` at 500 returns 500 events
//!   for a request of 1 000; "fewer than requested" does not mean "done".
//!   So a page is only known to be the last when it brings nothing new (or
//!   when it is shorter than a page limit the relay *told* us about).
//! - **Equal `created_at`.** With `until = oldest − 1` the events of the
//!   oldest second that did not fit on the page would be skipped; with
//!   `until = oldest` (NIP-01's `until` is inclusive) they come back on the next
//!   page next to the ones already seen. We keep the ids seen at the oldest
//!   second and count only the new ones, so nothing is lost and nothing loops.
//!
//! One case cannot be paged by `until` at all: a single second holding a
//! whole page of events. A page that brings nothing new and is as long as the
//! longest page so far may have been cut inside that second. We then step to
//! the second before it (so older events are still read) and record the
//! second in [`PaginationState::crowded_seconds`]: events of it beyond the
//! page may be missing. When the relay told us its page limit the record is
//! certain; without it, a second that merely holds as many events as the
//! longest page is recorded too (NIP-77 does not have this limit).

use std::collections::HashSet;

use nostr::prelude::{EventId, Filter, Timestamp};

use crate::filters::next_page_filter;

/// Pagination progress of one REQ+EOSE subscription (the spec's
/// `PaginationState`, extended for lossless paging).
#[derive(Clone, Debug, PartialEq)]
pub struct PaginationState {
    /// The filter of the first page; later pages add `until`.
    pub original_filter: Filter,
    /// Events received on the current page (duplicates included).
    pub event_count: usize,
    /// Events on the current page not seen on an earlier page.
    pub new_count: usize,
    /// The oldest `created_at` seen so far on this subscription.
    pub min_created_at: Option<Timestamp>,
    /// Pages requested so far, the first included.
    pub pages: u32,
    /// The most events any earlier page returned: the relay's page size is
    /// at least this.
    pub largest_page: usize,
    /// Seconds that filled a page as long as the longest the relay returned:
    /// events of such a second beyond the page cannot be read by `until`
    /// paging and may be missing. Certain when the relay told us its page
    /// limit, possible otherwise.
    pub crowded_seconds: Vec<CrowdedSecond>,
    /// The `until` of the current page (`None` on the first page).
    page_until: Option<Timestamp>,
    /// Ids seen at `page_until` on earlier pages: the only events the current
    /// page may legitimately repeat.
    boundary_ids: HashSet<EventId>,
    /// Ids seen at `min_created_at`, the boundary of the next page.
    ids_at_min: HashSet<EventId>,
}

/// A second that filled a page during paging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrowdedSecond {
    /// The second.
    pub at: Timestamp,
    /// How many events the page held (all at `at`).
    pub page_len: usize,
}

/// What to do after an EOSE.
#[derive(Clone, Debug, PartialEq)]
pub enum PageOutcome {
    /// Everything has been read.
    Complete,
    /// Request the next page with this filter (same subscription id).
    NextPage(Filter),
}

impl PaginationState {
    /// Progress of a subscription whose first page uses `original_filter`.
    pub fn new(original_filter: Filter) -> Self {
        PaginationState {
            original_filter,
            event_count: 0,
            new_count: 0,
            min_created_at: None,
            pages: 1,
            largest_page: 0,
            crowded_seconds: Vec::new(),
            page_until: None,
            boundary_ids: HashSet::new(),
            ids_at_min: HashSet::new(),
        }
    }

    /// The state after a page read as one filter of several in a REQ, whose
    /// oldest certain second was `until` (holding the ids `seen_at_until`)
    /// after `page_len` events: the next page asks `original_filter` with
    /// `until`, on its own.
    pub(crate) fn resume_after(
        original_filter: Filter,
        until: Timestamp,
        seen_at_until: HashSet<EventId>,
        page_len: usize,
    ) -> Self {
        let mut state = PaginationState::new(original_filter);
        state.min_created_at = Some(until);
        state.ids_at_min = seen_at_until;
        state.event_count = page_len;
        state.start_page(until);
        state
    }

    /// At the EOSE of a REQ holding this filter among others, on a relay
    /// that returns `page` events per filter (its page limit is known): the
    /// state to continue this filter with on its own, or `None` when its
    /// page was not cut. `seen` is every event of the REQ that matched this
    /// filter (duplicates allowed). Events other filters brought may match
    /// this one too, but none is newer than the last event of its own page,
    /// so the page ended at the `page`-th newest of `seen`: the next page
    /// goes on from there (not from the oldest, which could skip events).
    pub(crate) fn continue_alone(
        &self,
        seen: &[(EventId, Timestamp)],
        page: usize,
    ) -> Option<PaginationState> {
        let page = self
            .original_filter
            .limit
            .map_or(page, |asked| asked.min(page))
            .max(1);
        let mut distinct: Vec<(Timestamp, EventId)> =
            seen.iter().map(|(id, at)| (*at, *id)).collect();
        distinct.sort_unstable_by(|a, b| b.cmp(a));
        distinct.dedup();
        let until = distinct.get(page - 1)?.0;
        let at_until = distinct
            .iter()
            .filter(|(at, _)| *at == until)
            .map(|(_, id)| *id)
            .collect();
        Some(PaginationState::resume_after(
            self.original_filter.clone(),
            until,
            at_until,
            page,
        ))
    }

    /// The state to ask again with after the relay stopped answering the
    /// current page without EOSE or CLOSED (nostr-rs-relay drops a slow
    /// client's query): from the oldest second seen (`until` inclusive, its
    /// ids known, so only that second comes again), or the current page
    /// again if it brought nothing. Relays send a filter's events newest
    /// first, so nothing older than that second was received.
    pub(crate) fn resume_interrupted(&self) -> PaginationState {
        let mut state = self.clone();
        match self.min_created_at {
            Some(min) if self.event_count > 0 => state.start_page(min),
            _ => state.restart_page(),
        }
        state
    }

    /// The current page to be asked again from its start (one filter of
    /// several in an interrupted REQ: where its own events had reached
    /// cannot be told, others' may match it too). Its events come again.
    pub(crate) fn restart_page(&mut self) {
        self.event_count = 0;
        self.new_count = 0;
    }

    /// The filter the current page was requested with. An event that does
    /// not match it is off-filter for this subscription.
    pub(crate) fn current_filter(&self) -> Filter {
        match self.page_until {
            Some(until) => next_page_filter(&self.original_filter, until),
            None => self.original_filter.clone(),
        }
    }

    /// `true` if `event` matches the filter of the current page.
    pub(crate) fn matches(&self, event: &nostr::prelude::Event) -> bool {
        crate::filters::matches(&self.original_filter, event)
            && self
                .page_until
                .is_none_or(|until| event.created_at <= until)
    }

    /// Records an event of the current page. Returns `true` if no earlier
    /// page brought it.
    pub fn on_event(&mut self, id: EventId, created_at: Timestamp) -> bool {
        self.event_count = self.event_count.saturating_add(1);
        let is_new = match self.page_until {
            Some(until) if created_at > until => false,
            Some(until) if created_at == until => !self.boundary_ids.contains(&id),
            _ => true,
        };
        self.track_minimum(id, created_at);
        if is_new {
            self.new_count = self.new_count.saturating_add(1);
        }
        is_new
    }

    fn track_minimum(&mut self, id: EventId, created_at: Timestamp) {
        match self.min_created_at {
            Some(min) if created_at > min => {}
            Some(min) if created_at == min => {
                self.ids_at_min.insert(id);
            }
            _ => {
                self.min_created_at = Some(created_at);
                self.ids_at_min.clear();
                self.ids_at_min.insert(id);
            }
        }
    }

    /// Decides, at EOSE, whether another page is needed, and if so moves to
    /// it. `known_page_limit` is the most events the relay returns for this
    /// filter as far as it told us (NIP-11 `max_limit`, or `default_limit`
    /// when the filter has no `limit`): a page shorter than it and than the
    /// filter's own `limit` is the last. Without it only a page that brings
    /// nothing new ends the subscription, because relays clamp silently.
    pub fn on_eose(&mut self, known_page_limit: Option<usize>) -> PageOutcome {
        let next_until = self.next_until(known_page_limit);
        match next_until {
            None => PageOutcome::Complete,
            Some(until) => {
                self.start_page(until);
                PageOutcome::NextPage(next_page_filter(&self.original_filter, until))
            }
        }
    }

    /// The `until` of the next page, or `None` when everything was read.
    fn next_until(&mut self, known_page_limit: Option<usize>) -> Option<Timestamp> {
        let min = self.min_created_at?;
        if self.event_count == 0 || self.is_short_page(known_page_limit) {
            return None;
        }
        if self.new_count > 0 {
            return Some(min);
        }
        // Nothing new: every event of the page sat at the boundary second.
        // A page shorter than an earlier one was not cut: we are done.
        if self.event_count < self.largest_page || min.as_secs() == 0 {
            return None;
        }
        self.crowded_seconds.push(CrowdedSecond {
            at: min,
            page_len: self.event_count,
        });
        Some(Timestamp::from_secs(min.as_secs().saturating_sub(1)))
    }

    fn start_page(&mut self, until: Timestamp) {
        self.boundary_ids = if Some(until) == self.min_created_at {
            self.ids_at_min.clone()
        } else {
            HashSet::new()
        };
        self.page_until = Some(until);
        self.largest_page = self.largest_page.max(self.event_count);
        self.pages = self.pages.saturating_add(1);
        self.event_count = 0;
        self.new_count = 0;
    }

    /// A page shorter than every cap the relay told us about cannot have
    /// been cut.
    fn is_short_page(&self, known_page_limit: Option<usize>) -> bool {
        let Some(relay_cap) = known_page_limit else {
            return false;
        };
        let cap = self
            .original_filter
            .limit
            .map_or(relay_cap, |requested| requested.min(relay_cap));
        self.event_count < cap
    }
}

#[cfg(test)]
#[path = "pagination_group_tests.rs"]
mod group_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn id(n: u32) -> EventId {
        let mut bytes = [0u8; 32];
        bytes[28..].copy_from_slice(&n.to_be_bytes());
        EventId::from_byte_array(bytes)
    }

    /// A relay holding `events` (id number, created_at) that returns, for a
    /// page, the newest events up to `until` (inclusive), at most
    /// `min(limit, clamp)` of them, newest first, ties by id.
    fn serve(events: &[(u32, u64)], filter: &Filter, clamp: usize) -> Vec<(EventId, Timestamp)> {
        let mut matching: Vec<(u32, u64)> = events
            .iter()
            .copied()
            .filter(|(_, at)| filter.until.is_none_or(|until| *at <= until.as_secs()))
            .filter(|(_, at)| filter.since.is_none_or(|since| *at >= since.as_secs()))
            .collect();
        matching.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let cap = filter.limit.unwrap_or(usize::MAX).min(clamp);
        matching
            .into_iter()
            .take(cap)
            .map(|(n, at)| (id(n), Timestamp::from_secs(at)))
            .collect()
    }

    /// Pages through the relay; returns the ids read, pages and crowded seconds.
    fn page_all(
        events: &[(u32, u64)],
        limit: Option<usize>,
        clamp: usize,
        told: Option<usize>,
    ) -> (BTreeSet<EventId>, u32, Vec<Timestamp>) {
        let mut original = Filter::new();
        if let Some(limit) = limit {
            original = original.limit(limit);
        }
        let mut state = PaginationState::new(original);
        let mut read = BTreeSet::new();
        let mut crowded = Vec::new();
        for _ in 0..10_000 {
            for (event, at) in serve(events, &state.current_filter(), clamp) {
                state.on_event(event, at);
                read.insert(event);
            }
            if state.on_eose(told) == PageOutcome::Complete {
                crowded.extend(state.crowded_seconds.iter().map(|second| second.at));
                return (read, state.pages, crowded);
            }
        }
        panic!("pagination did not terminate");
    }

    #[test]
    fn a_silent_clamp_does_not_end_paging() {
        let events: Vec<(u32, u64)> = (0..1000).map(|n| (n, 1_000 + u64::from(n))).collect();
        let (read, pages, crowded) = page_all(&events, Some(1000), 500, None);
        assert_eq!(
            read.len(),
            1000,
            "a 500 clamp on a 1000 request must not stop after one page"
        );
        assert!(pages >= 3);
        assert!(crowded.is_empty());
    }

    #[test]
    fn many_events_in_one_second_are_not_lost() {
        // 300 events share one second, more than one page of 100.
        let mut events: Vec<(u32, u64)> = (0..300).map(|n| (n, 5_000)).collect();
        events.extend((300..350).map(|n| (n, 4_000 + u64::from(n))));
        let (read, _, crowded) = page_all(&events, Some(400), 400, None);
        assert_eq!(read.len(), 350);
        assert!(crowded.is_empty());
    }

    #[test]
    fn equal_created_at_across_page_boundary_is_lossless() {
        // Pages of 10; 25 events at the same second straddle several pages
        // only if the relay returns them in id order, which it does here.
        let mut events: Vec<(u32, u64)> = (0..25).map(|n| (n, 700)).collect();
        events.extend((25..40).map(|n| (n, 600 + u64::from(n))));
        events.extend((40..60).map(|n| (n, 100 + u64::from(n))));
        let (read, _, crowded) = page_all(&events, Some(30), 30, None);
        assert_eq!(read.len(), 60);
        assert!(crowded.is_empty());
    }

    #[test]
    fn a_second_crowded_beyond_a_page_is_reported_and_skipped() {
        let mut events: Vec<(u32, u64)> = (0..50).map(|n| (n, 900)).collect();
        events.extend((50..60).map(|n| (n, 800)));
        let (read, _, crowded) = page_all(&events, None, 20, None);
        assert_eq!(crowded, vec![Timestamp::from_secs(900)]);
        assert!(read.contains(&id(55)), "older events are still read");
        assert_eq!(read.len(), 20 + 10);
    }

    #[test]
    fn a_known_limit_ends_on_a_short_page() {
        let events: Vec<(u32, u64)> = (0..30).map(|n| (n, 10 + u64::from(n))).collect();
        let (read, pages, _) = page_all(&events, Some(100), 500, Some(500));
        assert_eq!(read.len(), 30);
        assert_eq!(pages, 1, "a short page under a told cap is the last");
        let (_, pages, _) = page_all(&events, Some(100), 500, None);
        assert_eq!(
            pages, 2,
            "without a told cap one more page confirms the end"
        );
    }

    #[test]
    fn an_empty_result_completes_at_once() {
        let (read, pages, _) = page_all(&[], Some(10), 10, None);
        assert!(read.is_empty());
        assert_eq!(pages, 1);
    }

    #[test]
    fn repeated_and_newer_events_are_not_new() {
        let mut state = PaginationState::new(Filter::new());
        assert!(state.on_event(id(1), Timestamp::from_secs(50)));
        assert!(state.on_event(id(2), Timestamp::from_secs(40)));
        let PageOutcome::NextPage(filter) = state.on_eose(None) else {
            panic!("new events ask for another page");
        };
        assert_eq!(filter.until, Some(Timestamp::from_secs(40)));
        assert!(
            !state.on_event(id(2), Timestamp::from_secs(40)),
            "boundary repeat"
        );
        assert!(
            !state.on_event(id(9), Timestamp::from_secs(41)),
            "newer than until"
        );
        assert!(
            state.on_event(id(3), Timestamp::from_secs(40)),
            "same second, new id"
        );
        assert_eq!(state.new_count, 1);
    }

    mod proptests {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the clamp, requested limit and timestamp spread, paging
            /// reads every event unless a second holds more than a page, in
            /// which case that second is reported.
            #[test]
            fn paging_is_lossless_or_reports(
                times in proptest::collection::vec(0u64..40, 0..300),
                limit in proptest::option::of(1usize..200),
                clamp in 1usize..120,
                told in any::<bool>(),
            ) {
                let events: Vec<(u32, u64)> = times.iter().enumerate().map(|(n, at)| (n as u32, 1_000 + at)).collect();
                let told = told.then_some(clamp);
                let (read, _, crowded) = page_all(&events, limit, clamp, told);
                let page = limit.unwrap_or(usize::MAX).min(clamp);
                let mut per_second: HashMap<u64, usize> = HashMap::new();
                for (_, at) in &events {
                    *per_second.entry(*at).or_insert(0) += 1;
                }
                let crowded_exists = per_second.values().any(|count| *count > page);

                // Every event missed lies in a reported second, and a
                // reported second really held at least a full page.
                for (n, at) in &events {
                    prop_assert!(read.contains(&id(*n)) || crowded.contains(&Timestamp::from_secs(*at)));
                }
                if told.is_some() {
                    for at in &crowded {
                        prop_assert!(per_second[&at.as_secs()] >= page, "certain when the cap is told");
                    }
                }
                if !crowded_exists {
                    prop_assert_eq!(read.len(), events.len());
                }
            }
        }
    }
}
