//! Catching up by `since`: what live coverage missed — a gap while it
//! waited, a quick reconnect's window, the filters that do not fit and are
//! polled — fetched by paginated `since` batches (the `since` of each is
//! the connection's `LiveCoverage` to answer).

use nostr::prelude::{Filter, Timestamp};
use tracing::debug;

use super::super::runtime::Purpose;
use super::super::session_events::Noted;
use super::super::timer_table::RelayTimer;
use super::{Ctx, RelaySession};
use crate::clock::Now;
use crate::filters::{item_filters, FilterMode};
use crate::model::{PendingItems, SyncMethod};

/// The session's catch-ups.
impl RelaySession {
    /// Live filters that open late: what was published since the coverage
    /// started waiting (minus the quick-reconnect window) is fetched by a
    /// paginated `since` catch-up, so nothing published in the gap is missed.
    pub(super) fn catch_up_gap(&mut self, cx: &mut Ctx<'_>, now: Now, filters: &[Filter]) {
        let window = cx.config.timeouts.quick_reconnect_window.as_secs();
        let Some((gap_since, since)) = self
            .link
            .conn()
            .and_then(|conn| conn.live().gap_catch_up(window, now.unix))
        else {
            return;
        };
        let jobs = self.poll_jobs(filters, since, cx.config);
        let batch = self.start_batch(
            cx,
            now,
            Purpose::Gap,
            PendingItems::default(),
            SyncMethod::ReqEose,
            jobs,
        );
        if let Some(batch) = batch {
            self.batches.cover_from(batch, gap_since);
        }
    }

    /// Quick reconnect's catch-up: the confirmed items from `since`.
    pub(super) fn start_catch_up(&mut self, cx: &mut Ctx<'_>, now: Now, since: Timestamp) {
        let Some(state) = &self.state else {
            return;
        };
        let items = state.items(cx.repos.ids());
        let mode = FilterMode::Historic { since: Some(since) };
        let filters = item_filters(&items, cx.config.limits.chunk_size, mode);
        let jobs = self.req_jobs(filters, cx.config);
        self.start_batch(
            cx,
            now,
            Purpose::CatchUp,
            PendingItems::default(),
            SyncMethod::ReqEose,
            jobs,
        );
    }

    /// Starts the `since` poll of the live filters that do not fit, when it
    /// is due.
    pub(crate) fn poll_uncovered(&mut self, cx: &mut Ctx<'_>, now: Now) {
        if !self.is_connected() || !self.timers.is_due(RelayTimer::Poll, now.instant) {
            return;
        }
        self.timers.clear(RelayTimer::Poll);
        let window = cx.config.timeouts.quick_reconnect_window.as_secs();
        let Some(conn) = self.link.conn_mut() else {
            return;
        };
        let Some((from, since, filters)) = conn.live().poll(now.unix, window) else {
            return;
        };
        debug!(relay = %cx.relay, filters = filters.len(), "polling live filters that do not fit");
        cx.events.push(Noted::UncoveredPoll);
        let jobs = self.poll_jobs(&filters, since, cx.config);
        let batch = self.start_batch(
            cx,
            now,
            Purpose::Poll,
            PendingItems::default(),
            SyncMethod::ReqEose,
            jobs,
        );
        if let Some(batch) = batch {
            self.batches.cover_from(batch, from);
        }
    }
}
