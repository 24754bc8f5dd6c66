//! Catching up by `since`: a quick reconnect's catch-up, the gap of live
//! coverage that waited, and the periodic poll of filters that do not fit.

use crate::filters::{layer2_and_layer3_filters, FilterMode};

use nostr::prelude::{Filter, RelayUrl, Timestamp};
use tracing::debug;

use super::runtime::Purpose;
use super::timer_table::RelayTimer;
use super::SyncEngine;
use crate::clock::Now;
use crate::model::{PendingItems, SyncMethod};

impl SyncEngine {
    /// Live filters that open late: what was published since the coverage
    /// started waiting (minus the quick-reconnect window) is fetched by a
    /// paginated `since` catch-up, so nothing published in the gap is missed.
    pub(super) fn catch_up_gap(&mut self, now: Now, relay: &RelayUrl, filters: &[Filter]) {
        let window = self.config.quick_reconnect_window.as_secs();
        let Some(gap_since) = self.relays.conn(relay).and_then(|conn| conn.live_gap_since) else {
            return;
        };
        let since = Timestamp::from_secs(
            gap_since
                .as_secs()
                .saturating_sub(window)
                .min(now.unix.as_secs()),
        );
        let jobs = self
            .relays
            .view(relay)
            .poll_jobs(filters, since, &self.config);
        let batch = self.start_batch(
            now,
            relay,
            Purpose::Gap,
            Default::default(),
            crate::model::SyncMethod::ReqEose,
            jobs,
        );
        if let Some(info) = batch.and_then(|batch| self.relays.batch_mut(relay, batch)) {
            info.covers_from = Some(gap_since);
        }
    }

    /// Quick reconnect: catch up the confirmed items from `since`.
    pub(super) fn start_catch_up(&mut self, now: Now, relay: &RelayUrl, since: Timestamp) {
        let Some(state) = self.relays.state(relay) else {
            return;
        };
        let items = state.items(self.repos.ids());
        let mode = FilterMode::Historic { since: Some(since) };
        let filters = layer2_and_layer3_filters(&items, self.config.chunk_size, mode);
        let jobs = self.relays.view(relay).req_jobs(filters, &self.config);
        if !jobs.is_empty() {
            self.start_batch(
                now,
                relay,
                Purpose::CatchUp,
                PendingItems::default(),
                SyncMethod::ReqEose,
                jobs,
            );
        }
    }

    /// Starts the `since` poll of every relay whose uncovered live filters
    /// are due.
    pub(super) fn run_polls(&mut self, now: Now) {
        let due: Vec<RelayUrl> = self
            .relays
            .iter()
            .filter(|(_, session)| {
                session.conn.is_some() && session.timers.is_due(RelayTimer::Poll, now.instant)
            })
            .map(|(relay, _)| relay.clone())
            .collect();
        let window = self.config.quick_reconnect_window.as_secs();
        for relay in due {
            let Some(session) = self.relays.get_mut(&relay) else {
                continue;
            };
            session.timers.clear(RelayTimer::Poll);
            let Some(conn) = session.conn.as_mut() else {
                continue;
            };
            if conn.uncovered.is_empty() {
                continue;
            }
            let from = conn.poll_from.unwrap_or(now.unix);
            let since = Timestamp::from_secs(from.as_secs().saturating_sub(window));
            let filters: Vec<Filter> = conn.uncovered.iter().cloned().collect();
            debug!(%relay, filters = filters.len(), "polling live filters that do not fit");
            self.stats.uncovered_polls += 1;
            let jobs = self
                .relays
                .view(&relay)
                .poll_jobs(&filters, since, &self.config);
            let batch = self.start_batch(
                now,
                &relay,
                Purpose::Poll,
                PendingItems::default(),
                SyncMethod::ReqEose,
                jobs,
            );
            if let Some(info) = batch.and_then(|batch| self.relays.batch_mut(&relay, batch)) {
                info.covers_from = Some(from);
            }
        }
    }
}
